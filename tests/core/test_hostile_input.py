"""Hostile input: huge, invisible, malformed and path-like text never crashes, is never
lost, and comes back exactly as it went in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.conversations.chat import ChatService
from app.core.conversations.export import _readable, export_json, export_markdown, safe_filename
from app.core.conversations.store import Store
from app.core.llama.engine import PromptTooLong, Sampling
from tests.core.helpers import GREEDY, PROBE
from tests.reference import Reference

TIMEOUT = 120
SHORT = Sampling(temperature=0.0, max_tokens=4, seed=1)
HUGE = ("All work and no play makes a dull day. " * 30_000)[:1_000_000]  # 1 MB
HOSTILE = [
    "NUL \x00 inside and at the end\x00",
    "lone surrogates \ud800 and \udfff",
    "right-to-left \u202eevil\u202c שלום مرحبا",
    "zero\u200bwidth\u200d joiner 👨\u200d👩\u200d👧 e\u0301 \ufeff",
    "\r\nCRLF \t tab \x1b[31m ANSI \x7f DEL",
]


def test_a_1_mb_paste_is_refused_clearly_and_kept(chat: ChatService, reference: Reference,
                                                  smollm2_path: Path) -> None:
    with pytest.raises(PromptTooLong, match="too long for the model's context"):
        chat.send(HUGE, GREEDY).future.result(TIMEOUT)
    conversation_id = chat.conversation_id
    assert conversation_id is not None
    # The pasted text is kept (the user can copy it back), with no empty reply after it.
    (kept,) = chat.store.messages(conversation_id)
    assert kept.role == "user" and kept.text == HUGE
    # The chat goes on: the oversized turn is left out of the prompt, not the new one.
    result = chat.send(PROBE, GREEDY).future.result(TIMEOUT)
    # Answered as a new chat with only the question would be: the 1 MB turn is not in it.
    assert result.reply.stats.dropped_turns == 1
    assert result.reply.text == reference.reply(smollm2_path, PROBE, GREEDY)
    assert [m.text for m in chat.store.messages(conversation_id)] == \
        [HUGE, PROBE, result.reply.text]


def test_a_1_mb_line_in_the_terminal_gets_a_message_and_the_session_goes_on(
        reference: Reference, smollm2_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app", "chat", "--json", "--temperature", "0",
         "--max-tokens", "16"], input=f"{HUGE}\n{PROBE}\n", capture_output=True, text=True,
        timeout=300, check=False, env=dict(os.environ))
    assert result.returncode == 0, result.stderr[-2000:]
    stream = [json.loads(line) for line in result.stdout.splitlines()]
    (error,) = (e for e in stream if e["event"] == "error")
    assert "too long" in error["message"] and len(error["message"]) < 500
    answer = reference.reply(smollm2_path, PROBE, Sampling(temperature=0.0, max_tokens=16))
    assert stream[-1]["event"] == "reply" and stream[-1]["text"] == answer
    assert "Traceback" not in result.stderr


def test_hostile_text_is_chatted_stored_and_exported_faithfully(chat: ChatService) -> None:
    for text in HOSTILE:
        result = chat.send(text, SHORT).future.result(TIMEOUT)
        assert result.saved
    conversation_id = chat.conversation_id
    assert conversation_id is not None
    title = "title \x00 \ud800 \u202e ../../etc"
    chat.store.rename_conversation(conversation_id, title)
    path = chat.store.path
    chat.store.close()
    with Store(path) as reopened:
        stored = reopened.messages(conversation_id)
        assert [m.text for m in stored if m.role == "user"] == HOSTILE
        document = json.loads(export_json(reopened, [conversation_id]))
        (conversation,) = document["conversations"]
        assert conversation["title"] == title
        assert [m["text"] for m in conversation["messages"]] == [m.text for m in stored]
        markdown = export_markdown(reopened, [conversation_id])
    markdown.encode("utf-8")  # writable as a file: no lone surrogates left in it
    for text in HOSTILE:
        assert _readable(text) in markdown


FILENAME_PARTS = st.sampled_from(
    ["..", ".", "/", "\\", "../", "..\\", "C:", "\x00", "CON", "con", "NUL", "COM1", "lpt9",
     "CONIN$", "\u202e", "\u200b", "\ufeff", " ", "\uff0e", "\uff0f", "~", "$HOME", "*", "?",
     "\ud800", "\n", "é", "🙂", "a", "x" * 300])


@settings(max_examples=300, deadline=None)
@given(title=st.text() | st.lists(FILENAME_PARTS, max_size=12).map("".join))
def test_a_name_from_conversation_text_never_leaves_its_folder(
        title: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    name = safe_filename(title, ".md")
    stem = name.removesuffix(".md")
    assert stem.strip(" .") and not name.startswith(".")
    assert PurePosixPath(name).name == name == PureWindowsPath(name).name
    assert not PureWindowsPath(name).drive and not PureWindowsPath(name).root
    assert len(name.encode("utf-8")) <= 255 and len(name.encode("utf-16-le")) <= 510
    assert not any(unicodedata.category(ch).startswith("C") for ch in name)
    for form in (name, unicodedata.normalize("NFKC", name)):
        assert not set(form) & set('<>:"/\\|?*')
        assert form.split(".")[0].strip().upper() not in {
            "CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$",
            *(f"{p}{n}" for p in ("COM", "LPT") for n in "0123456789¹²³")}
    folder = tmp_path_factory.mktemp("exports")
    written = folder / name
    written.write_text("x", encoding="utf-8")
    assert written.resolve().parent == folder.resolve()
    assert [p.name for p in folder.iterdir()] == [name]
