"""A server's models in the window, beside the local ones: a real llama-cpp-python
server on loopback, chatted with, switched away from and back, and killed mid-reply."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import keyring
import openai
import pytest
from keyring.backends import fail
from keyrings.alt.file import PlaintextKeyring
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton

from app.core import paths, settings
from app.core.remote import secrets, servers
from app.ui.notices import Level
from tests.cli.test_commands import events, fireside
from tests.model_server import Served, llama_server
from tests.ui.conftest import (
    REPLY_TIMEOUT_MS,
    Notices,
    WindowFactory,
    greedy_settings,
    send,
    wait_for_model_loaded,
)
from tests.ui.test_window import choose_model, saved_messages

KEY = "window-test-key-93c1"


@pytest.fixture
def served(smollm2_path: Path) -> Iterator[Served]:
    with llama_server(smollm2_path) as server:
        prefs = greedy_settings()
        prefs.servers = [servers.Server("box", server.url).to_json()]
        settings.save(prefs)
        yield server


def remote_path(served: Served, model: Path) -> Path:
    return servers.model_path("box", str(model))


def wait_listed(qtbot: Any, window: Any, path: Path) -> None:
    qtbot.waitUntil(lambda: window.picker.list_model.row_of(path) >= 0, timeout=30_000)


def bare_client_answer(served: Served, model: Path, text: str,
                       history: Sequence[Any] = ()) -> str:
    """What the official client alone gets for the same messages and sampling."""
    prefs = settings.load().settings
    messages: list[Any] = [{"role": m.role, "content": m.text} for m in history]
    with openai.OpenAI(base_url=served.url, api_key="none") as client:
        answer = client.chat.completions.create(
            model=str(model), messages=[*messages, {"role": "user", "content": text}],
            temperature=prefs.temperature, top_p=prefs.top_p, max_tokens=prefs.max_tokens,
            seed=prefs.seed)
    return answer.choices[0].message.content or ""


class LongReplies:
    """A window on the server's model, asking for long replies."""

    def __init__(self, open_window: WindowFactory, qtbot: Any, served: Served,
                 smollm2_path: Path) -> None:
        greedy_settings(max_tokens=600)
        self.window = window = open_window()
        self.qtbot = qtbot
        remote = remote_path(served, smollm2_path)
        wait_listed(qtbot, window, remote)
        with qtbot.waitSignal(window.chat.models.loaded, timeout=REPLY_TIMEOUT_MS):
            choose_model(window.picker, remote)

    def start(self) -> None:
        """Asks for a long story and returns once a few of its words are on screen."""
        rows = self.window.transcript.message_widgets
        before = len(rows())
        self.window.composer.set_text("Write a long story about a lighthouse keeper.")
        self.window.composer_bar.send_requested.emit(self.window.composer.text())
        self.qtbot.waitUntil(lambda: len(rows()) == before + 2
                             and len(rows()[-1].markdown().split()) >= 3,
                             timeout=REPLY_TIMEOUT_MS)


def test_a_servers_model_chats_like_a_local_one_and_the_conversation_moves_between_them(
        open_window: WindowFactory, qtbot: Any, served: Served, smollm2_path: Path) -> None:
    window = open_window()
    controller = window.controller
    remote = remote_path(served, smollm2_path)
    wait_listed(qtbot, window, remote)
    assert "box" in window.picker.list_model.entries[window.picker.list_model.row_of(remote)
                                                     ].source

    with qtbot.waitSignal(window.chat.models.loaded, timeout=REPLY_TIMEOUT_MS):
        choose_model(window.picker, remote)
    assert controller.core.model.path == remote
    assert "runs on box" in window.placeholder.text()
    question = "Name a colour."
    # llama.cpp answers a prompt it has just seen word for word the same each time (the
    # first time, computed whole, can differ in the last digits): see it once first.
    bare_client_answer(served, smollm2_path, question)
    text, stats = send(qtbot, window, question)
    # Fireside sent the message, not a prompt of its own making: the server's template
    # made the same prompt of it, and so the same answer, as the official client gets.
    assert text == bare_client_answer(served, smollm2_path, question)
    assert stats.model.endswith("on box") and stats.tokens > 0 and stats.ttft_s > 0
    conversation = controller.conversation_id

    choose_model(window.picker, smollm2_path)  # the local file, mid-conversation
    wait_for_model_loaded(qtbot, window)
    assert controller.core.model.path == smollm2_path
    _text, local_stats = send(qtbot, window, "And another one?")
    assert not local_stats.model.endswith("on box")

    with qtbot.waitSignal(window.chat.models.loaded, timeout=REPLY_TIMEOUT_MS):
        choose_model(window.picker, remote)
    history = saved_messages(conversation)
    bare_client_answer(served, smollm2_path, "One more?", history)
    text, back = send(qtbot, window, "One more?")
    assert back.model.endswith("on box")
    # The whole conversation went to the server, the local model's reply included.
    assert text == bare_client_answer(served, smollm2_path, "One more?", history)
    assert controller.conversation_id == conversation
    assert [m.role for m in saved_messages(conversation)] == ["user", "assistant"] * 3

    # The last message edited: the server writes its reply again from the new text.
    before = saved_messages(conversation)[:4]
    bare_client_answer(served, smollm2_path, "Two more?", before)
    with qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS) as edited:
        controller.edit_last("Two more?", conversation)
    answer, stats = edited.args
    assert answer == bare_client_answer(served, smollm2_path, "Two more?", before)
    assert stats.model.endswith("on box")
    assert [m.text for m in saved_messages(conversation)][4:] == ["Two more?", answer]


