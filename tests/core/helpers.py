"""Small helpers shared by the core tests (no stand-ins: they drive the real engine)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import NoReturn

import pytest

from app.core.conversations.store import Store
from app.core.llama.engine import Engine, PromptPlan, Reply, Sampling, Session
from app.core.reply import templates
from app.core.reply.pieces import Taken
from tests.streams import Taker

GREEDY = Sampling(temperature=0.0, max_tokens=24, seed=1)
PROBE = "What is the capital of France?"


def ask(engine: Engine, messages: Sequence[dict[str, str]], sampling: Sampling = GREEDY,
        system_prompt: str | None = None, taken: list[Taken] | None = None) -> Reply:
    """Render ``messages`` with the loaded model's template and wait for the reply;
    ``taken``: filled with what a face took of it as it streamed, batch by batch."""

    def build(session: Session) -> PromptPlan:
        segments = templates.render(session.template, messages, system_prompt=system_prompt)
        return PromptPlan(session.encode(segments))

    handle = engine.generate(build, sampling)
    taker = Taker(handle.pieces)
    reply = handle.future.result(timeout=120)
    if taken is not None:
        taken.extend(taker.wait().batches)
    return reply


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def fresh_process_reply(model: Path, prompt: str, max_tokens: int = 24,
                        env: dict[str, str] | None = None) -> str:
    """The greedy reply of a brand-new ``fireside chat`` process."""
    result = subprocess.run(
        [sys.executable, "-m", "app", "chat", "--json", "--model", str(model),
         "--temperature", "0", "--seed", "1", "--max-tokens", str(max_tokens), prompt],
        capture_output=True, text=True, timeout=180, env=env or dict(os.environ), check=True)
    events = [json.loads(line) for line in result.stdout.splitlines()]
    replies = [e for e in events if e["event"] == "reply"]
    assert len(replies) == 1, result.stdout + result.stderr
    text: str = replies[0]["text"]
    return text


# Set by .ci/run: there a disk-full test that cannot mount its disk fails instead of
# skipping, so a green CI always includes them.
DISK_FULL_REQUIRED = "FIRESIDE_REQUIRE_DISK_FULL_TESTS"


def _cannot_fill_a_disk(why: str) -> NoReturn:
    if os.environ.get(DISK_FULL_REQUIRED) == "1":
        pytest.fail(f"{why} ({DISK_FULL_REQUIRED}=1: the disk-full tests must run)")
    pytest.skip(why)


@contextmanager
def small_disk(folder: Path, size: str = "2m") -> Iterator[Path]:
    """A real tmpfs of ``size`` mounted at ``folder``: a disk that fills up."""
    if sys.platform != "linux" or os.geteuid() != 0 or shutil.which("mount") is None:
        _cannot_fill_a_disk("filling a real disk needs root on Linux to mount a small tmpfs")
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(folder)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        _cannot_fill_a_disk(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def fill_disk(folder: Path) -> Path:
    """Write a file in ``folder`` until its disk has no byte left; returns the file."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError as err:
                assert err.errno == errno.ENOSPC, err
    finally:
        os.close(fd)
    return filler


def rss_bytes() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


STORY = "Write a very long story about the sea."


def sigint_not_ignored() -> None:
    """Let SIGINT reach the children as a terminal user's Ctrl-C would.

    A shell starts background jobs with SIGINT ignored and children inherit that, while
    a handled signal is reset to the default at exec: handle it here.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def start_long_reply(model: Path, one_shot: bool = False,
                     deltas: int = 10) -> subprocess.Popen[str]:
    """`fireside chat --json` streaming a long reply (one-shot, or the first of a stdin
    session); returns once ``deltas`` pieces have arrived. Give it an instruct model:
    Gemma 3 270M is a base model whose "story" often ends after a few dozen tokens,
    before a signal sent at the tenth piece lands."""
    sigint_not_ignored()
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "chat", "--json", "--model", str(model),
         "--temperature", "0.8", "--max-tokens", "400", *([STORY] if one_shot else [])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=dict(os.environ))
    assert process.stdin is not None and process.stdout is not None
    if not one_shot:
        process.stdin.write(STORY + "\n")
        process.stdin.flush()
    seen = 0
    while seen < deltas:
        if json.loads(process.stdout.readline())["event"] == "delta":
            seen += 1
    return process


def stored_reply() -> str:
    """The reply of the only conversation, as `fireside export` gives it."""
    exported = subprocess.run(
        [sys.executable, "-m", "app", "export", "--format", "json", "--all"],
        capture_output=True, text=True, check=True, env=dict(os.environ))
    (conversation,) = json.loads(exported.stdout)["conversations"]
    text: str = conversation["messages"][1]["text"]
    return text


def database_with_a_damaged_page(path: Path, messages_root: bool = False) -> None:
    """A real conversation database with one page overwritten by garbage: a page in the
    middle of the file, or the root page of the messages table (which opening never
    reads)."""
    with Store(path) as first:
        conversation = first.create_conversation("t", "m")
        for i in range(300):
            first.add_message(conversation.id, "user", f"message {i} " * 20)
    with closing(sqlite3.connect(path)) as db:
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        if messages_root:
            (root,) = db.execute(
                "SELECT rootpage FROM sqlite_schema WHERE name = 'messages'").fetchone()
            page = root - 1
        else:
            page = db.execute("PRAGMA page_count").fetchone()[0] // 2
    data = bytearray(path.read_bytes())
    start = page * page_size
    data[start:start + page_size] = bytes((i * 7 + 3) % 256 for i in range(page_size))
    path.write_bytes(bytes(data))
