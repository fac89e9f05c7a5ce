"""The window's GPU offload: Settings → Hardware lists what llama.cpp sees and takes the
default offload and its margin, each model can have its own, the picker says where a
model's layers would go, and the status line says where the loaded model's are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QComboBox, QLabel, QListWidget, QSpinBox, QWidget

from app.core import settings
from app.core.llama import devices
from app.core.llama.devices import Device
from app.ui.model_picker import DETAILS_ROLE
from app.ui.window import MainWindow
from tests.ui.conftest import WindowFactory
from tests.ui.settings_pages import open_page

GIB = 1 << 30
CARD = Device("CUDA0", "Test card", "CUDA", "gpu", 20 * GIB, 24 * GIB)


def hardware_page(window: MainWindow) -> QWidget:
    window.show_settings()
    dialog = window.findChild(QWidget, "settingsDialog")
    page = dialog.hardware_page
    open_page(dialog, page)  # shown: it reads the devices again
    return page


def picker_line(window: MainWindow, path: Path) -> str:
    picker = window.picker.list_model
    return str(picker.index(picker.row_of(path)).data(DETAILS_ROLE))


def commit(box: QComboBox, text: str) -> None:
    """Type into an editable list and press Enter, as a user does."""
    box.setCurrentText(text)
    line = box.lineEdit()
    assert line is not None
    line.editingFinished.emit()


def test_without_a_gpu_the_page_lists_the_cpu_and_says_why_models_stay_there(
        open_window: WindowFactory, qtbot: Any, smollm2_path: Path) -> None:
    """A CPU build, or a GPU build on a machine without the GPU (or its driver)."""
    window = open_window()
    found = devices.survey()
    if found.unavailable is None:
        pytest.skip("llama.cpp has a GPU here: tests/gpu")
    page = hardware_page(window)
    listed = page.findChild(QListWidget, "deviceList")
    texts = [listed.item(i).text() for i in range(listed.count())]
    cpu = next(d for d in found.devices if d.kind == "cpu")
    assert any(t.startswith(f"{cpu.description} · CPU · ") and "free of" in t for t in texts)
    why = page.findChild(QLabel, "whyCpuNote")
    assert why.isVisible() and found.unavailable in why.text()
    assert not page.findChild(QComboBox, "gpuLayersBox").isEnabled()
    assert not page.findChild(QSpinBox, "gpuMarginBox").isEnabled()
    status = window.findChild(QLabel, "placementLabel")
    assert status.text() == "CPU" and found.unavailable in status.toolTip()
    assert "≈ " in picker_line(window, smollm2_path)  # RAM only, as before


@pytest.fixture
def one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 24 GB card beside the CPU, as ggml would list it (this machine has none)."""
    cpu = next(d for d in devices.list_devices() if d.kind == "cpu")
    monkeypatch.setattr(devices, "list_devices", lambda: [cpu, CARD])
    monkeypatch.setattr(devices, "gpu_support", lambda found=None: None)


@pytest.mark.usefixtures("one_gpu")
def test_with_a_gpu_the_settings_choose_how_many_layers_go_and_the_picker_follows(
        open_window: WindowFactory, qtbot: Any, smollm2_path: Path, gemma_path: Path) -> None:
    window = open_window()
    assert picker_line(window, smollm2_path).endswith(" RAM")
    assert "all 31 layers on GPU · " in picker_line(window, smollm2_path)
    assert "all 19 layers on GPU · " in picker_line(window, gemma_path)
    page = hardware_page(window)
    listed = page.findChild(QListWidget, "deviceList")
    assert "Test card · CUDA GPU · 21.5 GB free of 25.8 GB" in [
        listed.item(i).text() for i in range(listed.count())]
    assert not page.findChild(QLabel, "whyCpuNote").isVisible()
    default = page.findChild(QComboBox, "gpuLayersBox")
    assert default.isEnabled() and default.currentText() == "auto"
    commit(default, "12")
    qtbot.waitUntil(lambda: settings.load().settings.gpu_layers == "12")
    assert "12/31 layers on GPU · " in picker_line(window, smollm2_path)
    assert "12/19 layers on GPU · " in picker_line(window, gemma_path)
    commit(default, "most")  # not a choice: the kept one comes back
    assert default.currentText() == "12" and settings.load().settings.gpu_layers == "12"
    default.setCurrentIndex(default.findText("off"))
    default.activated.emit(default.currentIndex())
    qtbot.waitUntil(lambda: settings.load().settings.gpu_layers == "off")
    assert "≈ " in picker_line(window, smollm2_path)  # on the CPU: RAM only
    # The loaded model's own choice outranks the default.
    dialog = window.findChild(QWidget, "settingsDialog")
    own = dialog.findChild(QComboBox, "model_gpu_layersBox")
    assert own.currentText() == "off"
    commit(own, "all")
    qtbot.waitUntil(lambda: settings.load().settings.load_options(smollm2_path).gpu_layers
                    == "all")
    assert "all 31 layers on GPU · " in picker_line(window, smollm2_path)
    assert "≈ " in picker_line(window, gemma_path)  # still off for the others
    margin = page.findChild(QSpinBox, "gpuMarginBox")
    assert margin.isEnabled() and margin.text().startswith("Automatic")
    margin.setValue(1024)
    qtbot.waitUntil(lambda: settings.load().settings.gpu_margin_mib == 1024)
    margin.setValue(0)
    qtbot.waitUntil(lambda: settings.load().settings.gpu_margin_mib is None)


@pytest.mark.usefixtures("one_gpu")
def test_the_status_line_says_where_the_loaded_models_layers_are(
        open_window: WindowFactory, qtbot: Any, smollm2_path: Path) -> None:
    # llama.cpp on this machine has no GPU to put them on, and loads on the CPU as it
    # would with the layers asked for; the window shows the plan it loaded with.
    prefs = settings.load().settings
    prefs.gpu_layers = "7"
    settings.save(prefs)
    window = open_window()
    qtbot.waitUntil(lambda: window.findChild(QLabel, "placementLabel").text() == "GPU 7/31")
    label = window.findChild(QLabel, "placementLabel")
    assert label.isVisible() and label.toolTip().startswith("7/31 layers on GPU · ")
