"""The asyncio loop the window awaits the core on: qasync's, joined to Qt's running loop.

The window starts on Qt's plain event loop (importing asyncio costs a noticeable share
of startup); the asyncio loop joins it after the first paint, when the core is brought
up. Tests install their own qasync loop, which is then used as it is.
"""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("QT_API", "pyside6")  # qasync must pick PySide6

import qasync
from PySide6.QtWidgets import QApplication

from app.ui import notices

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
