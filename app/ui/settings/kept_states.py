"""Settings → Models, "Conversations left": the states kept for the conversations the
user left, which make going back to one instant, and a button that forgets them."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QWidget

from app.core.backend import KeptStates
from app.ui.settings.form_parts import push_button

REFRESH_MS = 1000  # the count changes as the chat keeps states; read it while on screen


class KeptStatesRow(QWidget):
    clear_requested = Signal()
    """The user wants the states kept for conversations left forgotten."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("keptStatesRow")
        self.label = QLabel(self)
        self.label.setObjectName("savedStatesLabel")
        self.label.setWordWrap(True)  # the sizes make it long: it must not widen the page
        clear = push_button("Clear", "clearStatesButton", self)
        clear.clicked.connect(self.clear_requested)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.label, 1)
        row.addWidget(clear)
        self._source: Callable[[], KeptStates] = lambda: KeptStates(0, 0, 0)
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.refresh)
        self.refresh()

    def set_source(self, source: Callable[[], KeptStates]) -> None:
        """Where the count and the bytes of the states kept are read (any thread)."""
        self._source = source
        self.refresh()

    def refresh(self) -> None:
        count, memory, disk = self._source()
        self.label.setText(
            f"{count} kept ({memory / 2**20:,.0f} MB in memory, {disk / 2**20:,.0f} MB on "
            "disk): going back to them is instant" if count
            else "None kept: a conversation is kept when you leave it")

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.refresh()
        self._timer.start()

    def hideEvent(self, event: QHideEvent) -> None:
        self._timer.stop()
        super().hideEvent(event)
