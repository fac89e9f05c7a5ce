"""Starting the window: one per user and data folder, Qt application, theme, signals,
crash path.

The window is shown before anything heavy is imported; asyncio, the core and
llama.cpp load after the first paint (see window.py). ``FIRESIDE_EXIT_WHEN_READY=1``
prints the seconds from process start to a window ready to type in, then quits: the
startup benchmark uses it.
"""

from __future__ import annotations

import argparse
import contextlib
import locale
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from PySide6.QtCore import QSocketNotifier, QTimer
from PySide6.QtWidgets import QApplication

from app.core import paths, settings
from app.ui import icons, notices, single_instance, theme
from app.ui.window import MainWindow

logger = logging.getLogger(__name__)

# What a terminal or a session manager sends to end a program: each closes the window
# the way the user would, so the reply being written is saved.
CLOSING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                        if hasattr(signal, name))  # Windows has no SIGHUP


def run(args: argparse.Namespace) -> int:
    _ensure_utf8_locale()
    app = QApplication.instance() or QApplication([*sys.argv[:1], *theme.STYLE_ARGS])
    assert isinstance(app, QApplication)
    app.setApplicationName("Fireside")
    app.setDesktopFileName("fireside")
    opened: Path | None = getattr(args, "open", None)
    try:
        link = single_instance.claim(paths.data_dir(), [opened] if opened else [])
    except single_instance.NotAnswering as err:
        print(f"fireside: {err}", file=sys.stderr)
        return 1
    if link is None:
        return 0  # the window already open took over
    app.setWindowIcon(icons.app_icon())
    sys.excepthook = notices.excepthook

    window = open_window(app, getattr(args, "models_dir", None) or [])
    if opened is not None:
        window.open_model(opened)
    link.on_launch = lambda files: _on_launched_again(window, files)
    window.closed.connect(link.close)  # all is saved: the next launch may take over
    if os.environ.get("FIRESIDE_EXIT_WHEN_READY"):
        window.ready.connect(lambda: _report_ready_and_quit(window))
    else:
        window.ready.connect(_log_to_file)
        window.ready.connect(window.start)
    window.closed.connect(app.quit)
    release_signals = _handle_termination(window)

    app.exec()
    release_signals()
    window.wait_for_start_thread()
    if window.controller is not None and not window.is_shut_down:
        window.controller.core.close()  # the loop ended some other way: bounded, as ever
    if "app.ui.event_loop" in sys.modules:
        from app.ui import event_loop  # noqa: PLC0415 - only if the core was started

        event_loop.close()
    link.close()
    if window.controller is not None:
        window.controller.core.exit_if_left_running(0)
    return 0


def open_window(app: QApplication, models_dirs: Sequence[Path]) -> MainWindow:
    """Show the window on the saved settings; an unreadable settings file is reported."""
    loaded = settings.load()
    theme.apply(app, loaded.settings.theme)
    window = MainWindow(loaded.settings, models_dirs)
    window.show()
    if loaded.problem:
        notices.warning(loaded.problem)
    return window


def _on_launched_again(window: MainWindow, files: list[Path]) -> bool:
    """Fireside was launched again: this window comes to the front and opens the files
    (False while it closes: the launch waits, then opens a window of its own)."""
    if window.is_closing:
        return False
    window.bring_to_front()
    for path in files:
        window.open_model(path)
    return True


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


def _handle_termination(window: MainWindow) -> Callable[[], None]:
    """Closing signals close the window like the user would; returns the undo.

    Python runs a signal handler only when the interpreter next gets control, and a Qt
    loop waiting for events never gives it. Python's C-level handler writes each
    signal's number to a socket (``signal.set_wakeup_fd``); a QSocketNotifier on the
    other end wakes the Qt loop, and the Python handler runs as that slot starts.
    Chosen over a periodic timer: the window reacts at once instead of within the
    timer's period, and the GUI thread is never woken for nothing while a reply streams.
    """
    received: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) == 1:
            logger.info("signal %s: closing", signum)
            QTimer.singleShot(0, window.close)
        else:  # asked twice: leave now (what could be saved has been)
            QTimer.singleShot(0, lambda: QApplication.exit(1))

    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    notifier = QSocketNotifier(reader.fileno(), QSocketNotifier.Type.Read, window)

    def drain() -> None:
        with contextlib.suppress(OSError):
            while reader.recv(64):
                pass

    notifier.activated.connect(drain)
    previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    previous = {signum: signal.signal(signum, on_signal) for signum in CLOSING_SIGNALS}

    def release() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(previous_fd)
        notifier.setEnabled(False)
        reader.close()
        writer.close()

    return release


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
    notices.log_file = str(path)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
