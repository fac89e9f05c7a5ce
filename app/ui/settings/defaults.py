"""The general settings (every model's defaults) as the pages edit them: each finished
edit is saved at once, and said, so that what shows a default shows the new one."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QSpinBox,
    QWidget,
)

from app.core.settings import Settings
from app.ui.settings.boxes import CLAMPED, W, spin_value


class Defaults(QObject):
    changed = Signal(str)
    """A general setting changed and was saved (its field's name)."""

    def __init__(self, prefs: Settings, save: Callable[[], None],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.prefs = prefs
        self.save = save

    def set(self, field: str, value: object) -> None:
        if getattr(self.prefs, field) != value:
            setattr(self.prefs, field, value)
            self.save()
            self.changed.emit(field)

    def spin_row(self, box: W, field: str, form: QFormLayout) -> W:
        """A row in ``form`` for a number setting: shows it, saves each finished edit."""
        value = getattr(self.prefs, field)
        box.setValue(0 if value is None else value)
        box.valueChanged.connect(lambda _v: self._on_spun(field, box))
        form.addRow(box.accessibleName(), box)
        return box

    def choice_row(self, box: QComboBox, field: str, form: QFormLayout) -> QComboBox:
        """A row in ``form`` for a setting chosen from a list: shows it, saves each choice."""
        box.setCurrentIndex(max(0, box.findData(getattr(self.prefs, field))))
        box.activated.connect(lambda _i: self.set(field, box.currentData()))
        form.addRow(box.accessibleName(), box)
        return box

    def check_row(self, box: QCheckBox, field: str, form: QFormLayout) -> QCheckBox:
        """A row in ``form`` for a setting on or off: shows it, saves each click."""
        box.setChecked(bool(getattr(self.prefs, field)))
        box.toggled.connect(lambda on: self.set(field, on))
        form.addRow(box.accessibleName(), box)
        return box

    def row(self, box: QWidget, field: str, form: QFormLayout) -> QWidget:
        """A row for ``box``, a number box, a list or a check box (boxes.TUNING_BOXES and
        the like)."""
        if isinstance(box, QCheckBox):
            return self.check_row(box, field, form)
        if isinstance(box, QComboBox):
            return self.choice_row(box, field, form)
        if isinstance(box, QSpinBox):
            return self.spin_row(box, field, form)
        assert isinstance(box, QDoubleSpinBox)
        return self.spin_row(box, field, form)

    def _on_spun(self, field: str, box: QSpinBox | QDoubleSpinBox) -> None:
        value = spin_value(field, box)
        if value is not CLAMPED:
            self.set(field, value)
