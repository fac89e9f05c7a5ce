"""Starts the real app the way ``fireside`` does and plays the user's part in it.

``python tests/ui/app_driver.py PROMPT`` opens the window through the app's own
start-up code (``app.main``, then ``app.ui.application.run``); once a model is
ready it types PROMPT into the composer and presses Enter, then leaves the app alone.
``--session PROMPT MODEL`` asks, switches to MODEL in the picker, asks again and quits.
Tests run it in a child process to send it signals or break its disk.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a plain script

from PySide6.QtCore import Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from app.main import main as fireside_main
from app.ui import theme
from app.ui.window import MainWindow

POLL_MS = 50


def play_user(prompt: str) -> QTimer:
    """Type ``prompt`` and press Enter as soon as the window can send it."""
    timer = QTimer()

    def poll() -> None:
        window = next((w for w in QApplication.topLevelWidgets()
                       if isinstance(w, MainWindow)), None)
        controller = window.controller if window is not None else None
        if window is None or controller is None or controller.core.model is None \
                or window.chat.models.loading:
            return
        timer.stop()
        QTest.keyClicks(window.composer, prompt)
        QTest.keyClick(window.composer, Qt.Key.Key_Return)
        print("sent", flush=True)

    timer.timeout.connect(poll)
    timer.start(POLL_MS)
    return timer


def play_session(prompt: str, other_model: Path) -> QTimer:
    """Ask ``prompt``, switch to ``other_model`` in the picker, ask again, then quit."""
    timer = QTimer()
    steps = ["ask", "switch", "ask", "quit"]

    def poll() -> None:
        window = next((w for w in QApplication.topLevelWidgets()
                       if isinstance(w, MainWindow)), None)
        controller = window.controller if window is not None else None
        if window is None or controller is None or controller.core.model is None \
                or controller.busy:
            return  # still starting, loading or replying
        step = steps.pop(0)
        if step == "ask":
            QTest.keyClicks(window.composer, prompt)
            QTest.keyClick(window.composer, Qt.Key.Key_Return)
        elif step == "switch":
            row = window.picker.list_model.row_of(other_model)
            window.picker.setCurrentIndex(row)
            window.picker.activated.emit(row)
        else:
            timer.stop()
            QTest.keyClick(window.composer, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
        print(step, flush=True)

    timer.timeout.connect(poll)
    timer.start(POLL_MS)
    return timer


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    # The app would create this itself; the driver needs it first for its timer.
    app = QApplication([sys.argv[0], *theme.STYLE_ARGS])
    if sys.argv[1] == "--session":  # --session PROMPT OTHER_MODEL
        timer = play_session(sys.argv[2], Path(sys.argv[3]))
    else:
        timer = play_user(sys.argv[1])
    status = fireside_main(["--log-level", "INFO"])
    timer.stop()
    del app
    return status


if __name__ == "__main__":
    sys.exit(main())
