"""Exporting conversations to Markdown and JSON, and naming the files."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest

from app.core.conversations.export import export_json, export_markdown, safe_filename
from app.core.conversations.store import NotFoundError, Store

HOSTILE_TEXTS = [
    "",
    "NUL \x00 in the middle\x00",
    "lone surrogates \ud800 and \udfff",
    "halves of a pair stored apart: \ud83d\ude00",
    "right-to-left \u202eevil\u202c שלום مرحبا",
    "zero\u200bwidth\u200djoiner 👨\u200d👩\u200d👧 and e\u0301",
    "# not a heading\n**You:**\n```\nunclosed fence",
    "quotes ' \" ` \\ and </script> {{ }}",
    "\r\nCRLF, \t tabs, \x1b[31m ANSI",
    "big: " + "abc🙂é" * 200_000,
]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "conversations.sqlite3") as opened:
        yield opened


def _joined(text: str) -> str:
    """``text`` as any JSON reader returns it: an escaped high+low pair is one character."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _readable(text: str) -> str:
    """``text`` as a UTF-8 file can hold it."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _hostile_conversations(store: Store) -> list[int]:
    ids = []
    for n, text in enumerate(HOSTILE_TEXTS):
        conversation = store.create_conversation(f"hostile {n}", f"/models/model-{n}.gguf",
                                                 {"system_prompt": text})
        store.add_message(conversation.id, "system", text)
        store.add_message(conversation.id, "user", text)
        reply = store.begin_reply(conversation.id)
        store.finish_reply(reply.id, text, {"tokens": 3, "model": f"other-{n}.gguf",
                                            "note": text})
        store.update_reply(store.begin_reply(conversation.id).id, text)  # cut off mid-reply
        ids.append(conversation.id)
    return ids


def test_json_export_round_trips_every_text_and_stat(store: Store) -> None:
    ids = _hostile_conversations(store)
    document = export_json(store, reversed(ids))
    assert document.isascii()  # writable in any encoding
    loaded = json.loads(document)
    assert [c["id"] for c in loaded["conversations"]] == list(reversed(ids))
    for exported in loaded["conversations"]:
        conversation = store.get_conversation(exported["id"])
        assert conversation is not None
        assert (exported["title"], exported["model"], exported["settings"]) == (
            conversation.title, conversation.model, conversation.settings)
        messages = store.messages(conversation.id)
        assert [m["role"] for m in exported["messages"]] == [m.role for m in messages]
        assert [m["text"] for m in exported["messages"]] == [_joined(m.text) for m in messages]
        assert [m["stats"] for m in exported["messages"]] == [m.stats for m in messages]
        assert [m["complete"] for m in exported["messages"]] == [True, True, True, False]
        for stamp, seconds in [(exported["created_at"], conversation.created_at),
                               (exported["updated_at"], conversation.updated_at),
                               *((m["created_at"], s.created_at)
                                 for m, s in zip(exported["messages"], messages, strict=True))]:
            moment = datetime.fromisoformat(stamp)
            assert moment.utcoffset() == timedelta(0)
            assert moment.timestamp() == pytest.approx(seconds, abs=1e-6)


def test_markdown_export_shows_each_text_verbatim_in_order(store: Store) -> None:
    ids = _hostile_conversations(store)
    document = export_markdown(store, ids)
    assert document.encode("utf-8")  # a file can hold it (no lone surrogate left)
    position = 0
    for n, conversation_id in enumerate(ids):
        system, user, reply, unfinished = (_readable(m.text)
                                           for m in store.messages(conversation_id))
        for block in (f"# hostile {n}\n\n- Model: model-{n}\n",
                      f"**System:**\n\n{system}\n\n",
                      f"**You:**\n\n{user}\n\n",
                      f"**Assistant (other-{n}):**\n\n{reply}\n\n",
                      f"**Assistant (model-{n}):**\n\n{unfinished}\n\n*(unfinished reply)*"):
            found = document.find(block, position)
            assert found >= 0, f"conversation {n}: {block[:40]!r} is missing or out of order"
            position = found + len(block)


def test_markdown_export_reads_as_a_transcript(store: Store) -> None:
    conversation = store.create_conversation("Capital\ncities", "C:\\models\\SmolLM2.gguf")
    store.add_message(conversation.id, "user", "What is the capital of France?")
    store.add_message(conversation.id, "assistant", "Paris.")
    lines = export_markdown(store, [conversation.id]).splitlines()
    assert lines[0] == "# Capital cities"
    assert "- Model: SmolLM2" in lines
    (started,) = (line for line in lines if line.startswith("- Started: "))
    moment = datetime.strptime(started, "- Started: %Y-%m-%d %H:%M UTC").replace(tzinfo=UTC)
    assert abs(moment.timestamp() - conversation.created_at) < 60
    transcript = [line for line in lines[lines.index("**You:**"):] if line]
    assert transcript == ["**You:**", "What is the capital of France?",
                          "**Assistant (SmolLM2):**", "Paris."]


def test_exporting_a_missing_conversation_says_so(store: Store) -> None:
    gone = store.create_conversation("gone", "m")
    store.delete_conversation(gone.id)
    for export in (export_json, export_markdown):
        with pytest.raises(NotFoundError, match="no longer exists"):
            export(store, [gone.id])
    assert json.loads(export_json(store, []))["conversations"] == []


RESERVED = {"CON", "PRN", "AUX", "NUL", "COM1", "COM9", "LPT1", "LPT9", "CONIN$", "CONOUT$"}
TITLES = [
    "../../etc/passwd", "..\\..\\Windows\\System32", "/absolute", "C:\\x", "C:", "a/b\\c",
    "CON", "con", "Con.txt", "NUL .md", "COM1", "lpt9.tar",
    "\uff23\uff2f\uff2e", "\uff43\uff4f\uff4e.txt",  # full-width "CON", "con.txt"
    "\uff0e\uff0e\uff0f\uff0e\uff0e\uff0fetc",  # full-width "../../etc"
    ".hidden", "..", ".", "...", " . . ", "", "   ", "\x00", "\n\t\r", "\u202etxt.exe",
    "x" * 500, "🙂" * 500, "é" * 300, "trailing dot.", "trailing space ",
    'what? <a|b> "c" *d*', "lone \udc80 surrogate", "NUL\x00byte", "a" * 254 + ".",
]


@pytest.mark.parametrize("title", TITLES, ids=range(len(TITLES)))
def test_a_file_name_never_leaves_its_folder(title: str, tmp_path: Path) -> None:
    name = safe_filename(title, ".md")
    assert name.endswith(".md")
    stem = name.removesuffix(".md")
    assert stem.strip(" .")
    assert PurePosixPath(name).name == name == PureWindowsPath(name).name
    assert not PureWindowsPath(name).drive
    assert not name.startswith(".")
    assert not name.endswith((" ", "."))
    assert not set(name) & set('<>:"/\\|?*')
    assert not any(unicodedata.category(ch).startswith("C") for ch in name)
    assert stem.split(".")[0].strip().upper() not in RESERVED
    assert len(name.encode("utf-8")) <= 255
    folded = unicodedata.normalize("NFKC", name)  # what a tool folding look-alikes sees
    assert not set(folded) & set('<>:"/\\|?*')
    assert not folded.startswith(".")
    assert folded.split(".")[0].strip().upper() not in RESERVED
    folder = tmp_path / "exports"
    folder.mkdir()
    (folder / name).write_text("x", encoding="utf-8")
    assert [p.name for p in folder.iterdir()] == [name]


def test_a_plain_title_keeps_its_words() -> None:
    assert safe_filename("Trip to Paris", ".md") == "Trip to Paris.md"
    assert safe_filename("Ünïcödé 東京 trip", ".json") == "Ünïcödé 東京 trip.json"
    assert safe_filename("what/why", ".md") == "what why.md"


def test_an_odd_suffix_is_refused() -> None:
    for suffix in ("md", "/../x", ".m/d", "", ". md"):
        with pytest.raises(ValueError, match="suffix"):
            safe_filename("t", suffix)
