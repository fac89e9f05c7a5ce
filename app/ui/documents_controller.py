"""The window's face on the core's documents: bringing files and folders into the open
conversation, taking them out, and the reading of them as it goes.

The core reads and indexes on a thread of its own; what touches the database here
(attaching, detaching, listing) runs on the window's background thread, so the window
never waits for the disk. The reading's progress is a cheap read of the core's state,
polled on a timer while there is something to show.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import TypeVar

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.documents.index import Collection
from app.core.documents.shelf import Progress
from app.core.fireside import Fireside
from app.ui import event_loop, notices

T = TypeVar("T")

BUSY_MS = 250  # while a collection is read: the bar moves smoothly enough
IDLE_MS = 1000  # while the conversation has documents: a folder that changed is re-read


class DocumentsController(QObject):
    attached_changed = Signal(list)
    """The open conversation's documents: its Collections, in the order they came."""
    progress_changed = Signal(object, str)
    """The reading as it goes (a Progress), and the name of a collection brought in that
    waits to be read ("" if none)."""

    def __init__(self, core: Fireside, background: Executor, tasks: event_loop.Tasks,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.core = core
        self._background = background
        self._tasks = tasks
        self.collections: list[Collection] = []
        self.progress = Progress()
        self._waiting: list[Path] = []  # brought in, not yet seen being read
        self._ticker = QTimer(self)
        self._ticker.timeout.connect(self._tick)

    def attach(self, paths: Sequence[Path]) -> None:
        """Bring ``paths`` into the open conversation (the new chat until it is saved);
        one that does not exist is said on the message bar, and nothing is attached."""
        paths = list(paths)

        async def run() -> None:
            try:
                added = await self._in_background(lambda: self.core.attach(paths))
            except ValueError as err:
                notices.warning(str(err))
                return
            self._waiting.extend(c.path for c in added)
            await self._show_attached()

        self._tasks.spawn(run())

    def detach(self, collection_id: int) -> None:
        async def run() -> None:
            await self._in_background(lambda: self.core.detach(collection_id))
            await self._show_attached()

        self._tasks.spawn(run())

    def refresh(self) -> None:
        """Another conversation is open (or the new chat): show its documents."""
        self._tasks.spawn(self._show_attached())

    def cancel(self) -> None:
        """Stop the reading under way and the collections waiting; what is read is kept."""
        self.core.documents.cancel()
        self._waiting.clear()
        self._tick()

    async def _show_attached(self) -> None:
        self.collections = await self._in_background(self.core.attached)
        self.attached_changed.emit(self.collections)
        self._tick()

    def _tick(self) -> None:
        progress = self.core.documents.progress()
        if progress.active:
            self._waiting = [p for p in self._waiting if str(p) != progress.path]
        elif not progress.queued:
            self._waiting.clear()  # read (or cancelled) without being seen: all done
        waiting = self._waiting[0].name if self._waiting else ""
        self.progress = progress
        self.progress_changed.emit(progress, waiting)
        busy = progress.active or bool(waiting)
        if busy or self.collections:
            interval = BUSY_MS if busy else IDLE_MS
            if not self._ticker.isActive() or self._ticker.interval() != interval:
                self._ticker.start(interval)
        else:
            self._ticker.stop()

    async def _in_background(self, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._background, work)
