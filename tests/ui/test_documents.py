"""Chatting with documents in the real window: files and folders dropped on the chat or
attached from the composer, their chips and the reading as it goes, Cancel, the files
that could not be read, and a reply's numbered sources, opened in their own window,
in a reply just written and in a conversation opened again.

Passages are found with the bundled embedding model where it is installed, else by
their words alone; these tests hold either way (they look for a file's own words).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDragLeaveEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QFileDialog, QWidget

from app.core import settings
from app.core.documents import readers
from app.core.llama import engine
from app.core.models.catalog import BUNDLED, ModelEntry
from app.ui.messages.message_widget import MessageWidget
from app.ui.settings.dialog import SettingsDialog
from app.ui.window import MainWindow
from tests.scripted_engine import ScriptedEngine
from tests.ui.conftest import (
    REPLY_TIMEOUT_MS,
    Notices,
    WindowFactory,
    greedy_settings,
    new_chat,
    send,
)

READ_TIMEOUT_MS = 120_000  # files are embedded as they are read: a busy machine is slow
QUESTION = "What is the name of the lighthouse keeper's cat?"
ANSWER_LINE = "The lighthouse keeper's cat is named Biscuit, and she sleeps by the lamp."
# Words of other subjects: the files around the answer, long enough that the reply is
# given passages (the best few) rather than every file whole.
TOPICS = {
    "trains.md": ("train", "platform", "timetable", "carriage", "signal", "junction"),
    "garden.md": ("tomato", "compost", "trellis", "seedling", "hedge", "watering"),
    "baking.txt": ("flour", "oven", "dough", "yeast", "crust", "butter"),
}


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replies from the scripted engine: for what does not depend on a model's words."""
    monkeypatch.setattr(engine, "Engine", lambda **_: ScriptedEngine())


@pytest.fixture
def slow_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each file takes a tenth of a second to read: the reading can be seen, and stopped."""
    read = readers.read

    def slowly(path: Path, **options: Any) -> list[readers.Section]:
        time.sleep(0.1)
        return read(path, **options)

    monkeypatch.setattr(readers, "read", slowly)


@pytest.fixture
def held_reading(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Reading waits until the test sets the event: the bar is seen whatever the speed."""
    go = threading.Event()
    read = readers.read

    def when_let(path: Path, **options: Any) -> list[readers.Section]:
        go.wait(timeout=60)
        return read(path, **options)

    monkeypatch.setattr(readers, "read", when_let)
    yield go
    go.set()


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """A folder of notes, one of which holds the answer to QUESTION."""
    folder = tmp_path / "notes"
    folder.mkdir()
    for name, words in TOPICS.items():
        lines = [f"Line {i}: the {words[i % 6]} and the {words[(i * 5 + 1) % 6]} of day {i}."
                 for i in range(60)]
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    lighthouse = [f"Entry {i}: the tide was {('high', 'low')[i % 2]} at the rocks today."
                  for i in range(40)]
    lighthouse.insert(20, ANSWER_LINE)
    (folder / "lighthouse.md").write_text("# Lighthouse log\n\n" + "\n".join(lighthouse),
                                          encoding="utf-8")
    return folder


def many_files(folder: Path, count: int) -> Path:
    folder.mkdir()
    for i in range(count):
        (folder / f"note-{i:02}.txt").write_text(f"Note {i} about the harbour.\n",
                                                 encoding="utf-8")
    return folder


# What the user does ------------------------------------------------------------------

def drop(window: MainWindow, paths: Sequence[Path], on: QWidget | None = None) -> None:
    """Drag ``paths`` from a file manager over the chat (or ``on``) and drop them."""
    target = on or window.chat_area
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    centre = target.rect().center()
    enter = QDragEnterEvent(centre, Qt.DropAction.CopyAction, mime,
                            Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, enter)
    assert enter.isAccepted(), "the chat refused the drag"
    assert window.chat is not None and window.chat.file_drop.highlight.isVisible()
    dropped = QDropEvent(QPointF(centre), Qt.DropAction.CopyAction, mime,
                         Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, dropped)
    assert dropped.isAccepted(), "the chat refused the drop"
    assert not window.chat.file_drop.highlight.isVisible()


