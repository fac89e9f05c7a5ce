"""Settings → Appearance: the theme, light or dark or as the system has it."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QWidget

from app.ui.settings.defaults import Defaults
from app.ui.settings.form_page import FormPage
from app.ui.theme import THEMES

THEME_NAMES = ("Follow the system", "Light", "Dark")  # in the order of theme.THEMES


class AppearancePage(FormPage):
    theme_changed = Signal(str)
    """The user picked "system", "light" or "dark" (saved)."""

    def __init__(self, defaults: Defaults, parent: QWidget | None = None) -> None:
        super().__init__("appearancePage", parent)
        self._defaults = defaults
        self.theme = QComboBox(self)
        self.theme.setObjectName("themeBox")
        self.theme.setAccessibleName("Theme")
        for value, label in zip(THEMES, THEME_NAMES, strict=True):
            self.theme.addItem(label, value)
        self.theme.setCurrentIndex(max(0, self.theme.findData(defaults.prefs.theme)))
        self.theme.currentIndexChanged.connect(self._on_theme_changed)
        self.form.addRow("Theme", self.theme)

    def _on_theme_changed(self, index: int) -> None:
        value = self.theme.itemData(index)
        self._defaults.set("theme", value)
        self.theme_changed.emit(value)
