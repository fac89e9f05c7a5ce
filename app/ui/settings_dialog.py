"""Settings: a non-modal dialog; every change is saved at once.

Context size and threads are load options: they apply the next time a model loads,
which the dialog says, and it offers to reload the current model right away. The
"This model" tab gives the loaded model settings of its own, over the defaults.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QHideEvent, QIntValidator, QShowEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.backend import KeptStates
from app.core.models import sources
from app.core.options import DEFAULT_BATCH
from app.core.reply.templates import BUILTIN_TEMPLATES
from app.core.settings import MODEL_FIELDS
from app.ui.api_page import ApiPage
from app.ui.form_parts import note
from app.ui.hardware_page import HardwarePage, gpu_layers_box, gpu_layers_value
from app.ui.servers_page import ServersPage
from app.ui.theme import THEMES
from app.ui.tools_page import ToolsPage

if TYPE_CHECKING:
    from app.core.models.catalog import ModelEntry
    from app.core.models.sources import Source
    from app.core.settings import Settings

SAVE_DELAY_MS = 400  # typing in the system prompt saves once the user pauses
MIN_CONTEXT = 256
_CLAMPED = object()  # a value put right in its box, which reports the new one itself
W = TypeVar("W", QSpinBox, QDoubleSpinBox)


def _name(box: QWidget, name: str, label: str) -> None:
    box.setObjectName(name)
    box.setAccessibleName(label)


def _spin(box: W, name: str, label: str) -> W:
    _name(box, name, label)
    box.setKeyboardTracking(False)  # one save per finished edit, not per keystroke
    return box


def _real_box(low: float, high: float, step: float) -> Callable[[QWidget, str, str],
                                                                QDoubleSpinBox]:
    def make(parent: QWidget, name: str, label: str) -> QDoubleSpinBox:
        box = _spin(QDoubleSpinBox(parent), name, label)
        box.setRange(low, high)
        box.setSingleStep(step)
        box.setDecimals(2)
        return box

    return make


def _whole_box(low: int, high: int, special: str = "") -> Callable[[QWidget, str, str],
                                                                    QSpinBox]:
    def make(parent: QWidget, name: str, label: str) -> QSpinBox:
        box = _spin(QSpinBox(parent), name, label)
        box.setRange(low, high)
        box.setSpecialValueText(special)
        return box

    return make


def _context_box(parent: QWidget, name: str, label: str) -> QSpinBox:
    box = _whole_box(0, 1 << 20, "Model default (at most 8,192)")(parent, name, label)
    box.setSingleStep(1024)
    box.setSuffix(" tokens")
    return box


def _threads_box(parent: QWidget, name: str, label: str) -> QSpinBox:
    return _whole_box(0, max(4, (os.cpu_count() or 1) * 2),
                      "Automatic (one per core)")(parent, name, label)


def _batch_box(parent: QWidget, name: str, label: str) -> QSpinBox:
    box = _whole_box(0, 8192, f"Automatic ({DEFAULT_BATCH})")(parent, name, label)
    box.setSingleStep(128)
    box.setSuffix(" tokens")
    return box


def _choice_box(parent: QWidget, name: str, label: str,
                choices: Sequence[tuple[str, str]]) -> QComboBox:
    box = QComboBox(parent)
    _name(box, name, label)
    for value, text in choices:
        box.addItem(text, value)
    return box


# llama.cpp's switches, in the general tab and in "This model": field, label, box.
_FLASH_CHOICES = (("auto", "Automatic (on where llama.cpp runs it)"), ("on", "On"),
                  ("off", "Off"))
_KV_CHOICES = (("f16", "f16 (exact)"), ("q8_0", "q8_0 (about half the memory)"),
               ("q4_0", "q4_0 (about a quarter; may change answers)"))
_TUNING_BOXES: tuple[tuple[str, str, Callable[[QWidget, str, str], QWidget]], ...] = (
    ("prompt_threads", "Prompt threads", _threads_box),
    ("batch_size", "Batch size", _batch_box),
    ("flash_attention", "Flash attention",
     lambda parent, name, label: _choice_box(parent, name, label, _FLASH_CHOICES)),
    ("kv_cache", "KV cache",
     lambda parent, name, label: _choice_box(parent, name, label, _KV_CHOICES)),
)


# A thinking model's thinking (thinking.THINKING_CHOICES): low/medium/high is gpt-oss's
# reasoning effort; elsewhere each means "on".
_THINKING_CHOICES = (("on", "On"), ("off", "Off (answer at once)"),
                     ("low", "Low effort (gpt-oss)"), ("medium", "Medium effort (gpt-oss)"),
                     ("high", "High effort (gpt-oss)"))


def _budget_box(parent: QWidget, name: str, label: str) -> QSpinBox:
    box = _whole_box(0, 1 << 20, "No limit")(parent, name, label)
    box.setSingleStep(100)
    box.setSuffix(" tokens")
    box.setToolTip("After this many thinking tokens Fireside ends the thought and the "
                   "model answers")
    return box


# The sampling settings, in the general tab and in "This model": field, label, box.
_SAMPLING_BOXES = (("temperature", "Temperature", _real_box(0.0, 2.0, 0.05)),
                   ("top_p", "Top-p", _real_box(0.01, 1.0, 0.01)),
                   ("top_k", "Top-k", _whole_box(0, 1000, "Off")),
                   ("min_p", "Min-p", _real_box(0.0, 1.0, 0.01)),
                   ("repeat_penalty", "Repeat penalty", _real_box(0.5, 2.0, 0.05)),
                   ("max_tokens", "Max reply tokens", _whole_box(1, 1 << 20)),
                   ("thinking", "Thinking",
                    lambda parent, name, label: _choice_box(parent, name, label,
                                                            _THINKING_CHOICES)),
                   ("thinking_budget", "Thinking budget", _budget_box))


def _spin_value(field: str, box: QSpinBox | QDoubleSpinBox) -> object:
    """What a box's value means for ``field``: 0 is "automatic" for the context size and
    threads; a context below MIN_CONTEXT is raised to it in the box (and _CLAMPED said)."""
    if isinstance(box, QDoubleSpinBox):
        return round(box.value(), 2)
    if field == "context_size" and 0 < box.value() < MIN_CONTEXT:
        box.setValue(MIN_CONTEXT)  # comes back here with a usable size
        return _CLAMPED
    if field in ("context_size", "threads", "prompt_threads", "batch_size", "thinking_budget"):
        if field == "batch_size" and 0 < box.value() < 32:
            box.setValue(32)
            return _CLAMPED
        return box.value() or None
    return box.value()


class SettingsDialog(QDialog):
    theme_changed = Signal(str)
    """The user picked "system", "light" or "dark"."""
    folders_changed = Signal()
    """The model folders or the other apps' stores in use changed: scan again."""
    context_size_changed = Signal()
    """A context size (the default, or a model's own) changed: model sizes change too."""
    reload_requested = Signal()
    """The user asked to reload the current model with the new load options."""
    open_models_folder_requested = Signal()
    """The user wants to see the models folder in the file manager."""
    about_requested = Signal()
    """The user wants to know about Fireside (version, licenses)."""
    servers_changed = Signal()
    """A model server was added or removed: ask the servers again."""
    tools_changed = Signal()
    """Tool servers were added, removed or switched: the toolbox starts over."""
    clear_states_requested = Signal()
    """The user wants the states kept for conversations left forgotten."""

    def __init__(self, prefs: Settings, save: Callable[[], None], models_dir: Path,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("settingsDialog")
        self.setWindowTitle("Fireside Settings")
        self.setAccessibleName("Settings")
        self.setModal(False)
        self.prefs = prefs
        self._save = save
        self._prompt_timer = QTimer(self)
        self._prompt_timer.setSingleShot(True)
        self._prompt_timer.setInterval(SAVE_DELAY_MS)
        self._prompt_timer.timeout.connect(self._on_prompt_timer_timeout)
        self._model_path: Path | None = None
        self._model_name = ""
        self._filling = False  # fields are being set from the settings, not by the user
        self._model_prompt_timer = QTimer(self)
        self._model_prompt_timer.setSingleShot(True)
        self._model_prompt_timer.setInterval(SAVE_DELAY_MS)
        self._model_prompt_timer.timeout.connect(self._on_model_prompt_timer_timeout)

        tabs = QTabWidget(self)
        tabs.setObjectName("settingsTabs")
        tabs.addTab(self._models_tab(models_dir), "Models")
        tabs.addTab(self._replies_tab(), "Replies")
        tabs.addTab(self._this_model_tab(), "This model")
        tabs.addTab(self._appearance_tab(), "Appearance")
        self.servers_page = ServersPage(prefs, save, self)
        self.servers_page.servers_changed.connect(self.servers_changed)
        tabs.addTab(self.servers_page, "Servers")
        self.tools_page = ToolsPage(prefs, save, self)
        self.tools_page.tools_changed.connect(self.tools_changed)
        tabs.addTab(self.tools_page, "Tools")
        self.api_page = ApiPage(prefs, save, _new_token, self)
        tabs.addTab(self.api_page, "Local server")
        self.hardware_page = HardwarePage(prefs, save, self)
        self.hardware_page.placement_changed.connect(self.context_size_changed)
        self.hardware_page.placement_changed.connect(self._fill_model_fields)
        tabs.addTab(self.hardware_page, "Hardware")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        about = buttons.addButton("About Fireside", QDialogButtonBox.ButtonRole.HelpRole)
        about.setObjectName("aboutButton")
        about.clicked.connect(self.about_requested)
        self.finished.connect(self._on_finished)
        layout = QVBoxLayout(self)
        layout.addWidget(tabs)
        layout.addWidget(buttons)
        self.resize(580, 560)

    # Tabs ------------------------------------------------------------------------

    def _models_tab(self, models_dir: Path) -> QWidget:
        page, form = _form_page(self)
        where = note(f"Fireside finds GGUF files in <b>{models_dir}</b>, the bundled "
                     "models and the folders below (searched with their subfolders).", page)
        where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        open_folder = self._button("Open models folder", "openModelsFolderButton", page)
        open_folder.clicked.connect(self.open_models_folder_requested)
        form.addRow(where)
        form.addRow(_left(open_folder))

        self.folder_list = QListWidget(page)
        self.folder_list.setObjectName("modelFolderList")
        self.folder_list.setAccessibleName("Model folders")
        self.folder_list.addItems(self.prefs.model_folders)
        self.folder_list.setMaximumHeight(110)
        add = self._button("Add…", "addFolderButton", page)
        add.clicked.connect(self._on_add_clicked)
        remove = self._button("Remove", "removeFolderButton", page)
        remove.clicked.connect(self._on_remove_clicked)
        row = QHBoxLayout()
        for button in (add, remove):
            row.addWidget(button)
        row.addStretch(1)
        form.addRow("Model folders", self.folder_list)
        form.addRow("", row)

        # Other apps' stores: a switch each, with the folder found (filled by set_sources).
        self.source_boxes: dict[str, QCheckBox] = {}
        self.source_places: dict[str, QLabel] = {}
        stores = QWidget(page)
        stores.setObjectName("sourceList")
        grid = QGridLayout(stores)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(12)
        grid.setVerticalSpacing(4)
        for row_no, (key, label) in enumerate(sources.KEYS.items()):
            box = QCheckBox(label, stores)
            box.setObjectName(f"source_{key}")
            box.setAccessibleName(f"Use models from {label}")
            box.setChecked(key not in self.prefs.disabled_sources)
            box.toggled.connect(lambda on, key=key: self._on_source_toggled(key, on))
            place = QLabel("not found", stores)
            place.setObjectName("settingsNote")
            place.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            grid.addWidget(box, row_no, 0)
            grid.addWidget(place, row_no, 1)
            self.source_boxes[key], self.source_places[key] = box, place
        grid.setColumnStretch(1, 1)
        form.addRow("Other apps", stores)

        self.default_model = QComboBox(page)
        self.default_model.setObjectName("defaultModelBox")
        self.default_model.setAccessibleName("Model at start")
        self.set_models([])
        self.default_model.activated.connect(self._on_default_model_activated)
        form.addRow("Model at start", self.default_model)

        self.context_size = self._default(_context_box(page, "contextSizeBox", "Context size"),
                                          "context_size", form)
        self.threads = self._default(_threads_box(page, "threadsBox", "Threads"), "threads",
                                     form)
        self.tuning_boxes: dict[str, QWidget] = {}
        for name, label, make in _TUNING_BOXES:
            box = make(page, f"{name}Box", label)
            self.tuning_boxes[name] = (self._default(box, name, form)
                                       if isinstance(box, QSpinBox)
                                       else self._default_choice(box, name, form))

        applies = note("Context size, threads and llama.cpp's switches apply the next time "
                       "a model loads.", page)
        reload_button = self._button("Reload model now", "reloadModelButton", page)
        reload_button.clicked.connect(self.reload_requested)
        form.addRow(applies)
        form.addRow(_left(reload_button))

        # What going back to a conversation restores instead of reading it again.
        self.saved_states = QLabel(page)
        self.saved_states.setObjectName("savedStatesLabel")
        clear_states = self._button("Clear", "clearStatesButton", page)
        clear_states.clicked.connect(self.clear_states_requested)
        row = QHBoxLayout()
        row.addWidget(self.saved_states, 1)
        row.addWidget(clear_states)
        form.addRow("Conversations left", row)
        self._states_source: Callable[[], KeptStates] = lambda: KeptStates(0, 0, 0)
        self._states_timer = QTimer(self)
        self._states_timer.setInterval(1000)  # while the dialog is open
        self._states_timer.timeout.connect(self.show_saved_states)
        self.show_saved_states()
        return page

    def _replies_tab(self) -> QWidget:
        page, form = _form_page(self)
        self.system_prompt = QPlainTextEdit(self.prefs.system_prompt, page)
        self.system_prompt.setObjectName("systemPromptBox")
        self.system_prompt.setAccessibleName("System prompt")
        self.system_prompt.setPlaceholderText("Instructions the model sees before every chat")
        self.system_prompt.setTabChangesFocus(True)
        self.system_prompt.setMaximumHeight(90)
        self.system_prompt.textChanged.connect(self._prompt_timer.start)
        form.addRow("System prompt", self.system_prompt)

        boxes: dict[str, Any] = {}
        for name, label, make in _SAMPLING_BOXES:
            box = make(page, f"{name}Box", label)
            boxes[name] = (self._default(box, name, form)
                           if isinstance(box, QSpinBox | QDoubleSpinBox)
                           else self._default_choice(box, name, form))
        self.temperature, self.top_p, self.top_k = (boxes["temperature"], boxes["top_p"],
                                                    boxes["top_k"])
        self.min_p, self.repeat_penalty = boxes["min_p"], boxes["repeat_penalty"]
        self.max_tokens = boxes["max_tokens"]
        self.thinking, self.thinking_budget = boxes["thinking"], boxes["thinking_budget"]

        self.seed = QLineEdit("" if self.prefs.seed is None else str(self.prefs.seed), page)
        self.seed.setObjectName("seedBox")
        self.seed.setAccessibleName("Seed")
        self.seed.setPlaceholderText("Random")
        self.seed.setValidator(QIntValidator(0, 2**31 - 1, self.seed))
        self.seed.textChanged.connect(self._on_seed_changed)
        form.addRow("Seed", self.seed)
        return page

    def _this_model_tab(self) -> QWidget:
        page, form = _form_page(self)
        self.model_title = QLabel(page)
        self.model_title.setObjectName("settingsNote")
        self.model_title.setWordWrap(True)
        form.addRow(self.model_title)
        boxes: dict[str, QWidget] = {}

        context = _context_box(page, "model_context_sizeBox", "Context size for this model")
        threads = _threads_box(page, "model_threadsBox", "Threads for this model")
        template = QComboBox(page)
        template.addItem("From the model file", None)
        for key, label in BUILTIN_TEMPLATES.items():
            template.addItem(label, key)
        prompt = QPlainTextEdit(page)
        prompt.setPlaceholderText("Instructions this model sees before every chat")
        prompt.setTabChangesFocus(True)
        prompt.setMaximumHeight(70)
        gpu = gpu_layers_box(page, "model_gpu_layersBox", "GPU offload for this model")
        line = gpu.lineEdit()
        if line is not None:
            line.editingFinished.connect(lambda: self._on_model_value_changed("gpu_layers"))
        for name, box, label in ((("context_size", context, "Context size"),
                                  ("threads", threads, "Threads"),
                                  ("gpu_layers", gpu, "GPU offload"),
                                  ("template_override", template, "Chat template"),
                                  ("system_prompt", prompt, "System prompt"))):
            _name(box, f"model_{name}Box", f"{label} for this model")
            boxes[name] = box
            form.addRow(label, box)
        for name, label, make in (*_TUNING_BOXES, *_SAMPLING_BOXES):
            boxes[name] = make(page, f"model_{name}Box", f"{label} for this model")
            form.addRow(label, boxes[name])
        self.model_boxes = boxes
        for name, box in boxes.items():
            if isinstance(box, QSpinBox | QDoubleSpinBox):
                box.valueChanged.connect(lambda _v, name=name: self._on_model_value_changed(name))
            elif isinstance(box, QComboBox):
                box.activated.connect(lambda _i, name=name: self._on_model_value_changed(name))
        prompt.textChanged.connect(self._on_model_prompt_edited)

        self.model_note = note("Context size, threads, llama.cpp's switches and the chat "
                               "template apply the next time this model loads.", page)
        self.use_defaults = self._button("Use defaults", "useDefaultsButton", page)
        self.use_defaults.clicked.connect(self._on_use_defaults_clicked)
        reload_button = self._button("Reload model now", "reloadThisModelButton", page)
        reload_button.clicked.connect(self.reload_requested)
        row = QHBoxLayout()
        row.addWidget(self.use_defaults)
        row.addWidget(reload_button)
        row.addStretch(1)
        form.addRow(self.model_note)
        form.addRow(row)
        self.set_model(None)
        return page

    def _appearance_tab(self) -> QWidget:
        page, form = _form_page(self)
        self.theme = QComboBox(page)
        self.theme.setObjectName("themeBox")
        self.theme.setAccessibleName("Theme")
        for value, label in zip(THEMES, ("Follow the system", "Light", "Dark"), strict=True):
            self.theme.addItem(label, value)
        self.theme.setCurrentIndex(max(0, self.theme.findData(self.prefs.theme)))
        self.theme.currentIndexChanged.connect(self._on_theme_changed)
        form.addRow("Theme", self.theme)
        return page

    def _button(self, text: str, name: str, parent: QWidget) -> QPushButton:
        button = QPushButton(text, parent)
        button.setObjectName(name)
        button.setAccessibleName(text.rstrip("…"))
        return button

    def _default_choice(self, box: QComboBox, field: str, form: QFormLayout) -> QComboBox:
        """A list for one of the general settings: shows it, and saves each choice."""
        box.setCurrentIndex(max(0, box.findData(getattr(self.prefs, field))))
        box.activated.connect(lambda _i: self._on_default_chosen(field, box))
        form.addRow(box.accessibleName(), box)
        return box

    def _on_default_chosen(self, field: str, box: QComboBox) -> None:
        self._set(field, box.currentData())
        if field == "kv_cache":  # the memory each model needs changes
            self.context_size_changed.emit()

    def _default(self, box: W, field: str, form: QFormLayout) -> W:
        """A box for one of the general settings: shows it, and saves each finished edit."""
        value = getattr(self.prefs, field)
        box.setValue(0 if value is None else value)
        box.valueChanged.connect(lambda _v: self._on_default_changed(field, box))
        form.addRow(box.accessibleName(), box)
        return box

    # Models ----------------------------------------------------------------------

    def set_states_source(self, source: Callable[[], KeptStates]) -> None:
        """Where the count and the bytes of the states kept are read (any thread)."""
        self._states_source = source
        self.show_saved_states()

    def show_saved_states(self) -> None:
        count, memory, disk = self._states_source()
        self.saved_states.setText(
            f"{count} kept ({memory / 2**20:,.0f} MB in memory, {disk / 2**20:,.0f} MB on "
            "disk): going back to them is instant" if count
            else "None kept: a conversation is kept when you leave it")

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.show_saved_states()
        self._states_timer.start()

    def hideEvent(self, event: QHideEvent) -> None:
        self._states_timer.stop()
        super().hideEvent(event)

    def set_models(self, entries: Sequence[ModelEntry]) -> None:
        """Offer these models (the usable ones) as the model to load at start."""
        box = self.default_model
        box.clear()
        box.addItem("The last model used", None)
        for entry in entries:
            if entry.usable:
                box.addItem(entry.name, str(entry.path))
        wanted = self.prefs.default_model
        index = box.findData(wanted) if wanted else 0
        if wanted and index < 0:
            box.addItem(Path(wanted).name, wanted)
            index = box.count() - 1
        box.setCurrentIndex(index)

    def set_sources(self, found: Sequence[Source]) -> None:
        """Show where each other app's store was found, or that it was not."""
        for source in found:
            place = self.source_places.get(source.key)
            if place is not None:
                where = ", ".join(_home_relative(f) for f in source.folders)
                place.setText(where or "not found")
                place.setToolTip("\n".join(str(f) for f in source.folders))

    def set_model(self, path: Path | None, name: str = "") -> None:
        """The loaded model, whose own settings the "This model" tab edits."""
        self._model_path = path
        for box in self.model_boxes.values():
            box.setEnabled(path is not None)
        self.use_defaults.setEnabled(path is not None)
        self._fill_model_fields()
        if path is None:
            self.model_title.setText("No model is loaded. Load one to give it settings of "
                                     "its own.")
        else:
            self._update_model_title(name or path.name)

    def _update_model_title(self, name: str) -> None:
        own = self._model_path is not None and self.prefs.model_overrides(self._model_path)
        self._model_name = name
        state = "has settings of its own" if own else "uses your defaults"
        self.model_title.setText(f"<b>{name}</b> {state}. Changes here apply to this "
                                 "model only.")

    def _fill_model_fields(self) -> None:
        path = self._model_path
        options = self.prefs.load_options(path)
        sampling = self.prefs.sampling(path)
        values: dict[str, object] = {
            "context_size": options.n_ctx or 0, "threads": options.n_threads or 0,
            "prompt_threads": options.prompt_threads or 0,
            "batch_size": options.batch_size or 0,
            "flash_attention": options.flash_attention, "kv_cache": options.kv_cache,
            "gpu_layers": options.gpu_layers,
            "template_override": options.template_override,
            "system_prompt": self.prefs.system_prompt_for(path),
            **{name: getattr(sampling, name) for name in MODEL_FIELDS
               if hasattr(sampling, name)},
            "thinking_budget": sampling.thinking_budget or 0}
        self._filling = True
        try:
            for name, box in self.model_boxes.items():
                value = values[name]
                if isinstance(box, QComboBox) and box.isEditable():
                    box.setCurrentText(str(value))
                elif isinstance(box, QComboBox):
                    index = box.findData(value)
                    if index < 0 and isinstance(value, str):
                        box.addItem("Custom template", value)
                        index = box.count() - 1
                    box.setCurrentIndex(max(0, index))
                elif isinstance(box, QPlainTextEdit):
                    if box.toPlainText() != value:
                        box.setPlainText(str(value))
                elif isinstance(box, QSpinBox):
                    box.setValue(int(value))  # type: ignore[call-overload]
                elif isinstance(box, QDoubleSpinBox):
                    box.setValue(float(value))  # type: ignore[arg-type]
        finally:
            self._filling = False

    def add_folder(self, folder: str) -> None:
        if folder and folder not in self.prefs.model_folders:
            self.prefs.model_folders.append(folder)
            self.folder_list.addItem(folder)
            self._save()
            self.folders_changed.emit()

    # Slots -----------------------------------------------------------------------

    def _set(self, field: str, value: object) -> None:
        if getattr(self.prefs, field) != value:
            setattr(self.prefs, field, value)
            self._save()
            self._fill_model_fields()  # a default the loaded model uses shows there too

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
        self._save()
        self.folders_changed.emit()

    def _on_default_model_activated(self, index: int) -> None:
        self._set("default_model", self.default_model.itemData(index))

    def _on_source_toggled(self, key: str, on: bool) -> None:
        disabled = [k for k in self.prefs.disabled_sources if k != key]
        self._set("disabled_sources", disabled if on else [*disabled, key])
        self.folders_changed.emit()

    def _on_model_value_changed(self, name: str) -> None:
        path = self._model_path
        if self._filling or path is None:
            return
        box = self.model_boxes[name]
        value: object
        if isinstance(box, QComboBox) and box.isEditable():  # GPU offload, typed or chosen
            value = gpu_layers_value(box)
            if value is None:
                self._fill_model_fields()  # nothing usable typed: show what is kept
                return
            box.setCurrentText(str(value))
        elif isinstance(box, QComboBox):
            value = box.currentData()
        elif isinstance(box, QPlainTextEdit):
            value = box.toPlainText()
        else:
            assert isinstance(box, QSpinBox | QDoubleSpinBox)
            value = _spin_value(name, box)
            if value is _CLAMPED:
                return
        self.prefs.set_model_value(path, name, value)
        self._save()
        self._update_model_title(self._model_name)
        if name in ("context_size", "kv_cache", "gpu_layers"):
            self.context_size_changed.emit()

    def _on_model_prompt_edited(self) -> None:
        if not self._filling:
            self._model_prompt_timer.start()

    def _on_model_prompt_timer_timeout(self) -> None:
        self._on_model_value_changed("system_prompt")

    def _on_use_defaults_clicked(self) -> None:
        if self._model_path is None:
            return
        self._model_prompt_timer.stop()
        self.prefs.clear_model(self._model_path)
        self._save()
        self.context_size_changed.emit()
        self._fill_model_fields()
        self._update_model_title(self._model_name)

    def _on_default_changed(self, field: str, box: QSpinBox | QDoubleSpinBox) -> None:
        value = _spin_value(field, box)
        if value is not _CLAMPED:
            self._set(field, value)
            if field == "context_size":
                self.context_size_changed.emit()

    def _on_prompt_timer_timeout(self) -> None:
        self._set("system_prompt", self.system_prompt.toPlainText())

    def _on_seed_changed(self, text: str) -> None:
        self._set("seed", int(text) if text.strip() else None)

    def _on_theme_changed(self, index: int) -> None:
        value = self.theme.itemData(index)
        self._set("theme", value)
        self.theme_changed.emit(value)

    def _on_finished(self) -> None:
        if self._prompt_timer.isActive():  # keep what was typed just before closing
            self._prompt_timer.stop()
            self._on_prompt_timer_timeout()
        if self._model_prompt_timer.isActive():
            self._model_prompt_timer.stop()
            self._on_model_prompt_timer_timeout()


def _new_token() -> str:
    from app.api.server import new_token  # noqa: PLC0415 - the server's modules load late

    return new_token()


def _home_relative(folder: Path) -> str:
    """~/.ollama/models rather than /home/someone/.ollama/models."""
    try:
        return "~/" + folder.relative_to(Path.home()).as_posix()
    except ValueError:
        return str(folder)


def _left(widget: QWidget) -> QHBoxLayout:
    """A row holding ``widget`` at its natural width, on the left."""
    row = QHBoxLayout()
    row.addWidget(widget)
    row.addStretch(1)
    return row


def _form_page(parent: QWidget) -> tuple[QWidget, QFormLayout]:
    """A tab whose rows stay together at the top, however tall the dialog."""
    page = QWidget(parent)
    column = QVBoxLayout(page)
    form = QFormLayout()
    column.addLayout(form)
    column.addStretch(1)
    return page, form
