"""Starting the window: Qt application, theme, signals, crash path.

The window is shown before anything heavy is imported; asyncio, the core and
llama.cpp load after the first paint (see window.py). ``FIRESIDE_EXIT_WHEN_READY=1``
prints the seconds from process start to a window ready to type in, then quits: the
startup benchmark uses it.
"""

from __future__ import annotations

import argparse
import locale
import logging
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.core import paths, settings
from app.ui import icons, messages, theme
from app.ui.window import MainWindow

logger = logging.getLogger(__name__)

SIGNAL_POLL_MS = 200  # Python runs signal handlers only when the Qt loop yields to it


def run(args: argparse.Namespace) -> int:
    _ensure_utf8_locale()
    app = QApplication.instance() or QApplication([*sys.argv[:1], *theme.STYLE_ARGS])
    assert isinstance(app, QApplication)
    app.setApplicationName("Fireside")
    app.setDesktopFileName("fireside")
    app.setWindowIcon(icons.app_icon())
    sys.excepthook = messages.excepthook

    loaded = settings.load()
    prefs = loaded.settings
    theme.apply(app, prefs.theme)

    window = MainWindow(prefs, getattr(args, "models_dir", None) or [])
    if os.environ.get("FIRESIDE_EXIT_WHEN_READY"):
        window.ready.connect(lambda: _report_ready_and_quit(window))
    else:
        window.ready.connect(_log_to_file)
        window.ready.connect(window.start)
    window.closed.connect(app.quit)
    window.show()
    if loaded.problem:
        messages.warning(loaded.problem)
    watchdog = _handle_termination(window)

    app.exec()
    watchdog.stop()
    if window.controller is not None and not window.is_shut_down:
        window.controller.engine.close(timeout=2.0)  # the loop ended some other way
    if "app.ui.event_loop" in sys.modules:
        from app.ui import event_loop  # noqa: PLC0415 - only if the core was started

        event_loop.close()
    return 0


def _report_ready_and_quit(window: MainWindow) -> None:
    print(f"ready {_seconds_since_process_start():.3f}", flush=True)
    window.close()


def _seconds_since_process_start() -> float:
    try:  # Linux: read by the kernel's clock, without importing anything
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        import psutil  # noqa: PLC0415 - elsewhere, only for this report

        return time.time() - float(psutil.Process().create_time())


def _handle_termination(window: MainWindow) -> QTimer:
    """SIGINT and SIGTERM close the window like the user would: the reply is saved."""

    received: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) == 1:
            logger.info("signal %s: closing", signum)
            QTimer.singleShot(0, window.close)
        else:  # asked twice: leave now (what could be saved has been)
            QTimer.singleShot(0, lambda: QApplication.exit(1))

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    timer = QTimer(window)
    timer.timeout.connect(lambda: None)  # gives Python a moment to run its handlers
    timer.start(SIGNAL_POLL_MS)
    return timer


def _ensure_utf8_locale() -> None:
    # Under the C locale Qt warns and switches to C.UTF-8 on its own: do it quietly.
    # (Python itself only coerces LC_CTYPE, and LC_ALL overrides that.)
    if locale.setlocale(locale.LC_CTYPE) in ("C", "POSIX"):
        os.environ["LC_ALL" if os.environ.get("LC_ALL") else "LC_CTYPE"] = "C.UTF-8"


def _log_to_file() -> None:
    """Tracebacks the message bar mentions go to a log file the user can send."""
    from logging.handlers import RotatingFileHandler  # noqa: PLC0415 - after the first paint

    path = paths.data_dir() / "fireside.log"
    try:
        handler = RotatingFileHandler(path, maxBytes=1 << 20, backupCount=1, encoding="utf-8")
    except OSError:
        return
    messages.log_file = str(path)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
