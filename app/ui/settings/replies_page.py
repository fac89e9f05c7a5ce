"""Settings → Replies: what every model is told before a chat, and how it picks its
words (sampling, thinking, the seed), unless a model has settings of its own."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtGui import QIntValidator
from PySide6.QtWidgets import QComboBox, QLineEdit, QPlainTextEdit, QWidget

from app.ui.settings.boxes import SAMPLING_BOXES
from app.ui.settings.defaults import Defaults
from app.ui.settings.form_page import FormPage

SAVE_DELAY_MS = 400  # typing in the system prompt saves once the user pauses


class RepliesPage(FormPage):
    def __init__(self, defaults: Defaults, parent: QWidget | None = None) -> None:
        super().__init__("repliesPage", parent)
        self._defaults = defaults
        prefs = defaults.prefs
        self._prompt_timer = QTimer(self)
        self._prompt_timer.setSingleShot(True)
        self._prompt_timer.setInterval(SAVE_DELAY_MS)
        self._prompt_timer.timeout.connect(self._save_prompt)
        self.system_prompt = QPlainTextEdit(prefs.system_prompt, self)
        self.system_prompt.setObjectName("systemPromptBox")
        self.system_prompt.setAccessibleName("System prompt")
        self.system_prompt.setPlaceholderText("Instructions the model sees before every chat")
        self.system_prompt.setTabChangesFocus(True)
        self.system_prompt.setMaximumHeight(90)
        self.system_prompt.textChanged.connect(self._prompt_timer.start)
        self.form.addRow("System prompt", self.system_prompt)

        self.sampling_boxes = {name: defaults.row(make(self, f"{name}Box", label), name,
                                                  self.form)
                               for name, label, make in SAMPLING_BOXES}
        thinking = self.sampling_boxes["thinking"]
        assert isinstance(thinking, QComboBox)
        self.thinking = thinking

        self.seed = QLineEdit("" if prefs.seed is None else str(prefs.seed), self)
        self.seed.setObjectName("seedBox")
        self.seed.setAccessibleName("Seed")
        self.seed.setPlaceholderText("Random")
        self.seed.setValidator(QIntValidator(0, 2**31 - 1, self.seed))
        self.seed.textChanged.connect(self._on_seed_changed)
        self.form.addRow("Seed", self.seed)

    def flush(self) -> None:
        """Save the system prompt now if typing in it has not been saved yet."""
        if self._prompt_timer.isActive():
            self._prompt_timer.stop()
            self._save_prompt()

    def _save_prompt(self) -> None:
        self._defaults.set("system_prompt", self.system_prompt.toPlainText())

    def _on_seed_changed(self, text: str) -> None:
        self._defaults.set("seed", int(text) if text.strip() else None)