def chip_names(window: MainWindow) -> list[str]:
    return [chip.text for chip in window.document_strip.chips]


def reading_shown(window: MainWindow) -> bool:
    strip = window.document_strip
    return strip.isVisible() and strip.progress_row.isVisible() and \
        strip.progress_bar.isVisible()


def reading_done(window: MainWindow) -> bool:
    assert window.controller is not None
    documents = window.controller.core.documents
    return documents.idle(0) and not window.document_strip.progress_row.isVisible()


def last_reply(window: MainWindow) -> MessageWidget:
    assert window.transcript is not None
    rows = [r for r in window.transcript.message_widgets() if r.role == "assistant"]
    assert rows, "no reply on screen"
    return rows[-1]


def sources_shown(window: MainWindow) -> bool:
    """The last reply on screen shows its sources (the row may be built anew)."""
    return last_reply(window).sources_line.isVisible()




# Bringing documents in -----------------------------------------------------------------

def test_a_dropped_folder_shows_its_chip_and_its_reading_then_the_chip_alone(
        open_window: WindowFactory, qtbot: Any, tmp_path: Path, scripted: None,
        held_reading: threading.Event) -> None:
    window = open_window()
    assert not window.document_strip.isVisible()
    folder = many_files(tmp_path / "harbour", 8)

    drop(window, [folder])
    qtbot.waitUntil(lambda: chip_names(window) == ["harbour"], timeout=READ_TIMEOUT_MS)
    qtbot.waitUntil(lambda: reading_shown(window), timeout=READ_TIMEOUT_MS)
    label = window.document_strip.progress_label.text()
    assert label.startswith("Reading harbour: ") and label.endswith(" / 8 files"), label
    chip = window.document_strip.chips[0]
    assert chip.accessibleName() == "Folder harbour"
    assert chip.toolTip() == str(folder.resolve())

    held_reading.set()
    qtbot.waitUntil(lambda: reading_done(window), timeout=READ_TIMEOUT_MS)
    assert window.document_strip.isVisible() and chip_names(window) == ["harbour"]
    assert not window.document_strip.problems_button.isVisible()
    assert window.controller is not None
    [collection] = window.controller.core.attached()
    assert collection.path == folder.resolve() and collection.folder
    assert len(window.controller.core.documents.index.files(collection.id)) == 8


def test_files_dropped_on_the_composer_are_attached_not_typed(
        open_window: WindowFactory, qtbot: Any, library: Path, scripted: None) -> None:
    window = open_window()
    files = [library / "lighthouse.md", library / "garden.md"]
    drop(window, files, on=window.composer.viewport())
    qtbot.waitUntil(lambda: sorted(chip_names(window)) == ["garden.md", "lighthouse.md"],
                    timeout=READ_TIMEOUT_MS)
    assert window.composer.text() == ""
    assert window.document_strip.chips[0].accessibleName().startswith("File ")


def test_a_drag_that_leaves_takes_its_highlight_away(
        open_window: WindowFactory, library: Path, scripted: None) -> None:
    window = open_window()
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(library))])
    enter = QDragEnterEvent(QPoint(20, 20), Qt.DropAction.CopyAction, mime,
                            Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window.chat_area, enter)
    assert window.chat is not None and window.chat.file_drop.highlight.isVisible()
    QApplication.sendEvent(window.chat_area, QDragLeaveEvent())
    assert not window.chat.file_drop.highlight.isVisible()
    assert window.controller is not None and window.controller.core.attached() == []


def test_text_dragged_over_the_chat_is_left_alone(
        open_window: WindowFactory, scripted: None) -> None:
    window = open_window()
    mime = QMimeData()
    mime.setText("just some words")
    enter = QDragEnterEvent(QPoint(20, 20), Qt.DropAction.CopyAction, mime,
                            Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window.chat_area, enter)
    assert not enter.isAccepted()
    assert window.chat is not None and not window.chat.file_drop.highlight.isVisible()


