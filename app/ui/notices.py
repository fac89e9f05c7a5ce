"""The one way the window tells the user something: a non-modal bar above the chat.

Any code, on any thread, calls :func:`info`, :func:`warning` or :func:`error`; the
notice travels through :data:`bridge` (a queued signal when sent from another thread)
to every :class:`NoticeBar`. Unexpected exceptions take the same path through
:func:`report_exception`: the traceback goes to the log, a short sentence to the bar.
Tests connect to ``bridge.shown`` to see exactly what a user would have read.
"""

from __future__ import annotations

import enum
import logging
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

if TYPE_CHECKING:
    import asyncio

logger = logging.getLogger(__name__)

INFO_TIMEOUT_MS = 6000
log_file: str | None = None  # where tracebacks go, named in the message; set at startup


class Level(enum.Enum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class Notice:
    level: Level
    text: str
    action_text: str | None = None
    action: Callable[[], object] | None = None
    unexpected: bool = False  # it came from an exception nobody handled


class _Bridge(QObject):
    shown = Signal(object)
    """A Notice was posted (any thread may emit; receivers live in the GUI thread)."""


bridge = _Bridge()


def info(text: str, action_text: str | None = None,
         action: Callable[[], object] | None = None) -> None:
    bridge.shown.emit(Notice(Level.INFO, text, action_text, action))


def warning(text: str, action_text: str | None = None,
            action: Callable[[], object] | None = None) -> None:
    bridge.shown.emit(Notice(Level.WARNING, text, action_text, action))


def error(text: str, action_text: str | None = None,
          action: Callable[[], object] | None = None) -> None:
    bridge.shown.emit(Notice(Level.ERROR, text, action_text, action))


def report_exception(exc: BaseException, where: str = "") -> None:
    """Log the traceback of a bug and tell the user in one sentence."""
    logger.error("Unexpected error%s", f" in {where}" if where else "",
                 exc_info=(type(exc), exc, exc.__traceback__))
    detail = str(exc) or type(exc).__name__
    where_logged = f"in {log_file}" if log_file else "to the log"
    bridge.shown.emit(Notice(Level.ERROR, f"Something went wrong: {detail}. "
                             f"The details were written {where_logged}.", unexpected=True))


def excepthook(exc_type: type[BaseException], exc: BaseException,
               tb: TracebackType | None) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)
        return
    if exc.__traceback__ is None:
        exc = exc.with_traceback(tb)
    report_exception(exc)


def asyncio_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    exc = context.get("exception")
    if isinstance(exc, BaseException):
        report_exception(exc, str(context.get("message", "")))
    else:
        logger.error("Event loop problem: %s\n%s", context.get("message"),
                     "".join(traceback.format_stack()))


def install_exception_handlers(loop: asyncio.AbstractEventLoop) -> None:
    """Route exceptions nobody caught (slots, tasks) to the message bar."""
    sys.excepthook = excepthook
    loop.set_exception_handler(asyncio_exception_handler)


class NoticeBar(QFrame):
    """Shows the latest notice; info notices hide by themselves."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageBar")
        self.setAccessibleName("Notifications")
        self._notice: Notice | None = None
        self._text = QLabel(self)
        self._text.setObjectName("messageText")
        self._text.setWordWrap(True)
        self._text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._action = QPushButton(self)
        self._action.setObjectName("messageAction")
        self._action.setAccessibleName("Notification action")
        self._action.clicked.connect(self._on_action_clicked)
        self.close_button = QToolButton(self)
        self.close_button.setObjectName("messageClose")
        self.close_button.setToolTip("Dismiss")
        self.close_button.setAccessibleName("Dismiss notification")
        self.close_button.clicked.connect(self.dismiss)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(14, 8, 8, 8)
        layout.setSpacing(10)
        layout.addWidget(self._text, 1)
        layout.addWidget(self._action)
        layout.addWidget(self.close_button)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.dismiss)
        bridge.shown.connect(self.show_notice)
        self.hide()

    @property
    def notice(self) -> Notice | None:
        """The notice on screen, if any."""
        return self._notice if self.isVisible() else None

    def show_notice(self, notice: Notice) -> None:
        self._notice = notice
        self._text.setText(notice.text)
        self.setAccessibleDescription(notice.text)
        self.setProperty("level", notice.level.value)
        self.style().unpolish(self)
        self.style().polish(self)
        self._action.setVisible(notice.action is not None)
        self._action.setText(notice.action_text or "")
        self._action.setAccessibleName(notice.action_text or "Notification action")
        self.show()
        if notice.level is Level.INFO:
            # An offer to undo stays a little longer than a plain note.
            self._timer.start(INFO_TIMEOUT_MS * (2 if notice.action else 1))
        else:
            self._timer.stop()

    def trigger_action(self) -> None:
        """Run the notice's action (the button), then dismiss it."""
        notice = self._notice
        self.dismiss()
        if notice is not None and notice.action is not None:
            notice.action()

    def dismiss(self) -> None:
        self._timer.stop()
        self.hide()

    def _on_action_clicked(self) -> None:
        self.trigger_action()
