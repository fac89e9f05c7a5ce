"""A reply's thinking, folded above its answer: "Thinking…" while it streams, "Thought
for 12 s" once the answer has begun; click, Space or Enter to unfold it.

While folded, arriving text is only kept: a 5,000-token thought costs the window
nothing until it is opened. Opened, it is plain text in a muted colour.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QToolButton, QVBoxLayout, QWidget

from app.core.reply.replies import ReplyStats, thought_for
from app.ui.messages.message_text import MessageText

THINKING = "Thinking…"


class _Toggle(QToolButton):
    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.click()
            return
        super().keyPressEvent(event)


class ThinkingView(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("thinking")
        self._parts: list[str] = []
        self._shown = 0  # parts written into the body
        self._started = 0.0
        self._live = False
        self.toggle = _Toggle(self)
        self.toggle.setObjectName("thinkingToggle")
        self.toggle.setCheckable(True)
        self.toggle.setAutoRaise(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setCursor(Qt.CursorShape.PointingHandCursor)
        self.toggle.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.toggle.toggled.connect(self._on_toggled)
        self.body = MessageText(self)
        self.body.setObjectName("thinkingText")
        self.body.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 6)  # a little air above the answer
        layout.setSpacing(4)
        layout.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.body)
        self._set_title(THINKING)
        self.hide()

    def text(self) -> str:
        return "".join(self._parts)

    @property
    def expanded(self) -> bool:
        return self.toggle.isChecked()

    def set_text(self, text: str, stats: ReplyStats | None) -> None:
        """A stored reply's thought."""
        self._parts, self._shown, self._live = [text] if text else [], 0, False
        self.setVisible(bool(text))
        self._set_title(thought_for(stats) if stats is not None and stats.thinking_s
                        else "Thought")
        if self.expanded:
            self.body.setPlainText(text)
            self._shown = len(self._parts)

    def stream(self, text: str) -> None:
        if not self._live and not self._parts:
            self._live, self._started = True, time.monotonic()
            self._set_title(THINKING)
            self.show()
        self._parts.append(text)
        if self.expanded:
            self._write_new()

    def answer_began(self) -> None:
        """The thought is over: title it with how long it took."""
        if self._live:
            self._live = False
            seconds = time.monotonic() - self._started
            self._set_title(thought_for(ReplyStats(0, 0, 0, 0.0, 0.0, "stop",
                                                   thinking_s=seconds)))

    def finish(self, stats: ReplyStats | None) -> None:
        self._live = False
        whole = self.text().rstrip()  # as it is stored
        if whole != self.text():
            self._parts = [whole] if whole else []
            self._shown = len(self._parts)
            if self.expanded:
                self.body.setPlainText(whole)
        if self._parts and stats is not None and stats.thinking_s:
            self._set_title(thought_for(stats))
        elif self._parts and self.toggle.text().startswith(THINKING):
            self._set_title("Thought")

    def _write_new(self) -> None:
        new = "".join(self._parts[self._shown:])
        self._shown = len(self._parts)
        if new:
            cursor = self.body.textCursor()
            cursor.movePosition(cursor.MoveOperation.End)
            cursor.insertText(new)
            self.body.lay_out(self.width())
            self.updateGeometry()

    def _on_toggled(self, shown: bool) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.toggle.setAccessibleName(("Hide" if shown else "Show") + " the model's thinking")
        if shown:
            self.body.setPlainText("".join(self._parts))
            self._shown = len(self._parts)
            self.body.lay_out(self.width())
        self.body.setVisible(shown)
        self.updateGeometry()

    def _set_title(self, title: str) -> None:
        self.toggle.setText(title)
        self.toggle.setAccessibleName(("Hide" if self.expanded else "Show")
                                      + " the model's thinking")
        self.toggle.setToolTip(f"{title}: click or press Enter to "
                               + ("fold it" if self.expanded else "read it"))
