"""The asyncio loop the window awaits the core on: qasync's, joined to Qt's running loop,
and the tasks it runs there.

The window starts on Qt's plain event loop (importing asyncio costs a noticeable share
of startup); the asyncio loop joins it after the first paint, when the core is brought
up. Tests install their own qasync loop, which is then used as it is.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

os.environ.setdefault("QT_API", "pyside6")  # qasync must pick PySide6

import qasync
from PySide6.QtWidgets import QApplication

from app.core.conversations.store import StoreError
from app.ui import notices

T = TypeVar("T")
_created: asyncio.AbstractEventLoop | None = None


def ensure() -> asyncio.AbstractEventLoop:
    """The running asyncio loop, or a new qasync loop on Qt's running event loop."""
    global _created  # noqa: PLW0603 - one loop per process
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    loop: asyncio.AbstractEventLoop = qasync.QEventLoop(QApplication.instance(),
                                                        already_running=True)
    asyncio.set_event_loop(loop)
    notices.install_exception_handlers(loop)
    _created = loop
    return loop


def close() -> None:
    """After Qt's loop has ended: release the loop ``ensure()`` created, if any."""
    global _created
    loop, _created = _created, None
    if loop is None or loop.is_closed():
        return
    loop.stop()
    asyncio.events._set_running_loop(None)
    asyncio.set_event_loop(None)
    loop.close()


class Tasks:
    """The window's tasks on the loop: whatever fails unexpectedly reaches the message bar."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()

    def __bool__(self) -> bool:
        return bool(self._running)

    def spawn(self, coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.ensure_future(coroutine)
        self._running.add(task)
        task.add_done_callback(self._done)
        return task

    async def cancel(self) -> None:
        """Cancel the others (work the core will no longer do) and wait for them."""
        others = [t for t in self._running if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        if others:
            await asyncio.wait(others)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            notices.report_exception(task.exception())  # type: ignore[arg-type]


def off_thread(work: Callable[[], T]) -> asyncio.Future[T]:
    """``work`` on a daemon thread of its own (network work: leaving never waits for it)."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to whoever awaits it
            future.set_exception(exc)

    threading.Thread(target=run, name="fireside-network", daemon=True).start()
    return asyncio.wrap_future(future)


async def wait(future: Future[T]) -> T:
    """The core's future, awaited on the loop (cancelled if the core closed)."""
    return await asyncio.wrap_future(future)


def read(reader: Callable[[], T], default: T, quiet: bool = False) -> T:
    """A read of the conversations: the default if the disk fails (said unless ``quiet``)."""
    try:
        return reader()
    except StoreError as err:
        if not quiet:
            notices.error(str(err))
        return default
