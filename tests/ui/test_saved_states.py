"""Settings shows the conversations kept for going back to, and Clear forgets them."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QPushButton

from tests.ui.conftest import WindowFactory, greedy_settings, send


def test_a_conversation_left_is_shown_kept_and_clear_forgets_it(
        open_window: WindowFactory, qtbot: Any) -> None:
    greedy_settings()
    window = open_window()
    send(qtbot, window, "Tell me three facts about lighthouses, and explain each of them "
                        "in a sentence or two, as you would to a curious child. " * 2)
    window.chat.new_chat()  # leaving it keeps its state
    window.show_settings()
    dialog = window._settings_dialog
    qtbot.waitUntil(lambda: "1 kept (" in dialog.saved_states.text()
                    and "MB on disk" in dialog.saved_states.text(), timeout=10_000)
    dialog.findChild(QPushButton, "clearStatesButton").click()
    qtbot.waitUntil(lambda: dialog.saved_states.text().startswith("None kept"),
                    timeout=10_000)
    assert window.controller.core.kept_states().histories == 0
