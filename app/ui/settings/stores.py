"""Settings → Models, "Other apps": a switch for each other app's store of models that
Fireside can read (Ollama, LM Studio...), beside the folder where it was found."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QGridLayout, QLabel, QWidget

from app.core.models import sources
from app.ui.settings.defaults import Defaults

if TYPE_CHECKING:
    from app.core.models.sources import Source


class StoreSwitches(QWidget):
    changed = Signal()
    """A store was switched on or off (and saved): scan again."""

    def __init__(self, defaults: Defaults, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sourceList")
        self._defaults = defaults
        self.boxes: dict[str, QCheckBox] = {}
        self.places: dict[str, QLabel] = {}
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(12)
        grid.setVerticalSpacing(4)
        disabled = defaults.prefs.disabled_sources
        for row, (key, label) in enumerate(sources.KEYS.items()):
            box = QCheckBox(label, self)
            box.setObjectName(f"source_{key}")
            box.setAccessibleName(f"Use models from {label}")
            box.setChecked(key not in disabled)
            box.toggled.connect(lambda on, key=key: self._on_toggled(key, on))
            place = QLabel("not found", self)  # until set_sources says where
            place.setObjectName("settingsNote")
            place.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            grid.addWidget(box, row, 0)
            grid.addWidget(place, row, 1)
            self.boxes[key], self.places[key] = box, place
        grid.setColumnStretch(1, 1)

    def set_sources(self, found: Sequence[Source]) -> None:
        """Show where each other app's store was found, or that it was not."""
        for source in found:
            place = self.places.get(source.key)
            if place is not None:
                where = ", ".join(_home_relative(f) for f in source.folders)
                place.setText(where or "not found")
                place.setToolTip("\n".join(str(f) for f in source.folders))

    def _on_toggled(self, key: str, on: bool) -> None:
        disabled = [k for k in self._defaults.prefs.disabled_sources if k != key]
        self._defaults.set("disabled_sources", disabled if on else [*disabled, key])
        self.changed.emit()


def _home_relative(folder: Path) -> str:
    """~/.ollama/models rather than /home/someone/.ollama/models."""
    try:
        return "~/" + folder.relative_to(Path.home()).as_posix()
    except ValueError:
        return str(folder)
