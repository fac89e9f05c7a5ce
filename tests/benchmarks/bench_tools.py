"""Tools: what the grammar that keeps a call's arguments valid costs.

    python tests/benchmarks/bench_tools.py [ROUNDS]

For each bundled model (SmolLM2, 49k-token vocabulary; Gemma 3, 262k), a call forced by
``tool_choice`` with a 3-argument schema (a string, an integer, an enum) against the
same request answered with ``tool_choice: none`` (no grammar), cut at as many tokens
as the call took: the time to write that many tokens after the first, each measured in
turn in one process (rounds alternated), medians. The ratio forced / free is what the
grammar costs the writing.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core import settings
from app.core.conversations.completions import read_request
from app.core.fireside import Fireside
from app.core.models import bundled
from app.core.reply.replies import Reply

BOOK = {"type": "function", "function": {
    "name": "book_table", "description": "Book a table at a restaurant.",
    "parameters": {"type": "object", "properties": {
        "restaurant": {"type": "string"}, "people": {"type": "integer"},
        "time": {"type": "string", "enum": ["lunch", "dinner"]}},
        "required": ["restaurant", "people", "time"]}}}
ASK = [{"role": "user", "content": "Book a table for 4 at Luigi's for dinner."}]


def reply(core: Fireside, body: dict) -> Reply:
    asked = read_request({"model": "x", "messages": ASK, **body})
    handle = core.answer(asked.prompt(), lambda m: asked.sampling_for(
        core.sampling(m.path), m.n_ctx)).result()
    return handle.future.result()


def seconds_per_token(r: Reply) -> float:
    return 1 / r.stats.tokens_per_s if r.stats.tokens_per_s else float("nan")


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    name = next((line.split(":", 1)[1].strip() for line in cpu.splitlines()
                 if line.startswith("Model name")), "?")
    print(f"CPU: {name}; {rounds} rounds, alternated; medians")
    for file in (bundled.DEFAULT_MODEL_FILE, bundled.GEMMA_FILE):
        prefs = settings.load().settings
        core = Fireside.open(prefs=prefs)
        core.load(bundled.bundled_dir() / file).result()
        forced_s, free_s, ratios, tokens = [], [], [], []
        try:
            for seed in range(1, rounds + 1):
                forced = reply(core, {"tools": [BOOK], "tool_choice": "required",
                                      "seed": seed, "max_tokens": 120})
                assert forced.tool_calls, "no call"
                n = forced.stats.tokens
                free = reply(core, {"tools": [BOOK], "tool_choice": "none", "seed": seed,
                                    "max_tokens": n})
                forced_s.append(seconds_per_token(forced) * (n - 1))
                free_s.append(seconds_per_token(free) * (n - 1))
                ratios.append(forced_s[-1] / free_s[-1])
                tokens.append(n)
        finally:
            core.close()
        print(f"{file}: forced call {statistics.median(forced_s):.3f} s "
              f"({statistics.median(tokens):.0f} tokens), free "
              f"{statistics.median(free_s):.3f} s; ratio {statistics.median(ratios):.2f} "
              f"({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
