"""Faults the window must live through: a full disk, a damaged database, a damaged
settings file. Each is real: a small tmpfs that fills up, bytes that are not SQLite,
a settings file that is not JSON."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.core import paths, settings
from app.ui import application
from app.ui.messages.message_column import MessageColumn
from app.ui.notices import Level
from app.ui.window import MainWindow
from tests.core import helpers
from tests.ui.actions import saved_rows
from tests.ui.conftest import (
    Notices,
    WindowFactory,
    close_window,
    greedy_settings,
    send,
    wait_for_model_loaded,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """The data folder on its own 2 MB tmpfs."""
    with helpers.small_disk(paths.data_dir()) as folder:
        yield folder


def shown(window: MainWindow) -> list[tuple[str, str]]:
    """Every message the transcript holds, as (role, text)."""
    assert window.transcript is not None
    return [(e.role, e.text) for e in window.transcript.findChild(MessageColumn).entries]


def test_a_full_disk_keeps_the_reply_on_screen_and_saves_it_when_room_returns(
        open_window: WindowFactory, qtbot: Any, small_disk: Path, notices: Notices) -> None:
    greedy_settings(max_tokens=12)
    window = open_window()
    controller = window.controller
    assert controller is not None
    send(qtbot, window, "Say hello.")
    conversation = controller.conversation_id
    assert conversation is not None
    before = saved_rows()[conversation]

    filler = helpers.fill_disk(small_disk)
    reply, _stats = send(qtbot, window, "Name a colour.")
    assert reply and shown(window)[-2:] == [("user", "Name a colour."), ("assistant", reply)]
    problem = notices.last(Level.ERROR).text
    assert "disk is full" in problem and "saved as soon as there is room" in problem
    assert window.message_bar.notice is not None
    assert saved_rows()[conversation][:len(before)] == before, "nothing earlier is lost"
    # Held in memory, the message is still the one Ctrl+E brings back to edit.
    qtbot.keyClick(window.composer, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)
    assert window.composer_bar.editing and window.composer.text() == "Name a colour."
    qtbot.keyClick(window.composer, Qt.Key.Key_Escape)
    assert not window.composer_bar.editing

    filler.unlink()
    send(qtbot, window, "What is two plus two?")
    qtbot.waitUntil(lambda: not controller.busy)
    stored = [(role, text) for role, text, complete in saved_rows()[controller.conversation_id]]
    assert stored == shown(window), "what was held in memory was saved in its place"
    assert len(stored) == 6


def test_a_damaged_database_is_set_aside_and_a_new_one_begun(
        open_window: WindowFactory, qtbot: Any, notices: Notices) -> None:
    damaged = paths.database_path()
    damaged.parent.mkdir(parents=True, exist_ok=True)
    garbage = b"these bytes are not an SQLite database " * 100
    damaged.write_bytes(garbage)
    window = open_window()
    notice = notices.last(Level.WARNING)
    kept = [p for p in damaged.parent.iterdir() if p.name.startswith(f"{damaged.name}.corrupt")]
    assert len(kept) == 1 and kept[0].read_bytes() == garbage, "the old file is kept"
    assert str(kept[0]) in notice.text
    assert window.message_bar.isVisible()
    reply, _stats = send(qtbot, window, "Say hello.")
    controller = window.controller
    assert controller is not None and controller.conversation_id is not None
    assert saved_rows()[controller.conversation_id][-1][:2] == ("assistant", reply)


def test_a_damaged_settings_file_gives_defaults_a_message_and_is_kept(
        qtbot: Any, qasync_loop: Any, notices: Notices) -> None:
    bad = paths.settings_path()
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text("{ this is not JSON", encoding="utf-8")
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    window = application.open_window(app, [])  # the app's own start-up path
    try:
        notice = notices.last(Level.WARNING)
        kept = [p for p in bad.parent.iterdir() if ".broken-" in p.name]
        assert len(kept) == 1 and kept[0].read_text() == "{ this is not JSON"
        assert str(kept[0]) in notice.text and "defaults" in notice.text
        assert window.message_bar.notice == notice
        assert window.prefs == settings.Settings(), "defaults are in use"
        window.start()
        wait_for_model_loaded(qtbot, window)
    finally:
        close_window(qtbot, window)
    assert not [n.text for n in notices if n.unexpected]
    assert os.path.exists(bad), "closing saved good settings in its place"
