"""One file fetched from the Hub so that nothing can make it start from zero: bytes go
to ``NAME.part`` beside the target, with ``NAME.part.json`` saying which file (repo,
commit, sha256, the server's ETag) they belong to. A cut connection, a stall, the app
quit or killed: the next try asks for the rest (``Range``) and only for the same file
(``If-Range``; an ETag that changed, or a changed file's new sha256 starts it again, never
a splice of two versions). The sha256 is checked before one rename puts it in place.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import queue
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from app.core import paths
from app.core.hub.access import BUSY, HubAccess, HubError, refusal, retry_after
from app.core.llama.memory import format_bytes

if TYPE_CHECKING:
    import httpx2

CHUNK = 1 << 20
DISK_SPARE = 16 << 20  # left free on the disk besides the file
MAX_FAILURES = 8  # tries in a row that bring no byte before the download gives up
PART, PART_INFO, LOCK = ".part", ".part.json", ".lock"


class Stopped(Exception):
    """The user paused or cancelled; what was fetched is kept (paused) or removed."""


class Stopper:
    """What the user asked of a download ("pause", "cancel"), and the way to end its
    connection at once: a silent server must not keep a pause waiting for a byte."""

    def __init__(self) -> None:
        self.why: str | None = None
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()

    def ask(self, why: str) -> None:
        with self._lock:
            self.why = why
            held = self._socket
        if held is not None:
            with contextlib.suppress(OSError):
                held.shutdown(socket.SHUT_RDWR)  # wakes the read blocked on it

    def watch(self, held: socket.socket | None) -> None:
        with self._lock:
            self._socket = held
        if held is not None and self.why:
            self.ask(self.why)


class FileChanged(HubError):
    """The file on the Hub is not the one the kept bytes came from: they were removed."""


@dataclass(frozen=True)
class Wanted:
    repo: str
    commit: str
    name: str  # the file's path in the repository
    size: int
    sha256: str | None

    def same_file(self, other: Wanted) -> bool:
        if self.sha256 and other.sha256:
            return (self.repo, self.name, self.sha256) == (other.repo, other.name, other.sha256)
        return self == other


def target_path(models_dir: Path, repo: str, name: str) -> Path:
    """Where a repository's file goes: ``<models>/<owner>/<repo>/<name>``; HubError for a
    name that would leave that folder (``..``, an absolute path, a backslash)."""
    parts = PurePosixPath(name).parts
    if (not parts or name.startswith("/") or "\\" in name or "\0" in name
            or any(p in ("..", ".") or ":" in p for p in parts)):
        raise HubError(f"refused the file name {name!r}: it would be written outside the "
                       "models folder")
    owner, _, repo_name = repo.partition("/")
    return models_dir.joinpath(owner, repo_name, *parts)


def part_of(target: Path) -> Path:
    return target.with_name(target.name + PART)


def info_of(target: Path) -> Path:
    return target.with_name(target.name + PART_INFO)


@dataclass(frozen=True)
class Kept:
    """What a ``.part`` beside a target holds: which file, how many bytes, its ETag."""

    wanted: Wanted
    size: int
    etag: str | None


def kept(target: Path) -> Kept | None:
    """What a ``.part`` beside ``target`` holds, if its record can be read."""
    try:
        data = json.loads(info_of(target).read_text(encoding="utf-8"))
        wanted = Wanted(**{k: data[k] for k in ("repo", "commit", "name", "size", "sha256")})
        return Kept(wanted, part_of(target).stat().st_size, data.get("etag"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def fetch(access: HubAccess, client: httpx2.Client, wanted: Wanted, target: Path, *,
          on_bytes: Callable[[int], None], stop: Stopper) -> str:
    """Fetch ``wanted`` to ``target``; its sha256. ``on_bytes`` hears of each byte (those
    kept from before first); ``stop`` says "pause" or "cancel" when the user does."""
    from filelock import FileLock, Timeout  # noqa: PLC0415 - huggingface_hub's own

    target.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(target.with_name(target.name + LOCK)))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise HubError(f"{target.name} is being downloaded already (by another "
                       "Fireside)") from None
    try:
        return _Transfer(access, client, wanted, target, on_bytes=on_bytes, stop=stop).run()
    finally:
        lock.release()
        with contextlib.suppress(OSError):
            os.unlink(lock.lock_file)


class _Transfer:
    def __init__(self, access: HubAccess, client: httpx2.Client, wanted: Wanted,
                 target: Path, *, on_bytes: Callable[[int], None], stop: Stopper) -> None:
        self.access, self.client, self.wanted, self.target = access, client, wanted, target
        self.on_bytes, self.stop = on_bytes, stop
        self.part, self.info = part_of(target), info_of(target)
        self.etag: str | None = None
        self.hasher = hashlib.sha256()
        self.have = 0

    def run(self) -> str:
        self._take_over_kept()
        self._check_space()
        failures = 0
        url = self.access.file_url(self.wanted.repo, self.wanted.commit, self.wanted.name)
        while self.have < self.wanted.size:
            self._check_stop()
            before = self.have
            try:
                wait = self._request(url, failures)
            except OSError as error:
                raise self._disk_error(error) from None
            except _transport_errors() as error:
                self._check_stop()  # a pause ends the connection: not a failure
                wait = retry_after({}, failures)
                if failures + 1 >= MAX_FAILURES:
                    raise HubError(
                        f"{self.wanted.name}: the connection keeps failing "
                        f"({type(error).__name__}); {format_bytes(self.have)} of "
                        f"{format_bytes(self.wanted.size)} are kept, and the next try "
                        "goes on from there") from None
            failures = 0 if self.have > before else failures + 1
            if wait:
                self._sleep(wait)
        return self._finish()

    def _take_over_kept(self) -> None:
        """Go on from a ``.part`` of this very file; anything else starts again."""
        before = kept(self.target)
        if before is not None and before.wanted.same_file(self.wanted) \
                and before.size <= self.wanted.size:
            self.etag = before.etag
            with self.part.open("rb") as held:
                while piece := held.read(CHUNK):
                    self.hasher.update(piece)
            self.have = before.size
            if before.size:
                self.on_bytes(before.size)
            return
        self._start_again()

    def _start_again(self) -> None:
        self.part.write_bytes(b"")
        self.hasher, self.have, self.etag = hashlib.sha256(), 0, None
        self._save_info()

    def _save_info(self) -> None:
        paths.replace_text(self.info, json.dumps(asdict(self.wanted) | {"etag": self.etag}))

    def _check_space(self) -> None:
        free = shutil.disk_usage(self.target.parent).free
        needed = self.wanted.size - self.have
        if free < needed + DISK_SPARE:
            raise HubError(f"{self.wanted.name} needs {format_bytes(needed)} more and only "
                           f"{format_bytes(free)} is free on the disk of {self.target.parent}")

    def _check_stop(self) -> None:
        if self.stop.why:
            raise Stopped(self.stop.why)

    def _sleep(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self._check_stop()
            time.sleep(min(0.1, max(0.0, until - time.monotonic())))

    def _request(self, url: str, failures: int) -> float:
        """One GET for the rest of the file; seconds to wait before the next, if any."""
        headers = {"range": f"bytes={self.have}-", "accept-encoding": "identity"}
        if self.have and self.etag:
            headers["if-range"] = self.etag
        with self.client.stream("GET", url, headers=headers) as answer:
            stream = answer.extensions.get("network_stream")
            self.stop.watch(stream.get_extra_info("socket") if stream is not None else None)
            try:
                return self._receive(answer, failures)
            finally:
                self.stop.watch(None)

    def _receive(self, answer: httpx2.Response, failures: int) -> float:
        status = answer.status_code
        if status in BUSY:
            return retry_after(answer.headers, failures)
        if status == 416 and self.have == self.wanted.size:
            return 0
        if status not in (200, 206):
            raise refusal(status, self.wanted.repo, self.wanted.name)
        etag = answer.headers.get("etag")
        resumed = status == 206
        if self.have and (not resumed or (self.etag and etag and etag != self.etag)):
            self._start_again()  # the kept bytes are of another version of the file
            raise FileChanged(f"{self.wanted.name} changed on the Hub while it was "
                              "downloading: it starts again")
        if resumed and not answer.headers.get("content-range", "").startswith(
                f"bytes {self.have}-"):
            raise HubError(f"{self.wanted.name}: the server sent another part of the "
                           "file than the one asked for")
        if etag != self.etag:
            self.etag = etag
            self._save_info()
        with _Writer(self.part, self.hasher) as out:
            # Raw bytes as they arrive (a stall loses nothing), written here and
            # hashed on the writer's thread while this one reads on.
            for piece in answer.iter_raw():
                self._check_stop()
                out.write(piece)
                self.have += len(piece)
                self.on_bytes(len(piece))
                if self.have > self.wanted.size:
                    break
        if self.have > self.wanted.size:
            self._start_again()
            raise FileChanged(f"{self.wanted.name} is larger on the Hub than it said")
        return 0

    def _finish(self) -> str:
        digest = self.hasher.hexdigest()
        if self.wanted.sha256 and digest != self.wanted.sha256.lower():
            self.part.unlink(missing_ok=True)
            self.info.unlink(missing_ok=True)
            raise HubError(f"{self.wanted.name} did not arrive intact: its sha256 is "
                           f"{digest[:12]}…, the Hub's is {self.wanted.sha256[:12]}…; "
                           "it was removed and not added to the models")
        with self.part.open("rb+") as done:
            os.fsync(done.fileno())
        os.replace(self.part, self.target)
        self.info.unlink(missing_ok=True)
        return digest

    def _disk_error(self, error: OSError) -> HubError:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            return HubError(f"the disk of {self.target.parent} is full: "
                            f"{format_bytes(self.have)} of {format_bytes(self.wanted.size)} "
                            f"of {self.wanted.name} are kept; free some space and resume")
        return HubError(f"{self.target.parent}: {error.strerror or error}")


class _Writer:
    """Appends to the ``.part`` on the reading thread, as any download does, and hashes
    on a thread of its own (hashlib runs without Python's lock), which also flushes the
    file to the disk as it grows: the sha256 and the final flush cost the network
    nothing. What waits to be hashed is already in the file."""

    SYNC_EVERY = 64 << 20

    def __init__(self, path: Path, hasher: Any) -> None:
        self._hasher = hasher
        self._file = path.open("ab", buffering=0)
        self._pieces: queue.Queue[bytes | None] = queue.Queue(maxsize=16)
        self._thread = threading.Thread(target=self._hash, name="fireside-part-hash",
                                        daemon=True)
        self._thread.start()

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pieces.put(None)
        self._thread.join()
        self._file.close()

    def write(self, piece: bytes) -> None:
        view = memoryview(piece)
        while view:  # an unbuffered write may take part of it
            view = view[self._file.write(view) or 0:]
        self._pieces.put(piece)

    def _hash(self) -> None:
        unsynced = 0
        while (piece := self._pieces.get()) is not None:
            self._hasher.update(piece)
            unsynced += len(piece)
            if unsynced >= self.SYNC_EVERY:
                with contextlib.suppress(OSError):  # the final flush reports a failure
                    _sync(self._file.fileno())
                unsynced = 0


def _sync(fd: int) -> None:
    """The file's data on the disk (its size and dates need not be, until the end)."""
    getattr(os, "fdatasync", os.fsync)(fd)


def _transport_errors() -> tuple[type[BaseException], ...]:
    import httpx2  # noqa: PLC0415

    return (httpx2.TransportError, httpx2.StreamError)
