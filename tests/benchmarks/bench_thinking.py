"""Thinking: the budget on the real models, rendering a long template, the window while
a long thought streams.

    python tests/benchmarks/bench_thinking.py

1. A thinking budget of N: thinking tokens before the answer, and the answer's length,
   on both bundled models given QwQ's real template (it opens a thought in its
   generation prompt), against the same reply with no budget.
2. Rendering the next turn's prompt for a 50-turn conversation with the longest
   templates (gpt-oss, Qwen3): the first render (compiling the template) and the next.
3. The longest time the window's thread is held while a 5,000-token thought streams
   into a folded section, and into an opened one (the reference).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core.backend import PromptPlan, Session
from app.core.llama.engine import Engine
from app.core.models import bundled
from app.core.options import LoadOptions, Sampling
from app.core.reply import templates, thinking

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "templates"
STORY = "Write a long story about a dragon who loves tea."
WORDS = ("tea ", "dragon ", "thinks ", "about ", "the ", "kettle.\n")
BUDGETS = (0, 20, 50, 100)


def cpu() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines()
                 if line.startswith("Model name")), "unknown CPU")


def budgets() -> None:
    template = (FIXTURES / "qwq.jinja").read_text()
    engine = Engine()
    try:
        for name in (bundled.DEFAULT_MODEL_FILE, bundled.GEMMA_FILE):
            engine.load(bundled.bundled_dir() / name,
                        LoadOptions(template_override=template)).result()

            def build(session: Session) -> PromptPlan:
                return PromptPlan(session.encode(templates.render(
                    session.template, [{"role": "user", "content": STORY}])))

            print(f"\n{name} (QwQ's template), greedy, at most 300 tokens:")
            for budget in (None, *BUDGETS):
                sampling = Sampling(temperature=0.0, seed=1, max_tokens=300,
                                    thinking_budget=budget)
                reply = engine.generate(build, sampling).future.result()
                stats = reply.stats
                held = "" if budget is None else \
                    ("  within N + 2" if stats.thinking_tokens <= budget + 2 else "  OVER")
                print(f"  budget {budget if budget is not None else 'none':>4}: "
                      f"{stats.thinking_tokens:3} thinking tokens, then "
                      f"{stats.tokens - stats.thinking_tokens:3} answer tokens "
                      f"({len(reply.text.strip())} characters){held}")
    finally:
        engine.close()


def rendering() -> None:
    print("\nThe next turn's prompt, 50 turns (system, user, assistant with thinking):")
    messages: list[dict[str, str]] = []
    for turn in range(50):
        messages.append({"role": "user", "content": f"Question {turn}: what comes next?"})
        messages.append({"role": "assistant", "content": f"Answer {turn}, at length. " * 8,
                         "thinking": f"Reasoning about {turn}. " * 6})
    messages.append({"role": "user", "content": "And the last one?"})
    for name in ("gpt-oss", "qwen3"):
        text = (FIXTURES / f"{name}.jinja").read_text()
        template = templates.ChatTemplate(name, "override", text, "", "", True, False)
        times = []
        for _ in range(6):
            started = time.perf_counter()
            templates.render(template, messages, system_prompt="Be brief.",
                             extra=thinking.template_variables(text, "on"))
            times.append((time.perf_counter() - started) * 1000)
        print(f"  {name:8} ({len(text):,} characters): first {times[0]:.1f} ms, "
              f"then median {statistics.median(times[1:]):.1f} ms")


def window_stall() -> None:
    from PySide6.QtWidgets import QApplication

    from app.core.reply.pieces import Pieces
    from app.ui.bridge import PieceStream
    from app.ui.transcript import TranscriptView
    from tests.heartbeat import Heartbeat

    app = QApplication.instance() or QApplication([])
    print("\nThe window while a 5,000-token thought streams (2,500 pieces/s), longest "
          "hold of its thread:")
    results = {}
    for opened in (False, True):
        view = TranscriptView()
        view.resize(900, 700)
        view.show()
        stream = Pieces()
        view.begin_reply("Model", PieceStream(stream))
        row = view.message_widgets()[-1]
        def produce(stream: Pieces = stream) -> None:
            for i in range(5000):
                stream.put(WORDS[i % len(WORDS)], thought=True)
                time.sleep(0.0004)
            stream.put("The answer.")

        beat = Heartbeat()
        beat.start()
        producer = threading.Thread(target=produce)
        producer.start()
        first = True
        while producer.is_alive():
            app.processEvents()
            if first and row.thinking.isVisible():
                row.thinking.toggle.setChecked(opened)
                first = False
        app.processEvents()
        results[opened] = beat.stop() * 1000
        view.finish_reply("The answer.", None)
        view.close()
    print(f"  folded: {results[False]:.0f} ms   opened: {results[True]:.0f} ms "
          "(a 10 ms heartbeat: 10 ms means never held)")


def main() -> None:
    print(f"CPU: {cpu()}")
    rendering()
    window_stall()
    budgets()


if __name__ == "__main__":
    main()
