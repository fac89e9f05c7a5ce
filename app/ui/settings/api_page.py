"""Settings → Local server: other apps on this computer use the loaded model through
Fireside's OpenAI-compatible API. Off unless the user turns it on."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QWidget,
)

from app.core.settings import Settings
from app.ui.settings.form_parts import note


class ApiPage(QWidget):
    changed = Signal()
    """Serving was turned on or off, or its port or token changed (and saved)."""

    def __init__(self, prefs: Settings, save: Callable[[], None], new_token: Callable[[], str],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.prefs = prefs
        self._save = save
        self._new_token = new_token
        form = QFormLayout(self)
        form.addRow(note("Editors, scripts and agents on this computer can use the model "
                         "loaded here through an OpenAI-compatible API. Only this computer "
                         "can connect; requests and your own chat take turns.", self))
        self.serve_box = QCheckBox("Serve the loaded model on this computer", self)
        self.serve_box.setObjectName("serveApiBox")
        self.serve_box.setChecked(prefs.serve_api)
        self.serve_box.toggled.connect(self._on_serve_box_toggled)
        form.addRow(self.serve_box)
        self.port_box = QSpinBox(self)
        self.port_box.setObjectName("apiPortBox")
        self.port_box.setAccessibleName("Port")
        self.port_box.setRange(1024, 65535)
        self.port_box.setValue(prefs.api_port)
        self.port_box.editingFinished.connect(self._on_port_box_editing_finished)
        form.addRow("Port", self.port_box)
        self.token_box = QCheckBox("Require a token", self)
        self.token_box.setObjectName("apiTokenBox")
        self.token_box.setChecked(bool(prefs.api_token))
        self.token_box.toggled.connect(self._on_token_box_toggled)
        self.token_field = QLineEdit(prefs.api_token, self)
        self.token_field.setObjectName("apiTokenField")
        self.token_field.setAccessibleName("Token")
        self.token_field.setReadOnly(True)
        copy = QPushButton("Copy", self)
        copy.setObjectName("copyTokenButton")
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(
            self.token_field.text()))
        row = QHBoxLayout()
        row.addWidget(self.token_field, 1)
        row.addWidget(copy)
        form.addRow(self.token_box)
        form.addRow("Token", row)
        self.status = QLabel(self)
        self.status.setObjectName("apiStatusLabel")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(self.status.textInteractionFlags()
                                            | self.status.textInteractionFlags().
                                            TextSelectableByMouse)
        form.addRow(self.status)

    def show_status(self, text: str) -> None:
        self.status.setText(text)

    def _on_serve_box_toggled(self, on: bool) -> None:
        self.prefs.serve_api = on
        self._changed()

    def _on_port_box_editing_finished(self) -> None:
        if self.port_box.value() != self.prefs.api_port:
            self.prefs.api_port = self.port_box.value()
            self._changed()

    def _on_token_box_toggled(self, on: bool) -> None:
        self.prefs.api_token = self._new_token() if on else ""
        self.token_field.setText(self.prefs.api_token)
        self._changed()

    def _changed(self) -> None:
        self._save()
        self.changed.emit()
