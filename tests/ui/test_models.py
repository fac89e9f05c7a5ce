"""The sidebar's and the picker's item models: valid Qt models, showing what users read."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt

from app.core.conversations.store import Conversation
from app.core.models import catalog
from app.ui.conversation_model import HEADER_ROLE, ID_ROLE, ConversationListModel, day_group
from app.ui.model_picker import DETAILS_ROLE, PATH_ROLE, ModelListModel
from tests.ui.conftest import Notices, WindowFactory, greedy_settings, send

TODAY = date(2026, 3, 15)


def at(days_ago: int, hour: int = 12) -> float:
    moment = datetime.combine(TODAY - timedelta(days=days_ago), datetime.min.time())
    return moment.replace(hour=hour).timestamp()


def conversation(conversation_id: int, title: str, days_ago: int) -> Conversation:
    when = at(days_ago)
    return Conversation(conversation_id, title, "SmolLM2", when, when, {})


def test_day_headings_read_like_a_calendar() -> None:
    def heading(days_ago: int) -> str:
        return day_group(datetime.fromtimestamp(at(days_ago)), TODAY)

    assert heading(0) == "Today"
    assert heading(1) == "Yesterday"
    assert {heading(n) for n in range(2, 8)} == {"Previous 7 days"}
    assert heading(20) == "February"
    assert heading(400) == "February 2025"


def test_conversations_come_grouped_newest_first(qtmodeltester: Any) -> None:
    model = ConversationListModel()
    model.set_conversations([conversation(4, "Tea", 0), conversation(3, "Maps", 0),
                             conversation(2, "Bread", 1), conversation(1, "Kites", 30)],
                            today=TODAY)
    qtmodeltester.check(model)
    rows = [(model.index(r).data(), bool(model.index(r).data(HEADER_ROLE)))
            for r in range(model.rowCount())]
    assert rows == [("Today", True), ("Tea", False), ("Maps", False), ("Yesterday", True),
                    ("Bread", False), ("February", True), ("Kites", False)]
    heading = model.index(0)
    assert not heading.flags() & Qt.ItemFlag.ItemIsSelectable
    tea = model.index(1)
    assert tea.data(ID_ROLE) == 4 and tea.flags() & Qt.ItemFlag.ItemIsEditable


def test_renaming_asks_for_the_new_title_and_ignores_blank_ones() -> None:
    model = ConversationListModel()
    model.set_conversations([conversation(7, "Untitled", 0)], today=TODAY)
    asked: list[tuple[int, str]] = []
    model.rename_requested.connect(lambda cid, title: asked.append((cid, title)))
    row = model.index(model.row_of(7))
    assert model.setData(row, "  Garden plans  ")
    assert not model.setData(row, "   ")
    assert not model.setData(model.index(0), "a heading")
    assert asked == [(7, "Garden plans")]


def test_the_picker_lists_every_model_and_disables_the_broken_one(
        qtmodeltester: Any, tmp_path: Path, smollm2_path: Path, gemma_path: Path) -> None:
    (tmp_path / "broken.gguf").write_bytes(b"not a model at all")
    entries = catalog.scan([(smollm2_path.parent, catalog.BUNDLED), (tmp_path, catalog.SETTINGS)])
    model = ModelListModel()
    model.set_entries(entries)
    qtmodeltester.check(model)
    smol = model.index(model.row_of(smollm2_path))
    assert smol.flags() & Qt.ItemFlag.ItemIsEnabled
    assert "Q4_1" in smol.data(DETAILS_ROLE) and "MB" in smol.data(DETAILS_ROLE)
    assert "Base model" not in smol.data(DETAILS_ROLE)
    gemma = model.index(model.row_of(gemma_path))
    assert gemma.data(DETAILS_ROLE).startswith("Base model · 270M")
    assert smol.data(PATH_ROLE) == str(smollm2_path)
    broken = model.index(model.row_of(tmp_path / "broken.gguf"))
    assert not broken.flags() & Qt.ItemFlag.ItemIsEnabled
    assert broken.data(DETAILS_ROLE).startswith("Cannot be used:")


def test_the_first_reply_of_a_base_model_says_once_that_it_continues_text(
        open_window: WindowFactory, qtbot: Any, notices: Notices, gemma_path: Path) -> None:
    greedy_settings(default_model=str(gemma_path), max_tokens=8)
    window = open_window()
    assert window.picker.currentText().startswith("Gemma 3 270M")
    send(qtbot, window, "The lighthouse keeper")
    send(qtbot, window, "The ferry")
    said = [text for text in notices.texts() if "is a base model" in text]
    assert said == ["Gemma 3 270M is a base model: it continues the text it is given rather "
                    "than answering it. For a conversation, choose a chat (instruct) model."]
