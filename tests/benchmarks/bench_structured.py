"""Structured output: what holding a reply to a JSON schema costs.

    python tests/benchmarks/bench_structured.py [ROUNDS]

For each bundled model (SmolLM2, 49k-token vocabulary; Gemma 3, 262k), a reply held to
a small schema (a name of up to 20 characters, an age of 0 to 120, up to three tags of
an enumeration) through the local API's ``response_format``, checked against the schema,
against the same request without it, cut at as many tokens as the held reply took: the
time to the whole reply (the prompt read, then every token) and to write its tokens
after the first, each measured in turn in one process (rounds alternated), medians. The
ratios held / free are what the grammar costs.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jsonschema

from app.core import settings
from app.core.conversations.completions import read_request
from app.core.fireside import Fireside
from app.core.models import bundled
from app.core.reply.replies import Reply
from tests.api.test_structured_output import PERSON

HELD = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
ASK = [{"role": "user", "content": "Alice is 30 and a friend from work. Describe her."}]


def reply(core: Fireside, body: dict[str, Any]) -> Reply:
    asked = read_request({"model": "x", "messages": ASK, **body})
    handle = core.answer(asked.prompt(), lambda m: asked.sampling_for(
        core.sampling(m.path), m.n_ctx)).result()
    return handle.future.result()


def writing_s(r: Reply, tokens: int) -> float:
    """Seconds to write ``tokens`` tokens after the first, at the reply's speed."""
    return (tokens - 1) / r.stats.tokens_per_s if r.stats.tokens_per_s else float("nan")


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    name = next((line.split(":", 1)[1].strip() for line in cpu.splitlines()
                 if line.startswith("Model name")), "?")
    print(f"CPU: {name}; {rounds} rounds, alternated; medians")
    for file in (bundled.DEFAULT_MODEL_FILE, bundled.GEMMA_FILE):
        core = Fireside.open(prefs=settings.load().settings)
        core.load(bundled.bundled_dir() / file).result()
        whole: dict[str, list[float]] = {"held": [], "free": [], "ratio": []}
        write: dict[str, list[float]] = {"held": [], "free": [], "ratio": []}
        tokens = []
        try:
            reply(core, {"max_tokens": 8})  # the prompt's common part read once
            for seed in range(1, rounds + 1):
                held = reply(core, {"response_format": HELD, "seed": seed,
                                    "max_tokens": 200})
                assert held.stats.finish_reason == "stop", held.text
                jsonschema.validate(json.loads(held.text), PERSON)
                n = held.stats.tokens
                free = reply(core, {"seed": seed, "max_tokens": n})
                for kind, r in (("held", held), ("free", free)):
                    write[kind].append(writing_s(r, n))
                    whole[kind].append(r.stats.ttft_s + write[kind][-1])
                for figures in (whole, write):
                    figures["ratio"].append(figures["held"][-1] / figures["free"][-1])
                tokens.append(n)
        finally:
            core.close()
        print(f"{file} ({statistics.median(tokens):.0f} tokens):")
        for label, figures in (("whole reply", whole), ("writing", write)):
            ratios = figures["ratio"]
            print(f"  {label}: held {statistics.median(figures['held']):.3f} s, free "
                  f"{statistics.median(figures['free']):.3f} s; ratio "
                  f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
