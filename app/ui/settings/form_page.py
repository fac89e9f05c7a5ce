"""A settings page of labelled rows that stay together at the top, however tall the
dialog, and the small pieces its rows are made of."""

from __future__ import annotations

from PySide6.QtWidgets import QFormLayout, QHBoxLayout, QPushButton, QVBoxLayout, QWidget


class FormPage(QWidget):
    def __init__(self, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(name)
        column = QVBoxLayout(self)
        self.form = QFormLayout()
        column.addLayout(self.form)
        column.addStretch(1)

    def button(self, text: str, name: str) -> QPushButton:
        """A button on this page, named for screen readers by its text ("Add…": "Add")."""
        return push_button(text, name, self)


def push_button(text: str, name: str, parent: QWidget) -> QPushButton:
    button = QPushButton(text, parent)
    button.setObjectName(name)
    button.setAccessibleName(text.rstrip("…"))
    return button


def left(*widgets: QWidget) -> QHBoxLayout:
    """A row holding ``widgets`` at their natural width, from the left."""
    row = QHBoxLayout()
    for widget in widgets:
        row.addWidget(widget)
    row.addStretch(1)
    return row
