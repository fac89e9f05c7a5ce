"""Transcript benchmarks: each figure is compared with a reference from the same run.

    QT_QPA_PLATFORM=offscreen python tests/benchmarks/bench_transcript.py

(a) Streaming a 2,000-token Markdown reply with every piece written and painted at
    once (no coalescing, the worst case): GUI time per piece for the first and the
    last 200 pieces. Target: last/first ~ 1 (no growth with the reply's length).
(b) Opening a 500-message conversation (set_messages + first paint) against creating
    and showing an empty window. Target: < 0.3 s.
(c) Scrolling that conversation from the bottom to the top a wheel step per frame,
    older messages being built on the way: frame times.
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtWidgets import QApplication, QScrollArea, QWidget

from app.core.conversations.store import Message
from app.core.reply.pieces import Pieces
from app.ui.bridge import PieceStream
from app.ui.messages import markdown
from app.ui.transcript import TranscriptView

SIZE = (1100, 850)
TOKEN = re.compile(r" ?[\w']+| ?[^\w\s]+|\s+")  # roughly how BPE vocabularies cut text
RUNS = 5

PROSE = (
    "The reader walks the file once and keeps only the running total, so memory stays "
    "flat however large the file is. If a value cannot be parsed, the row is skipped "
    "and counted, which is usually what you want for **messy exports**; see the "
    "[csv documentation](https://docs.python.org/3/library/csv.html) for dialects."
)
CODE = '''```python
import csv
from pathlib import Path


def column_total(path: Path, column: str) -> tuple[float, int]:
    """Sum one column; return the total and how many rows were skipped."""
    total, skipped = 0.0, 0
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            try:
                total += float(row[column])
            except (KeyError, ValueError):
                skipped += 1
    return total, skipped
```'''
LIST = """Things to check first:

