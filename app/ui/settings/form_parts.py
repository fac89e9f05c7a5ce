"""The small parts settings pages share: the quiet, wrapping line of explanation above
their fields, a named line edit, and a row of buttons."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QPushButton, QWidget


def note(text: str, parent: QWidget) -> QLabel:
    label = QLabel(text, parent)
    label.setObjectName("settingsNote")  # the theme greys it
    label.setWordWrap(True)
    return label


def line_edit(parent: QWidget, name: str, label: str, hint: str) -> QLineEdit:
    """An edit with its object name (for styles and tests) and a name screen readers say."""
    edit = QLineEdit(parent)
    edit.setObjectName(name)
    edit.setAccessibleName(label)
    edit.setPlaceholderText(hint)
    return edit


def button_row(*widgets: QWidget) -> QHBoxLayout:
    """Buttons (or other widgets) side by side at their natural width, from the left."""
    row = QHBoxLayout()
    for widget in widgets:
        row.addWidget(widget)
    row.addStretch(1)
    return row


def push_button(text: str, name: str, parent: QWidget) -> QPushButton:
    """A button with its object name, named for screen readers by its text ("Add…": "Add")."""
    button = QPushButton(text, parent)
    button.setObjectName(name)
    button.setAccessibleName(text.rstrip("…"))
    return button
