"""The quiet, wrapping line of explanation that settings pages put above their fields."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QWidget


def note(text: str, parent: QWidget) -> QLabel:
    label = QLabel(text, parent)
    label.setObjectName("settingsNote")  # the theme greys it
    label.setWordWrap(True)
    return label
