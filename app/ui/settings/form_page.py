"""A settings page of labelled rows that stay together at the top, however tall the
dialog."""

from __future__ import annotations

from PySide6.QtWidgets import QFormLayout, QPushButton, QVBoxLayout, QWidget

from app.ui.settings.form_parts import push_button


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
