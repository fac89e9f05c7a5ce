"""The reply on screen, from its first piece to its end: its text streams to the window,
its calls wait for the user's answers, and its end (finished, stopped or failed) is told
through the chat's signals and on the message bar."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from PySide6.QtCore import QObject

from app.core.backend import EngineError
from app.core.conversations.chat import ChatResult, ChatTurn, ToolHooks
from app.core.conversations.store import Message, StoreError
from app.core.fireside import Fireside
from app.core.reply.replies import ToolRun
from app.ui import event_loop, notices
from app.ui.bridge import PieceStream, ToolRelay
from app.ui.chat_signals import ChatSignals
from app.ui.event_loop import read, wait
from app.ui.tool_answers import ToolAnswers

# The core's notices after a reply, on the window's bar.
_SAY: dict[str, Callable[[str], None]] = {
    "info": notices.info, "warning": notices.warning, "error": notices.error}


class ReplyOnScreen(QObject):
    """One reply at a time, told through ``signals``, its Qt parent."""

    def __init__(self, core: Fireside, tasks: event_loop.Tasks, signals: ChatSignals) -> None:
        super().__init__(signals)
        self._core = core
        self._tasks = tasks
        self._signals = signals
        self._turn: ChatTurn | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False  # the window is closing
        self._answers = ToolAnswers()
        # A QObject's method: the relay's calls from the calls' thread are queued here.
        self._relay = ToolRelay(self)
        self._relay.changed.connect(self._on_tool_call_changed)
        self._calls_shown = False  # the reply on screen made calls

    @property
    def streaming(self) -> bool:
        return self._turn is not None

    def tools(self) -> ToolHooks:
        """The window's part in calls: asked on the calls' thread, answered by a click."""
        return ToolHooks(lambda run: self._answers.answer(run.call.id),
                         self._relay.changed.emit)

    def decide(self, call_id: str, decision: str) -> None:
        self._answers.decide(call_id, decision)

    def stop(self) -> None:
        if self._turn is not None:
            self._turn.stop()

    def close(self) -> None:
        """Stop for good: the window is closing, so only a reply that could not be saved
        is still worth a notice."""
        self._closed = True
        self.stop()

    async def finish(self) -> None:
        """Stop the reply on screen, if any, and wait until it is finished there (and
        saved): what comes next never shows next to it."""
        task = self._task
        if task is not None and not task.done():
            self.stop()
            await asyncio.wait([task])

    async def begin(self, turn: ChatTurn, text: str,
                    sources: Sequence[Mapping[str, Any]] = ()) -> None:
        """Show the user's ``text`` (none when it is already shown), then ``turn``'s reply
        as it streams in; under it, once it ends, the sources it was given (the turn's,
        else ``sources``: a reply written again is given those of the message it
        answers)."""
        pieces = PieceStream(turn.pieces, self)  # the core's buffer, as the GUI takes it
        self._turn = turn
        self._calls_shown = False
        self._signals.streaming_changed.emit(True)
        if text:
            self._signals.message_sent.emit(text)
            await asyncio.sleep(0)
        model = self._core.model
        self._signals.reply_started.emit(model.name if model else "", pieces)
        self._task = self._tasks.spawn(self._stream(turn, pieces,
                                                    tuple(turn.sources or sources)))
        await asyncio.sleep(0)

    def _on_tool_call_changed(self, run: ToolRun) -> None:
        self._calls_shown = True
        self._signals.tool_call_changed.emit(run)

    async def _stream(self, turn: ChatTurn, pieces: PieceStream,
                      sources: tuple[Mapping[str, Any], ...]) -> None:
        signals = self._signals
        try:
            result = await wait(turn.future)
        except (EngineError, StoreError) as err:
            signals.reply_failed.emit(str(err))
            if not self._closed or isinstance(err, StoreError):
                notices.error(str(err))
        else:
            signals.reply_finished.emit(result.reply.text, result.reply.stats)
            if sources:
                signals.sources_given.emit(sources)
            if self._calls_shown:  # the replies and calls as stored, each in its place
                signals.conversation_opened.emit(self._core.conversation_id,
                                                 read(self._core.history, list[Message]()))
            self._tell(turn, result)
        finally:
            pieces.deleteLater()  # the transcript is done with it
            self._answers.forget()
            self._turn = None
            signals.streaming_changed.emit(False)
            if not self._closed:
                signals.conversations_changed.emit()

    def _tell(self, turn: ChatTurn, result: ChatResult) -> None:
        """The core's notices about the reply that has ended, on the message bar."""
        for notice in self._core.reply_notices(turn, result):
            hint = " Any model can go on with the conversation." \
                if notice.about == "cut" else ""
            _SAY[notice.level](notice.text + hint)
