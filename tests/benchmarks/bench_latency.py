"""How long streamed text takes from the engine to the screen, in the real window.

    python tests/benchmarks/bench_latency.py [REPLIES]

The real window (offscreen) on the real SmolLM2 streams REPLIES replies of 200 tokens.
Each piece is timed when the inference thread hands it on and again when the
transcript writes the text holding it into the reply's document. Prints the median and
95th percentile of that delay for the first piece of each reply and for every piece,
against one frame (target: the first piece on screen within 40 ms).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_API", "pyside6")

REPLY_TOKENS = 200
PROMPT = "Write a short story about a lighthouse keeper."


class Clock:
    """When each character was produced, and when it was written into the document."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.produced: list[tuple[float, int]] = []  # (time, characters so far)
        self.written: list[tuple[float, int]] = []
        self.first: list[float] = []  # per reply: delay of its first piece

    def reset(self) -> None:
        with self.lock:
            self.produced, self.written = [], []

    def delays(self) -> list[float]:
        """For each produced piece, the delay until the text holding all of it was written."""
        delays, w = [], 0
        for at, chars in self.produced:
            while w < len(self.written) and self.written[w][1] < chars:
                w += 1
            if w < len(self.written):
                delays.append(self.written[w][0] - at)
        return delays


def main(replies: int) -> int:
    clock = Clock()
    with tempfile.TemporaryDirectory() as home:
        os.environ["FIRESIDE_DATA_DIR"] = f"{home}/data"
        os.environ["FIRESIDE_CONFIG_DIR"] = f"{home}/config"
        import qasync
        from PySide6.QtWidgets import QApplication

        from app.core import settings
        from app.ui import theme
        from app.ui.window import MainWindow

        time_produced(clock)
        written = time_written(clock)
        app = QApplication(sys.argv[:1])
        app.setQuitOnLastWindowClosed(False)
        theme.apply(app, "light")
        prefs = settings.load().settings
        prefs.temperature, prefs.seed, prefs.max_tokens = 0.7, None, REPLY_TOKENS
        loop = qasync.QEventLoop(app)
        asyncio.set_event_loop(loop)
        window = MainWindow(prefs)
        window.show()
        all_delays: list[float] = []
        with loop:
            loop.run_until_complete(stream_replies(window, replies, clock, written,
                                                   all_delays))
    report(replies, clock, all_delays)
    return 0


def time_produced(clock: Clock) -> None:
    """Note on ``clock`` each piece of answer as the inference thread hands it on."""
    from app.core.reply import pieces

    put = pieces.Pieces.put
    produced: dict[int, int] = {}  # answer characters written, per reply's pieces

    def timed_put(self: pieces.Pieces, text: str, thought: bool = False) -> None:
        if not thought:
            with clock.lock:
                produced[id(self)] = produced.get(id(self), 0) + len(text)
                clock.produced.append((time.perf_counter(), produced[id(self)]))
        put(self, text, thought)

    pieces.Pieces.put = timed_put  # type: ignore[method-assign]


def time_written(clock: Clock) -> list[int]:
    """Note on ``clock`` each text the transcript writes into a reply. Returns the count
    of characters written, which each reply sets back to 0."""
    from app.ui.messages import message_widget

    stream = message_widget.MessageWidget.stream
    written = [0]

    def timed_stream(self: message_widget.MessageWidget, text: str) -> None:
        stream(self, text)
        with clock.lock:
            written[0] += len(text)
            clock.written.append((time.perf_counter(), written[0]))

    message_widget.MessageWidget.stream = timed_stream  # type: ignore[method-assign]
    return written


async def stream_replies(window: Any, replies: int, clock: Clock, written: list[int],
                         all_delays: list[float]) -> None:
    from tests.benchmarks.bench_window import ready

    controller = await ready(window)
    for _ in range(replies):
        await controller.new_chat()
        clock.reset()
        written[0] = 0
        finished = asyncio.get_running_loop().create_future()

        def done(*_args: object, finished: asyncio.Future[None] = finished) -> None:
            if not finished.done():
                finished.set_result(None)

        controller.reply_finished.connect(done)
        window.composer_bar.send_requested.emit(PROMPT)
        await finished
        controller.reply_finished.disconnect(done)
        delays = clock.delays()
        if delays:
            clock.first.append(delays[0])
            all_delays.extend(delays)
    window.close()
    while not window.is_shut_down:
        await asyncio.sleep(0.05)


def report(replies: int, clock: Clock, all_delays: list[float]) -> None:
    def ms(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    print(f"{replies} replies, {len(all_delays)} pieces timed")
    print(f"first piece on screen  median {1000 * statistics.median(clock.first):5.1f} ms"
          f"  p95 {ms(clock.first, 0.95):5.1f} ms  (target <= 40 ms)")
    print(f"every piece on screen  median {1000 * statistics.median(all_delays):5.1f} ms"
          f"  p95 {ms(all_delays, 0.95):5.1f} ms")


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
