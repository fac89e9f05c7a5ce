"""Speculative decoding in the window: the draft model chosen on "This model" among the
models that can draft for it, the switch on Replies and on "This model", and a reply's
details saying how many drafted tokens the model kept.

Replies come from the scripted engine, which reports drafting as a speculating engine
does; the words say nothing (the real engine's replies are tested in tests/cli and
tests/api)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QPushButton

from app.core import settings
from app.core.backend import LoadedModel, PromptBuilder, ReplyHandle
from app.core.llama import engine
from app.core.models import catalog
from app.core.models.bundled import bundled_dir
from app.core.options import LoadOptions, Sampling
from app.core.reply.replies import Reply
from app.ui.settings.dialog import SettingsDialog
from app.ui.settings.this_model_page import NO_DRAFT
from app.ui.window import MainWindow
from tests.core.test_drafts import small_model
from tests.scripted_engine import ScriptedEngine
from tests.ui.conftest import WindowFactory, greedy_settings, send
from tests.ui.settings_pages import open_page

DRAFTED, KEPT = 60, 45  # what the engine below reports for a reply with speculation on


class DraftingEngine(ScriptedEngine):
    """The scripted engine with the draft model asked for loaded beside the model (by
    name), and drafting figures in each reply that speculates."""

    def __init__(self) -> None:
        super().__init__()
        self.speculation: list[bool] = []  # each reply's switch, in order

    def _switch(self, path: Path, options: LoadOptions,
                on_progress: Callable[[float], None] | None, cancel: threading.Event
                ) -> LoadedModel:
        loaded = super()._switch(path, options, on_progress, cancel)
        draft = Path(options.draft_model).stem if options.draft_model else None
        self._loaded = dataclasses.replace(loaded, draft=draft)
        return self._loaded

    def _generate(self, handle: ReplyHandle, build: PromptBuilder, sampling: Sampling) -> Reply:
        reply = super()._generate(handle, build, sampling)
        self.speculation.append(sampling.speculation)
        if not sampling.speculation:
            return reply
        return dataclasses.replace(reply, stats=dataclasses.replace(
            reply.stats, draft_proposed=DRAFTED, draft_accepted=KEPT))


@pytest.fixture
def drafting(monkeypatch: pytest.MonkeyPatch) -> DraftingEngine:
    scripted = DraftingEngine()
    monkeypatch.setattr(engine, "Engine", lambda **_: scripted)
    return scripted


@pytest.fixture
def draft_folder(tmp_path: Path) -> Path:
    """A folder with a small model of SmolLM2's vocabulary (it can draft for SmolLM2),
    and one of another (it cannot)."""
    folder = tmp_path / "drafts"
    small_model(folder)
    small_model(folder, "Other Draft", changes={"tokenizer.ggml.pre": "llama-bpe"})
    return folder


def entries_with(folder: Path) -> list[catalog.ModelEntry]:
    return catalog.scan([(bundled_dir(), catalog.BUNDLED), (folder, catalog.COMMAND_LINE)])


@pytest.fixture
def dialog(qtbot: Any, tmp_path: Path) -> SettingsDialog:
    prefs = settings.Settings()
    shown = SettingsDialog(prefs, lambda: settings.save(prefs, tmp_path / "settings.json"),
                           tmp_path / "models")
    qtbot.addWidget(shown)
    return shown


def draft_box(dialog: SettingsDialog) -> QComboBox:
    box = dialog.findChild(QComboBox, "model_draft_modelBox")
    assert box is not None
    return box


def check_box(dialog: SettingsDialog, name: str) -> QCheckBox:
    box = dialog.findChild(QCheckBox, name)
    assert box is not None, name
    return box


def choose(box: QComboBox, text: str) -> None:
    box.setCurrentIndex(box.findText(text))
    box.activated.emit(box.currentIndex())


def test_this_model_offers_the_models_that_can_draft_for_it_and_saves_the_choice(
        dialog: SettingsDialog, qtbot: Any, smollm2_path: Path, gemma_path: Path,
        draft_folder: Path) -> None:
    dialog.set_models(entries_with(draft_folder))
    dialog.set_model(smollm2_path, "SmolLM2-135M-Instruct")
    box = draft_box(dialog)
    offered = [box.itemText(i) for i in range(box.count())]
    assert offered == [NO_DRAFT, "SmolLM2 Draft"]  # not Gemma, not the other vocabulary
    assert box.currentText() == NO_DRAFT and box.toolTip()
    with qtbot.waitSignal(dialog.context_size_changed, timeout=1000):  # it takes memory
        choose(box, "SmolLM2 Draft")
    wanted = str(draft_folder / "SmolLM2-Draft.gguf")
    saved = settings.load(draft_folder.parent / "settings.json").settings  # the dialog's
    assert saved.load_options(smollm2_path).draft_model == wanted
    assert saved.load_options(gemma_path).draft_model is None  # this model's own
    assert "has settings of its own" in dialog.model_title.text()

    dialog.set_model(gemma_path, "Gemma 3 270M")  # nothing smaller of its vocabulary
    assert [box.itemText(i) for i in range(box.count())] == [NO_DRAFT]
    dialog.set_model(smollm2_path, "SmolLM2-135M-Instruct")
    assert box.currentText() == "SmolLM2 Draft"
    with qtbot.waitSignal(dialog.reload_requested, timeout=1000):  # as other load options
        dialog.findChild(QPushButton, "reloadThisModelButton").click()
    dialog.findChild(QPushButton, "useDefaultsButton").click()
    assert box.currentText() == NO_DRAFT
    assert dialog.prefs.load_options(smollm2_path).draft_model is None


def test_a_draft_model_kept_but_not_offered_still_shows(
        dialog: SettingsDialog, smollm2_path: Path, tmp_path: Path) -> None:
    dialog.prefs.set_model_value(smollm2_path, "draft_model", str(tmp_path / "gone.gguf"))
    dialog.set_model(smollm2_path, "SmolLM2-135M-Instruct")
    assert draft_box(dialog).currentText() == "gone.gguf"


def test_the_speculation_switch_is_a_default_and_each_models_own(
        dialog: SettingsDialog, smollm2_path: Path, gemma_path: Path, tmp_path: Path) -> None:
    dialog.set_model(smollm2_path, "SmolLM2-135M-Instruct")
    default, own = check_box(dialog, "speculationBox"), check_box(dialog, "model_speculationBox")
    assert default.isChecked() and own.isChecked()
    assert "faster where the reply repeats its input" in default.toolTip()
    assert default.accessibleName() == "Speculative decoding"
    default.click()  # off for every model that has no switch of its own
    assert not own.isChecked()
    own.click()  # on again for this model alone
    saved = settings.load(tmp_path / "settings.json").settings
    assert saved.speculation is False
    assert saved.sampling(smollm2_path).speculation is True
    assert saved.sampling(gemma_path).speculation is False


def test_a_replys_details_say_how_many_drafted_tokens_were_kept(
        open_window: WindowFactory, qtbot: Any, drafting: DraftingEngine,
        smollm2_path: Path, draft_folder: Path) -> None:
    greedy_settings(default_model=str(smollm2_path))
    window = open_window([draft_folder])
    window.show_settings()
    dialog = window._settings_dialog
    assert isinstance(dialog, SettingsDialog)
    open_page(dialog, dialog.this_model_page)
    choose(draft_box(dialog), "SmolLM2 Draft")
    qtbot.mouseClick(dialog.findChild(QPushButton, "reloadThisModelButton"),
                     Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "drafted by SmolLM2-Draft" in window.status.text.text(),
                    timeout=40_000)

    _, stats = send(qtbot, window, "Repeat after me: the tide is high.")
    assert (stats.draft_proposed, stats.draft_accepted) == (DRAFTED, KEPT)
    details = last_reply(window).details
    assert f"Draft: {KEPT} of {DRAFTED} accepted" in details.text()

    open_page(dialog, dialog.replies_page)
    check_box(dialog, "speculationBox").click()
    _, stats = send(qtbot, window, "And again.")
    assert drafting.speculation == [True, False]
    assert stats.draft_proposed == 0
    assert "Draft:" not in last_reply(window).details.text()
    dialog.close()


def last_reply(window: MainWindow) -> Any:
    return window.transcript.message_widgets()[-1]
