"""Settings → Models: where Fireside finds models, the model loaded at start, how every
model loads by default, and the states kept for the conversations left.

Context size, threads and llama.cpp's switches are load options: they apply the next
time a model loads, which the page says, and it offers to reload the current model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QFileDialog, QLabel, QListWidget, QWidget

from app.core.backend import KeptStates
from app.core.models.catalog import chat_models
from app.ui.settings.boxes import TUNING_BOXES, context_box, threads_box
from app.ui.settings.defaults import Defaults
from app.ui.settings.form_page import FormPage
from app.ui.settings.form_parts import button_row, note
from app.ui.settings.kept_states import KeptStatesRow
from app.ui.settings.stores import StoreSwitches

if TYPE_CHECKING:
    from app.core.models.catalog import ModelEntry
    from app.core.models.sources import Source


class ModelsPage(FormPage):
    folders_changed = Signal()
    """The model folders or the other apps' stores in use changed: scan again."""
    open_models_folder_requested = Signal()
    """The user wants to see the models folder in the file manager."""
    reload_requested = Signal()
    """The user asked to reload the current model with the new load options."""
    clear_states_requested = Signal()
    """The user wants the states kept for conversations left forgotten."""

    def __init__(self, defaults: Defaults, models_dir: Path,
                 parent: QWidget | None = None) -> None:
        super().__init__("modelsPage", parent)
        self._defaults = defaults
        self.prefs = defaults.prefs
        self._add_folder_rows(models_dir)
        self.stores = StoreSwitches(defaults, self)
        self.stores.changed.connect(self.folders_changed)
        self.form.addRow("Other apps", self.stores)
        self._add_load_rows()
        self.kept_states = KeptStatesRow(self)
        self.kept_states.clear_requested.connect(self.clear_states_requested)
        self.form.addRow("Conversations left", self.kept_states)


    def _add_folder_rows(self, models_dir: Path) -> None:
        where = note(f"Fireside finds GGUF files in <b>{models_dir}</b>, the bundled "
                     "models and the folders below (searched with their subfolders).", self)
        where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        open_folder = self.button("Open models folder", "openModelsFolderButton")
        open_folder.clicked.connect(self.open_models_folder_requested)
        self.form.addRow(where)
        self.form.addRow(button_row(open_folder))
        self.folder_list = QListWidget(self)
        self.folder_list.setObjectName("modelFolderList")
        self.folder_list.setAccessibleName("Model folders")
        self.folder_list.addItems(self.prefs.model_folders)
        self.folder_list.setMaximumHeight(110)
        add = self.button("Add…", "addFolderButton")
        add.clicked.connect(self._on_add_clicked)
        remove = self.button("Remove", "removeFolderButton")
        remove.clicked.connect(self._on_remove_clicked)
        self.form.addRow("Model folders", self.folder_list)
        self.form.addRow("", button_row(add, remove))

    def _add_load_rows(self) -> None:
        """The model loaded at start, and the load options every model has by default."""
        self.default_model = QComboBox(self)
        self.default_model.setObjectName("defaultModelBox")
        self.default_model.setAccessibleName("Model at start")
        self.set_models([])
        self.default_model.activated.connect(self._on_default_model_activated)
        self.form.addRow("Model at start", self.default_model)
        rows, form = self._defaults, self.form
        self.context_size = rows.spin_row(context_box(self, "contextSizeBox", "Context size"),
                                          "context_size", form)
        self.threads = rows.spin_row(threads_box(self, "threadsBox", "Threads"), "threads",
                                     form)
        self.tuning_boxes = {name: rows.row(make(self, f"{name}Box", label), name, form)
                             for name, label, make in TUNING_BOXES}
        reload_button = self.button("Reload model now", "reloadModelButton")
        reload_button.clicked.connect(self.reload_requested)
        form.addRow(note("Context size, threads and llama.cpp's switches apply the next time "
                         "a model loads.", self))
        form.addRow(button_row(reload_button))

    @property
    def saved_states(self) -> QLabel:
        """The line that says how many states are kept, and their size."""
        return self.kept_states.label

    def set_states_source(self, source: Callable[[], KeptStates]) -> None:
        """Where the count and the bytes of the states kept are read (any thread)."""
        self.kept_states.set_source(source)

    def set_models(self, entries: Sequence[ModelEntry]) -> None:
        """Offer these models (the usable chat models) as the model to load at start."""
        box = self.default_model
        box.clear()
        box.addItem("The last model used", None)
        for entry in chat_models(entries):
            if entry.usable:
                box.addItem(entry.name, str(entry.path))
        wanted = self.prefs.default_model
        index = box.findData(wanted) if wanted else 0
        if wanted and index < 0:  # kept, though not found now
            box.addItem(Path(wanted).name, wanted)
            index = box.count() - 1
        box.setCurrentIndex(index)

    def set_sources(self, found: Sequence[Source]) -> None:
        """Show where each other app's store was found, or that it was not."""
        self.stores.set_sources(found)

    def add_folder(self, folder: str) -> None:
        if folder and folder not in self.prefs.model_folders:
            self.prefs.model_folders.append(folder)
            self.folder_list.addItem(folder)
            self._defaults.save()
            self.folders_changed.emit()

    def _on_add_clicked(self) -> None:
        # Non-modal: a nested event loop would stall the window's async work.
        chooser = QFileDialog(self, "Add a folder of GGUF models")
        chooser.setObjectName("folderChooser")
        chooser.setFileMode(QFileDialog.FileMode.Directory)
        chooser.setOption(QFileDialog.Option.ShowDirsOnly, True)
        chooser.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        chooser.fileSelected.connect(self.add_folder)
        chooser.open()

    def _on_remove_clicked(self) -> None:
        item = self.folder_list.currentItem()
        if item is None:
            return
        self.prefs.model_folders.remove(item.text())
        self.folder_list.takeItem(self.folder_list.row(item))
        self._defaults.save()
        self.folders_changed.emit()

    def _on_default_model_activated(self, index: int) -> None:
        self._defaults.set("default_model", self.default_model.itemData(index))
