"""The settings dialog on its own: its pages beside the list of their names, chosen with
the mouse or the keyboard, each fitting the dialog, and a default edited on one page
showing on "This model"."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QDoubleSpinBox,
    QLineEdit,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QStackedWidget,
    QWidget,
)

from app.core import settings
from app.ui.settings.dialog import SettingsDialog
from tests.ui.settings_pages import open_page, page_at, page_names

C = TypeVar("C", bound=QWidget)
PAGES = ["Models", "Replies", "This model", "Documents", "Appearance", "Network", "Servers",
         "Tools", "Local server", "Hardware"]


@pytest.fixture
def dialog(qtbot: Any, tmp_path: Path) -> SettingsDialog:
    prefs = settings.Settings()
    path = tmp_path / "settings.json"
    shown = SettingsDialog(prefs, lambda: settings.save(prefs, path), tmp_path / "models")
    qtbot.addWidget(shown)
    return shown


def child(dialog: SettingsDialog, kind: type[C], name: str) -> C:
    found = dialog.findChild(kind, name)
    assert found is not None, name
    return found


def shown_page(dialog: SettingsDialog) -> QWidget:
    return page_at(dialog, child(dialog, QStackedWidget, "settingsStack").currentIndex())


def names_list(dialog: SettingsDialog) -> QListWidget:
    return child(dialog, QListWidget, "settingsPages")


def test_the_pages_are_listed_by_name_and_a_name_chosen_shows_its_page(
        dialog: SettingsDialog) -> None:
    names = names_list(dialog)
    assert names.accessibleName() == "Settings pages"
    assert page_names(dialog) == PAGES
    assert shown_page(dialog) is dialog.models_page  # the first, on opening
    for row, name in enumerate(PAGES):
        names.setCurrentRow(row)
        assert shown_page(dialog) is page_at(dialog, row) is dialog.current_page()
        assert names.currentItem().text() == name
    assert page_at(dialog, PAGES.index("Hardware")) is dialog.hardware_page
    assert page_at(dialog, PAGES.index("Local server")) is dialog.api_page


def test_the_window_can_open_a_page_and_the_list_follows(dialog: SettingsDialog) -> None:
    dialog.show_page(dialog.tools_page)
    assert names_list(dialog).currentItem().text() == "Tools"
    assert shown_page(dialog) is dialog.tools_page
    open_page(dialog, dialog.servers_page)
    assert dialog.current_page() is dialog.servers_page
    with pytest.raises(ValueError, match="not a page here"):
        dialog.show_page(QWidget())


def test_the_arrow_keys_go_through_the_pages_and_tab_goes_into_the_page(
        dialog: SettingsDialog, qtbot: Any) -> None:
    dialog.show()
    qtbot.waitExposed(dialog)
    dialog.activateWindow()
    names = names_list(dialog)
    names.setFocus(Qt.FocusReason.OtherFocusReason)
    qtbot.waitUntil(names.hasFocus)
    QTest.keyClick(names, Qt.Key.Key_Down)
    QTest.keyClick(names, Qt.Key.Key_Down)
    assert shown_page(dialog) is dialog.this_model_page
    QTest.keyClick(names, Qt.Key.Key_Up)
    assert shown_page(dialog) is dialog.replies_page
    QTest.keyClick(names, Qt.Key.Key_Tab)
    focused = QApplication.focusWidget()
    assert focused is dialog.replies_page.system_prompt  # the page's first field
    QTest.keyClick(focused, Qt.Key.Key_Tab, Qt.KeyboardModifier.ShiftModifier)
    assert QApplication.focusWidget() is names
    QTest.keyClick(names, Qt.Key.Key_End)
    assert shown_page(dialog) is dialog.hardware_page
    QTest.keyClick(names, Qt.Key.Key_Tab)
    focused = QApplication.focusWidget()
    assert focused is not None and dialog.hardware_page.isAncestorOf(focused)


def test_each_page_fits_the_dialog_across_and_scrolls_down_if_it_must(
        dialog: SettingsDialog, qtbot: Any) -> None:
    dialog.show()
    qtbot.waitExposed(dialog)
    for row, name in enumerate(PAGES):
        names_list(dialog).setCurrentRow(row)
        page = page_at(dialog, row)
        scroll = scroll_of(page)
        qtbot.waitUntil(lambda page=page, scroll=scroll:  # laid out once it shows
                        page.width() == scroll.viewport().width())
        assert page.width() >= page.minimumSizeHint().width(), f"{name} is squeezed"
        bottom = page.mapTo(scroll.viewport(), page.rect().bottomLeft()).y()
        assert bottom < scroll.viewport().height() or \
            scroll.verticalScrollBar().isVisible(), f"{name} is cut off at the bottom"
        if row == 0:  # the page that opens shows whole at the dialog's own size
            assert not scroll.verticalScrollBar().isVisible()
    # A page of rows keeps them at the top; the one that scrolls itself fills the height.
    assert dialog.servers_page.height() < scroll_of(dialog.servers_page).viewport().height()
    assert dialog.tools_page.height() == scroll_of(dialog.tools_page).viewport().height()
    names = names_list(dialog)
    widest = max(names.visualItemRect(names.item(row)).width() for row in range(len(PAGES)))
    assert names.sizeHintForColumn(0) <= widest <= names.viewport().width()


def scroll_of(page: QWidget) -> QScrollArea:
    """The scroll area that holds ``page`` in the dialog."""
    holder = page.parentWidget()
    while holder is not None and not isinstance(holder, QScrollArea):
        holder = holder.parentWidget()
    assert holder is not None
    return holder


def test_a_default_changed_shows_on_this_model_and_sizes_are_said(
        dialog: SettingsDialog, qtbot: Any, tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    dialog.set_model(model, "M")
    own = child(dialog, QDoubleSpinBox, "model_temperatureBox")
    assert own is not None and own.isEnabled()
    child(dialog, QDoubleSpinBox, "temperatureBox").setValue(0.35)
    assert own.value() == pytest.approx(0.35)  # the model still uses the default
    assert "uses your defaults" in dialog.model_title.text()
    with qtbot.waitSignal(dialog.context_size_changed, timeout=1000):
        child(dialog, QSpinBox, "contextSizeBox").setValue(4096)
    assert child(dialog, QSpinBox, "model_context_sizeBox").value() == 4096
    kv = child(dialog, QComboBox, "kv_cacheBox")
    kv.setCurrentIndex(kv.findData("q8_0"))
    with qtbot.waitSignal(dialog.context_size_changed, timeout=1000):
        kv.activated.emit(kv.currentIndex())
    with qtbot.waitSignal(dialog.context_size_changed, timeout=1000):
        child(dialog, QSpinBox, "model_context_sizeBox").setValue(2048)
    assert "has settings of its own" in dialog.model_title.text()
    assert dialog.prefs.context_size == 4096  # the default stays


def test_every_control_has_an_object_name_and_a_name_to_say(dialog: SettingsDialog) -> None:
    controls = (QAbstractButton, QAbstractSpinBox, QComboBox, QLineEdit, QPlainTextEdit,
                QAbstractItemView)
    for widget in dialog.findChildren(QWidget):
        if not isinstance(widget, controls) or widget.window() is not dialog:
            continue  # a list's popup is a window of its own
        if isinstance(widget.parentWidget(), QAbstractSpinBox | QComboBox):
            continue  # the edit inside a box, which the box names
        text = widget.text() if isinstance(widget, QAbstractButton) else ""
        assert widget.objectName(), f"a {type(widget).__name__} {text!r} has no object name"
        assert widget.accessibleName() or text, widget.objectName()


def test_the_network_page_keeps_the_hub_token_in_the_keyring_and_saves_offline(
        dialog: SettingsDialog, tmp_path: Path) -> None:
    from app.core.hub.access import HubAccess

    page = dialog.network_page
    page.offline.setChecked(True)
    page.endpoint.setText("https://hf-mirror.example")
    page.endpoint.editingFinished.emit()
    page.token.setText("hf_secret_read_token")
    QTest.mouseClick(child(dialog, QPushButton, "keepHubTokenButton"), Qt.MouseButton.LeftButton)
    stored = (tmp_path / "settings.json").read_text(encoding="utf-8")
    assert '"offline": true' in stored and "hf-mirror.example" in stored
    assert "hf_secret_read_token" not in stored, "the token is kept in the keyring"
    assert page.token.text() == "" and page.token_state.text().startswith("kept in")
    access = HubAccess.from_settings(dialog.prefs)
    assert (access.endpoint, access.token, access.offline) == (
        "https://hf-mirror.example", "hf_secret_read_token", True)
    QTest.mouseClick(child(dialog, QPushButton, "forgetHubTokenButton"),
                     Qt.MouseButton.LeftButton)
    assert HubAccess.from_settings(dialog.prefs).token is None
    assert page.token_state.text().startswith("none kept")
