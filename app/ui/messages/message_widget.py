"""One message of the transcript: its rendered text, its actions and its details."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from PySide6.QtCore import QSize, Qt, QUrl, Signal
from PySide6.QtGui import QColor, QFont, QPalette, QResizeEvent
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.reply.replies import ReplyStats, ToolRun, describe
from app.ui.messages.live_reply import LiveReply
from app.ui.messages.markdown import (
    COPY_CODE_PREFIX,
    Theme,
    document_stylesheet,
    is_safe_link,
    render,
)
from app.ui.messages.message_text import MessageText
from app.ui.messages.sources_line import SourcesLine
from app.ui.messages.thinking_view import ThinkingView
from app.ui.messages.tool_call_view import ToolCallView

BUBBLE_SHARE = 0.8  # of the column a user's bubble may take
BUBBLE_PADDING = (14, 10, 6)  # sides, top, bottom (the line height adds below)
TEXT_SCALE = 1.08  # message text is a little larger than the interface font


def theme_for(palette: QPalette, mono_family: str) -> Theme:
    """Colours for rendered messages that sit well on ``palette``'s base colour."""
    base = palette.color(QPalette.ColorRole.Base)
    text = palette.color(QPalette.ColorRole.Text)
    return Theme(
        dark=base.lightnessF() < 0.5,
        text=text.name(),
        muted=mix(text, base, 0.42).name(),
        link=palette.color(QPalette.ColorRole.Link).name(),
        code_background=mix(base, text, 0.045).name(),
        code_header=mix(base, text, 0.09).name(),
        border=mix(base, text, 0.14).name(),
        inline_code=mix(base, text, 0.09).name(),
        mono_family=mono_family,
    )


def mix(a: QColor, b: QColor, amount: float) -> QColor:
    """``a`` moved ``amount`` of the way towards ``b``."""
    return QColor.fromRgbF(a.redF() + (b.redF() - a.redF()) * amount,
                           a.greenF() + (b.greenF() - a.greenF()) * amount,
                           a.blueF() + (b.blueF() - a.blueF()) * amount)


def _scaled(font: QFont, factor: float) -> QFont:
    scaled = QFont(font)
    if font.pointSizeF() > 0:
        scaled.setPointSizeF(font.pointSizeF() * factor)
    elif font.pixelSize() > 0:  # a font set in pixels has no point size
        scaled.setPixelSize(round(font.pixelSize() * factor))
    return scaled


