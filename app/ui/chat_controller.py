"""The window's face on the core's conversations: its actions and their outcomes, as signals.

It adapts an open :class:`app.core.fireside.Fireside` and assembles nothing. It runs
on the GUI thread's event loop and awaits the core's futures there, so nothing blocks
the window. Actions reach the screen in the order asked, and each stops the reply on
screen first, as a person who asks for something new wants (the core queues them in
that order too): see ActionQueue. The reply itself streams in ReplyOnScreen.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any

from PySide6.QtCore import QObject

from app.core.backend import EngineError
from app.core.conversations.chat import ChatTurn
from app.core.conversations.store import Conversation, StoreError
from app.core.fireside import Fireside, Rewound
from app.ui import event_loop, notices
from app.ui.action_queue import ActionQueue
from app.ui.chat_signals import ChatSignals
from app.ui.event_loop import read, wait
from app.ui.reply_on_screen import ReplyOnScreen

Action = Callable[..., Coroutine[Any, Any, None]]


def _action(stops_reply: bool = True) -> Callable[[Action], Callable[..., asyncio.Task[None]]]:
    """The method as a task on the controller's queue of actions (see ActionQueue)."""

    def wrap(method: Action) -> Callable[..., asyncio.Task[None]]:
        @functools.wraps(method)
        def spawn(self: ChatController, *args: Any) -> asyncio.Task[None]:
            return self._actions.spawn(lambda: method(self, *args), stops_reply)
        return spawn

    return wrap


class ChatController(ChatSignals):
    def __init__(self, core: Fireside, background: Executor, tasks: event_loop.Tasks,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.core = core
        self._background = background  # the core closes there, off the GUI thread
        self._tasks = tasks  # the window's, loads included
        self._reply = ReplyOnScreen(core, tasks, self)
        self._actions = ActionQueue(tasks, self._reply)

    @property
    def conversation_id(self) -> int | None:
        return self.core.conversation_id

    @property
    def streaming(self) -> bool:
        return self._reply.streaming

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
        self._reply.stop()

    def decide(self, call_id: str, decision: str) -> None:
        """The user's answer for a call that waits (ALLOW_ONCE, ALLOW_ALWAYS or DENY)."""
        self._reply.decide(call_id, decision)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        read(lambda: self.core.rename_conversation(conversation_id, title), None)
        self.conversations_changed.emit()

    def shut_down(self, then: Callable[[], None]) -> None:
        """Stop the reply (its text so far is saved), close the model and the database,
        in the background and in bounded time; then call ``then``."""
        self._actions.close()
        self._reply.close()

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
                    text, edit_in, preempt=True, tools=self._reply.tools()))
            else:
                started = await wait(core.send(text, preempt=True, tools=self._reply.tools()))
        except (EngineError, StoreError):
            self.send_refused.emit(text)
            raise
        if isinstance(started, Rewound):
            await self._show(started)
            started = started.turn
        await self._reply.begin(started, text)
        self.conversations_changed.emit()  # a new conversation, or a new order

    @_action()
    async def regenerate(self) -> None:
        started = await wait(self.core.regenerate(preempt=True, tools=self._reply.tools()))
        if started is not None:
            await self._show(started)
            asked = [m for m in started.before if m.role == "user"]
            await self._reply.begin(started.turn, "", asked[-1].sources if asked else ())

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
        await self._reply.finish()
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
            await self._reply.finish()
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
