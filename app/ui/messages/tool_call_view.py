"""A tool call in a reply: which tool, with what, and the user's say before it runs.

While the call waits for the user it offers Allow once / Always allow / Deny; then it
says what became of it, with the tool's output folded under it (what the model was
told), opened by a click like a reply's thinking.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.conversations.chat import ALLOW_ALWAYS, ALLOW_ONCE, DENY
from app.core.reply.replies import ToolRun

_STATUS = {"asking": "asks to run", "running": "running…", "done": "done",
           "denied": "denied", "failed": "failed", "stopped": "stopped"}
_ARGUMENTS_SHOWN = 300  # characters of the arguments on the card's line


class ToolCallView(QFrame):
    decided = Signal(str, str)
    """The user answered for this call: its id and ALLOW_ONCE, ALLOW_ALWAYS or DENY."""

    def __init__(self, run: ToolRun, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("toolCall")
        self.run = run
        self.title = QLabel(self)
        self.title.setObjectName("toolCallTitle")
        self.title.setWordWrap(True)
        self.title.setTextFormat(Qt.TextFormat.PlainText)
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self._choices = QWidget(self)
        self.allow_once = self._choice("Allow once", "allowOnceButton", ALLOW_ONCE)
        self.allow_always = self._choice("Always allow this tool", "allowAlwaysButton",
                                         ALLOW_ALWAYS)
        self.deny = self._choice("Deny", "denyButton", DENY)
        choices = QHBoxLayout(self._choices)
        choices.setContentsMargins(0, 0, 0, 0)
        for button in (self.allow_once, self.allow_always, self.deny):
            choices.addWidget(button)
        choices.addStretch(1)

        self.result_toggle = QToolButton(self)
        self.result_toggle.setObjectName("toolResultToggle")
        self.result_toggle.setCheckable(True)
        self.result_toggle.setAutoRaise(True)
        self.result_toggle.setCursor(Qt.CursorShape.PointingHandCursor)
        self.result_toggle.toggled.connect(self._on_toggled)
        self.result = QPlainTextEdit(self)
        self.result.setObjectName("toolResult")
        self.result.setReadOnly(True)
        self.result.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.result.hide()

        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.setSpacing(4)
        layout.addWidget(self.title)
        layout.addWidget(self._choices)
        layout.addWidget(self.result_toggle, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.result)
        self.update_run(run)

    def update_run(self, run: ToolRun) -> None:
        self.run = run
        arguments = run.call.arguments if run.call.arguments not in ("", "{}") else ""
        if len(arguments) > _ARGUMENTS_SHOWN:
            arguments = arguments[:_ARGUMENTS_SHOWN] + "…"
        where = f" ({run.server})" if run.server else ""
        self.title.setText(f"Tool call: {run.call.name}({arguments}){where} — "
                           f"{_STATUS[run.status]}")
        self.setAccessibleName(f"Tool call {run.call.name}, {_STATUS[run.status]}")
        self._choices.setVisible(run.status == "asking")
        finished = run.status not in ("asking", "running")
        self.result_toggle.setVisible(finished)
        self.result.setPlainText(run.result)
        # As tall as the output, up to a cap: a long one scrolls inside.
        lines = min(run.result.count("\n") + 1 + len(run.result) // 100, 12)
        self.result.setFixedHeight(self.result.fontMetrics().lineSpacing() * lines + 14)
        self._on_toggled(self.result_toggle.isChecked())

    def _choice(self, label: str, name: str, decision: str) -> QPushButton:
        button = QPushButton(label, self._choices)
        button.setObjectName(name)
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        button.clicked.connect(lambda: self._decide(decision))
        return button

    def _decide(self, decision: str) -> None:
        self._choices.hide()  # answered once; the card shows what follows
        self.decided.emit(self.run.call.id, decision)

    def _on_toggled(self, shown: bool) -> None:
        label = "Result" if self.run.status == "done" else "What the model was told"
        self.result_toggle.setText(f"{'▾' if shown else '▸'} {label}")
        self.result.setVisible(shown and self.result_toggle.isVisible())