def test_the_attach_menu_brings_files_and_a_folder_in(
        open_window: WindowFactory, qtbot: Any, library: Path, tmp_path: Path,
        scripted: None) -> None:
    window = open_window()
    bar = window.composer_bar
    assert bar.attach_button.isEnabled()
    assert [a.text() for a in bar.attach_button.menu().actions()] == ["Files…", "Folder…"]

    bar.attach_files_action.trigger()
    chooser = window.findChild(QFileDialog, "documentChooser")
    assert chooser is not None and chooser.isVisible()
    assert chooser.fileMode() == QFileDialog.FileMode.ExistingFiles
    chooser.filesSelected.emit([str(library / "trains.md"), str(library / "baking.txt")])
    chooser.close()
    qtbot.waitUntil(lambda: sorted(chip_names(window)) == ["baking.txt", "trains.md"],
                    timeout=READ_TIMEOUT_MS)

    bar.attach_folder_action.trigger()
    chooser = next(c for c in window.findChildren(QFileDialog, "documentChooser")
                   if c.isVisible())
    assert chooser.fileMode() == QFileDialog.FileMode.Directory
    chooser.filesSelected.emit([str(library)])
    chooser.close()
    qtbot.waitUntil(lambda: "notes" in chip_names(window), timeout=READ_TIMEOUT_MS)


def test_a_path_that_is_gone_is_said_and_nothing_is_attached(
        open_window: WindowFactory, qtbot: Any, tmp_path: Path, notices: Notices,
        scripted: None) -> None:
    window = open_window()
    gone = tmp_path / "moved-away.pdf"
    assert window.chat is not None
    window.chat.documents.attach([gone])
    qtbot.waitUntil(lambda: any("moved-away.pdf" in t for t in notices.texts()),
                    timeout=READ_TIMEOUT_MS)
    assert chip_names(window) == []
    assert not window.document_strip.isVisible()


def test_the_close_button_of_a_chip_takes_it_out(
        open_window: WindowFactory, qtbot: Any, library: Path, scripted: None) -> None:
    window = open_window()
    drop(window, [library / "trains.md", library / "garden.md"])
    qtbot.waitUntil(lambda: len(chip_names(window)) == 2, timeout=READ_TIMEOUT_MS)
    trains = next(c for c in window.document_strip.chips if c.text == "trains.md")
    qtbot.mouseClick(trains.close_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: chip_names(window) == ["garden.md"], timeout=READ_TIMEOUT_MS)
    assert window.controller is not None
    assert [c.path.name for c in window.controller.core.attached()] == ["garden.md"]


def test_cancel_stops_the_reading_and_keeps_what_was_read(
        open_window: WindowFactory, qtbot: Any, tmp_path: Path, scripted: None,
        slow_reading: None) -> None:
    window = open_window()
    folder = many_files(tmp_path / "archive", 40)
    drop(window, [folder])
    strip = window.document_strip
    qtbot.waitUntil(lambda: reading_shown(window) and strip.progress_bar.value() >= 2,
                    timeout=READ_TIMEOUT_MS)
    qtbot.mouseClick(strip.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: reading_done(window), timeout=READ_TIMEOUT_MS)

    assert window.controller is not None
    [collection] = window.controller.core.attached()
    read = window.controller.core.documents.index.files(collection.id)
    assert 2 <= len(read) < 40, f"{len(read)} files read"
    assert chip_names(window) == ["archive"]  # still in the conversation