def test_a_server_killed_mid_reply_keeps_the_text_and_any_model_goes_on(
        open_window: WindowFactory, qtbot: Any, served: Served, smollm2_path: Path,
        notices: Notices) -> None:
    long = LongReplies(open_window, qtbot, served, smollm2_path)
    window, controller = long.window, long.window.controller
    with qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        long.start()
        served.process.kill()
    text, stats = done.args
    assert text and stats.finish_reason == "cut" and "box" in stats.problem
    assert "reply so far is kept" in notices.last(Level.ERROR).text
    [(role, saved)] = [(m.role, m.text) for m in
                       saved_messages(controller.conversation_id)][1:]
    assert role == "assistant" and saved == text  # kept, and marked in its stats

    # While the server is down, a new message says why its reply could not come.
    with qtbot.waitSignal(controller.reply_failed, timeout=REPLY_TIMEOUT_MS) as failed:
        window.composer_bar.send_requested.emit("Are you there?")
    assert "Could not connect to box" in failed.args[0]
    # Started again where it was, the server answers the model still chosen.
    with (llama_server(smollm2_path, port=urlsplit(served.url).port),
          qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS) as again):
        window.chat.regenerate()
    answer, stats = again.args
    assert answer and stats.model.endswith("on box") and stats.finish_reason != "cut"
    assert [m.text for m in saved_messages(controller.conversation_id)][2:] == [
        "Are you there?", answer]

    choose_model(window.picker, smollm2_path)
    wait_for_model_loaded(qtbot, window)
    answer, _stats = send(qtbot, window, "Name a colour.")
    assert answer


@pytest.fixture
def system_keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real keyring backend (keyrings.alt's file) where this machine has none."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    before = keyring.get_keyring()
    backend = PlaintextKeyring()
    keyring.set_keyring(backend)
    yield Path(backend.file_path)
    keyring.set_keyring(before)


def add_in_settings(window: Any, name: str, url: str, key: str = "",
                    in_file: bool = False) -> Any:
    window.show_settings()
    page = window._settings_dialog.servers_page
    page.name_edit.setText(name)
    page.url_edit.setText(url)
    page.key_edit.setText(key)
    page.key_in_file.setChecked(in_file)
    page.findChild(QPushButton, "addServerButton").click()
    return page


def test_a_server_added_in_settings_joins_the_picker_with_its_key_in_the_keyring(
        open_window: WindowFactory, qtbot: Any, smollm2_path: Path,
        system_keyring: Path) -> None:
    with llama_server(smollm2_path, api_key=KEY) as server:
        window = open_window()
        page = add_in_settings(window, "keyed box", server.url, KEY)
        remote = servers.model_path("keyed box", str(smollm2_path))
        wait_listed(qtbot, window, remote)
        assert "1 model" in page.server_list.item(0).text()
        stored = paths.settings_path().read_text(encoding="utf-8")
        assert KEY not in stored and '"key_store": "keyring"' in stored
        assert keyring.get_password(secrets.SERVICE, "keyed box") == KEY  # kept there

        with qtbot.waitSignal(window.chat.models.loaded, timeout=REPLY_TIMEOUT_MS):
            choose_model(window.picker, remote)
        text, stats = send(qtbot, window, "Name a colour.")
        assert text and stats.model.endswith("on keyed box")

        page.server_list.setCurrentRow(0)
        page.findChild(QPushButton, "removeServerButton").click()
        qtbot.waitUntil(lambda: window.picker.list_model.row_of(remote) < 0, timeout=30_000)
        assert keyring.get_password(secrets.SERVICE, "keyed box") is None


def test_without_a_keyring_the_key_lasts_the_session_or_goes_to_the_users_own_file(
        open_window: WindowFactory, qtbot: Any, smollm2_path: Path) -> None:
    before = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    try:
        with llama_server(smollm2_path, api_key=KEY) as server:
            window = open_window()
            page = add_in_settings(window, "session box", server.url, KEY)
            assert "no keyring" in page.message.text()
            wait_listed(qtbot, window, servers.model_path("session box", str(smollm2_path)))
            add_in_settings(window, "file box", server.url, KEY, in_file=True)
            wait_listed(qtbot, window, servers.model_path("file box", str(smollm2_path)))
            key_file = secrets.key_file()
            assert key_file.stat().st_mode & 0o077 == 0  # only the user can read it
            # Another process (a later session) finds the file's key, not the session's.
            listed = {s["name"]: s for s in events(fireside("servers", "list", "--json")
                                                   .stdout)}
            assert listed["file box"]["error"] is None
            assert "one session only" in listed["session box"]["error"]
            assert KEY not in paths.settings_path().read_text(encoding="utf-8")
    finally:
        keyring.set_keyring(before)


def test_stop_and_quit_mid_reply_on_a_server_keep_the_text_so_far(
        open_window: WindowFactory, qtbot: Any, served: Served, smollm2_path: Path) -> None:
    long = LongReplies(open_window, qtbot, served, smollm2_path)
    window, controller = long.window, long.window.controller
    with qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        long.start()
        qtbot.keyClick(window.composer, Qt.Key.Key_Escape)
    text, stats = done.args
    assert stats.finish_reason == "stopped" and 0 < stats.tokens < 600
    conversation = controller.conversation_id
    assert saved_messages(conversation)[-1].text == text

    long.start()
    window.close()
    qtbot.waitUntil(lambda: window.is_shut_down, timeout=REPLY_TIMEOUT_MS)
    last = saved_messages(conversation)[-1]
    assert last.role == "assistant" and last.text and last.reply_stats.stopped
