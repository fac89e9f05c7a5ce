"""Settings → Hardware: the devices llama.cpp sees, and how much of a model goes to a GPU.

The list is what llama.cpp itself reports (app/core/llama/devices.py), read again each time
the page is shown, since free memory changes with what else runs.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QRegularExpression, Signal
from PySide6.QtGui import QRegularExpressionValidator, QShowEvent
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QListWidget,
    QListWidgetItem,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.llama.devices import Hardware
from app.core.llama.memory import format_bytes
from app.core.options import GPU_LAYERS, checked_gpu_layers
from app.core.settings import Settings
from app.ui.settings.form_parts import note

KIND_NAMES = {"cpu": "CPU", "gpu": "GPU", "igpu": "integrated GPU", "accel": "accelerator"}


def gpu_layers_box(parent: QWidget, name: str, label: str) -> QComboBox:
    """auto / all / off, or a number of layers typed in."""
    box = QComboBox(parent)
    box.setObjectName(name)
    box.setAccessibleName(label)
    box.setEditable(True)
    box.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
    box.addItems(list(GPU_LAYERS))
    box.setValidator(QRegularExpressionValidator(QRegularExpression(
        "(?i)auto|all|off|[0-9]{1,4}"), box))
    box.setToolTip("auto: as many layers as fit in the GPU's free memory · all · off: "
                   "the CPU only · or a number of layers")
    return box


def gpu_layers_value(box: QComboBox) -> str | None:
    """The choice in ``box``, or None while it holds none (an empty edit)."""
    return checked_gpu_layers(box.currentText())


class HardwarePage(QWidget):
    placement_changed = Signal()
    """The GPU offload or its margin changed: where each model would go changes."""

    def __init__(self, prefs: Settings, save: Callable[[], None],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.prefs = prefs
        self._save = save
        self._survey: Callable[[], Hardware] | None = None
        outer = QVBoxLayout(self)
        form = QFormLayout()
        outer.addLayout(form)
        outer.addStretch(1)  # the rows stay together at the top
        form.addRow(note("Fireside runs models with llama.cpp on these devices. Layers on a "
                         "GPU run several times faster than on the CPU.", self))
        self.devices = QListWidget(self)
        self.devices.setObjectName("deviceList")
        self.devices.setAccessibleName("Devices")
        self.devices.setMaximumHeight(120)
        form.addRow("Devices", self.devices)
        self.why_cpu = note("", self)
        self.why_cpu.setObjectName("whyCpuNote")
        form.addRow(self.why_cpu)

        self.gpu_layers = gpu_layers_box(self, "gpuLayersBox", "GPU offload")
        self.gpu_layers.setCurrentText(prefs.gpu_layers)
        self.gpu_layers.activated.connect(self._on_gpu_layers_edited)
        line = self.gpu_layers.lineEdit()
        if line is not None:
            line.editingFinished.connect(self._on_gpu_layers_edited)
        form.addRow("GPU offload", self.gpu_layers)
        self.margin = QSpinBox(self)
        self.margin.setObjectName("gpuMarginBox")
        self.margin.setAccessibleName("GPU memory left free")
        self.margin.setRange(0, 1 << 20)
        self.margin.setSingleStep(256)
        self.margin.setSuffix(" MiB")
        self.margin.setSpecialValueText("Automatic (the larger of 512 MiB and 8 %)")
        self.margin.setValue(prefs.gpu_margin_mib or 0)
        self.margin.valueChanged.connect(self._on_margin_changed)
        form.addRow("GPU memory left free", self.margin)
        form.addRow(note("Each model can have its own GPU offload (This model). Changes "
                         "apply the next time a model loads.", self))

    def set_survey(self, survey: Callable[[], Hardware]) -> None:
        """Where the devices are read (the core's), each time the page is shown."""
        self._survey = survey
        self.refresh()

    def refresh(self) -> None:
        if self._survey is None:
            return
        found = self._survey()
        self.devices.clear()
        for device in found.devices:
            kind = KIND_NAMES.get(device.kind, device.kind)
            what = kind if device.backend == kind else f"{device.backend} {kind}"
            item = QListWidgetItem(
                f"{device.description or device.name} · {what} · "
                f"{format_bytes(device.free)} free of {format_bytes(device.total)}")
            item.setToolTip(f"llama.cpp's name for it: {device.name}")
            self.devices.addItem(item)
        self.why_cpu.setText(f"Models run on the CPU: {found.unavailable}."
                             if found.unavailable else "")
        self.why_cpu.setVisible(bool(found.unavailable))
        for box in (self.gpu_layers, self.margin):
            box.setEnabled(found.unavailable is None)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.refresh()

    def _set(self, field: str, value: object) -> None:
        if getattr(self.prefs, field) != value:
            setattr(self.prefs, field, value)
            self._save()
            self.placement_changed.emit()

    def _on_gpu_layers_edited(self) -> None:
        value = gpu_layers_value(self.gpu_layers)
        if value is None:  # nothing usable typed: show what is kept
            self.gpu_layers.setCurrentText(self.prefs.gpu_layers)
            return
        self.gpu_layers.setCurrentText(value)
        self._set("gpu_layers", value)

    def _on_margin_changed(self, value: int) -> None:
        self._set("gpu_margin_mib", value or None)
