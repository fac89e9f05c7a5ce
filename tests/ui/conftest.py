"""Window test fixtures: a qasync loop inside pytest-qt, real windows on the real
bundled models, and the notices a user would have read in the message bar."""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_API", "pyside6")

import pytest
import qasync
import shiboken6
from PySide6.QtCore import QEvent, QObject, Qt, QUrl, Slot
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QApplication

from app.core import paths, settings
from app.core.reply.replies import ReplyStats
from app.ui import notices as notice_bar
from app.ui.notices import Level, Notice
from app.ui.transcript import TranscriptView
from app.ui.window import MainWindow

LOAD_TIMEOUT_MS = 40_000
REPLY_TIMEOUT_MS = 120_000


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The offscreen platform cannot pass a window's size limits on or raise a window,
    # and says so; that is the test platform talking, not the app.
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.qt_log_ignore(
                "This plugin does not support (propagateSizeHints|raise)"))


class Notices(list[Notice]):
    """Everything the message bar was asked to show, in order."""

    def texts(self, level: Level | None = None) -> list[str]:
        return [n.text for n in self if level is None or n.level is level]

    def last(self, level: Level) -> Notice:
        found = [n for n in self if n.level is level]
        assert found, f"no {level.value} notice; got {self.texts()}"
        return found[-1]


@pytest.fixture
def view(qtbot: Any) -> TranscriptView:
    """A transcript on screen at a window's size, on its own."""
    widget = TranscriptView()
    qtbot.addWidget(widget)
    widget.resize(900, 700)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


@pytest.fixture
def qasync_loop(qapp: QApplication) -> Iterator[asyncio.AbstractEventLoop]:
    """An asyncio loop on Qt's: pytest-qt's waits drive it as the app's own loop would."""
    qapp.setQuitOnLastWindowClosed(False)
    loop = qasync.QEventLoop(qapp, already_running=True)
    asyncio.set_event_loop(loop)
    yield loop
    # Not loop.stop(): it would call QApplication.exit(), and the next test's loop
    # could not start its worker threads.
    loop._QEventLoop__is_running = False  # type: ignore[attr-defined]
    asyncio.events._set_running_loop(None)
    loop.close()
    asyncio.set_event_loop(None)


@pytest.fixture
def notices(qapp: QApplication) -> Iterator[Notices]:
    seen = Notices()
    notice_bar.bridge.shown.connect(seen.append)
    yield seen
    notice_bar.bridge.shown.disconnect(seen.append)


def greedy_settings(**changes: Any) -> settings.Settings:
    """Saved settings for fast, repeatable replies: greedy sampling, short answers."""
    prefs = settings.load().settings
    values = {"temperature": 0.0, "seed": 1, "max_tokens": 24, "context_size": 2048,
              **changes}
    for name, value in values.items():
        setattr(prefs, name, value)
    settings.save(prefs)
    return prefs


WindowFactory = Callable[..., MainWindow]


@pytest.fixture
def open_window(qtbot: Any, qasync_loop: asyncio.AbstractEventLoop,
                notices: Notices) -> Iterator[WindowFactory]:
    """Open a real window on the saved settings, as the app does, and wait for its model."""
    windows: list[MainWindow] = []

    def open_(models_dirs: Sequence[Path] = (), wait_for_model: bool = True) -> MainWindow:
        if not paths.settings_path().exists():
            greedy_settings()
        window = MainWindow(settings.load().settings, models_dirs)
        windows.append(window)
        window.show()
        qtbot.waitUntil(window.isVisible)
        window.start()
        if wait_for_model:
            wait_for_model_loaded(qtbot, window)
        return window

    yield open_
    for window in windows:
        close_window(qtbot, window)
    assert not [n.text for n in notices if n.unexpected], "an unexpected error was shown"


def wait_for_model_loaded(qtbot: Any, window: MainWindow) -> None:
    def loaded() -> bool:
        controller = window.controller
        return controller is not None and controller.core.model is not None \
            and not window.chat.models.loading
    qtbot.waitUntil(loaded, timeout=LOAD_TIMEOUT_MS)


def close_window(qtbot: Any, window: MainWindow) -> None:
    if not shiboken6.isValid(window):
        return  # closed and deleted earlier in the test
    if not window.is_shut_down:
        window.close()
        qtbot.waitUntil(lambda: window.is_shut_down, timeout=REPLY_TIMEOUT_MS)
    if window.controller is not None:
        # A busy machine may need longer than the window's bound: the next test must
        # not share the CPU with this window's inference thread.
        assert window.controller.core.engine.close(timeout=60)
    # Qt objects must be destroyed on the GUI thread, never by a garbage collection
    # that happens to run on another thread later.
    window.deleteLater()
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.unfreeze()  # the window froze what it had; the next test starts afresh
    gc.collect()


def new_chat(qtbot: Any, window: MainWindow) -> None:
    """Start a new chat and wait until the window shows it, as a person sees it before
    typing: no conversation open, an empty transcript, none marked in the list."""
    window.chat.new_chat()
    qtbot.waitUntil(lambda: window.controller is not None
                    and window.controller.conversation_id is None
                    and not window.transcript.message_widgets()
                    and not window.sidebar.list.currentIndex().isValid(),
                    timeout=REPLY_TIMEOUT_MS)


def type_and_send(qtbot: Any, window: MainWindow, text: str) -> None:
    """Type ``text`` in the composer and press Enter, as a user would."""
    qtbot.keyClicks(window.composer, text)
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)


def send(qtbot: Any, window: MainWindow, text: str) -> tuple[str, ReplyStats]:
    """Send ``text`` and wait for the whole reply: its text and stats."""
    assert window.controller is not None
    with qtbot.waitSignal(window.controller.reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        type_and_send(qtbot, window, text)
    reply, stats = done.args
    return reply, stats


@pytest.fixture
def file_links() -> Iterator[list[QUrl]]:
    """The files the window asked the desktop to open."""
    opened: list[QUrl] = []

    class Catcher(QObject):
        @Slot(QUrl)
        def open(self, url: QUrl) -> None:
            opened.append(url)

    catcher = Catcher()
    QDesktopServices.setUrlHandler("file", catcher, "open")
    yield opened
    QDesktopServices.unsetUrlHandler("file")