def test_the_reading_waits_while_a_reply_is_written(
        open_window: WindowFactory, qtbot: Any, tmp_path: Path, slow_reading: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "Engine", lambda **_: ScriptedEngine(piece_delay_s=0.6))
    greedy_settings(context_size=8192)
    window = open_window()
    drop(window, [many_files(tmp_path / "logbook", 40)])
    strip = window.document_strip
    qtbot.waitUntil(lambda: reading_shown(window), timeout=READ_TIMEOUT_MS)
    assert window.controller is not None
    with qtbot.waitSignal(window.controller.reply_finished, timeout=REPLY_TIMEOUT_MS):
        window.chat.controller.send("Which notes mention the harbour?")
        qtbot.waitUntil(lambda: strip.progress_label.text().startswith(
            "Paused while the reply is written (logbook: "), timeout=REPLY_TIMEOUT_MS)
        paused_at = strip.progress_bar.value()
    qtbot.waitUntil(lambda: strip.progress_label.text().startswith("Reading logbook: ")
                    or reading_done(window), timeout=READ_TIMEOUT_MS)
    qtbot.waitUntil(lambda: reading_done(window), timeout=READ_TIMEOUT_MS)
    assert paused_at < 40
    [collection] = window.controller.core.attached()
    assert len(window.controller.core.documents.index.files(collection.id)) == 40


def test_a_file_that_cannot_be_read_is_named_and_the_others_are_read(
        open_window: WindowFactory, qtbot: Any, tmp_path: Path, scripted: None) -> None:
    window = open_window()
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "x.pdf").write_bytes(os.urandom(4096))
    (folder / "minutes.md").write_text("# Minutes\n\nThe committee met on Tuesday.\n",
                                       encoding="utf-8")
    (folder / "todo.txt").write_text("Paint the boat.\nMend the net.\n", encoding="utf-8")
    drop(window, [folder])
    strip = window.document_strip
    qtbot.waitUntil(lambda: reading_done(window) and strip.problems_button.isVisible(),
                    timeout=READ_TIMEOUT_MS)

    assert strip.problems_button.text() == "⚠ 1 file could not be read"
    assert "x.pdf" in strip.problems_button.toolTip()
    assert not strip.problem_list.isVisible()
    qtbot.mouseClick(strip.problems_button, Qt.MouseButton.LeftButton)
    assert strip.problem_list.isVisible() and "x.pdf" in strip.problem_list.text()
    assert window.controller is not None
    [collection] = window.controller.core.attached()
    files = {f.path.name: f.error for f in
             window.controller.core.documents.index.files(collection.id)}
    assert files["minutes.md"] is None and files["todo.txt"] is None
    assert files["x.pdf"] and "x.pdf" in files["x.pdf"]


# Sources ----------------------------------------------------------------------------

