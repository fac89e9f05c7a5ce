"""Settings → This model: settings of the loaded model's own, over the defaults.

Each box shows what the model uses, its own value or the default; changing one gives the
model a value of its own, and "Use defaults" forgets them all. Load options apply the
next time the model loads, which the page says, and it offers to reload it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QLabel,
    QPlainTextEdit,
    QSpinBox,
    QWidget,
)

from app.core.models.drafts import draft_candidates
from app.core.reply.templates import BUILTIN_TEMPLATES
from app.core.settings import MODEL_FIELDS, Settings
from app.ui.settings.boxes import (
    CLAMPED,
    SAMPLING_BOXES,
    TUNING_BOXES,
    context_box,
    named,
    spin_value,
    threads_box,
)
from app.ui.settings.form_page import FormPage
from app.ui.settings.form_parts import button_row, note
from app.ui.settings.hardware_page import gpu_layers_box, gpu_layers_value

if TYPE_CHECKING:
    from app.core.models.catalog import ModelEntry

SAVE_DELAY_MS = 400  # typing in the system prompt saves once the user pauses
# Change the memory a model needs.
SIZE_FIELDS = ("context_size", "kv_cache", "gpu_layers", "draft_model")
NO_DRAFT = "None (prompt lookup only)"
_UNUSABLE = object()  # nothing usable typed: the box shows the value kept again


class ThisModelPage(FormPage):
    context_size_changed = Signal()
    """The model's context size, KV cache or GPU offload changed: its size changes too."""
    reload_requested = Signal()
    """The user asked to reload the model with its new load options."""

    def __init__(self, prefs: Settings, save: Callable[[], None],
                 parent: QWidget | None = None) -> None:
        super().__init__("thisModelPage", parent)
        self.prefs = prefs
        self._save = save
        self._model_path: Path | None = None
        self._model_name = ""
        self._entries: Sequence[ModelEntry] = ()  # the models found, some of which may draft
        self._filling = False  # the boxes are being set from the settings, not by the user
        self._prompt_timer = QTimer(self)
        self._prompt_timer.setSingleShot(True)
        self._prompt_timer.setInterval(SAVE_DELAY_MS)
        self._prompt_timer.timeout.connect(self._save_prompt)
        self.model_title = QLabel(self)
        self.model_title.setObjectName("settingsNote")
        self.model_title.setWordWrap(True)
        self.form.addRow(self.model_title)
        self.model_boxes: dict[str, QWidget] = {}
        self._add_own_rows()
        for name, label, make in (*TUNING_BOXES, *SAMPLING_BOXES):
            self._add_row(name, label, make(self, "", ""))
        self._connect_boxes()
        self._add_buttons()
        self.set_model(None)

    def _add_own_rows(self) -> None:
        """The rows only a model has here: the defaults of these are on other pages."""
        self._add_row("context_size", "Context size", context_box(self, "", ""))
        self._add_row("threads", "Threads", threads_box(self, "", ""))
        gpu = gpu_layers_box(self, "", "")
        line = gpu.lineEdit()
        if line is not None:
            line.editingFinished.connect(lambda: self._on_value_changed("gpu_layers"))
        self._add_row("gpu_layers", "GPU offload", gpu)
        self.draft_box = QComboBox(self)
        self.draft_box.setToolTip("A small model of the same vocabulary that drafts tokens "
                                  "for this one to check; it keeps only those it would have "
                                  "written itself. Only the models that can draft for it "
                                  "are listed.")
        self._add_row("draft_model", "Draft model", self.draft_box)
        self._add_row("template_override", "Chat template", _template_box(self))
        prompt = QPlainTextEdit(self)
        prompt.setPlaceholderText("Instructions this model sees before every chat")
        prompt.setTabChangesFocus(True)
        prompt.setMaximumHeight(70)
        prompt.textChanged.connect(self._on_prompt_edited)
        self._add_row("system_prompt", "System prompt", prompt)

    def _add_row(self, name: str, label: str, box: QWidget) -> None:
        named(box, f"model_{name}Box", f"{label} for this model")
        self.model_boxes[name] = box
        self.form.addRow(label, box)

    def _connect_boxes(self) -> None:
        for name, box in self.model_boxes.items():
            if isinstance(box, QSpinBox | QDoubleSpinBox):
                box.valueChanged.connect(lambda _v, name=name: self._on_value_changed(name))
            elif isinstance(box, QComboBox):
                box.activated.connect(lambda _i, name=name: self._on_value_changed(name))
            elif isinstance(box, QCheckBox):
                box.toggled.connect(lambda _on, name=name: self._on_value_changed(name))

    def _add_buttons(self) -> None:
        self.model_note = note("Context size, threads, llama.cpp's switches, the draft "
                               "model and the chat template apply the next time this model "
                               "loads.", self)
        self.use_defaults = self.button("Use defaults", "useDefaultsButton")
        self.use_defaults.clicked.connect(self._on_use_defaults_clicked)
        reload_button = self.button("Reload model now", "reloadThisModelButton")
        reload_button.clicked.connect(self.reload_requested)
        self.form.addRow(self.model_note)
        self.form.addRow(button_row(self.use_defaults, reload_button))

    def set_model(self, path: Path | None, name: str = "") -> None:
        """The loaded model, whose own settings the page edits."""
        self._model_path = path
        for box in self.model_boxes.values():
            box.setEnabled(path is not None)
        self.use_defaults.setEnabled(path is not None)
        self._offer_drafts()
        self.refresh()
        if path is None:
            self.model_title.setText("No model is loaded. Load one to give it settings of "
                                     "its own.")
        else:
            self._show_title(name or path.name)

    def set_models(self, entries: Sequence[ModelEntry]) -> None:
        """The models found: those that can draft for the loaded model are offered."""
        self._entries = entries
        self._offer_drafts()
        self.refresh()

    def _offer_drafts(self) -> None:
        """Fill the draft model's list: none, the models that pass the header check for
        this one (smaller, same vocabulary), and the one it has if it is not among them."""
        box, path = self.draft_box, self._model_path
        box.clear()
        box.addItem(NO_DRAFT, None)
        if path is None:
            return
        for entry in draft_candidates(path, self._entries):
            box.addItem(entry.name, str(entry.path))
        kept = self.prefs.load_options(path).draft_model
        if kept and box.findData(kept) < 0:  # gone, or set in the settings file by hand
            box.addItem(Path(kept).name, kept)

    def refresh(self) -> None:
        """Show the values the model uses now: a default it uses may have changed."""
        values = self._values()
        self._filling = True
        try:
            for name, box in self.model_boxes.items():
                _show(box, values[name])
        finally:
            self._filling = False

    def flush(self) -> None:
        """Save the system prompt now if typing in it has not been saved yet."""
        if self._prompt_timer.isActive():
            self._prompt_timer.stop()
            self._save_prompt()

    def _values(self) -> dict[str, object]:
        path = self._model_path
        options = self.prefs.load_options(path)
        sampling = self.prefs.sampling(path)
        return {
            "context_size": options.n_ctx or 0, "threads": options.n_threads or 0,
            "prompt_threads": options.prompt_threads or 0,
            "batch_size": options.batch_size or 0,
            "flash_attention": options.flash_attention, "kv_cache": options.kv_cache,
            "gpu_layers": options.gpu_layers, "draft_model": options.draft_model,
            "template_override": options.template_override,
            "system_prompt": self.prefs.system_prompt_for(path),
            **{name: getattr(sampling, name) for name in MODEL_FIELDS
               if hasattr(sampling, name)},
            "thinking_budget": sampling.thinking_budget or 0}

    def _show_title(self, name: str) -> None:
        own = self._model_path is not None and self.prefs.model_overrides(self._model_path)
        self._model_name = name
        state = "has settings of its own" if own else "uses your defaults"
        self.model_title.setText(f"<b>{name}</b> {state}. Changes here apply to this "
                                 "model only.")

    def _on_value_changed(self, name: str) -> None:
        path = self._model_path
        if self._filling or path is None:
            return
        value = self._read(name)
        if value is CLAMPED:  # the box reports the value it was put right to
            return
        if value is _UNUSABLE:
            self.refresh()
            return
        self.prefs.set_model_value(path, name, value)
        self._save()
        self._show_title(self._model_name)
        if name in SIZE_FIELDS:
            self.context_size_changed.emit()

    def _read(self, name: str) -> object:
        """What the box for ``name`` holds, as the setting keeps it."""
        box = self.model_boxes[name]
        if isinstance(box, QComboBox) and box.isEditable():  # GPU offload, typed or chosen
            value = gpu_layers_value(box)
            if value is None:
                return _UNUSABLE
            box.setCurrentText(value)
            return value
        if isinstance(box, QComboBox):
            return box.currentData()
        if isinstance(box, QPlainTextEdit):
            return box.toPlainText()
        if isinstance(box, QCheckBox):
            return box.isChecked()
        assert isinstance(box, QSpinBox | QDoubleSpinBox)
        return spin_value(name, box)

    def _on_prompt_edited(self) -> None:
        if not self._filling:
            self._prompt_timer.start()

    def _save_prompt(self) -> None:
        self._on_value_changed("system_prompt")

    def _on_use_defaults_clicked(self) -> None:
        if self._model_path is None:
            return
        self._prompt_timer.stop()
        self.prefs.clear_model(self._model_path)
        self._save()
        self.context_size_changed.emit()
        self.refresh()
        self._show_title(self._model_name)


def _template_box(parent: QWidget) -> QComboBox:
    box = QComboBox(parent)
    box.addItem("From the model file", None)
    for key, label in BUILTIN_TEMPLATES.items():
        box.addItem(label, key)
    return box


def _show(box: QWidget, value: object) -> None:
    """Put ``value`` in ``box`` without it counting as the user's edit."""
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
    elif isinstance(box, QCheckBox):
        box.setChecked(bool(value))
    elif isinstance(box, QSpinBox):
        box.setValue(int(value))  # type: ignore[call-overload]
    elif isinstance(box, QDoubleSpinBox):
        box.setValue(float(value))  # type: ignore[arg-type]
