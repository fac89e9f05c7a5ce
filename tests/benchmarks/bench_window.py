"""Window benchmarks: each figure is a ratio against a reference measured in the same run.

    python tests/benchmarks/bench_window.py

- Startup: from launching ``python -m app`` to a window ready to type in, against a
  process that shows an empty PySide6 window the same way (target <= 2x).
- Throughput: a long reply streamed through the real window (transcript rendering
  every piece) against the same engine with no window work (target >= 0.95x), both
  as the engine counts it (the tok/s the window shows) and end to end.
- Closing mid-reply: seconds from close to everything saved and the model closed
  (target <= 2 s).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

if TYPE_CHECKING:
    from app.core.reply.replies import ReplyStats
    from app.ui.chat_controller import ChatController
    from app.ui.window import MainWindow
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_API", "pyside6")

ROUNDS = 7
REPLY_TOKENS = 2000
STORY = "Write a very long, detailed story about a lighthouse keeper and a storm."

# Ready as Fireside counts it: the first paint pass has finished.
EMPTY_WINDOW = """
import sys
from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QApplication, QWidget

class FirstPaint(QObject):
    def eventFilter(self, watched, event):
        if event.type() == QEvent.Type.Paint:
            watched.removeEventFilter(self)
            QTimer.singleShot(0, lambda: (print("ready", flush=True), app.quit()))
        return False

app = QApplication(sys.argv[:1])
window = QWidget()
window.resize(1180, 760)
first_paint = FirstPaint()
window.installEventFilter(first_paint)
window.show()
app.exec()
"""


def report(name: str, ratio: float, target: str, detail: str) -> None:
    print(f"{name:<30} {ratio:6.3f}  (target {target})  {detail}", flush=True)


def time_to_ready(command: list[str], env: dict[str, str]) -> float:
    """Seconds from launch until the process prints its ready line."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True, env=env)
    assert process.stdout is not None
    line = process.stdout.readline()
    elapsed = time.perf_counter() - started
    process.wait(timeout=60)
    if not line.startswith("ready"):
        raise SystemExit(f"{command} never reported ready")
    return elapsed


def bench_startup() -> None:
    with tempfile.TemporaryDirectory() as home:
        # Compiled bytecode, as an installed app has it (kept out of the source tree).
        env = {**os.environ, "FIRESIDE_DATA_DIR": f"{home}/data",
               "FIRESIDE_CONFIG_DIR": f"{home}/config", "FIRESIDE_EXIT_WHEN_READY": "1",
               "PYTHONPYCACHEPREFIX": f"{home}/pycache"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        app_command = [sys.executable, "-m", "app"]
        empty_command = [sys.executable, "-c", EMPTY_WINDOW]
        time_to_ready(app_command, env)  # warm the file cache for both, write bytecode
        time_to_ready(empty_command, env)
        app_times, empty_times = [], []
        for _ in range(ROUNDS):
            empty_times.append(time_to_ready(empty_command, env))
            app_times.append(time_to_ready(app_command, env))
    app_s, empty_s = statistics.median(app_times), statistics.median(empty_times)
    report("startup (ready to type)", app_s / empty_s, "<= 2",
           f"Fireside {app_s:.2f} s, empty PySide6 window {empty_s:.2f} s "
           f"(medians of {ROUNDS})")


def bench_window() -> None:
    with tempfile.TemporaryDirectory() as home:
        os.environ["FIRESIDE_DATA_DIR"] = f"{home}/data"
        os.environ["FIRESIDE_CONFIG_DIR"] = f"{home}/config"
        import qasync
        from PySide6.QtWidgets import QApplication

        from app.core import settings
        from app.ui import theme
        from app.ui.window import MainWindow

        app = QApplication(sys.argv[:1])
        app.setQuitOnLastWindowClosed(False)
        theme.apply(app, "light")
        prefs = settings.load().settings
        prefs.temperature, prefs.seed, prefs.max_tokens = 0.0, 1, REPLY_TOKENS
        prefs.context_size = 4096
        loop = qasync.QEventLoop(app)
        asyncio.set_event_loop(loop)
        window = MainWindow(prefs)
        window.show()
        with loop:
            loop.run_until_complete(_throughput_and_close(window))


async def ready(window: MainWindow) -> ChatController:
    """Start the window's core and wait until its model is loaded."""
    window.start()
    while window.controller is None:
        await asyncio.sleep(0.05)
    controller = window.controller
    while controller.core.model is None or window.chat.models.loading:
        await asyncio.sleep(0.05)
    return controller


async def _throughput_and_close(window: object) -> None:
    from app.ui.window import MainWindow

    assert isinstance(window, MainWindow)
    controller = await ready(window)
    core = controller.core
    assert core is not None

    async def through_window() -> tuple[float, float, int]:
        await controller.new_chat()
        finished: asyncio.Future[ReplyStats] = asyncio.get_running_loop().create_future()

        def on_finished(_text: str, stats: ReplyStats) -> None:
            if not finished.done():
                finished.set_result(stats)

        controller.reply_finished.connect(on_finished)
        started = time.perf_counter()
        window.composer_bar.send_requested.emit(STORY)  # as if typed and sent
        stats = await finished
        wall = time.perf_counter() - started
        controller.reply_finished.disconnect(on_finished)
        return stats.tokens_per_s, stats.tokens / wall, stats.tokens

    async def engine_alone() -> tuple[float, float, int]:
        await asyncio.wrap_future(core.new_chat())
        started = time.perf_counter()
        turn = await asyncio.wrap_future(core.send(STORY))
        result = await asyncio.wrap_future(turn.future)
        wall = time.perf_counter() - started
        stats = result.reply.stats
        return stats.tokens_per_s, stats.tokens / wall, stats.tokens

    window_runs, engine_runs = [], []
    for _ in range(3):
        engine_runs.append(await engine_alone())
        window_runs.append(await through_window())
    shown = statistics.median(r[0] for r in window_runs)
    alone = statistics.median(r[0] for r in engine_runs)
    report("tok/s shown vs engine alone", shown / alone, ">= 0.95",
           f"{shown:.1f} vs {alone:.1f} tok/s, {window_runs[0][2]} tokens per reply")
    wall_window = statistics.median(r[1] for r in window_runs)
    wall_alone = statistics.median(r[1] for r in engine_runs)
    report("end to end vs engine alone", wall_window / wall_alone, ">= 0.95",
           f"{wall_window:.1f} vs {wall_alone:.1f} tok/s, send to finished")

    await controller.new_chat()
    window.composer_bar.send_requested.emit(STORY)
    await asyncio.sleep(1.5)  # mid-reply
    closed = asyncio.get_running_loop().create_future()
    window.closed.connect(lambda: closed.set_result(None))
    started = time.perf_counter()
    window.close()
    await closed
    seconds = time.perf_counter() - started
    report("close mid-reply (seconds)", seconds, "<= 2", "reply saved, model closed")


if __name__ == "__main__":
    bench_startup()
    bench_window()