class _UserRow(QWidget):
    """A right-aligned bubble as wide as its text needs, up to a share of the row."""

    def __init__(self, text: MessageText, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text = text
        self.bubble = QFrame(self)
        self.bubble.setObjectName("userBubble")
        text.setParent(self.bubble)
        self._natural = 0
        self._width = 400  # the last width the row was given
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    @staticmethod
    def widest_text(width: int) -> int:
        """The widest the bubble's text may be in a row ``width`` wide."""
        return max(24, int(width * BUBBLE_SHARE) - 2 * BUBBLE_PADDING[0])

    def content_changed(self, width: int) -> None:
        """The text was set, laid out at ``widest_text(width)``: fit the bubble to it."""
        self._natural = math.ceil(self.text.document().idealWidth())
        self.updateGeometry()
        self._place(width)

    def _text_width(self, width: int) -> int:
        return min(self._natural + 1, self.widest_text(width))

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self.text.heightForWidth(self._text_width(width)) + sum(BUBBLE_PADDING[1:])

    def sizeHint(self) -> QSize:
        return QSize(self._width, self.heightForWidth(self._width))

    def resizeEvent(self, event: QResizeEvent) -> None:
        self._place(event.size().width())

    def _place(self, width: int) -> None:
        self._width = width
        text_width = self._text_width(width)
        text_height = self.text.heightForWidth(text_width)
        pad_x, pad_top, pad_bottom = BUBBLE_PADDING
        bubble_width = text_width + 2 * pad_x
        self.bubble.setGeometry(width - bubble_width, 0, bubble_width,
                                text_height + pad_top + pad_bottom)
        self.text.setGeometry(pad_x, pad_top, text_width, text_height)


class MessageWidget(QFrame):
    """A user's message (a bubble) or a model's reply (full width), with its actions."""

    copied = Signal(str)
    """Something was put on the clipboard; the text is a short notice for the user."""
    link_activated = Signal(QUrl)
    """The user clicked an http, https or mailto link in the message."""
    regenerate_requested = Signal()
    """The user asked for this reply to be written again."""
    edit_requested = Signal(str)
    """The user wants to edit this message; carries its text."""
    tool_decided = Signal(str, str)
    """The user answered for a call of this reply: its id and the decision."""
    source_clicked = Signal(object)
    """The user clicked one of the reply's sources: its dict, as the core keeps it."""

    def __init__(self, role: str, text: str, theme: Theme, *, model: str = "",
                 stats: ReplyStats | None = None, note: str = "", thinking: str = "",
                 calls: Sequence[ToolRun] = (), sources: Sequence[Mapping[str, Any]] = (),
                 width: int = 600, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # Laid out at its final width from the start: a QTextDocument layout is the
        # dearest thing here, and Qt would first size a new widget 100 pixels wide.
        self.resize(width, 100)
        self.role = role
        self._markdown = text
        self._theme = theme
        self._model = model
        self._stats = stats
        self._code_blocks: Sequence[str] = ()
        self._live: LiveReply | None = None
        self.setObjectName("userMessage" if role == "user" else "replyMessage")
        self._build_text(thinking, stats)
        self._build_actions()
        self._lay_out(calls)
        self.set_sources(sources)

        self._apply_stats()
        self._update_names()
        self._render()
        if note:
            self.mark_failed(note)

    def _build_text(self, thinking: str, stats: ReplyStats | None) -> None:
        """The text and what is shown around it: its author, the reply's thinking, why
        it failed and its details."""
        self.text = MessageText(self)
        self.text.setFont(_scaled(self.font(), TEXT_SCALE))
        self.text.anchorClicked.connect(self._on_anchor_clicked)
        self._author = QLabel(self)
        self._author.setObjectName("messageAuthor")
        self.thinking = ThinkingView(self)  # shown when the reply has thinking
        self.thinking.set_text(thinking, stats)
        self._error = QLabel(self)
        self._error.setObjectName("replyError")
        self._error.setWordWrap(True)
        self._error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._error.hide()
        self.details = QLabel(self)
        self.details.setObjectName("replyDetails")
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.hide()
        # The documents the reply was given, numbered as it cites them.
        self.sources_line = SourcesLine(self)
        self.sources_line.set_link_color(self._theme.link)
        self.sources_line.source_clicked.connect(self.source_clicked)

    def _build_actions(self) -> None:
        """The buttons under the message, not yet laid out: which show depends on its role."""
        self._actions = QWidget(self)
        self._actions.setObjectName("messageActions")
        self.copy_button = self._action("Copy", "copyButton", "Copy message",
                                        "Copy this message as Markdown")
        self.edit_button = self._action("Edit", "editButton", "Edit message",
                                        "Edit this message and send it again")
        self.regenerate_button = self._action("Regenerate", "regenerateButton",
                                              "Regenerate reply", "Write this reply again")
        self.details_button = self._action("Details", "detailsButton", "Show reply details",
                                           "Tokens, speed and context of this reply")
        self.details_button.setCheckable(True)
        self.edit_button.hide()
        self.regenerate_button.hide()
        self.copy_button.clicked.connect(self._on_copy_clicked)
        self.edit_button.clicked.connect(lambda: self.edit_requested.emit(self._markdown))
        self.regenerate_button.clicked.connect(self.regenerate_requested)
        self.details_button.toggled.connect(self._on_details_toggled)

    def _lay_out(self, calls: Sequence[ToolRun]) -> None:
        """A user's message as a bubble with its actions on the right; a reply at full
        width under its author and thinking, its calls under its text."""
        bar = QHBoxLayout(self._actions)
        bar.setContentsMargins(0, 0, 0, 0)
        bar.setSpacing(2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        self._user_row: _UserRow | None = None
        if self.role == "user":
            self._author.hide()
            self._user_row = _UserRow(self.text, self)
            layout.addWidget(self._user_row)
            bar.addStretch(1)
            bar.addWidget(self.edit_button)
            bar.addWidget(self.copy_button)
        else:
            layout.addWidget(self._author)
            layout.addWidget(self.thinking)
            layout.addWidget(self.text)
            for button in (self.copy_button, self.regenerate_button, self.details_button):
                bar.addWidget(button)
            bar.addStretch(1)
        self._calls: dict[str, ToolCallView] = {}
        self._calls_layout = QVBoxLayout()
        self._calls_layout.setSpacing(4)
        layout.addLayout(self._calls_layout)
        for run in calls:
            self.show_call(run)
        layout.addWidget(self.sources_line)
        layout.addWidget(self._error)
        layout.addWidget(self._actions)
        layout.addWidget(self.details)

    def _action(self, label: str, name: str, accessible: str, tip: str) -> QToolButton:
        button = QToolButton(self._actions)
        button.setText(label)
        button.setObjectName(name)
        button.setAccessibleName(accessible)
        button.setToolTip(tip)
        button.setAutoRaise(True)
        button.setProperty("messageAction", True)
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        button.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        return button

    # What the transcript asks of a message ------------------------------------

    def markdown(self) -> str:
        """The message's raw text, as Copy puts it on the clipboard."""
        return self._live.text() if self._live is not None else self._markdown

    def show_actions(self, *, regenerate: bool = False, edit: bool = False) -> None:
        """Show Regenerate / Edit: only the newest messages offer them."""
        self.regenerate_button.setVisible(regenerate and self.role == "assistant")
        self.edit_button.setVisible(edit and self.role == "user")

    def show_call(self, run: ToolRun) -> ToolCallView:
        """Show a call of this reply under its text, or what became of it."""
        view = self._calls.get(run.call.id)
        if view is None:
            view = ToolCallView(run, self)
            view.decided.connect(self.tool_decided)
            self._calls[run.call.id] = view
            self._calls_layout.addWidget(view)
        else:
            view.update_run(run)
        return view

    @property
    def call_views(self) -> list[ToolCallView]:
        return list(self._calls.values())

    def set_sources(self, sources: Sequence[Mapping[str, Any]]) -> None:
        """The sources under a reply (a user's message shows none)."""
        self.sources_line.set_sources(sources if self.role == "assistant" else ())

    def set_theme(self, theme: Theme) -> None:
        if theme == self._theme:
            return
        self._theme = theme
        self.sources_line.set_link_color(theme.link)
        if self._live is not None:
            self.text.document().setDefaultStyleSheet(document_stylesheet(theme))
            self._live.restyle(theme)
        else:
            self._render()

    def begin_stream(self) -> None:
        """From now on the text arrives through ``stream``."""
        self.text.document().setDefaultStyleSheet(document_stylesheet(self._theme))
        self._live = LiveReply(self.text.document(), self._theme)
        self._code_blocks = self._live.code_blocks
        self._update_names()

    def stream(self, text: str) -> None:
        if self._live is not None:
            self.thinking.answer_began()
            self._live.append(text)

    def stream_thinking(self, text: str) -> None:
        if self._live is not None:
            self.thinking.stream(text)

    def finish(self, text: str, stats: ReplyStats | None) -> None:
        """The final text, rendered once, and the reply's stats."""
        self._live = None
        self.thinking.finish(stats)
        self._markdown = text
        self._stats = stats
        self._apply_stats()
        self._update_names()
        self._render()

    def mark_failed(self, message: str) -> None:
        """Keep the text so far and say why it ended."""
        if self._live is not None:
            self.finish(self._live.text(), self._stats)
        self._error.setText(f"⚠ {message}")
        self._error.show()
        self._update_names()

    # Inside -------------------------------------------------------------------

    def _render(self) -> None:
        rendered = render(self._markdown, self._theme)
        self._code_blocks = rendered.code_blocks
        self.text.document().setDefaultStyleSheet(document_stylesheet(self._theme))
        width = self.width()
        if self._user_row is not None:
            self.text.lay_out(_UserRow.widest_text(width))
            self.text.setHtml(rendered.html)
            self._user_row.content_changed(width)
        else:
            self.text.resize(width, self.text.height())
            self.text.lay_out(width)
            self.text.setHtml(rendered.html)

    def _apply_stats(self) -> None:
        stats = self._stats if self.role == "assistant" else None
        summary = "\n".join(describe(stats)) if stats is not None else ""
        self.details.setText(summary)
        self.details_button.setToolTip(summary or "No details for this reply")
        self.details_button.setVisible(bool(summary))
        self.details.setVisible(bool(summary) and self.details_button.isChecked())

    def _update_names(self) -> None:
        writing = self._live is not None
        if self.role == "user":
            name, author = "Your message", "You"
        elif self.role == "system":
            name, author = "System message", "System"
        else:
            author = self._model or "Reply"
            name = f"Reply from {self._model}" if self._model else "Reply"
        self.setAccessibleName(name)
        self.text.setAccessibleName(name)
        self.text.setAccessibleDescription(
            "Being written" if writing else self._error.text() or self.details.text())
        self._author.setText(f"{author}  ·  writing…" if writing else author)
        self._actions.setVisible(not writing)

    def _on_copy_clicked(self) -> None:
        QApplication.clipboard().setText(self.markdown())
        self.copied.emit("Message copied")

    def _on_details_toggled(self, shown: bool) -> None:
        self.details.setVisible(shown and bool(self.details.text()))
        self.details_button.setAccessibleName(
            "Hide reply details" if shown else "Show reply details")

    def _on_anchor_clicked(self, url: QUrl) -> None:
        target = url.toString()
        if target.startswith(COPY_CODE_PREFIX):
            index = target.removeprefix(COPY_CODE_PREFIX)
            if index.isdigit() and int(index) < len(self._code_blocks):
                QApplication.clipboard().setText(self._code_blocks[int(index)])
                self.copied.emit("Code copied")
        elif is_safe_link(target):
            self.link_activated.emit(url)