1. The file's encoding (`utf-8` or `latin-1`).
2. Whether the first line is a header.
3. The delimiter: commas, semicolons or tabs.
   - Excel in some locales writes semicolons.
   - `csv.Sniffer` can guess it."""
TABLE = """| Approach | Memory | Speed | Notes |
|---|---|---|---|
| `csv` module | low | medium | standard library |
| pandas | high | fast | `chunksize` for big files |
| polars | medium | very fast | lazy frames |"""
SHELL = """```bash
python -m venv .venv && . .venv/bin/activate
pip install pandas
python total.py sales.csv amount
```"""


def reply_text(variant: int) -> str:
    blocks = [PROSE, CODE, LIST, PROSE, TABLE, SHELL, PROSE]
    rotated = blocks[variant % 3:] + blocks[: variant % 3]
    return "\n\n".join(rotated[: 4 + variant % 4])


def long_reply(tokens: int) -> list[str]:
    """Realistic Markdown cut into token-sized pieces (words, spaces, punctuation)."""
    text = ""
    variant = 0
    while len(TOKEN.findall(text)) < tokens:
        text += reply_text(variant) + "\n\n"
        variant += 1
    return TOKEN.findall(text)[:tokens]


def conversation(count: int) -> list[Message]:
    now = time.time()
    stats = {"prompt_tokens": 900, "cached_tokens": 850, "tokens": 420, "ttft_s": 0.2,
             "tokens_per_s": 70.0, "stopped": False, "dropped_turns": 0,
             "model": "SmolLM2-135M-Instruct", "finish_reason": "stop"}
    messages = []
    for i in range(count):
        if i % 2 == 0:
            text = f"Question {i}: how do I sum a column of a CSV file that has {i} rows?"
            messages.append(Message(i, 1, "user", text, now, None, True))
        else:
            messages.append(Message(i, 1, "assistant", reply_text(i), now, stats, True))
    return messages


def settle(seconds: float = 0.0) -> None:
    """Run the event loop for ``seconds`` (at least one pass), as the app would idle."""
    loop = QEventLoop()
    QTimer.singleShot(round(seconds * 1000), loop.quit)
    loop.exec()


def bench_streaming(app: QApplication) -> None:
    view = TranscriptView()
    view.resize(*SIZE)
    view.show()
    view.set_messages(conversation(6))
    settle(0.5)
    pieces = long_reply(2000)
    view.add_user_message("Explain, at length, how to sum a CSV column.")
    stream = Pieces()
    view.begin_reply("SmolLM2-135M-Instruct", PieceStream(stream, view))
    times = []
    for piece in pieces:
        start = time.perf_counter()
        stream.put(piece)
        view.deliver()  # every piece reaches the document on its own
        app.processEvents()  # the layout and the paint
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    view.finish_reply("".join(pieces), None)
    app.processEvents()
    final = time.perf_counter() - start
    print(f"(a) streaming {len(pieces)} pieces ({len(''.join(pieces)):,} chars):")
    for name, measure in (("mean", statistics.mean), ("median", statistics.median)):
        first, last = measure(times[:200]), measure(times[-200:])
        print(f"    {name:<6} first 200: {first * 1e3:.3f} ms/piece   last 200:"
              f" {last * 1e3:.3f} ms/piece   ratio last/first {last / first:.2f}  (target ~1)")
    print(f"    slowest piece {max(times) * 1e3:.1f} ms (a block completing and rendered);"
          f" finish_reply {final * 1e3:.1f} ms")
    view.close()
    view.deleteLater()
    settle()


def bench_open(app: QApplication) -> None:
    messages = conversation(500)
    empty, opened = [], []
    for run in range(RUNS + 1):
        start = time.perf_counter()
        window = QWidget()
        window.resize(*SIZE)
        window.show()
        app.processEvents()
        took = time.perf_counter() - start
        window.close()
        window.deleteLater()
        settle()

        view = TranscriptView()
        view.resize(*SIZE)
        view.show()
        settle()
        markdown._render.cache_clear()  # measure a conversation never shown before
        start = time.perf_counter()
        view.set_messages(messages)
        app.processEvents()  # first paint
        took_open = time.perf_counter() - start
        built = len(view.message_widgets())
        view.close()
        view.deleteLater()
        settle()
        if run:  # the first round warms caches up
            empty.append(took)
            opened.append(took_open)
    empty_ms, open_ms = statistics.median(empty) * 1e3, statistics.median(opened) * 1e3
    print(f"(b) open 500 messages + first paint: {open_ms:.1f} ms (median of {RUNS});"
          f" empty window: {empty_ms:.1f} ms; ratio {open_ms / empty_ms:.1f}x;"
          f" {built} messages built  (target < 300 ms)")


def bench_scroll(app: QApplication) -> None:
    view = TranscriptView()
    view.resize(*SIZE)
    view.show()
    view.set_messages(conversation(500))
    settle(0.5)
    markdown._render.cache_clear()
    bar = view.findChild(QScrollArea, "transcriptScroll").verticalScrollBar()
    frames = []
    while bar.value() > 0 or view.unbuilt_count():
        start = time.perf_counter()
        bar.setValue(bar.value() - 120)  # one wheel step
        app.processEvents()
        frames.append(time.perf_counter() - start)
    frames.sort()
    slow = sum(f > 1 / 60 for f in frames)
    median, p95 = statistics.median(frames) * 1e3, frames[int(len(frames) * 0.95)] * 1e3
    print(f"(c) scroll to the top: {len(frames)} frames, median {median:.1f} ms,"
          f" p95 {p95:.1f} ms, max {frames[-1] * 1e3:.1f} ms,"
          f" {slow} frames over 16.7 ms; {len(view.message_widgets())} messages built")
    view.close()


def main() -> None:
    app = QApplication.instance() or QApplication(sys.argv)
    bench_streaming(app)
    bench_open(app)
    bench_scroll(app)


if __name__ == "__main__":
    main()
