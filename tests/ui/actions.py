"""What a user does in the real window, and what must hold after each thing they do.

Shared by the state-machine test (tests/ui/test_window_state_machine.py) and the soak
benchmark (tests/benchmarks/soak.py). Actions press keys and click as a user would; a
burst of them runs without waiting in between (fast hands). ``check`` waits until the
window is idle (within a generous bound: only a deadlock exceeds it) and compares the
window with the database, read through a connection of its own.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import shiboken6
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLineEdit, QListView, QPushButton, QSpinBox, QWidget

from app.core import paths
from app.ui import notices as notice_bar
from app.ui.conversation_model import ID_ROLE
from app.ui.messages.message_column import MessageColumn
from app.ui.notices import Notice
from app.ui.window import MainWindow
from tests.gguf_files import copy_with_metadata

IDLE_TIMEOUT_S = 120.0  # a busy 2-core machine stays far inside this; a deadlock does not
FOCUS_TIMEOUT_S = 10.0
PROMPTS = ("Say hello.", "Name a colour.", "What is two plus two?", "Tell me a joke.",
           "Write a long story about a storm.")
TITLES = ("Greetings", "Colours", "Sums", "A storm")
ACTIONS = ("send", "stop", "new_chat", "switch_model", "regenerate", "edit_last",
           "open_conversation", "rename", "delete", "change_setting")
W = TypeVar("W", bound=QWidget)
_TAGS = itertools.count(1)  # one per message sent in this process: each is findable


def model_files(folder: Path, smollm2: Path, gemma: Path) -> list[Path]:
    """What the user picks among: both models, and in ``folder`` a file that is not
    GGUF and one llama.cpp refuses."""
    folder.mkdir()
    damaged = folder / "damaged.gguf"
    damaged.write_bytes(b"not a model at all" * 64)
    refused = copy_with_metadata(smollm2, folder / "refused.gguf",
                                 {"general.architecture": "notanarch"})
    return [smollm2, gemma, damaged, refused]


class Deadlock(AssertionError):
    """An action neither finished nor was refused within the bound."""


def wait_until(condition: Callable[[], bool], what: str,
               timeout_s: float = IDLE_TIMEOUT_S) -> None:
    """Run the event loop until ``condition`` holds (the way a user waits: watching)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise Deadlock(f"{what}: not done within {timeout_s:.0f} s")
        QTest.qWait(10)


