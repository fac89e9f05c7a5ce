"""Going to a page of the settings dialog as a user does: by its name in the list of
pages beside them."""

from __future__ import annotations

from PySide6.QtWidgets import QListWidget, QWidget

from app.ui.settings.dialog import SettingsDialog


def page_names(dialog: SettingsDialog) -> list[str]:
    names = _names(dialog)
    return [names.item(row).text() for row in range(names.count())]


def page_at(dialog: SettingsDialog, row: int) -> QWidget:
    """The page the list's row ``row`` shows."""
    return dialog.page_list.page_at(row)


def open_page(dialog: SettingsDialog, page: QWidget) -> None:
    """Choose ``page``'s name in the list, which shows the page."""
    names = _names(dialog)
    rows = [row for row in range(names.count()) if page_at(dialog, row) is page]
    assert rows, f"{page.objectName()} is not in the list of pages"
    names.setCurrentRow(rows[0])


def _names(dialog: SettingsDialog) -> QListWidget:
    names = dialog.findChild(QListWidget, "settingsPages")
    assert names is not None
    return names
