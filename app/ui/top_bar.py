"""The bar above the chat: the model picker, load progress, and the window's tools."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QToolButton,
    QWidget,
)

from app.ui import icons
from app.ui.model_picker import ModelPicker

LOAD_LABEL_WIDTH = 200


class TopBar(QFrame):
    cancel_load_requested = Signal()
    """The user wants the model that is loading not to load."""
    models_folder_requested = Signal()
    """The user wants to see the models folder."""
    settings_requested = Signal()
    """The user wants the settings."""
    get_models_requested = Signal()
    """The user wants to find and download models (the Hub)."""

    def __init__(self, models_folder: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("topBar")
        self.picker = ModelPicker(self)
        self.load_label = QLabel(self)
        self.load_label.setObjectName("statusText")
        self.load_progress = QProgressBar(self)
        self.load_progress.setObjectName("loadProgress")
        self.load_progress.setAccessibleName("Model loading progress")
        self.load_progress.setRange(0, 100)
        self.load_progress.setTextVisible(False)
        self.load_progress.setFixedSize(140, 6)
        self.cancel_load_button = QPushButton("Cancel", self)
        self.cancel_load_button.setObjectName("cancelLoadButton")
        self.cancel_load_button.setAccessibleName("Cancel loading the model")
        self.cancel_load_button.setToolTip("Cancel loading (Esc)")
        self.cancel_load_button.clicked.connect(self.cancel_load_requested)
        self.get_models_button = QPushButton("Get models", self)
        self.get_models_button.setObjectName("getModelsButton")
        self.get_models_button.setAccessibleName("Get models")
        self.get_models_button.setToolTip("Search the Hugging Face Hub and download models "
                                          "(Ctrl+Shift+M)")
        self.get_models_button.clicked.connect(self.get_models_requested)
        self.models_folder_button = self._tool_button(
            "modelsFolderButton", "Open the models folder",
            f"Open the models folder ({models_folder})")
        self.models_folder_button.clicked.connect(self.models_folder_requested)
        self.settings_button = self._tool_button("settingsButton", "Settings",
                                                 "Settings (Ctrl+,)")
        self.settings_button.clicked.connect(self.settings_requested)

        row = QHBoxLayout(self)
        row.setContentsMargins(14, 8, 10, 8)
        row.setSpacing(10)
        for widget in (self.picker, self.get_models_button, self.load_label,
                       self.load_progress, self.cancel_load_button):
            row.addWidget(widget)
        row.addStretch(1)
        row.addWidget(self.models_folder_button)
        row.addWidget(self.settings_button)
        self.show_loading(None)

    def show_loading(self, name: str | None) -> None:
        """Show that ``name`` is loading (progress and Cancel), or nothing if None."""
        loading = name is not None
        for widget in (self.load_label, self.load_progress, self.cancel_load_button):
            widget.setVisible(loading)
        self.picker.setEnabled(not loading)
        if loading:
            # Elided: a long name must not widen the window past the screen.
            text = f"Loading {name}…"
            metrics = self.load_label.fontMetrics()
            self.load_label.setText(metrics.elidedText(text, Qt.TextElideMode.ElideMiddle,
                                                       LOAD_LABEL_WIDTH))
            self.load_label.setToolTip(text)
            self.load_progress.setValue(0)

    def show_progress(self, fraction: float) -> None:
        self.load_progress.setValue(round(fraction * 100))

    def apply_icons(self, color: QColor) -> None:
        self.get_models_button.setIcon(icons.glyph("download", color, 16))
        self.models_folder_button.setIcon(icons.glyph("folder", color))
        self.settings_button.setIcon(icons.glyph("settings", color))

    def _tool_button(self, name: str, accessible: str, tip: str) -> QToolButton:
        button = QToolButton(self)
        button.setObjectName(name)
        button.setAccessibleName(accessible)
        button.setIconSize(QSize(18, 18))
        button.setToolTip(tip)
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        return button
