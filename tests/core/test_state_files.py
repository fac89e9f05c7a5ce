"""Conversations come back fast after a restart: the sequence's states on disk, used only
when whole and right, deleted with their conversation, and never a reason to fail."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.core import paths, settings
from app.core.fireside import Fireside
from app.core.llama.engine import Engine
from app.core.llama.seq_states import StateCache
from app.core.llama.state_files import MAGIC
from app.core.reply.replies import ReplyStats
from tests.core.helpers import fill_disk, small_disk
from tests.core.test_seq_states import long_conversation, regenerate, say

NEXT = "Which of those facts is the most surprising?"

Opener = Callable[..., Fireside]


@pytest.fixture
def open_core() -> Iterator[Opener]:
    """Opens a core as the app does (states in the cache folder unless ``engine`` says
    otherwise); each is closed at the end, as quitting would."""
    opened: list[Fireside] = []

    def open_one(engine: Engine | None = None) -> Fireside:
        prefs = settings.load().settings
        prefs.temperature, prefs.seed, prefs.max_tokens, prefs.context_size = 0.0, 1, 24, 4096
        core = Fireside.open(prefs=prefs, engine=engine)
        opened.append(core)
        return core

    yield open_one
    for core in opened:
        core.close()


def folder() -> Path:
    return paths.cache_dir() / "states"


def files() -> list[Path]:
    return sorted(folder().iterdir()) if folder().exists() else []


def cache(core: Fireside) -> StateCache:
    return core.engine.local.states  # the engine's own cache


def quit_with_a_long_conversation(open_core: Opener, model: Path) -> int:
    core = open_core()
    core.load(model).result()
    conversation = long_conversation(core)
    core.close()  # quitting keeps the conversation left open
    return conversation


def come_back(open_core: Opener, model: Path, conversation: int,
              engine: Engine | None = None) -> tuple[str, ReplyStats]:
    core = open_core(engine)
    core.load(model).result()
    core.open_conversation(conversation).result()
    return say(core, NEXT)


def full_reading(open_core: Opener, model: Path, conversation: int) -> str:
    """The last reply written again with nothing kept (an engine with no folder)."""
    core = open_core(Engine())
    core.load(model).result()
    core.open_conversation(conversation).result()
    text, stats = regenerate(core)
    assert stats.restored_tokens == 0
    return text


def never_left(open_core: Opener, model: Path) -> str:
    """The same conversation held again in an engine that keeps nothing, and asked at
    once: what ``come_back`` must have got (test_seq_states.never_left says why not the
    whole conversation read again)."""
    core = open_core(Engine())
    core.load(model).result()
    long_conversation(core)
    text, stats = say(core, NEXT)
    assert stats.restored_tokens == 0
    return text


@pytest.mark.parametrize("model", ["smollm2_path", "gemma_path"])
def test_after_a_restart_the_conversation_comes_back_from_disk_and_answers_the_same(
        open_core: Opener, model: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(model)
    conversation = quit_with_a_long_conversation(open_core, path)
    assert len(files()) == 1
    text, stats = come_back(open_core, path, conversation)
    assert stats.restored_tokens > 100
    assert text == never_left(open_core, path)  # byte for byte


def test_after_a_model_switch_and_a_restart_the_first_model_restores_the_same_reply(
        open_core: Opener, smollm2_path: Path, gemma_path: Path) -> None:
    core = open_core()
    core.load(smollm2_path).result()
    conversation = long_conversation(core)
    core.load(gemma_path).result()  # SmolLM2's sequence is kept as it goes
    core.close()
    core = open_core()
    core.load(smollm2_path).result()
    core.open_conversation(conversation).result()
    text, stats = regenerate(core)
    assert stats.restored_tokens > 100
    core.close()
    core = open_core(Engine())
    core.load(smollm2_path).result()
    core.open_conversation(conversation).result()
    full_text, full = regenerate(core)
    assert full.restored_tokens == 0 and text == full_text


def truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size - 1000)


def flip_a_byte(path: Path) -> None:
    with path.open("r+b") as file:
        file.seek(-5000, os.SEEK_END)
        byte = file.read(1)
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([byte[0] ^ 0xFF]))


def foreign(path: Path) -> None:
    path.write_bytes(os.urandom(path.stat().st_size))


def older_version(path: Path) -> None:
    data = path.read_bytes()
    start = len(MAGIC) + 4
    (length,) = struct.unpack("<I", data[len(MAGIC):start])
    header = json.loads(data[start:start + length])
    header["stamp"] = "llama-cpp-python 0.2.0"
    new = json.dumps(header).encode()
    path.write_bytes(MAGIC + struct.pack("<I", len(new)) + new + data[start + length:])


@pytest.mark.parametrize("damage", [truncate, flip_a_byte, foreign, older_version])
def test_a_damaged_state_file_is_refused_and_the_reply_comes_normally(
        open_core: Opener, smollm2_path: Path, damage: Callable[[Path], None]) -> None:
    conversation = quit_with_a_long_conversation(open_core, smollm2_path)
    [state] = files()
    damage(state)
    text, stats = come_back(open_core, smollm2_path, conversation)
    assert stats.restored_tokens == 0  # read in full, never put into the sequence
    assert not state.exists()
    assert text == full_reading(open_core, smollm2_path, conversation)


def test_the_least_recent_file_goes_when_the_disk_budget_is_spent(
        open_core: Opener, smollm2_path: Path) -> None:
    # Nothing stays in memory, so every return is from the disk.
    core = open_core(Engine(folder(), memory_budget=0))
    core.load(smollm2_path).result()
    first = long_conversation(core)
    core.new_chat().result()
    disk = cache(core).disk
    assert disk is not None and disk.flush() and len(disk) == 1
    disk.budget = disk.used + disk.used // 2  # room for one conversation
    second = long_conversation(core)
    core.new_chat().result()
    assert disk.flush() and len(disk) == 1  # the first one went
    assert len(files()) == 1
    core.open_conversation(second).result()
    assert say(core, NEXT)[1].restored_tokens > 100
    core.open_conversation(first).result()
    text, stats = say(core, NEXT)
    assert stats.restored_tokens == 0 and text  # read again in full, answered all the same


def test_deleting_a_conversation_deletes_what_was_kept_of_it(
        open_core: Opener, smollm2_path: Path) -> None:
    core = open_core()
    core.load(smollm2_path).result()
    kept = long_conversation(core)
    core.new_chat().result()
    say(core, "Hello, I am Ana.")  # another history
    deleted = long_conversation(core)
    core.new_chat().result()  # both are kept now, in memory and on disk
    disk = cache(core).disk
    assert disk is not None and disk.flush() and cache(core).usage().histories == 2
    core.delete_conversation(deleted).result()
    assert disk.flush() and cache(core).usage().histories == 1 and len(files()) == 1
    # The open one too: its history leaves the sequence, and nothing is kept at exit.
    core.open_conversation(kept).result()
    assert say(core, NEXT)[1].restored_tokens > 100
    core.delete_conversation(kept).result()
    core.close()
    assert files() == []


def test_a_full_disk_skips_the_save_and_loses_nothing(
        open_core: Opener, smollm2_path: Path, tmp_path: Path) -> None:
    with small_disk(tmp_path / "small", "1m") as small:
        (small / "states").mkdir()
        fill_disk(small)
        core = open_core(Engine(small / "states"))
        core.load(smollm2_path).result()
        first = long_conversation(core)
        core.new_chat().result()
        disk = cache(core).disk
        assert disk is not None and disk.flush()
        assert len(disk) == 0 and list((small / "states").iterdir()) == []
        say(core, "What is a harbour?")
        core.open_conversation(first).result()
        text, stats = say(core, NEXT)
        assert stats.restored_tokens > 100  # memory still had it
        assert core.store.get_conversation(first) is not None and text
