"""A source of a reply, opened from the line under it: the file's name, where in the
file the passage is, the passage itself (to read, select and copy), and a button that
opens the file in the app the desktop opens it with."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QIcon
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

from app.ui import desktop
from app.ui.messages.sources_line import describe_source

SIZE = (680, 520)


class SourceView(QDialog):
    """One source at a time; opening another shows it in place."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sourceView")
        self.setAccessibleName("Source")
        self.setModal(False)
        self.path: Path | None = None
        self.title = QLabel(self)
        self.title.setObjectName("sourceTitle")
        font = QFont(self.title.font())
        font.setPointSizeF(font.pointSizeF() * 1.15 if font.pointSizeF() > 0 else 11)
        font.setBold(True)
        self.title.setFont(font)
        self.title.setTextFormat(Qt.TextFormat.PlainText)
        self.where = QLabel(self)
        self.where.setObjectName("sourcePath")
        self.where.setWordWrap(True)
        self.where.setTextFormat(Qt.TextFormat.PlainText)
        self.where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.passage = QPlainTextEdit(self)
        self.passage.setObjectName("sourcePassage")
        self.passage.setAccessibleName("Passage")
        self.passage.setReadOnly(True)
        self.passage.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                             | Qt.TextInteractionFlag.TextSelectableByKeyboard)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        # Some styles give Close an icon; the theme's padded buttons would draw it over
        # the text.
        buttons.button(QDialogButtonBox.StandardButton.Close).setIcon(QIcon())
        self.open_button = buttons.addButton("Open file", QDialogButtonBox.ButtonRole.ActionRole)
        self.open_button.setObjectName("openSourceButton")
        self.open_button.setAccessibleName("Open the file")
        self.open_button.clicked.connect(self._on_open_clicked)
        column = QVBoxLayout(self)
        column.setSpacing(8)
        column.addWidget(self.title)
        column.addWidget(self.where)
        column.addWidget(self.passage, 1)
        column.addWidget(buttons)
        self.resize(*SIZE)

    def show_source(self, source: Mapping[str, Any]) -> None:
        self.path = Path(str(source.get("path", "")))
        label = describe_source(source)
        self.setWindowTitle(f"Source {label}")
        self.title.setText(label)
        self.where.setText(str(self.path))
        self.passage.setPlainText(str(source.get("text", "")))
        self.open_button.setToolTip(f"Open {self.path.name}")
        self.show()
        self.raise_()
        self.activateWindow()

    def _on_open_clicked(self) -> None:
        if self.path is not None:
            desktop.open_file(self.path)
