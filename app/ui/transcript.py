"""The transcript: a conversation's messages, with a reply streaming into it.

Messages live in a ``MessageColumn``, which builds widgets only near the view (see
there), so a conversation of 5,000 messages opens as fast as one of 10. A streaming
reply's text comes through one buffer (the core's ``Pieces``, taken through a
``PieceStream``): the first text after a pause is written at once, what follows at most once
a frame (``FRAME_MS``), by ``LiveReply``, whose cost per piece does not grow with the
reply. While the view is at the bottom it follows the reply; once the user scrolls up
it stays put.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from PySide6.QtCore import QEvent, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QLabel, QPushButton, QStackedLayout, QVBoxLayout, QWidget

from app.core.conversations.store import Message
from app.core.reply.replies import ReplyStats, ToolRun
from app.ui.bridge import PieceStream
from app.ui.messages.message_column import Entry, MessageColumn
from app.ui.messages.message_widget import MessageWidget, mix, theme_for

FRAME_MS = 33  # streamed text is written at most this often (about 30 frames/s)
EMPTY_TEXT = "Send a message to start the conversation."
INTERRUPTED = "This reply was interrupted before it finished."


class TranscriptView(QWidget):
    """A conversation's messages; the newest reply may be streaming into it."""

    regenerate_requested = Signal()
    """The user asked for the last reply to be written again."""
    edit_requested = Signal(str)
    """The user wants to edit the last message they sent; carries its text."""
    copy_done = Signal(str)
    """Something was copied; the text is a short notice for the message bar."""
    link_clicked = Signal(QUrl)
    """The user clicked an http, https or mailto link; the window decides what to do."""
    tool_decided = Signal(str, str)
    """The user answered for a tool call: its id and ALLOW_ONCE, ALLOW_ALWAYS or DENY."""
    get_models_requested = Signal()
    """The empty conversation's link: find and download models."""
    source_requested = Signal(object)
    """The user clicked a source under a reply: its dict, as the core keeps it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("transcript")
        self.setAccessibleName("Conversation")
        self._live: Entry | None = None
        self._source: PieceStream | None = None  # where the streaming reply's text waits
        self._mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()
        self._theme = theme_for(self.palette(), self._mono)

        self._empty_page = QWidget(self)
        self._empty = QLabel(EMPTY_TEXT, self._empty_page)
        self._empty.setObjectName("transcriptEmpty")
        self._empty.setAccessibleName("Empty conversation")
        self._empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._empty.setWordWrap(True)
        self.get_models_link = QPushButton("Get models from the Hugging Face Hub…",
                                           self._empty_page)
        self.get_models_link.setObjectName("getModelsLink")
        self.get_models_link.setFlat(True)
        self.get_models_link.setCursor(Qt.CursorShape.PointingHandCursor)
        self.get_models_link.clicked.connect(self.get_models_requested)
        empty_column = QVBoxLayout(self._empty_page)
        empty_column.addStretch(1)
        empty_column.addWidget(self._empty)
        empty_column.addWidget(self.get_models_link, 0, Qt.AlignmentFlag.AlignHCenter)
        empty_column.addStretch(1)
        self._column = MessageColumn(self._build_row, self)
        self._stack = QStackedLayout(self)
        self._stack.addWidget(self._empty_page)
        self._stack.addWidget(self._column)

        self._frame = QTimer(self)
        self._frame.setSingleShot(True)
        self._frame.setInterval(FRAME_MS)
        self._frame.timeout.connect(self.deliver)
        self._apply_style()

    # The interface the window drives --------------------------------------------

    def set_messages(self, messages: Sequence[Message]) -> None:
        """Show a conversation in place of the current one; builds its newest part."""
        self._stop_stream()
        # The column must be on screen before rows are built, or they are first laid
        # out at the size of a hidden widget.
        self._stack.setCurrentWidget(self._column if messages else self._empty_page)
        self._column.set_entries(_entries(messages))
        self._refresh_actions()

    def clear(self) -> None:
        """Show an empty conversation."""
        self._stop_stream()
        self._column.set_entries([])
        self._stack.setCurrentWidget(self._empty_page)

    def set_empty_text(self, text: str) -> None:
        self._empty.setText(text)

    def add_user_message(self, text: str) -> None:
        self._add(Entry("user", text))
        self.scroll_to_bottom()

    def begin_reply(self, model_name: str, source: PieceStream) -> None:
        """Add an empty reply from ``model_name``; its text streams in from ``source``."""
        if self._live is not None:  # the last one never finished: keep what it got
            self.deliver()
            self.finish_reply(self._live_text(), None)
        entry = Entry("assistant", "", model=model_name)
        self._live = entry
        row = self._add(entry)
        row.begin_stream()
        self._column.pinned = row
        self._source = source
        source.arrived.connect(self._on_arrived)
        self._refresh_actions()
        self.deliver()  # what streamed in while the reply was being set up

    def show_call(self, run: ToolRun) -> None:
        """A call of the streaming reply, shown under its text (or what became of it).
        What the model writes after its calls streams into a reply of its own below,
        as the conversation is stored."""
        entry = self._live
        if entry is None:
            return
        self.deliver()  # the text before the call is the calling reply's
        known = [i for i, r in enumerate(entry.calls) if r.call.id == run.call.id]
        if known:
            entry.calls[known[0]] = run
        else:
            entry.calls.append(run)
        if entry.row is not None:
            entry.row.show_call(run)
        self._column.schedule()  # the row grew

    def deliver(self) -> None:
        """Write what has arrived into the reply now; more waits for the next frame."""
        source, entry = self._source, self._live
        if source is None or entry is None:
            return
        thought, text = source.take()
        if (thought or text) and entry.calls:  # the reply after the calls begins
            entry = self._next_reply(entry)
        if thought:
            entry.thinking += thought
            if entry.row is not None:
                entry.row.stream_thinking(thought)
        if text and entry.row is not None:
            entry.row.stream(text)
        if thought or text:
            self._frame.start()  # what comes during this frame waits for its end

    def _next_reply(self, calling: Entry) -> Entry:
        calling.text = self._live_text()
        if calling.row is not None:
            calling.row.finish(calling.text, None)
        entry = Entry("assistant", "", model=calling.model)
        self._live = entry
        row = self._add(entry)
        row.begin_stream()
        self._column.pinned = row
        return entry

    def finish_reply(self, text: str, stats: ReplyStats | None) -> None:
        """Show the reply's final text, rendered once, and its stats (what was still on
        its way is in ``text``)."""
        entry = self._live
        self._stop_stream()
        if entry is None:
            self._add(Entry("assistant", text, model=stats.model if stats else "", stats=stats))
            return
        entry.text, entry.stats = text, stats
        if entry.row is not None:
            entry.row.finish(text, stats)
        self._refresh_actions()

    def show_sources(self, sources: Sequence[Mapping[str, Any]]) -> None:
        """The sources of the reply that just ended, under it."""
        entries = self._column.entries
        if self._live is not None or not entries or entries[-1].role != "assistant":
            return
        entry = entries[-1]
        entry.sources = tuple(sources)
        if entry.row is not None:
            entry.row.set_sources(entry.sources)
            self._column.schedule()  # the row grew

    def fail_reply(self, message: str) -> None:
        """The reply failed: keep what arrived and say why it ended."""
        entry = self._live
        if entry is None:
            return
        self.deliver()
        entry.text, entry.note = self._live_text(), message
        self._stop_stream()
        if entry.row is not None:
            entry.row.mark_failed(message)
        self._refresh_actions()

    def scroll_to_bottom(self) -> None:
        self._column.scroll_to_bottom()

    # Extra, for the window and tests ----------------------------------------------

    def message_widgets(self) -> list[MessageWidget]:
        """The messages built right now, oldest first; others are built near the view."""
        return self._column.rows()

    def unbuilt_count(self) -> int:
        """How many older messages have never been built (they appear near the top)."""
        return self._column.never_built()

    # Inside -----------------------------------------------------------------------

    def _add(self, entry: Entry) -> MessageWidget:
        self._stack.setCurrentWidget(self._column)
        row = self._column.append(entry)
        self._refresh_actions()
        return row

    def _build_row(self, entry: Entry, width: int, parent: QWidget) -> MessageWidget:
        row = MessageWidget(entry.role, entry.text, self._theme, model=entry.model,
                            stats=entry.stats, note=entry.note, thinking=entry.thinking,
                            calls=entry.calls, sources=entry.sources, width=width,
                            parent=parent)
        row.copied.connect(self.copy_done)
        row.link_activated.connect(self.link_clicked)
        row.regenerate_requested.connect(self.regenerate_requested)
        row.edit_requested.connect(self.edit_requested)
        row.tool_decided.connect(self.tool_decided)
        row.source_clicked.connect(self.source_requested)
        entries = self._column.entries
        if self._live is None and entries:
            row.show_actions(regenerate=entry is entries[-1], edit=entry is _last_user(entries))
        return row

    def _refresh_actions(self) -> None:
        """Only the last reply offers Regenerate, the last user message Edit."""
        entries = self._column.entries
        streaming = self._live is not None
        last, last_user = (entries[-1] if entries else None), _last_user(entries)
        for entry in entries:
            if entry.row is not None:
                entry.row.show_actions(regenerate=not streaming and entry is last,
                                     edit=not streaming and entry is last_user)

    def _live_text(self) -> str:
        row = self._live.row if self._live is not None else None
        return row.markdown() if row is not None else ""

    def _on_arrived(self) -> None:
        if not self._frame.isActive():  # else the frame's end takes it
            self.deliver()

    def _stop_stream(self) -> None:
        self._frame.stop()
        if self._source is not None:
            self._source.arrived.disconnect(self._on_arrived)
            self._source = None
        self._live = None
        self._column.pinned = None

    # Looks ------------------------------------------------------------------------

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            theme = theme_for(self.palette(), self._mono)
            if theme != self._theme:
                self._theme = theme
                self._apply_style()
                for row in self._column.rows():
                    row.set_theme(theme)

    def _apply_style(self) -> None:
        palette = self.palette()
        base = palette.color(palette.ColorRole.Base)
        text = palette.color(palette.ColorRole.Text)
        muted = self._theme.muted
        action = 'QToolButton[messageAction="true"]'
        self.setStyleSheet(
            f"#transcriptContent, #transcriptColumn, #transcriptScroll {{"
            f" background: {base.name()}; }}"
            f" #transcriptEmpty {{ color: {muted}; background: {base.name()};"
            f" font-size: 15px; }}"
            f" #userBubble {{ background: {mix(base, text, 0.075).name()};"
            f" border-radius: 14px; }}"
            f" #messageAuthor {{ color: {muted}; font-weight: 600; }}"
            f" #replyDetails {{ color: {muted}; padding: 2px 4px; }}"
            f" #sourcesLine {{ color: {muted}; padding-top: 4px; }}"
            f" #thinkingText {{ color: {muted}; background: transparent;"
            f" border: none; border-left: 2px solid {self._theme.border};"
            f" padding-left: 10px; margin-left: 6px; }}"
            f" #thinkingToggle {{ color: {muted}; border: none; padding: 2px 4px;"
            f" border-radius: 6px; }}"
            f" #thinkingToggle:hover, #thinkingToggle:focus {{"
            f" background: {mix(base, text, 0.1).name()}; color: {text.name()}; }}"
            f" #toolCall {{ background: {mix(base, text, 0.04).name()};"
            f" border: 1px solid {self._theme.border}; border-radius: 8px; }}"
            f" #toolCallTitle {{ font-family: '{self._mono}'; }}"
            f" #toolResult {{ font-family: '{self._mono}'; background: {base.name()}; }}"
            f" #replyError {{ color: {'#ff7b72' if self._theme.dark else '#cf222e'}; }}"
            f" {action} {{ color: {muted}; border: none; padding: 3px 8px;"
            f" border-radius: 6px; }}"
            f" {action}:hover, {action}:checked {{"
            f" background: {mix(base, text, 0.1).name()}; color: {text.name()}; }}"
            f" {action}:focus {{"
            f" border: 1px solid {palette.color(palette.ColorRole.Highlight).name()}; }}"
        )


def _entries(messages: Sequence[Message]) -> list[Entry]:
    """The messages as entries; a reply shows the sources stored with the user's message
    it answers, under the last of its parts (the answer after any calls)."""
    entries = [_entry(m) for m in messages]
    asked: Sequence[Mapping[str, Any]] = ()
    for index, (message, entry) in enumerate(zip(messages, entries, strict=True)):
        if message.role == "user":
            asked = message.sources
        elif message.role == "assistant" and asked and (
                index + 1 == len(messages) or messages[index + 1].role != "assistant"):
            entry.sources = tuple(asked)
    return entries


def _entry(message: Message) -> Entry:
    stats = message.reply_stats
    return Entry(message.role, message.text, model=stats.model if stats else "", stats=stats,
                 note="" if message.complete else INTERRUPTED, thinking=message.thinking,
                 calls=list(message.calls))


def _last_user(entries: Sequence[Entry]) -> Entry | None:
    # Near the end in practice: a reply rarely follows more than one message.
    return next((e for e in reversed(entries) if e.role == "user"), None)