@dataclass
class Problems:
    """Exceptions nobody caught and unexpected errors the message bar showed."""

    notices: list[Notice] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)

    def install(self, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
        """Record from the message bar, the event loop and ``sys.excepthook``; returns
        the undo."""
        previous_hook = sys.excepthook

        def on_loop_exception(_loop: asyncio.AbstractEventLoop,
                              context: dict[str, Any]) -> None:
            self.exceptions.append(f"{context.get('message')}: {context.get('exception')!r}")

        def on_exception(kind: type[BaseException], exc: BaseException,
                         _tb: TracebackType | None) -> None:
            self.exceptions.append(f"{kind.__name__}: {exc}")

        loop.set_exception_handler(on_loop_exception)
        sys.excepthook = on_exception
        notice_bar.bridge.shown.connect(self.notices.append)

        def uninstall() -> None:
            notice_bar.bridge.shown.disconnect(self.notices.append)
            sys.excepthook = previous_hook
            loop.set_exception_handler(None)

        return uninstall

    def unexpected(self) -> list[str]:
        return self.exceptions + [n.text for n in self.notices if n.unexpected]


class WindowUser:
    """Drives one real window with the keyboard and mouse, and checks it."""

    def __init__(self, window: MainWindow, models: Sequence[Path], problems: Problems) -> None:
        self.window = window
        self.models = list(models)  # usable, damaged and refused files alike
        self.problems = problems
        self.log: list[str] = []  # the actions so far, for a report

    @property
    def controller(self) -> Any:
        assert self.window.controller is not None, "the window has started"
        return self.window.controller

    # Actions -----------------------------------------------------------------------

    def do(self, action: str, choice: int) -> None:
        """Run ``action``; ``choice`` picks among its variants (a model, a row, ...)."""
        self.log.append(f"{action}({choice})")
        getattr(self, action)(choice)

    def send(self, choice: int) -> None:
        """Type a prompt (tagged so it can be found again) into the composer and press
        Enter. Whatever was left in the composer is replaced, as a user would."""
        text = f"{PROMPTS[choice % len(PROMPTS)]} #{next(_TAGS)}"
        composer = self._focus(self.window.composer)
        composer.selectAll()
        QTest.keyClick(composer, Qt.Key.Key_Delete)
        QTest.keyClicks(composer, text)
        QTest.keyClick(composer, Qt.Key.Key_Return)

    def stop(self, _choice: int) -> None:
        """Esc: stops a streaming reply (else cancels an edit or a load, or does nothing)."""
        QTest.keyClick(self._focus(self.window.composer), Qt.Key.Key_Escape)

    def new_chat(self, _choice: int) -> None:
        QTest.keyClick(self._focus(self.window.composer), Qt.Key.Key_N,
                       Qt.KeyboardModifier.ControlModifier)

    def regenerate(self, _choice: int) -> None:
        QTest.keyClick(self._focus(self.window.composer), Qt.Key.Key_R,
                       Qt.KeyboardModifier.ControlModifier)

    def edit_last(self, choice: int) -> None:
        """Ctrl+E puts the last message back; change its end and press Enter."""
        composer = self._focus(self.window.composer)
        QTest.keyClick(composer, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)
        if not self.window.composer_bar.editing:
            return  # nothing to edit (or a reply is streaming): nothing happens
        QTest.keyClicks(composer, f" (again {choice}) #{next(_TAGS)}")  # a new text, a new tag
        QTest.keyClick(composer, Qt.Key.Key_Return)

    def switch_model(self, choice: int) -> None:
        """Choose a model in the picker; a file listed as unusable cannot be chosen."""
        picker = self.window.picker
        path = self.models[choice % len(self.models)]
        row = picker.list_model.row_of(path)
        if row < 0:
            return  # not listed (yet)
        if not picker.list_model.index(row).flags() & Qt.ItemFlag.ItemIsEnabled:
            return  # greyed out with the reason: the user cannot pick it
        picker.setCurrentIndex(row)
        picker.activated.emit(row)

    def open_conversation(self, choice: int) -> None:
        row = self._conversation_row(choice)
        if row is not None:
            self.window.sidebar.list.setCurrentIndex(self.window.sidebar.model.index(row))

    def rename(self, choice: int) -> None:
        """Select a conversation, F2, type a title, Enter."""
        view = self._select_conversation(choice)
        if view is None:
            return
        QTest.keyClick(view, Qt.Key.Key_F2)
        editor = next((e for e in view.findChildren(QLineEdit) if e.isVisible()), None)
        if editor is None:
            return
        editor.selectAll()
        QTest.keyClicks(editor, TITLES[choice % len(TITLES)])
        QTest.keyClick(editor, Qt.Key.Key_Return)
        # Qt commits a title at the next turn of the event loop, sooner than any hand
        # can move on (moving the focus first would commit it twice).
        wait_until(lambda: not shiboken6.isValid(editor) or not editor.isVisible(),
                   "the title editor to close")

    def delete(self, choice: int) -> None:
        """Select a conversation and press Delete; with an odd choice, click Undo."""
        view = self._select_conversation(choice)
        if view is None:
            return
        QTest.keyClick(view, Qt.Key.Key_Delete)
        if choice % 2:
            bar = self.window.message_bar
            wait_until(lambda: bar.notice is not None and bar.notice.action is not None,
                       "the offer to undo a delete")
            button = bar.findChild(QPushButton, "messageAction")
            QTest.mouseClick(button, Qt.MouseButton.LeftButton)

    def change_setting(self, choice: int) -> None:
        """Ctrl+, opens settings; set the reply length (8 to 16 tokens); close them."""
        QTest.keyClick(self._focus(self.window.composer), Qt.Key.Key_Comma,
                       Qt.KeyboardModifier.ControlModifier)
        dialog = self.window.findChild(QWidget, "settingsDialog")
        if dialog is None:
            return
        box = dialog.findChild(QSpinBox, "max_tokensBox")
        box.setValue(8 + choice % 9)
        dialog.close()

    def _focus(self, widget: W) -> W:
        """Bring the window to the front and put the focus in ``widget``, as a click
        would: keyboard shortcuts reach only the active window."""
        self.window.activateWindow()
        widget.setFocus(Qt.FocusReason.MouseFocusReason)
        wait_until(widget.hasFocus, f"the focus in {widget.objectName()}", FOCUS_TIMEOUT_S)
        return widget

    def _select_conversation(self, choice: int) -> QListView | None:
        """Click a conversation in the sidebar (its list keeps the focus); None if none."""
        row = self._conversation_row(choice)
        if row is None:
            return None
        view = self._focus(self.window.sidebar.list)
        view.setCurrentIndex(self.window.sidebar.model.index(row))
        return view

    def _conversation_row(self, choice: int) -> int | None:
        model = self.window.sidebar.model
        ids = model.conversation_ids()
        return model.row_of(ids[choice % len(ids)]) if ids else None

    # Checks ------------------------------------------------------------------------

    def wait_idle(self) -> None:
        wait_until(lambda: self.window.controller is not None and not self.controller.busy,
                   "the last action")

    def check(self) -> None:
        """Wait until idle, then: nothing unexpected, the picker tells the truth, and
        the window shows exactly what the database holds."""
        self.wait_idle()
        assert not self.problems.unexpected(), self.problems.unexpected()
        self._check_model()
        self._check_conversation()

    def _check_model(self) -> None:
        model = self.controller.core.model
        picker = self.window.picker
        shown = picker.current_path()
        assert shown == (model.path if model else None), f"picker shows {shown}, loaded {model}"
        if model is not None:
            assert picker.currentIndex() == picker.list_model.row_of(model.path)
            assert self.window.composer_bar.send_button.toolTip() == "Send (Enter)", \
                "a loaded model takes messages"

    def _check_conversation(self) -> None:
        conversation_id = self.controller.conversation_id
        rows = saved_rows()
        for cid, messages_ in rows.items():
            roles = [role for role, _text, _complete in messages_]
            assert all(complete for _r, _t, complete in messages_), f"unfinished in {cid}"
            # A reply always answers a user message of its own conversation.
            assert all(roles[i - 1] == "user" for i, r in enumerate(roles) if r == "assistant"
                       and i > 0) and roles[:1] != ["assistant"], f"{cid}: {roles}"
        tagged = [(text.rsplit("#", 1)[-1], cid, text) for cid, msgs in rows.items()
                  for role, text, _c in msgs if role == "user" and "#" in text]
        tags = [tag for tag, _cid, _text in tagged]
        twice = [(cid, text) for tag, cid, text in tagged if tags.count(tag) > 1]
        assert not twice, f"a message was stored twice: {twice}"
        transcript = self.window.transcript
        assert transcript is not None
        # Every message the transcript holds (far rows are built only when scrolled to),
        # and each built row shows its own message.
        entries = transcript.findChild(MessageColumn).entries
        shown = [(entry.role, entry.text) for entry in entries]
        assert all(entry.row.markdown() == entry.text for entry in entries if entry.row)
        stored = [(role, text) for role, text, _c in rows.get(conversation_id, [])] \
            if conversation_id is not None else []
        assert shown == stored, f"the window shows {shown}, the database holds {stored}"
        if conversation_id is None:
            return
        assert self.window.sidebar.list.currentIndex().data(ID_ROLE) == conversation_id


def saved_rows() -> dict[int, list[tuple[str, str, bool]]]:
    """(role, text, complete) of each live conversation's messages, read through a
    connection of its own, as another program would."""
    path = paths.database_path()
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
        found = db.execute(
            "SELECT m.conversation_id, m.role, m.text, m.complete FROM messages m"
            " JOIN conversations c ON c.id = m.conversation_id"
            " WHERE c.deleted_at IS NULL ORDER BY m.id").fetchall()
    rows: dict[int, list[tuple[str, str, bool]]] = {}
    for cid, role, text, complete in found:
        value = text.decode("utf-8", "surrogatepass") if isinstance(text, bytes) else text
        rows.setdefault(cid, []).append((role, value, bool(complete)))
    return rows
