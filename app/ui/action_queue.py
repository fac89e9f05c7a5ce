"""The chat's actions in the order asked: each runs after those asked before it and, if
it stops the reply on screen, once that reply has finished there, as a person who asks
for something new wants (the core queues them in that order too). What the core refuses
reaches the message bar."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from app.core.backend import EngineError
from app.core.conversations.store import StoreError
from app.ui import event_loop, notices
from app.ui.reply_on_screen import ReplyOnScreen


class ActionQueue:
    def __init__(self, tasks: event_loop.Tasks, reply: ReplyOnScreen) -> None:
        self._tasks = tasks  # the window's, loads included
        self._reply = reply
        self._lock = asyncio.Lock()
        self._closed = False

    def close(self) -> None:
        """The window is closing: an action not yet begun never begins, and what the
        core refuses goes untold."""
        self._closed = True

    def spawn(self, action: Callable[[], Coroutine[Any, Any, None]],
              stops_reply: bool) -> asyncio.Task[None]:
        """Run ``action`` in its turn, after stopping the reply on screen if
        ``stops_reply``."""

        async def run() -> None:
            async with self._lock:
                if self._closed:
                    return
                if stops_reply:
                    await self._reply.finish()
                try:
                    await action()
                except (EngineError, StoreError) as err:
                    if not self._closed:
                        notices.error(str(err))

        return self._tasks.spawn(run())
