"""Real faults under the core and the terminal: a full disk, damaged files, a model file
changed while loaded, and signals during a reply."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core import paths, settings
from app.core.conversations.chat import ChatService
from app.core.conversations.store import Store, open_store
from tests.cli.test_commands import events, fireside
from tests.core.helpers import (
    GREEDY,
    PROBE,
    database_with_a_damaged_page,
    fill_disk,
    small_disk,
    start_long_reply,
    stored_reply,
)
from tests.streams import Taker

TIMEOUT = 120  # a reply or a load that takes longer than this is stuck


@pytest.fixture
def data_on_small_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with small_disk(tmp_path / "small") as folder:
        monkeypatch.setenv("FIRESIDE_DATA_DIR", str(folder))
        yield folder


def _texts(path: Path, conversation_id: int) -> list[str]:
    with Store(path) as reopened:
        return [m.text for m in reopened.messages(conversation_id)]


# A full disk --------------------------------------------------------------------------


def test_a_full_disk_keeps_the_reply_and_saves_it_when_space_returns(
        data_on_small_disk: Path, chat: ChatService) -> None:
    first = chat.send(PROBE, GREEDY).future.result(TIMEOUT)
    assert first.saved and first.save_error is None
    filler = fill_disk(data_on_small_disk)
    turn = chat.send("And of Italy?", GREEDY)
    taker = Taker(turn.pieces)
    second = turn.future.result(TIMEOUT)
    assert second.reply.text and taker.wait().answer == second.reply.text
    assert not second.saved and second.save_error is not None
    assert "disk is full" in second.save_error
    assert chat.unsaved == 2
    # Nothing saved before is lost, and the service still shows the whole conversation.
    assert [m.text for m in chat.store.messages(first.conversation_id)] == \
        [PROBE, first.reply.text]
    assert [m.text for m in chat.open(first.conversation_id)] == \
        [PROBE, first.reply.text, "And of Italy?", second.reply.text]
    filler.unlink()
    third = chat.send("And of Spain?", GREEDY).future.result(TIMEOUT)
    assert third.saved and chat.unsaved == 0
    # The unsaved turn was part of the prompt, and is saved now, in its place.
    assert third.reply.stats.prompt_tokens > second.reply.stats.prompt_tokens
    assert _texts(chat.store.path, first.conversation_id) == [
        PROBE, first.reply.text, "And of Italy?", second.reply.text, "And of Spain?",
        third.reply.text]


def test_a_chat_begun_on_a_full_disk_is_saved_when_space_returns(
        data_on_small_disk: Path, chat: ChatService) -> None:
    chat.send(PROBE, GREEDY).future.result(TIMEOUT)
    chat.new_chat().result(TIMEOUT)
    filler = fill_disk(data_on_small_disk)
    result = chat.send("Name a fruit.", GREEDY).future.result(TIMEOUT)
    assert result.reply.text and not result.saved
    assert result.conversation_id < 0 and chat.conversation() is None
    assert chat.save_unsaved() is not None  # still full: still held
    filler.unlink()
    assert chat.save_unsaved() is None and chat.unsaved == 0
    assert chat.conversation_id is not None and chat.conversation_id > 0
    conversation = chat.conversation()
    assert conversation is not None and conversation.title == "Name a fruit."
    assert _texts(chat.store.path, conversation.id) == ["Name a fruit.", result.reply.text]


@pytest.mark.model  # the bundled model, found as the app finds it
def test_the_terminal_answers_on_a_full_disk_and_says_it_was_not_saved(
        data_on_small_disk: Path) -> None:
    args = ("chat", "--json", "--temperature", "0", "--max-tokens", "16")
    assert fireside(*args, PROBE).returncode == 0
    filler = fill_disk(data_on_small_disk)
    result = fireside(*args, "Name a fruit.")
    assert result.returncode == 1, result.stderr
    stream = events(result.stdout)
    (reply,) = (e for e in stream if e["event"] == "reply")
    assert reply["text"]
    # Told either at the start (the database cannot even be opened) or after the reply.
    errors = [e["message"] for e in stream if e["event"] == "error"]
    assert any("disk is full" in m and "not be saved" in m for m in errors), errors
    filler.unlink()
    exported = json.loads(fireside("export", "--format", "json", "--all").stdout)
    (kept,) = exported["conversations"]  # the earlier chat is intact
    assert kept["messages"][0]["text"] == PROBE and kept["messages"][1]["text"]


# Damaged files ------------------------------------------------------------------------


@pytest.mark.model  # the bundled model, found as the app finds it
@pytest.mark.parametrize("damage", ["not a database", "a damaged page"])
def test_a_damaged_database_is_set_aside_and_a_new_one_started(damage: str) -> None:
    path = paths.database_path()
    if damage == "not a database":
        path.write_bytes(b"this is a shopping list, not a database\n" * 200)
    else:
        database_with_a_damaged_page(path)
    damaged = path.read_bytes()
    result = fireside("chat", "--json", "--temperature", "0", "--max-tokens", "8", PROBE)
    assert result.returncode == 0, result.stderr
    notice = next(e for e in events(result.stdout) if e["event"] == "notice")
    (kept,) = path.parent.glob("conversations.sqlite3.corrupt-*[0-9]")
    assert str(kept) in notice["message"] and "damaged" in notice["message"]
    assert kept.read_bytes() == damaged  # kept as it was, never deleted
    with open_store() as store:  # the new database holds the new chat, and opens cleanly
        assert store.notice is None
        (conversation,) = store.list_conversations()
        assert store.messages(conversation.id)[0].text == PROBE
    # Damaged again: the first damaged copy is not overwritten.
    path.write_bytes(b"garbage" * 1000)
    with open_store() as store:
        assert store.set_aside is not None and store.set_aside != kept
        assert str(store.set_aside) in (store.notice or "")
    assert kept.read_bytes() == damaged


def test_a_damaged_database_is_named_by_export_too() -> None:
    paths.database_path().write_bytes(b"\x00" * 5000)
    result = fireside("export", "--all", "--format", "json")
    assert result.returncode == 0
    assert json.loads(result.stdout)["conversations"] == []
    assert "conversations.sqlite3.corrupt-" in result.stderr


def test_damaged_settings_are_set_aside_each_time_and_the_terminal_says_so() -> None:
    path = paths.settings_path()
    for n in range(2):  # twice in the same second: both copies are kept
        path.write_bytes(b"{broken %d" % n)
        assert settings.load().problem is not None
    kept = sorted(p.read_bytes() for p in path.parent.glob("settings.broken-*"))
    assert kept == [b"{broken 0", b"{broken 1"]
    path.write_text("[1, 2]")
    result = fireside("models")
    assert result.returncode == 0
    assert "settings file could not be read" in result.stderr and "kept as" in result.stderr


# The loaded model's file changes --------------------------------------------------------


def _session(model: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "chat", "--json", "--model", str(model),
         "--temperature", "0", "--max-tokens", "8"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=dict(os.environ))
    assert process.stdout is not None
    assert json.loads(process.stdout.readline())["event"] == "model_loaded"
    return process


def _next_reply(process: subprocess.Popen[str], text: str) -> dict[str, object]:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(text + "\n")
    process.stdin.flush()
    for line in process.stdout:
        event = json.loads(line)
        if event["event"] in ("reply", "error", "model_loaded"):
            return dict(event)
    raise AssertionError(f"the session ended: {process.wait(TIMEOUT)}")


def _delete(path: Path) -> None:
    path.unlink()


def _rename_over(path: Path) -> None:
    other = path.with_name("other.tmp")
    other.write_bytes(b"not a model at all")
    other.replace(path)


def _overwrite_in_place(path: Path) -> None:
    size = path.stat().st_size
    with path.open("r+b") as handle:
        handle.seek(size // 3)
        handle.write(os.urandom(size // 3))


def _truncate(path: Path) -> None:
    with path.open("r+b") as handle:
        handle.truncate(4096)


@pytest.mark.parametrize("change", [_delete, _rename_over, _overwrite_in_place, _truncate],
                         ids=lambda f: f.__name__.strip("_"))
def test_the_loaded_model_file_changing_does_not_end_the_session(
        change: object, smollm2_path: Path, tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    shutil.copyfile(smollm2_path, model)
    process = _session(model)
    try:
        before = _next_reply(process, PROBE)
        assert before["event"] == "reply"
        change(model)  # type: ignore[operator]
        after = _next_reply(process, f"/new\n{PROBE}")
        # The weights were read in at load time: the same greedy answer, from memory.
        assert after["event"] == "reply" and after["text"] == before["text"]
        # Loading the changed file again is refused with a reason (unless only its
        # weights were overwritten: then it is a valid file); the session goes on.
        again = _next_reply(process, f"/model {model}")
        if change is _overwrite_in_place:
            assert again["event"] == "model_loaded"
        else:
            assert again["event"] == "error" and "model.gguf" in str(again["message"])
        assert _next_reply(process, "Thanks!")["event"] == "reply"
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(TIMEOUT) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# Signals during a reply -------------------------------------------------------------------


# The stdin session's contract (Ctrl-C stops the reply and keeps the session; SIGTERM
# and SIGHUP save and leave) is in tests/cli/test_commands.py. A one-shot chat has no
# session to keep: every one of the three saves the reply so far and ends the process.
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=lambda s: s.name)
def test_a_signal_during_a_one_shot_reply_saves_it_and_ends_the_process(
        sig: signal.Signals, smollm2_path: Path) -> None:
    process = start_long_reply(smollm2_path, one_shot=True, deltas=5)
    sent_at = time.monotonic()
    process.send_signal(sig)
    assert process.stdout is not None
    streamed = "".join(e.get("text", "") for e in map(json.loads, process.stdout)
                       if e["event"] == "delta")
    assert process.wait(TIMEOUT) == 0
    assert time.monotonic() - sent_at < TIMEOUT
    saved = stored_reply()
    assert saved and len(saved) >= len(streamed) / 2
