"""The Get models window against a Hub on loopback: searched, each file's fit shown
before downloading, a download paused and resumed with its progress on screen, then
the model in the picker, loaded and answering."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt

from app.core.hub import download
from app.core.hub import downloads as queue
from app.ui.get_models import BEST
from tests.loopback_hub import LoopbackHub
from tests.ui.conftest import WindowFactory, greedy_settings, send, wait_for_model_loaded

REPO = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
NAME = "SmolLM2-135M-Instruct-Q4_1.gguf"


def test_a_model_found_judged_downloaded_paused_resumed_and_used(
        open_window: WindowFactory, hub_server: LoopbackHub, smollm2_path: Path,
        gemma_path: Path, qtbot: Any) -> None:
    hub_server.add(REPO, {NAME: smollm2_path, "SmolLM2-135M-F16-stand-in.gguf": gemma_path},
                   downloads=9000)
    hub_server.add("google/gemma-3-270m-GGUF", {"gemma-3-270m-Q4_K_M.gguf": gemma_path},
                   downloads=50)
    greedy_settings(hub_endpoint=hub_server.endpoint)
    window = open_window()
    qtbot.mouseClick(window.top_bar.get_models_button, Qt.MouseButton.LeftButton)
    dialog = window.get_models
    assert dialog is not None and dialog.isVisible()
    assert hub_server.api_paths == [], "opening the page asks the Hub nothing"

    qtbot.keyClicks(dialog.search_box, "smollm2")
    qtbot.keyClick(dialog.search_box, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: dialog.results.count() == 1, timeout=30_000)
    assert dialog.results.item(0).text().startswith(f"{REPO}\n9,000 downloads")
    dialog.results.setCurrentRow(0)
    qtbot.waitUntil(lambda: len(dialog.judged) == 2, timeout=60_000)
    rows = {item.text(1): [item.text(c) for c in range(5)]
            for item in (dialog.file_tree.topLevelItem(r) for r in range(2)) if item}
    # The quantized file is marked over the full-precision one; both fit this machine.
    assert rows["Q4_1"][:4] == [NAME, "Q4_1", "98 MB", f"fits in RAM  {BEST}"]
    assert rows["F16"][:4] == ["SmolLM2-135M-F16-stand-in.gguf", "F16", "253 MB", "fits in RAM"]
    assert rows["Q4_1"][4].endswith(" MB RAM")
    dialog.file_tree.setCurrentItem(dialog.file_tree.topLevelItem(0))
    assert "135M parameters" in dialog.facts.text() and "chat template" in dialog.facts.text()
    assert "license: apache-2.0" in dialog.repo_title.text()

    go = threading.Event()
    hub_server.stall_at[NAME] = (40_000_000, go)
    qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(dialog.rows) == 1)
    row = next(iter(dialog.rows.values()))
    job = row.job
    qtbot.waitUntil(lambda: job.done >= 40_000_000 and row.bar.value() >= 390, timeout=60_000)
    assert " of 98 MB" in row.status.text() and row.pause_button.text() == "Pause"
    qtbot.mouseClick(row.pause_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: job.state == queue.PAUSED and "Paused" in row.status.text())
    assert row.pause_button.text() == "Resume"
    kept = download.part_of(job.path).stat().st_size
    assert kept >= 40_000_000
    go.set()
    qtbot.mouseClick(row.pause_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: job.state == queue.DONE, timeout=120_000)
    assert hub_server.sent[-1].range == f"bytes={kept}-", "resumed, not started again"
    assert job.sha256 == [hub_server.sha(smollm2_path)]
    qtbot.waitUntil(lambda: row.use_button.isVisible() and "sha256 checked" in row.status.text())
    qtbot.waitUntil(lambda: window.picker.model().row_of(job.path) >= 0, timeout=30_000)

    qtbot.mouseClick(row.use_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.controller.core.model is not None
                    and window.controller.core.model.path == job.path, timeout=120_000)
    wait_for_model_loaded(qtbot, window)  # the window, too, has taken the load's end
    reply, _ = send(qtbot, window, "Say hello.")
    assert reply.strip()


def test_the_empty_chat_leads_to_get_models_and_offline_asks_nothing(
        open_window: WindowFactory, hub_server: LoopbackHub, qtbot: Any) -> None:
    greedy_settings(hub_endpoint=hub_server.endpoint, offline=True)
    window = open_window()
    link = window.transcript.get_models_link
    qtbot.waitUntil(link.isVisible)
    qtbot.mouseClick(link, Qt.MouseButton.LeftButton)
    dialog = window.get_models
    assert dialog is not None and dialog.isVisible()
    qtbot.keyClicks(dialog.search_box, "qwen")
    qtbot.mouseClick(dialog.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Fireside is offline" in dialog.message.text())
    assert hub_server.api_paths == [] and hub_server.sent == []
