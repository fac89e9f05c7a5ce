"""A thinking model in the window: its thought folded above a plain answer, opened with
Enter, kept when the conversation is opened again; thinking off and a budget from
Settings; a base model's reply ending at a blank line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt

from app.core.options import Sampling
from app.ui.messages.message_widget import MessageWidget
from app.ui.settings.dialog import SettingsDialog
from tests.reference import Reference, cut_as_a_base_model
from tests.ui.conftest import WindowFactory, greedy_settings, new_chat, send

STORY = "Write a long story about a dragon who loves tea."


def last_row(window: Any) -> MessageWidget:
    return window.transcript.message_widgets()[-1]


def test_the_thought_is_folded_above_a_plain_answer_and_opens_with_enter(
        open_window: WindowFactory, qtbot: Any, thinking_model_path: Path) -> None:
    greedy_settings(default_model=str(thinking_model_path), max_tokens=120,
                    thinking_budget=30)
    window = open_window([thinking_model_path.parent])
    text, stats = send(qtbot, window, STORY)
    row = last_row(window)
    assert stats.thinking_tokens <= 32 and text.strip()
    assert row.markdown() == text and "think>" not in text
    section = row.thinking
    assert section.isVisible() and not section.body.isVisible()
    assert section.toggle.text().startswith("Thought for")
    section.toggle.setFocus()
    qtbot.keyClick(section.toggle, Qt.Key.Key_Return)
    assert section.expanded and section.body.isVisible()
    shown = section.body.toPlainText()
    assert shown == section.text() and "think>" not in shown
    assert shown not in text

    # Opened again later, the conversation shows the same thought, folded.
    conversation = window.controller.conversation_id
    new_chat(qtbot, window)
    listed = window.sidebar.model
    qtbot.waitUntil(lambda: listed.row_of(conversation) >= 0)
    window.sidebar.list.setCurrentIndex(listed.index(listed.row_of(conversation)))
    qtbot.waitUntil(lambda: window.controller.conversation_id == conversation)
    qtbot.waitUntil(lambda: len(window.transcript.message_widgets()) == 2)
    again = last_row(window).thinking
    assert again.isVisible() and not again.expanded and again.text() == shown


def test_thinking_off_in_settings_gives_an_answer_without_a_thought(
        open_window: WindowFactory, qtbot: Any, thinking_model_path: Path) -> None:
    greedy_settings(default_model=str(thinking_model_path), max_tokens=60)
    window = open_window([thinking_model_path.parent])
    window.show_settings()
    dialog = window._settings_dialog
    assert isinstance(dialog, SettingsDialog)
    box = dialog.thinking
    box.setCurrentIndex(box.findData("off"))
    box.activated.emit(box.currentIndex())
    dialog.close()
    text, stats = send(qtbot, window, STORY)
    assert stats.thinking_tokens == 0 and text.strip()
    assert not last_row(window).thinking.isVisible()


def test_a_base_models_reply_ends_rather_than_running_to_the_limit(
        open_window: WindowFactory, qtbot: Any, gemma_path: Path, reference: Reference) -> None:
    greedy_settings(default_model=str(gemma_path), max_tokens=200)
    window = open_window()
    loaded = window.controller.core.model  # type: ignore[union-attr]
    assert loaded is not None and loaded.base_model
    stops = loaded.stops
    for prompt in ("Hello!", "Dear friend,", "What is the capital of France?"):
        # Each in a chat of its own: in one chat a base model copies its last reply.
        new_chat(qtbot, window)
        text, stats = send(qtbot, window, prompt)
        # Whatever this CPU's words are: llama-cpp-python's own continuation, cut where
        # a blank line, a turn marker or a repeated line begins.
        raw = reference.reply(gemma_path, prompt, Sampling(temperature=0.0, max_tokens=200),
                              n_ctx=2048)
        assert text == cut_as_a_base_model(raw, stops)
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        assert "\n\n" not in text and len(lines) == len(set(lines))
        if text != raw.strip():
            assert stats.finish_reason == "stop" and stats.tokens < 200
        assert last_row(window).markdown() == text
