"""The window's model library: other apps' models appear and leave by themselves, each
source can be switched off, and a model's own settings apply when it loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QCheckBox, QWidget

from app.core import settings
from app.ui.model_picker import SOURCE_ROLE, ModelPicker
from tests.gguf_files import write_gguf
from tests.stores import link, ollama_model, tree
from tests.ui.conftest import LOAD_TIMEOUT_MS, WindowFactory, greedy_settings, send

LIVE_MS = 30_000  # within 2 s on a quiet machine; generous for a busy one


def listed(picker: ModelPicker) -> dict[str, str]:
    """Each model in the picker with where it came from, as the user reads them."""
    model = picker.list_model
    return {model.index(row).data(): model.index(row).data(SOURCE_ROLE)
            for row in range(model.rowCount())}


def test_models_added_and_removed_in_other_apps_come_and_go(
        open_window: WindowFactory, qtbot: Any, gemma_path: Path) -> None:
    home = Path.home()
    window = open_window()
    assert listed(window.picker)["SmolLM2-135M-Instruct"] == "Bundled"
    lmstudio = link(gemma_path, home / ".lmstudio/models/google/gemma/gemma-3-270m.gguf")
    qtbot.waitUntil(lambda: listed(window.picker).get("Gemma 3 270M") == "Bundled",
                    timeout=LIVE_MS)  # the same file as a bundled one: listed once
    lmstudio.unlink()
    manifest = ollama_model(home / ".ollama/models", "qwen-like:0.1b",
                            window.controller.core.model.path)
    # The bundled file has an Ollama name now: listed once, under that name.
    qtbot.waitUntil(lambda: listed(window.picker).get("qwen-like:0.1b") == "Bundled"
                    and "SmolLM2-135M-Instruct" not in listed(window.picker), timeout=LIVE_MS)
    manifest.unlink()
    qtbot.waitUntil(lambda: "SmolLM2-135M-Instruct" in listed(window.picker), timeout=LIVE_MS)


def test_a_model_only_another_app_has_is_listed_from_there_and_can_go_while_loaded(
        open_window: WindowFactory, qtbot: Any, smollm2_path: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIRESIDE_BUNDLED_DIR", str(tmp_path / "no-bundled-models"))
    home = Path.home()
    blob_store = home / ".ollama/models"
    ollama_model(blob_store, "smollm2:135m", smollm2_path)
    before = tree(blob_store)
    window = open_window()
    assert listed(window.picker) == {"smollm2:135m": "Ollama"}
    assert window.controller.core.model is not None  # the only model: loaded from Ollama's store
    loaded = window.controller.core.model.path
    assert loaded.parent == blob_store / "blobs"

    link(smollm2_path, home / "jan/models/smol/model.gguf")  # the same file, once more
    lmstudio = link(smollm2_path.with_name("gemma-3-270m-q4_k_m.gguf"),
                    home / ".lmstudio/models/g/g/gemma.gguf")
    qtbot.waitUntil(lambda: listed(window.picker) == {"smollm2:135m": "Ollama",
                                                      "Gemma 3 270M": "LM Studio"},
                    timeout=LIVE_MS)
    assert tree(blob_store) == before  # read in place, nothing written

    # The loaded model's file goes: the picker drops it, the model keeps answering.
    for manifest in (blob_store / "manifests").rglob("135m"):
        manifest.unlink()
    (home / "jan/models/smol/model.gguf").unlink()
    lmstudio.unlink()
    qtbot.waitUntil(lambda: listed(window.picker) == {}, timeout=LIVE_MS)
    reply, _ = send(qtbot, window, "What is the capital of France?")
    assert reply.strip()


def test_switching_a_source_off_in_settings_hides_its_models(
        open_window: WindowFactory, qtbot: Any, tmp_path: Path) -> None:
    tiny = write_gguf(tmp_path / "tiny.gguf", metadata={"general.name": "Tiny"})
    ollama_model(Path.home() / ".ollama/models", "tiny:1m", tiny)
    window = open_window()
    assert listed(window.picker)["tiny:1m"] == "Ollama"
    window.show_settings()
    dialog = window.findChild(QWidget, "settingsDialog")
    assert dialog.source_places["ollama"].text() == "~/.ollama/models"
    assert dialog.source_places["lmstudio"].text() == "not found"
    assert dialog.source_boxes["lmstudio"].isChecked()
    dialog.findChild(QCheckBox, "source_ollama").setChecked(False)
    qtbot.waitUntil(lambda: settings.load().settings.disabled_sources == ["ollama"])
    qtbot.waitUntil(lambda: "tiny:1m" not in listed(window.picker), timeout=LIVE_MS)
    dialog.findChild(QCheckBox, "source_ollama").setChecked(True)
    qtbot.waitUntil(lambda: "tiny:1m" in listed(window.picker), timeout=LIVE_MS)


def test_a_models_own_settings_apply_when_it_loads(
        open_window: WindowFactory, qtbot: Any, smollm2_path: Path) -> None:
    prefs = greedy_settings(context_size=2048)
    prefs.set_model_value(smollm2_path, "context_size", 1024)
    prefs.set_model_value(smollm2_path, "system_prompt", "You are terse.")
    settings.save(prefs)
    window = open_window()
    assert window.controller.core.model.n_ctx == 1024
    window.show_settings()
    dialog = window.findChild(QWidget, "settingsDialog")
    assert dialog.findChild(QWidget, "model_context_sizeBox").value() == 1024
    assert dialog.findChild(QWidget, "model_system_promptBox").toPlainText() == "You are terse."
    assert "has settings of its own" in dialog.model_title.text()
    dialog.findChild(QWidget, "model_temperatureBox").setValue(0.25)
    qtbot.waitUntil(lambda: settings.load().settings.sampling(smollm2_path).temperature == 0.25)
    assert settings.load().settings.sampling().temperature == 0.0  # the default stays

    dialog.findChild(QWidget, "useDefaultsButton").click()
    qtbot.waitUntil(lambda: settings.load().settings.model_settings == {})
    assert dialog.findChild(QWidget, "model_context_sizeBox").value() == 2048
    assert "uses your defaults" in dialog.model_title.text()
    dialog.findChild(QWidget, "reloadThisModelButton").click()
    qtbot.waitUntil(lambda: window.controller.core.model is not None
                    and window.controller.core.model.n_ctx == 2048, timeout=LOAD_TIMEOUT_MS)
