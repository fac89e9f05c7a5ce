"""The picker tells how much memory each model will take at the context it loads with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QComboBox, QWidget

from app.core import settings
from app.core.llama import memory
from app.core.models import catalog
from app.core.models.gguf import read_header
from app.ui.model_picker import DETAILS_ROLE, ModelListModel
from tests.ui.conftest import WindowFactory


def test_each_model_shows_its_memory_estimate(smollm2_path: Path, gemma_path: Path) -> None:
    entries = catalog.scan([(smollm2_path.parent, catalog.BUNDLED)])
    model = ModelListModel()
    model.set_entries(entries)
    for path in (smollm2_path, gemma_path):
        shown = model.index(model.row_of(path)).data(DETAILS_ROLE)
        expected = memory.estimate(read_header(path)).total  # at the engine's default context
        assert f"≈ {memory.format_bytes(expected)} in memory" in shown


def test_the_estimate_follows_the_context_the_settings_choose(
        open_window: WindowFactory, qtbot: Any, smollm2_path: Path) -> None:
    window = open_window()
    picker = window.picker.list_model

    def shown() -> str:
        return str(picker.index(picker.row_of(smollm2_path)).data(DETAILS_ROLE))

    at_default = shown()
    window.show_settings()  # the loaded model's own context, as a user sets it
    dialog = window.findChild(QWidget, "settingsDialog")
    dialog.findChild(QWidget, "model_context_sizeBox").setValue(512)
    small = memory.estimate(read_header(smollm2_path), 512).total
    assert f"≈ {memory.format_bytes(small)} in memory" in shown()
    assert shown() != at_default


def test_a_quantized_kv_cache_chosen_in_settings_shrinks_the_estimate_and_loads(
        open_window: WindowFactory, qtbot: Any, smollm2_path: Path) -> None:
    window = open_window()
    picker = window.picker.list_model
    window.show_settings()
    dialog = window.findChild(QWidget, "settingsDialog")
    box = dialog.findChild(QComboBox, "kv_cacheBox")  # the defaults, for every model
    box.setCurrentIndex(box.findData("q8_0"))
    box.activated.emit(box.currentIndex())
    header, n_ctx = read_header(smollm2_path), settings.load().settings.context_size
    q8 = memory.estimate(header, n_ctx, kv_cache="q8_0")
    assert q8.kv_cache < 0.6 * memory.estimate(header, n_ctx).kv_cache
    assert f"≈ {memory.format_bytes(q8.total)} in memory" in \
        picker.index(picker.row_of(smollm2_path)).data(DETAILS_ROLE)
    qtbot.waitUntil(lambda: settings.load().settings.kv_cache == "q8_0")  # saved
    own = dialog.findChild(QComboBox, "model_flash_attentionBox")  # this model only
    own.setCurrentIndex(own.findData("on"))
    own.activated.emit(own.currentIndex())
    qtbot.waitUntil(lambda: settings.load().settings.load_options(smollm2_path)
                    .flash_attention == "on")
    dialog.findChild(QWidget, "reloadModelButton").click()
    qtbot.waitUntil(lambda: window.controller.core.model is not None
                    and window.controller.core.model.options.kv_cache == "q8_0",
                    timeout=30_000)
    assert window.controller.core.model.options.flash_attention == "on"
