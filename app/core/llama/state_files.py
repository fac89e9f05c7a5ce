"""Sequence states on disk: what lets a conversation come back fast after the memory
tier let it go, or after a restart.

One file per state, in Fireside's cache folder::

    MAGIC | header length (4 bytes, little-endian) | header (JSON) | tokens (int32) | data

The header names the model the state was made with (file and load options), the
llama.cpp build that made it, the conversation it belongs to, the sizes, and a CRC-32
of the tokens and the data. A file is used only if all of it matches: a truncated,
corrupted, foreign or older file is deleted before it comes near the sequence.

Writes happen on a thread of this folder's own, so neither the inference thread nor
the window waits for the disk; a write goes to a temporary name first, so a crash or
a full disk never leaves a half file under a real name. Past the budget, the least
recently used files go first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import queue
import struct
import threading
import time
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from app.core.llama.saved_state import GIB, ModelKey, SavedState, new_bytes

logger = logging.getLogger(__name__)

MAGIC = b"FIRESIDE STATE\n"
VERSION = 1
DEFAULT_BUDGET = 4 * GIB
SUFFIX = ".state"
_LENGTH = struct.Struct("<I")
PART_AGE_S = 600  # a temporary file this old is no write under way


@dataclass(frozen=True)
class StateFile:
    path: Path
    model: ModelKey
    tokens: tuple[int, ...]
    owner: int | None
    size: int  # of the whole file


class StateFolder:
    """The states kept on disk: an index in memory, the files in ``folder``."""

    def __init__(self, folder: Path, stamp: str, budget: int = DEFAULT_BUDGET) -> None:
        self.folder = folder
        self.stamp = stamp  # the llama.cpp build: a state means nothing to another one
        self.budget = budget
        self._index: OrderedDict[Path, StateFile] = OrderedDict()  # least recent first
        self._unlisted: list[Path] = []  # taken out of the index, their files still there
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            logger.warning("sequence states are kept in memory only: %s", err)
            self.usable = False
            return
        self.usable = True
        self._scan()
        self._writer = threading.Thread(target=self._write_jobs, name="fireside-states",
                                        daemon=True)
        self._writer.start()

    # -- any thread ----------------------------------------------------------------------

    @property
    def used(self) -> int:
        with self._lock:
            return sum(entry.size for entry in self._index.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._index)

    def entries(self, model: ModelKey | None) -> list[StateFile]:
        """The states of ``model`` (None: all of them)."""
        with self._lock:
            return [entry for entry in self._index.values()
                    if model is None or entry.model == model]

    def save(self, state: SavedState) -> None:
        """Write ``state`` in the background; states it makes redundant go."""
        with self._lock:
            same = [path for path, entry in self._index.items()
                    if entry.model == state.model and entry.tokens == state.tokens]
            for path in same:  # written already: now the most recent
                self._index.move_to_end(path)
        if same:
            with contextlib.suppress(OSError):
                os.utime(same[0])
            return
        self._later(lambda: self._write(state))

    def read(self, entry: StateFile) -> SavedState | None:
        """The state in ``entry``'s file, checked whole; None (and the file deleted) if
        it is not exactly what its header says."""
        try:
            state = self._read(entry)
        except (OSError, ValueError, KeyError, TypeError, struct.error) as err:
            logger.warning("sequence state %s not used: %s", entry.path.name, err)
            self._delete(lambda kept: kept.path == entry.path)
            with contextlib.suppress(OSError):
                entry.path.unlink()
            return None
        with self._lock:
            if entry.path in self._index:
                self._index.move_to_end(entry.path)
        with contextlib.suppress(OSError):
            os.utime(entry.path)  # the least recently used go first, after a restart too
        return state

    def _read(self, entry: StateFile) -> SavedState:
        with entry.path.open("rb") as file:
            header = _read_header(file)
            tokens_bytes = file.read(4 * header["n_tokens"])
            data = new_bytes(header["data_size"])
            got = file.readinto(memoryview(data).cast("B"))
            extra = file.read(1)
        if got != len(data) or extra or len(tokens_bytes) != 4 * header["n_tokens"]:
            raise ValueError("its size is not the one its header says")
        if zlib.crc32(data, zlib.crc32(tokens_bytes)) != header["crc32"]:
            raise ValueError("its checksum does not match")
        tokens = struct.unpack(f"<{header['n_tokens']}i", tokens_bytes)
        if tokens != entry.tokens or self._model(header) != entry.model:
            raise ValueError("it changed since it was listed")
        return SavedState(entry.model, entry.tokens, data, entry.owner)

    def forget(self, owner: int) -> None:
        """Delete the states of conversation ``owner`` (now, and any write queued)."""
        self._delete_now_and_later(lambda entry: entry.owner == owner)

    def clear(self) -> None:
        self._delete_now_and_later(lambda entry: True)

    def _delete_now_and_later(self, which: Callable[[StateFile], bool]) -> None:
        self._delete(which, unlink=False)  # gone from the index (and the count) at once
        self._later(lambda: self._delete(which))
        self._later(self._delete_unlisted)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait for the writes queued so far; True if they are done."""
        done = threading.Event()
        self._later(done.set)
        return done.wait(timeout) if self._writer is not None and self._writer.is_alive() \
            else True

    def close(self, timeout: float) -> bool:
        """Finish the writes queued, for at most ``timeout`` seconds; True if done. What
        is not written by then is simply not kept (no half file is left under a name)."""
        if self._writer is None:
            return True
        self._jobs.put(None)
        self._writer.join(timeout)
        return not self._writer.is_alive()

    # -- the writer's thread -------------------------------------------------------------

    def _later(self, job: Callable[[], None]) -> None:
        if self._writer is not None and self._writer.is_alive():
            self._jobs.put(job)

    def _write_jobs(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except Exception:  # a cache: a failed job loses only what it was saving
                logger.exception("sequence state job failed")

    def _write(self, state: SavedState) -> None:
        tokens = struct.pack(f"<{len(state.tokens)}i", *state.tokens)
        header = json.dumps({
            "version": VERSION, "stamp": self.stamp, "model": dataclasses.asdict(state.model),
            "owner": state.owner, "n_tokens": len(state.tokens),
            "data_size": len(state.data), "crc32": zlib.crc32(state.data, zlib.crc32(tokens)),
        }).encode()
        path = self.folder / f"{uuid.uuid4().hex}{SUFFIX}"
        partial = path.with_suffix(".part")
        try:
            with partial.open("wb") as file:
                file.write(MAGIC + _LENGTH.pack(len(header)) + header)
                file.write(tokens)
                file.write(state.data)
            partial.replace(path)
        except OSError as err:  # a full disk: this state is not kept, nothing else changes
            logger.warning("a sequence state was not saved: %s", err)
            with contextlib.suppress(OSError):
                partial.unlink()
            return
        entry = StateFile(path, state.model, state.tokens, state.owner,
                          len(MAGIC) + _LENGTH.size + len(header) + len(tokens) + len(state.data))
        self._delete(lambda kept: kept.model == state.model
                     and state.tokens[:len(kept.tokens)] == kept.tokens)
        with self._lock:
            self._index[path] = entry
        self._evict()

    def _evict(self) -> None:
        while True:
            with self._lock:
                if sum(e.size for e in self._index.values()) <= self.budget or not self._index:
                    return
                path, _ = self._index.popitem(last=False)
            with contextlib.suppress(OSError):
                path.unlink()

    def _delete(self, which: Callable[[StateFile], bool], unlink: bool = True) -> None:
        with self._lock:
            gone = [path for path, entry in self._index.items() if which(entry)]
            for path in gone:
                del self._index[path]
                if not unlink:
                    self._unlisted.append(path)
        for path in gone if unlink else ():
            with contextlib.suppress(OSError):
                path.unlink()

    def _delete_unlisted(self) -> None:
        with self._lock:
            gone, self._unlisted = self._unlisted, []
        for path in gone:
            with contextlib.suppress(OSError):
                path.unlink()

    # -- reading the folder --------------------------------------------------------------

    def _scan(self) -> None:
        """List the usable files, least recently used first; delete the others."""
        found: list[tuple[float, StateFile]] = []
        for path in self.folder.iterdir():
            if path.suffix == ".part" and _older_than(path, PART_AGE_S):
                with contextlib.suppress(OSError):  # a write cut short (the app was killed)
                    path.unlink()
            if path.suffix != SUFFIX:
                continue
            try:
                with path.open("rb") as file:
                    header = _read_header(file)
                    if header["version"] != VERSION or header["stamp"] != self.stamp:
                        raise ValueError("made by another version")
                    n_tokens = header["n_tokens"]
                    tokens = struct.unpack(f"<{n_tokens}i", file.read(4 * n_tokens))
                    expected = file.tell() + header["data_size"]
                stat = path.stat()
                if stat.st_size != expected:
                    raise ValueError("its size is not the one its header says")
                entry = StateFile(path, self._model(header), tuple(tokens), header["owner"],
                                  stat.st_size)
            except (OSError, ValueError, KeyError, TypeError, struct.error) as err:
                logger.info("sequence state %s not used: %s", path.name, err)
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            found.append((stat.st_mtime, entry))
        for _, entry in sorted(found, key=lambda item: item[0]):
            self._index[entry.path] = entry
        self._evict()

    @staticmethod
    def _model(header: dict[str, Any]) -> ModelKey:
        model = header["model"]
        if not isinstance(model, dict):
            raise ValueError("no model in its header")
        return ModelKey(**model)


def _read_header(file: BinaryIO) -> dict[str, Any]:
    if file.read(len(MAGIC)) != MAGIC:
        raise ValueError("not a Fireside state")
    (length,) = _LENGTH.unpack(file.read(_LENGTH.size))
    if length > 1 << 20:
        raise ValueError("its header is too long")
    header = json.loads(file.read(length))
    if not isinstance(header, dict):
        raise ValueError("its header is not an object")
    return header


def _older_than(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime > seconds
    except OSError:
        return False
