"""Speculative decoding against plain decoding, on both bundled models, greedy.

    python tests/benchmarks/bench_speculation.py [--rounds N] [--only repeat|story|draft]

1. repeat: a text of this machine (bash's Debian changelog, about 400 words) to be
   written again with every date in ISO form: the reply copies most of its input, and
   prompt lookup drafts it. Goal: ≥ 1.5x the tokens per second of plain decoding.
2. story: a story, which repeats nothing: prompt lookup must not slow it (≥ 0.97x).
3. draft: each model drafting for itself (the mechanism: acceptance near 100 %); a
   smaller model of the same vocabulary is not bundled, so that figure is pending.

Each round runs both ways back to back, in alternating order; the ratio is the median
of the rounds' ratios (tokens per second after the first token), with their range, and
whether the replies were the same text.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core.backend import PromptPlan, Session
from app.core.llama.engine import Engine
from app.core.models import bundled
from app.core.options import LoadOptions, Sampling
from app.core.reply import templates
from app.core.reply.replies import Reply

CHANGELOG = Path("/usr/share/doc/bash/changelog.Debian.gz")
LICENSE = Path("/usr/share/common-licenses/GPL-3")
STORY = "Write a long story about a dragon who loves tea."


def cpu() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines()
                 if line.startswith("Model name")), "unknown CPU")


def repeat_task(words: int = 400) -> str:
    """The issue's kind of task: a text of this machine, its dates to be rewritten."""
    text = gzip.decompress(CHANGELOG.read_bytes()).decode("utf-8", "replace") \
        if CHANGELOG.exists() else LICENSE.read_text()
    kept, count = [], 0
    for line in text.splitlines():
        kept.append(line)
        count += len(line.split())
        if count >= words:
            break
    return ("Here is a text. Write it again, exactly as it is, except that every date "
            "is written in ISO form (2023-01-02).\n\n" + "\n".join(kept))


def copy_task(words: int = 250) -> str:
    """A text to write again as it is: the GPL's preamble, as this machine has it."""
    text = LICENSE.read_text()
    start = text.find("The GNU General Public License is a free")
    return "Repeat this text exactly: " + " ".join(text[max(start, 0):].split()[:words])


def reply(engine: Engine, prompt: str, speculation: bool, max_tokens: int) -> Reply:
    def build(session: Session) -> PromptPlan:
        return PromptPlan(session.encode(templates.render(
            session.template, [{"role": "user", "content": prompt}])))

    engine.clear().result()
    sampling = Sampling(temperature=0.0, seed=1, max_tokens=max_tokens,
                        speculation=speculation)
    return engine.generate(build, sampling).future.result()


def compare(engine: Engine, label: str, prompt: str, *, rounds: int, max_tokens: int,
            goal: str) -> None:
    ratios, same, accepted, proposed, tokens = [], 0, 0, 0, 0
    rates: dict[bool, list[float]] = {False: [], True: []}
    for i in range(rounds):
        got: dict[bool, Reply] = {}
        for spec in ((False, True) if i % 2 == 0 else (True, False)):
            got[spec] = reply(engine, prompt, spec, max_tokens)
            rates[spec].append(got[spec].stats.tokens_per_s)
        ratios.append(got[True].stats.tokens_per_s / got[False].stats.tokens_per_s)
        same += got[True].text == got[False].text
        accepted += got[True].stats.draft_accepted
        proposed += got[True].stats.draft_proposed
        tokens += got[True].stats.tokens
    print(f"  {label}: {statistics.median(ratios):.2f}x (rounds {min(ratios):.2f}-"
          f"{max(ratios):.2f}; plain {statistics.median(rates[False]):.1f} tok/s, "
          f"drafting {statistics.median(rates[True]):.1f}) {goal}; drafts kept "
          f"{accepted}/{proposed} ({accepted / max(proposed, 1):.0%}), "
          f"{accepted / max(tokens, 1):.0%} of the tokens; same text {same}/{rounds}",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--only", choices=("repeat", "story", "draft"))
    args = parser.parse_args()
    print(f"CPU: {cpu()}")
    for name in (bundled.DEFAULT_MODEL_FILE, bundled.GEMMA_FILE):
        path = bundled.bundled_dir() / name
        print(f"\n{name}, greedy:")
        engine = Engine()
        try:
            if args.only in (None, "repeat", "story"):
                engine.load(path, LoadOptions()).result()
                if args.only in (None, "repeat"):
                    compare(engine, "copy (prompt lookup)", copy_task(), rounds=args.rounds,
                            max_tokens=500, goal="goal >= 1.5x")
                    compare(engine, "dates to ISO (prompt lookup)", repeat_task(),
                            rounds=args.rounds, max_tokens=500, goal="goal >= 1.5x")
                if args.only in (None, "story"):
                    compare(engine, "story (prompt lookup)", STORY, rounds=args.rounds,
                            max_tokens=300, goal="goal >= 0.97x")
            if args.only in (None, "draft"):
                loaded = engine.load(path, LoadOptions(draft_model=str(path))).result()
                assert loaded.draft, loaded.notice
                compare(engine, "story, drafted by itself", STORY, rounds=args.rounds,
                        max_tokens=300, goal="(mechanism only)")
        finally:
            engine.close()


if __name__ == "__main__":
    main()
