"""The real window on the real bundled models: chatting, stopping, switching models,
conversations, settings and restarts, driven the way a user drives them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtWidgets import QAbstractButton, QLineEdit, QWidget

from app.core import paths, settings
from app.core.conversations.store import Store
from app.ui import notices as notice_bar
from app.ui.model_picker import DETAILS_ROLE, ModelPicker
from app.ui.notices import Level
from app.ui.window import MainWindow
from tests.gguf_files import copy_with_metadata
from tests.heartbeat import Heartbeat
from tests.ui.conftest import (
    REPLY_TIMEOUT_MS,
    Notices,
    WindowFactory,
    close_window,
    greedy_settings,
    new_chat,
    send,
    type_and_send,
    wait_for_model_loaded,
)

STORY = "Write a very long, detailed story about a lighthouse keeper and a storm."
MAX_GAP_S = 0.050  # the GUI thread never stalls longer than this


def saved_messages(conversation_id: int | None) -> list[Any]:
    """The messages stored for a conversation the window has opened."""
    assert conversation_id is not None, "the window has no conversation open"
    with Store() as store:
        return store.messages(conversation_id)


def choose_model(picker: ModelPicker, path: Path) -> None:
    """Pick ``path`` in the model picker as a user does (the activated signal)."""
    row = picker.list_model.row_of(path)
    assert row >= 0, f"{path.name} is not listed"
    picker.setCurrentIndex(row)
    picker.activated.emit(row)


def last_reply_text(window: MainWindow) -> str:
    rows = window.transcript.message_widgets()
    return rows[-1].markdown() if rows and rows[-1].role == "assistant" else ""


def test_first_run_loads_the_bundled_model_and_a_reply_streams_in(
        open_window: WindowFactory, qtbot: Any, smollm2_path: Path) -> None:
    greedy_settings(max_tokens=200)
    window = open_window()
    controller = window.controller
    assert controller is not None and controller.core.model is not None
    assert controller.core.model.path == smollm2_path
    assert window.picker.current_path() == smollm2_path
    assert window.windowTitle().startswith("Fireside")

    type_and_send(qtbot, window, STORY)
    # Text is on screen while the reply is still being written.
    qtbot.waitUntil(lambda: controller.streaming and len(last_reply_text(window)) > 20,
                    timeout=REPLY_TIMEOUT_MS)
    seen_mid_reply = last_reply_text(window)
    assert window.composer_bar.stop_button.isVisible()
    assert not window.composer_bar.send_button.isVisible()
    qtbot.waitUntil(lambda: not controller.streaming, timeout=REPLY_TIMEOUT_MS)

    final = last_reply_text(window)
    assert final.startswith(seen_mid_reply)
    assert window.composer_bar.send_button.isVisible()
    assert window.composer.text() == ""
    history = saved_messages(controller.conversation_id)
    assert [m.role for m in history] == ["user", "assistant"]
    assert history[1].text == final and history[1].complete
    assert window.sidebar.model.conversation_ids() == [controller.conversation_id]
    assert window.status.used_tokens == history[1].stats["prompt_tokens"] + \
        history[1].stats["tokens"]
    assert "tok/s" in window.status.speed.text()


def test_escape_stops_a_reply_and_keeps_what_was_written(
        open_window: WindowFactory, qtbot: Any) -> None:
    greedy_settings(max_tokens=2000)
    window = open_window()
    controller = window.controller
    assert controller is not None
    type_and_send(qtbot, window, STORY)
    qtbot.waitUntil(lambda: len(last_reply_text(window)) > 20, timeout=REPLY_TIMEOUT_MS)
    with qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        qtbot.keyClick(window.composer, Qt.Key.Key_Escape)
    text, stats = done.args
    assert stats.finish_reason == "stopped" and stats.tokens < 2000
    assert text and last_reply_text(window) == text
    reply = saved_messages(controller.conversation_id)[-1]
    assert reply.text == text and reply.complete
    assert window.composer_bar.send_button.isVisible()


def test_new_chat_empties_the_transcript_and_keeps_the_model(
        open_window: WindowFactory, qtbot: Any) -> None:
    window = open_window()
    controller = window.controller
    assert controller is not None
    model = controller.core.model
    send(qtbot, window, "Hello!")
    first = controller.conversation_id
    loads: list[object] = []
    window.chat.models.load_started.connect(lambda *args: loads.append(args))

    with qtbot.waitSignal(controller.chat_cleared):
        qtbot.keyClick(window.composer, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert window.transcript.message_widgets() == []
    assert controller.conversation_id is None
    send(qtbot, window, "What is the capital of France?")
    assert controller.core.model is model and loads == []  # never reloaded
    assert controller.conversation_id not in (None, first)
    assert set(window.sidebar.model.conversation_ids()) == {first, controller.conversation_id}


def test_switching_model_mid_conversation_continues_it(
        open_window: WindowFactory, qtbot: Any, gemma_path: Path) -> None:
    window = open_window()
    controller = window.controller
    assert controller is not None
    send(qtbot, window, "Name a colour.")
    conversation = controller.conversation_id

    with qtbot.waitSignal(window.chat.models.load_started):
        choose_model(window.picker, gemma_path)
    top_bar = window.top_bar
    assert top_bar.load_progress.isVisible() and top_bar.cancel_load_button.isVisible()
    assert not window.picker.isEnabled()
    wait_for_model_loaded(qtbot, window)
    assert controller.core.model is not None and controller.core.model.path == gemma_path
    assert not window.top_bar.load_progress.isVisible()
    assert window.picker.current_path() == gemma_path

    _text, stats = send(qtbot, window, "Name another colour.")
    assert stats.model == controller.core.model.name
    assert controller.conversation_id == conversation
    assert [m.role for m in saved_messages(conversation)] == \
        ["user", "assistant", "user", "assistant"]
    assert len(window.transcript.message_widgets()) == 4


def test_cancelling_a_load_keeps_the_model_in_use(
        open_window: WindowFactory, qtbot: Any, gemma_path: Path, smollm2_path: Path,
        notices: Notices) -> None:
    window = open_window()
    controller = window.controller
    assert controller is not None
    with qtbot.waitSignal(window.chat.models.load_started):
        choose_model(window.picker, gemma_path)
    with qtbot.waitSignal(window.chat.models.load_failed, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(window.top_bar.cancel_load_button, Qt.MouseButton.LeftButton)
    assert "cancelled" in notices.last(Level.INFO).text
    assert controller.core.model is not None and controller.core.model.path == smollm2_path
    assert window.picker.current_path() == smollm2_path
    assert not window.top_bar.load_progress.isVisible()
    text, _stats = send(qtbot, window, "Say hello.")
    assert text


def test_opening_another_conversation_mid_reply_keeps_each_in_its_place(
        open_window: WindowFactory, qtbot: Any) -> None:
    window = open_window()
    controller = window.controller
    assert controller is not None
    send(qtbot, window, "Hello!")
    window.prefs.max_tokens = 2000  # as the settings dialog sets it: a long reply next
    quiet = controller.conversation_id
    quiet_before = saved_messages(quiet)
    new_chat(qtbot, window)
    type_and_send(qtbot, window, STORY)
    qtbot.waitUntil(lambda: len(last_reply_text(window)) > 20, timeout=REPLY_TIMEOUT_MS)
    busy = controller.conversation_id

    view = window.sidebar.list
    view.setCurrentIndex(window.sidebar.model.index(window.sidebar.model.row_of(quiet)))
    qtbot.waitUntil(lambda: controller.conversation_id == quiet and not controller.streaming,
                    timeout=REPLY_TIMEOUT_MS)
    interrupted = saved_messages(busy)
    assert [m.role for m in interrupted] == ["user", "assistant"]
    assert interrupted[1].complete and interrupted[1].stats["finish_reason"] == "stopped"
    assert saved_messages(quiet) == quiet_before  # nothing landed here
    # The core has opened it; the window shows it once its event loop hears of it.
    qtbot.waitUntil(lambda: [r.markdown() for r in window.transcript.message_widgets()]
                    == [m.text for m in quiet_before], timeout=REPLY_TIMEOUT_MS)


def test_a_damaged_file_is_listed_but_cannot_be_chosen(
        open_window: WindowFactory, tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "broken.gguf").write_bytes(b"this is not a model" * 10)
    window = open_window([models])
    row = window.picker.list_model.row_of(models / "broken.gguf")
    assert row >= 0
    index = window.picker.list_model.index(row)
    assert not index.flags() & Qt.ItemFlag.ItemIsEnabled
    for role in (DETAILS_ROLE, Qt.ItemDataRole.ToolTipRole, Qt.ItemDataRole.AccessibleTextRole):
        assert "cannot be used" in index.data(role).lower()


def test_a_model_llama_refuses_leaves_the_previous_one_working(
        open_window: WindowFactory, qtbot: Any, tmp_path: Path, smollm2_path: Path,
        notices: Notices) -> None:
    models = tmp_path / "models"
    refused = copy_with_metadata(smollm2_path, models / "notanarch.gguf",
                                 {"general.architecture": "notanarch"})
    window = open_window([models])
    controller = window.controller
    assert controller is not None
    with qtbot.waitSignal(window.chat.models.load_failed, timeout=REPLY_TIMEOUT_MS):
        choose_model(window.picker, refused)
    assert "notanarch" in notices.last(Level.ERROR).text
    assert window.message_bar.notice is not None
    assert controller.core.model is not None and controller.core.model.path == smollm2_path
    assert window.picker.current_path() == smollm2_path
    assert window.picker.currentIndex() == window.picker.list_model.row_of(smollm2_path)
    text, _stats = send(qtbot, window, "Say hello.")
    assert text


def test_regenerate_replaces_the_last_reply(open_window: WindowFactory, qtbot: Any) -> None:
    window = open_window()
    controller = window.controller
    assert controller is not None
    send(qtbot, window, "Tell me a fact about the sea.")
    before = saved_messages(controller.conversation_id)
    button = window.transcript.message_widgets()[-1].regenerate_button
    assert button.isVisible()
    with qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    after = saved_messages(controller.conversation_id)
    assert [m.role for m in after] == ["user", "assistant"]
    assert after[0].id == before[0].id and after[1].id != before[1].id
    assert len(window.transcript.message_widgets()) == 2


def test_edit_puts_the_message_back_and_resends_it(
        open_window: WindowFactory, qtbot: Any) -> None:
    window = open_window()
    controller = window.controller
    assert controller is not None
    send(qtbot, window, "What is the capital of Spain?")
    conversation = controller.conversation_id
    user_row = window.transcript.message_widgets()[0]
    qtbot.mouseClick(user_row.edit_button, Qt.MouseButton.LeftButton)
    assert window.composer.text() == "What is the capital of Spain?"
    assert window.composer_bar.editing

    window.composer.clear()
    send(qtbot, window, "What is the capital of Italy?")
    history = saved_messages(conversation)
    assert (history[0].role, history[0].text) == ("user", "What is the capital of Italy?")
    assert len(history) == 2 and controller.conversation_id == conversation
    assert not window.composer_bar.editing


def test_an_edit_begun_in_one_conversation_never_lands_in_another(
        open_window: WindowFactory, qtbot: Any) -> None:
    window = open_window()
    controller = window.controller
    assert controller is not None
    send(qtbot, window, "What is the capital of Spain?")
    first = controller.conversation_id
    assert first is not None
    qtbot.keyClick(window.composer, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    send(qtbot, window, "What is the capital of Italy?")
    second = controller.conversation_id
    qtbot.keyClick(window.composer, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)
    assert window.composer_bar.editing
    # Fast hands: another conversation is clicked and Enter pressed before it has opened.
    controller.open_conversation(first)
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(saved_messages(first)) == 4 and not controller.busy,
                    timeout=REPLY_TIMEOUT_MS)
    assert [m.text for m in saved_messages(first) if m.role == "user"] == [
        "What is the capital of Spain?", "What is the capital of Italy?"]
    kept = saved_messages(second)
    assert [(m.role, m.text) for m in kept][:1] == [("user", "What is the capital of Italy?")]
    assert len(kept) == 2, "the conversation the edit was begun in is left as it was"


def test_rename_with_f2(open_window: WindowFactory, qtbot: Any) -> None:
    window = open_window()
    controller = window.controller
    assert controller is not None
    send(qtbot, window, "Hi there")
    view = window.sidebar.list
    view.setFocus()
    view.setCurrentIndex(window.sidebar.model.index(window.sidebar.model.row_of(
        controller.conversation_id)))
    qtbot.keyClick(view, Qt.Key.Key_F2)
    editor = view.findChild(QLineEdit)
    assert editor is not None
    editor.selectAll()
    qtbot.keyClicks(editor, "Greetings")
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: getattr(controller.conversation(), "title", "") == "Greetings")
    assert window.windowTitle() == "Fireside — Greetings"
    row = window.sidebar.model.row_of(controller.conversation_id)
    assert window.sidebar.model.index(row).data() == "Greetings"


def test_delete_then_undo(open_window: WindowFactory, qtbot: Any, notices: Notices) -> None:
    window = open_window()
    controller = window.controller
    assert controller is not None
    send(qtbot, window, "Remember the word apple.")
    conversation = controller.conversation_id
    window.sidebar.list.setFocus()
    with qtbot.waitSignal(controller.chat_cleared):
        qtbot.keyClick(window.sidebar.list, Qt.Key.Key_Delete)
    qtbot.waitUntil(lambda: window.sidebar.model.conversation_ids() == [])
    undo = notices.last(Level.INFO)
    assert undo.action_text == "Undo" and window.message_bar.isVisible()

    window.message_bar.trigger_action()  # the Undo button
    qtbot.waitUntil(lambda: controller.conversation_id == conversation)
    assert window.sidebar.model.conversation_ids() == [conversation]
    assert len(window.transcript.message_widgets()) == 2


def test_search_filters_the_list_and_ctrl_k_focuses_it(
        open_window: WindowFactory, qtbot: Any) -> None:
    window = open_window()
    controller = window.controller
    assert controller is not None
    send(qtbot, window, "Tell me about volcanoes.")
    volcano = controller.conversation_id
    qtbot.keyClick(window.composer, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: controller.conversation_id is None)
    send(qtbot, window, "Tell me about glaciers.")
    assert len(window.sidebar.model.conversation_ids()) == 2

    qtbot.keyClick(window.composer, Qt.Key.Key_K, Qt.KeyboardModifier.ControlModifier)
    assert window.sidebar.search_box.hasFocus()
    qtbot.keyClicks(window.sidebar.search_box, "volcano")
    qtbot.waitUntil(lambda: window.sidebar.model.conversation_ids() == [volcano])
    window.sidebar.search_box.clear()
    qtbot.waitUntil(lambda: len(window.sidebar.model.conversation_ids()) == 2)
    assert window.sidebar.model.headings() == ["Today"]


def test_settings_are_saved_at_once_and_restored_in_a_new_window(
        open_window: WindowFactory, qtbot: Any) -> None:
    window = open_window()
    qtbot.keyClick(window.composer, Qt.Key.Key_Comma, Qt.KeyboardModifier.ControlModifier)
    dialog = window.findChild(QWidget, "settingsDialog")
    assert dialog is not None and dialog.isVisible() and not dialog.isModal()
    temperature = dialog.findChild(QWidget, "temperatureBox")
    temperature.setValue(0.35)
    dialog.findChild(QWidget, "seedBox").setText("42")
    dialog.findChild(QWidget, "themeBox").setCurrentIndex(2)  # dark
    qtbot.waitUntil(lambda: settings.load().settings.theme == "dark")
    saved = settings.load().settings
    assert saved.temperature == pytest.approx(0.35) and saved.seed == 42
    assert window.palette().color(window.backgroundRole()).lightness() < 100
    close_window(qtbot, window)

    second = open_window()
    assert second.prefs.temperature == pytest.approx(0.35) and second.prefs.seed == 42
    second.show_settings()
    again = second.findChild(QWidget, "settingsDialog")
    assert again.findChild(QWidget, "temperatureBox").value() == pytest.approx(0.35)
    assert again.findChild(QWidget, "seedBox").text() == "42"
    again.findChild(QWidget, "themeBox").setCurrentIndex(1)  # back to light for the others


def test_a_restart_restores_the_conversations_and_the_open_one(
        open_window: WindowFactory, qtbot: Any) -> None:
    window = open_window()
    controller = window.controller
    assert controller is not None
    send(qtbot, window, "First conversation")
    first = controller.conversation_id
    new_chat(qtbot, window)
    send(qtbot, window, "Second conversation")
    second = controller.conversation_id
    window.sidebar.list.setCurrentIndex(window.sidebar.model.index(
        window.sidebar.model.row_of(first)))  # a click on the first
    qtbot.waitUntil(lambda: controller.conversation_id == first)
    close_window(qtbot, window)

    again = open_window()
    restored = again.controller
    assert restored is not None
    qtbot.waitUntil(lambda: restored.conversation_id == first)
    assert again.sidebar.model.conversation_ids() == [second, first]
    rows = again.transcript.message_widgets()
    assert [r.role for r in rows] == ["user", "assistant"]
    assert rows[0].markdown() == "First conversation"


def test_closing_mid_reply_saves_the_text_so_far(open_window: WindowFactory,
                                                 qtbot: Any) -> None:
    greedy_settings(max_tokens=2000)
    window = open_window()
    controller = window.controller
    assert controller is not None
    type_and_send(qtbot, window, STORY)
    qtbot.waitUntil(lambda: len(last_reply_text(window)) > 20, timeout=REPLY_TIMEOUT_MS)
    conversation = controller.conversation_id
    window.close()
    qtbot.waitUntil(lambda: window.is_shut_down, timeout=REPLY_TIMEOUT_MS)
    assert not window.isVisible()
    assert controller.core.engine.close(timeout=0), "the inference thread still runs"
    reply = saved_messages(conversation)[-1]
    assert reply.role == "assistant" and reply.complete
    assert reply.text.startswith(last_reply_text(window)[:20])
    assert reply.stats and reply.stats["finish_reason"] == "stopped"


def test_window_stays_responsive_while_a_model_loads_and_a_reply_streams(
        open_window: WindowFactory, qtbot: Any, gemma_path: Path, smollm2_path: Path) -> None:
    greedy_settings(max_tokens=200)
    window = open_window()
    heartbeat = Heartbeat()

    heartbeat.start()
    choose_model(window.picker, gemma_path)
    wait_for_model_loaded(qtbot, window)
    loading_gap = heartbeat.stop()
    choose_model(window.picker, smollm2_path)  # a chat model writes the long reply
    assert window.controller is not None
    core = window.controller.core
    qtbot.waitUntil(lambda: core.model is not None and core.model.path == smollm2_path
                    and not window.chat.models.loading, timeout=REPLY_TIMEOUT_MS)

    heartbeat.start()
    _text, stats = send(qtbot, window, STORY)
    streaming_gap = heartbeat.stop()
    assert stats.tokens > 50
    assert loading_gap < MAX_GAP_S, f"the window stalled {loading_gap * 1000:.0f} ms loading"
    assert streaming_gap < MAX_GAP_S, \
        f"the window stalled {streaming_gap * 1000:.0f} ms streaming"


def test_keyboard_and_accessibility(open_window: WindowFactory, qtbot: Any) -> None:
    window = open_window()
    qtbot.waitUntil(window.composer.hasFocus)
    for name in ("modelPicker", "conversationList", "newChatButton", "searchBox",
                 "transcript", "composer", "sendButton", "stopButton", "contextMeter",
                 "settingsButton"):
        widget = window.findChild(QWidget, name)
        assert widget is not None, name
        assert widget.accessibleName(), f"{name} has no accessible name"
    for button in window.findChildren(QAbstractButton):
        assert button.accessibleName() or button.text(), button.objectName()

    qtbot.keyClicks(window.composer, "first line")
    qtbot.keyClick(window.composer, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(window.composer, "second line")
    assert window.composer.text() == "first line\nsecond line"
    assert window.controller is not None and window.controller.conversation_id is None


def test_empty_state_points_to_the_models_folder(open_window: WindowFactory, qtbot: Any,
                                                 file_links: list[QUrl]) -> None:
    window = open_window()
    empty = window.transcript.findChild(QWidget, "transcriptEmpty")
    assert str(paths.models_dir()) in empty.text()
    qtbot.mouseClick(window.top_bar.models_folder_button, Qt.MouseButton.LeftButton)
    assert [u.toLocalFile() for u in file_links] == [str(paths.models_dir())]


def test_unexpected_errors_reach_the_message_bar(open_window: WindowFactory,
                                                 notices: Notices) -> None:
    window = open_window()
    try:
        raise RuntimeError("a slot failed")
    except RuntimeError as err:
        notice_bar.excepthook(type(err), err, err.__traceback__)
    notice = notices.last(Level.ERROR)
    assert "a slot failed" in notice.text and "Traceback" not in notice.text
    assert window.message_bar.notice == notice
    notices.clear()  # seen and handled: not a test failure