def test_a_reply_shows_numbered_sources_from_the_file_that_holds_the_answer(
        open_window: WindowFactory, qtbot: Any, library: Path, file_links: list[QUrl]
        ) -> None:
    greedy_settings(max_tokens=8, context_size=1024)  # a short prompt: a quick reply
    window = open_window()
    drop(window, [library])
    qtbot.waitUntil(lambda: chip_names(window) == ["notes"] and reading_done(window),
                    timeout=READ_TIMEOUT_MS)
    send(qtbot, window, QUESTION)

    qtbot.waitUntil(lambda: sources_shown(window), timeout=REPLY_TIMEOUT_MS)
    line = last_reply(window).sources_line
    labels = line.labels()
    assert labels[0].startswith("[1] lighthouse.md, lines "), labels
    assert [label.split("]")[0] for label in labels] == \
        [f"[{n}" for n in range(1, len(labels) + 1)]
    assert line.text().startswith("Sources: ")
    assert line.sources[0]["path"] == str((library / "lighthouse.md").resolve())

    line.linkActivated.emit("source:0")  # a click on "[1] lighthouse.md, lines …"
    assert window.chat is not None and window.chat.source_view is not None
    view = window.chat.source_view
    qtbot.waitUntil(view.isVisible)
    assert view.title.text() == labels[0]
    assert ANSWER_LINE in view.passage.toPlainText()
    assert view.passage.isReadOnly()
    assert view.where.text() == str((library / "lighthouse.md").resolve())
    qtbot.mouseClick(view.open_button, Qt.MouseButton.LeftButton)
    assert [u.toLocalFile() for u in file_links] == [str((library / "lighthouse.md")
                                                         .resolve())]

    # Written again, the reply was given the same passages, and says so.
    assert window.controller is not None
    with qtbot.waitSignal(window.controller.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(window.composer, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: sources_shown(window), timeout=REPLY_TIMEOUT_MS)
    assert last_reply(window).sources_line.labels() == labels


def test_a_conversation_opened_again_shows_its_documents_and_sources(
        open_window: WindowFactory, qtbot: Any, library: Path) -> None:
    greedy_settings(max_tokens=8, context_size=1024)  # a short prompt: a quick reply
    window = open_window()
    drop(window, [library])
    qtbot.waitUntil(lambda: reading_done(window) and chip_names(window) == ["notes"],
                    timeout=READ_TIMEOUT_MS)
    send(qtbot, window, QUESTION)
    qtbot.waitUntil(lambda: sources_shown(window), timeout=REPLY_TIMEOUT_MS)
    shown = last_reply(window).sources_line.labels()
    controller = window.controller
    assert controller is not None
    conversation = controller.conversation_id

    new_chat(qtbot, window)
    qtbot.waitUntil(lambda: chip_names(window) == [], timeout=READ_TIMEOUT_MS)
    assert not window.document_strip.isVisible()

    window.sidebar.conversation_chosen.emit(conversation)
    qtbot.waitUntil(lambda: controller.conversation_id == conversation and any(
        r.role == "assistant" for r in window.transcript.message_widgets()),
        timeout=REPLY_TIMEOUT_MS)
    line = last_reply(window).sources_line
    assert line.isVisible() and line.labels() == shown
    qtbot.waitUntil(lambda: chip_names(window) == ["notes"], timeout=READ_TIMEOUT_MS)
    line.linkActivated.emit("source:0")
    assert window.chat is not None and window.chat.source_view is not None
    assert ANSWER_LINE in window.chat.source_view.passage.toPlainText()


# Settings ---------------------------------------------------------------------------

def test_the_documents_page_offers_the_embedding_models_of_the_library(
        qtbot: Any, tmp_path: Path) -> None:
    prefs = settings.Settings()
    saved = tmp_path / "settings.json"
    dialog = SettingsDialog(prefs, lambda: settings.save(prefs, saved), tmp_path / "models")
    qtbot.addWidget(dialog)
    chat = tmp_path / "chat.gguf"
    nomic = tmp_path / "nomic-embed-text.gguf"
    minilm = tmp_path / "embedding" / "all-MiniLM-L6-v2.f16.gguf"
    dialog.set_models([ModelEntry("Chat", chat, (chat,), "folder"),
                       ModelEntry("nomic-embed-text", nomic, (nomic,), "folder",
                                  embedding=True),
                       ModelEntry("all-MiniLM-L6-v2", minilm, (minilm,), BUNDLED,
                                  embedding=True)])
    box = dialog.documents_page.embedding_model
    assert [box.itemText(i) for i in range(box.count())] == \
        ["All-MiniLM-L6-v2 (bundled)", "nomic-embed-text"]
    assert box.currentIndex() == 0
    assert [dialog.models_page.default_model.itemText(i)  # no chat with an embedding model
            for i in range(dialog.models_page.default_model.count())] == \
        ["The last model used", "Chat"]

    box.setCurrentIndex(1)
    box.activated.emit(1)
    assert prefs.embedding_model == str(nomic)
    assert settings.load(saved).settings.embedding_model == str(nomic)

    # Gone from the library, it stays chosen (and says so) until another is chosen.
    dialog.set_models([ModelEntry("Chat", chat, (chat,), "folder")])
    assert box.currentText() == "nomic-embed-text.gguf (not found)"
    box.setCurrentIndex(0)
    box.activated.emit(0)
    assert settings.load(saved).settings.embedding_model == ""
