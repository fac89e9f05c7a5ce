"""Settings → Documents: the embedding model that finds, in the files brought into a
conversation, the passages that answer a question (the bundled one, or an embedding
model among the library's)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QWidget

from app.ui.settings.defaults import Defaults
from app.ui.settings.form_page import FormPage
from app.ui.settings.form_parts import note

if TYPE_CHECKING:
    from app.core.models.catalog import ModelEntry

BUNDLED_NAME = "All-MiniLM-L6-v2 (bundled)"


class DocumentsPage(FormPage):
    def __init__(self, defaults: Defaults, parent: QWidget | None = None) -> None:
        super().__init__("documentsPage", parent)
        self._defaults = defaults
        self.form.addRow(note("Files and folders dropped on the chat (or attached with the "
                              "paperclip) are read on this computer; the passages that "
                              "best answer a message are given to the model with it.", self))
        self.embedding_model = QComboBox(self)
        self.embedding_model.setObjectName("embeddingModelBox")
        self.embedding_model.setAccessibleName("Embedding model")
        self.embedding_model.activated.connect(self._on_activated)
        self.form.addRow("Embedding model", self.embedding_model)
        self.form.addRow(note("It finds passages by their meaning; without one they are found "
                              "by their words alone. After a change, the passages kept are "
                              "embedded again in the background.", self))
        self.set_models(())

    def set_models(self, entries: Sequence[ModelEntry]) -> None:
        """Offer the embedding models among ``entries`` beside the bundled one."""
        from app.core.models import catalog  # noqa: PLC0415 - not before the first paint

        box = self.embedding_model
        chosen = self._defaults.prefs.embedding_model
        box.clear()
        box.addItem(BUNDLED_NAME, "")
        for entry in entries:
            # The bundled model is listed too (in its folder's embedding/): first, by name.
            if entry.usable and entry.embedding and entry.source != catalog.BUNDLED:
                box.addItem(entry.name, str(entry.path))
                box.setItemData(box.count() - 1, str(entry.path),
                                Qt.ItemDataRole.ToolTipRole)
        if chosen and box.findData(chosen) < 0:  # chosen, but not in the library now
            box.addItem(f"{Path(chosen).name} (not found)", chosen)
        box.setCurrentIndex(max(0, box.findData(chosen)))

    def _on_activated(self, index: int) -> None:
        self._defaults.set("embedding_model", self.embedding_model.itemData(index))
