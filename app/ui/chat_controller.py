"""The window's face on the core's conversations: its actions and their outcomes, as signals.

It adapts an open :class:`app.core.fireside.Fireside` and assembles nothing. It runs
on the GUI thread's event loop and awaits the core's futures there, so nothing blocks
the window. Actions reach the screen in the order asked, and each stops the reply on
screen first, as a person who asks for something new wants (the core queues them in
that order too).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor, Future
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.core.backend import EngineError
from app.core.conversations.chat import ChatTurn, ToolHooks
from app.core.conversations.store import Conversation, Message, StoreError
from app.core.fireside import Fireside, Rewound
from app.core.reply.replies import ToolRun
from app.ui import event_loop, notices
from app.ui.bridge import PieceStream, ToolRelay
from app.ui.event_loop import read, wait

Action = Callable[..., Coroutine[Any, Any, None]]
# The core's notices after a reply, on the window's bar.
_SAY: dict[str, Callable[[str], None]] = {
    "info": notices.info, "warning": notices.warning, "error": notices.error}


def _action(stops_reply: bool = True) -> Callable[[Action], Callable[..., asyncio.Task[None]]]:
    """A task after those asked before it and (``stops_reply``) after the reply on screen
    has stopped; what the core refuses reaches the message bar."""

    def wrap(method: Action) -> Callable[..., asyncio.Task[None]]:
        async def run(self: ChatController, *args: Any) -> None:
            async with self._lock:
                if self._closed:
                    return
                if stops_reply:
                    await self._finish_reply_on_screen()
                try:
                    await method(self, *args)
                except (EngineError, StoreError) as err:
                    if not self._closed:
                        notices.error(str(err))

        @functools.wraps(method)
        def spawn(self: ChatController, *args: Any) -> asyncio.Task[None]:
            return self._tasks.spawn(run(self, *args))
        return spawn

    return wrap


class ChatController(QObject):
    conversations_changed = Signal()  # added, renamed, deleted or reordered
    conversation_opened = Signal(object, list)  # this conversation (id or None) and messages
    chat_cleared = Signal()  # a new, empty chat is shown
    message_sent = Signal(str)  # the user's message was saved; its reply follows
    reply_started = Signal(str, PieceStream)  # from this model; its text streams in the second
    reply_finished = Signal(str, object)  # finished or stopped: its whole text and ReplyStats
    reply_failed = Signal(str)  # the reply could not be produced, for this reason
    streaming_changed = Signal(bool)
    send_refused = Signal(str)  # this text was not sent (the reason was shown): give it back
    tool_call_changed = Signal(object)  # a ToolRun of the reply: asked, running, its result

    def __init__(self, core: Fireside, background: Executor, tasks: event_loop.Tasks,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.core = core
        self._background = background  # the core closes there, off the GUI thread
        self._turn: ChatTurn | None = None
        self._stream_task: asyncio.Task[None] | None = None
        self._tasks = tasks  # the window's, loads included
        self._lock = asyncio.Lock()
        self._closed = False
        self._asked: dict[str, Future[str]] = {}  # the user's answers to calls, by id
        self._asked_lock = threading.Lock()  # asked on the calls' thread, answered here
        self._relay = ToolRelay(self)
        self._relay.changed.connect(self._on_tool_call_changed)
        self._calls_shown = False  # the reply on screen made calls

    @property
    def conversation_id(self) -> int | None:
        return self.core.conversation_id

    @property
    def streaming(self) -> bool:
        return self._turn is not None

    @property
    def busy(self) -> bool:
        """An action is under way: a load, a reply, or a change of conversation."""
        return bool(self._tasks) or self.core.loading or self.streaming

    def conversations(self, query: str = "") -> list[Conversation]:
        return read(lambda: self.core.conversations(query), [])

    def conversation(self) -> Conversation | None:
        """The open conversation, if it has been saved."""
        return read(self.core.conversation, None, quiet=True)

    def last_user_text(self) -> str | None:
        return read(self.core.last_user_text, None)

    def start(self) -> None:
        """Show the conversation that was open when Fireside last closed."""
        if self.core.settings.open_conversation is not None:
            self.open_conversation(self.core.settings.open_conversation, True)

    def send(self, text: str) -> asyncio.Task[None]:
        return self._send(text, None, False)

    def edit_last(self, text: str, conversation_id: int | None) -> asyncio.Task[None]:
        """Send ``text`` in place of the last user message (and its reply), if the
        conversation open when the edit began (its ``conversation_id``) is still open."""
        return self._send(text, conversation_id, True)

    def stop(self) -> None:
        if self._turn is not None:
            self._turn.stop()

    def decide(self, call_id: str, decision: str) -> None:
        """The user's answer for a call that waits (ALLOW_ONCE, ALLOW_ALWAYS or DENY)."""
        answer = self._answer(call_id)
        if not answer.done():  # the first answer counts
            answer.set_result(decision)

    def _answer(self, call_id: str) -> Future[str]:
        # The call is shown just before its question is asked on the calls' thread: a
        # quick click may come first, and its answer waits here for the question.
        with self._asked_lock:
            return self._asked.setdefault(call_id, Future())

    def _on_tool_call_changed(self, run: ToolRun) -> None:
        self._calls_shown = True
        self.tool_call_changed.emit(run)

    def _tools(self) -> ToolHooks:
        """The window's part in calls: asked on the calls' thread, answered by a click."""
        return ToolHooks(lambda run: self._answer(run.call.id), self._relay.changed.emit)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        read(lambda: self.core.rename_conversation(conversation_id, title), None)
        self.conversations_changed.emit()

    def shut_down(self, then: Callable[[], None]) -> None:
        """Stop the reply (its text so far is saved), close the model and the database,
        in the background and in bounded time; then call ``then``."""
        self._closed = True
        self.stop()

        async def run() -> None:
            try:
                await asyncio.get_running_loop().run_in_executor(self._background,
                                                                 self.core.close)
            finally:
                await self._tasks.cancel()
                then()

        self._tasks.spawn(run())

    @_action()
    async def _send(self, text: str, edit_in: int | None, editing: bool) -> None:
        core = self.core
        if core.answering:
            notices.info("Waiting for the local server's request to finish…")
        try:
            if editing:
                started: Rewound | ChatTurn = await wait(core.edit_last(
                    text, edit_in, preempt=True, tools=self._tools()))
            else:
                started = await wait(core.send(text, preempt=True, tools=self._tools()))
        except (EngineError, StoreError):
            self.send_refused.emit(text)
            raise
        if isinstance(started, Rewound):
            await self._show(started)
            started = started.turn
        await self._begin(started, text)
        self.conversations_changed.emit()  # a new conversation, or a new order

    @_action()
    async def regenerate(self) -> None:
        started = await wait(self.core.regenerate(preempt=True, tools=self._tools()))
        if started is not None:
            await self._show(started)
            await self._begin(started.turn, "")

    @_action()
    async def new_chat(self) -> None:
        try:
            await wait(self.core.new_chat(preempt=True))
        finally:
            self.chat_cleared.emit()

    @_action(stops_reply=False)
    async def open_conversation(self, conversation_id: int, quiet: bool = False) -> None:
        if conversation_id == self.core.conversation_id:
            return  # already shown: a reply in it goes on
        await self._finish_reply_on_screen()
        history = await wait(self.core.open_conversation(conversation_id, preempt=True))
        if history is not None:
            self.conversation_opened.emit(conversation_id, history)
            return
        if not quiet:
            notices.warning("That conversation no longer exists.")
        self.conversations_changed.emit()

    @_action(stops_reply=False)
    async def delete_conversation(self, conversation_id: int) -> None:
        was_open = conversation_id == self.core.conversation_id
        if was_open:  # a reply in another conversation goes on
            await self._finish_reply_on_screen()
        conversation = await wait(self.core.delete_conversation(conversation_id,
                                                                preempt=was_open))
        if was_open:
            self.chat_cleared.emit()
        self.conversations_changed.emit()
        title = conversation.title if conversation else "the conversation"
        notices.info(f"Deleted “{title}”.", "Undo",
                     lambda: self._undelete(conversation_id, was_open))

    def _undelete(self, conversation_id: int, reopen: bool) -> None:
        try:
            self.core.undelete_conversation(conversation_id)
        except StoreError as err:
            notices.error(str(err))
            return
        self.conversations_changed.emit()
        if reopen and self.conversation_id is None and not self.streaming:
            self.open_conversation(conversation_id)

    async def _show(self, rewound: Rewound) -> None:
        self.conversation_opened.emit(rewound.conversation_id, rewound.before)
        await asyncio.sleep(0)  # each change of the transcript gets its own turn

    async def _begin(self, turn: ChatTurn, text: str) -> None:
        pieces = PieceStream(turn.pieces, self)  # the core's buffer, as the GUI takes it
        self._turn = turn
        self._calls_shown = False
        self.streaming_changed.emit(True)
        if text:
            self.message_sent.emit(text)
            await asyncio.sleep(0)
        model = self.core.model
        self.reply_started.emit(model.name if model else "", pieces)
        self._stream_task = self._tasks.spawn(self._stream(turn, pieces))
        await asyncio.sleep(0)

    async def _stream(self, turn: ChatTurn, pieces: PieceStream) -> None:
        try:
            result = await wait(turn.future)
        except (EngineError, StoreError) as err:
            self.reply_failed.emit(str(err))
            if not self._closed or isinstance(err, StoreError):
                notices.error(str(err))
        else:
            self.reply_finished.emit(result.reply.text, result.reply.stats)
            if self._calls_shown:  # the replies and calls as stored, each in its place
                self.conversation_opened.emit(self.core.conversation_id,
                                              read(self.core.history, list[Message]()))
            for notice in self.core.reply_notices(turn, result):
                hint = " Any model can go on with the conversation." \
                    if notice.about == "cut" else ""
                _SAY[notice.level](notice.text + hint)
        finally:
            pieces.deleteLater()  # the transcript is done with it
            with self._asked_lock:
                self._asked.clear()  # a call still asked was stopped with its reply
            self._turn = None
            self.streaming_changed.emit(False)
            if not self._closed:
                self.conversations_changed.emit()

    async def _finish_reply_on_screen(self) -> None:
        """Stop the reply on screen, if any, and wait until it is finished there (and
        saved): what comes next never shows next to it."""
        task = self._stream_task
        if task is not None and not task.done():
            self.stop()
            await asyncio.wait([task])
