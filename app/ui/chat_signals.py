"""What the chat controller tells the window, as signals: the conversations' changes and
the reply on screen as it begins, streams and ends."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.ui.bridge import PieceStream


class ChatSignals(QObject):
    conversations_changed = Signal()  # added, renamed, deleted or reordered
    conversation_opened = Signal(object, list)  # this conversation (id or None) and messages
    chat_cleared = Signal()  # a new, empty chat is shown
    message_sent = Signal(str)  # the user's message was saved; its reply follows
    reply_started = Signal(str, PieceStream)  # from this model; its text streams in the second
    reply_finished = Signal(str, object)  # finished or stopped: its whole text and ReplyStats
    sources_given = Signal(tuple)  # the documents' passages the reply just ended was given
    reply_failed = Signal(str)  # the reply could not be produced, for this reason
    streaming_changed = Signal(bool)
    send_refused = Signal(str)  # this text was not sent (the reason was shown): give it back
    tool_call_changed = Signal(object)  # a ToolRun of the reply: asked, running, its result
