"""A persistent cache of GGUF headers, so listing hundreds of models costs a stat each.

Rows are keyed by path and checked against the file's size, inode and mtime_ns, so a
changed or replaced file is read again. The cache is only ever a shortcut: a damaged,
locked or unwritable cache file is set aside and rebuilt, or done without, and the
header is read from the file as if there were no cache.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from app.core import paths
from app.core.models.gguf import (
    ArrayInfo,
    GGUFHeader,
    MetaValue,
    TensorInfo,
    ValueType,
    read_header,
)

T = TypeVar("T")

logger = logging.getLogger(__name__)

FILE_NAME = "headers.sqlite3"
_FORMAT = 1  # bump when the stored form of a header changes
_MAX_ROWS = 20_000

_lock = threading.Lock()
_open_db: dict[Path, sqlite3.Connection] = {}  # at most one: the current cache folder's


def cached_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """The header of `path`, from the cache when the file is unchanged; GGUFError if unusable.

    Misses are read with the fast reader (`read_header(exact=False)`), whose result
    equals the exact reader's.
    """
    path = Path(path)
    try:
        info = path.stat()
    except (OSError, ValueError):
        return read_header(path)  # says why, in its own words
    signature = (info.st_size, info.st_ino, info.st_mtime_ns)
    key = os.fspath(path)
    row = _query("SELECT size, ino, mtime_ns, header FROM headers WHERE path = ?", (key,))
    if row is not None and tuple(row[:3]) == signature:
        try:
            return _decode(path, json.loads(row[3]))
        except (ValueError, TypeError, KeyError, IndexError):
            logger.info("cached header of %s is unreadable; reading the file", path)
    header = read_header(path, exact=False)
    _store(key, signature, json.dumps(_encode(header), separators=(",", ":")))
    return header


def _connection() -> sqlite3.Connection | None:
    """The cache database for the current cache folder, opened (or rebuilt) on demand."""
    try:
        file = paths.cache_dir() / FILE_NAME
    except OSError:
        return None
    if file in _open_db and file.exists():
        return _open_db[file]
    _close()
    for attempt in range(2):
        try:
            connection = _open(file)
        except sqlite3.Error as err:
            if attempt:
                logger.warning("header cache unavailable: %s", err)
                return None
            logger.warning("header cache %s is damaged (%s); rebuilding it", file, err)
            with contextlib.suppress(OSError):
                file.unlink()
        else:
            _open_db[file] = connection
            return connection
    return None


def _open(file: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(file, timeout=2.0, check_same_thread=False,
                                 isolation_level=None)
    try:
        # A cache may lose its last writes in a crash: it is rebuilt, so skip the fsyncs.
        connection.execute("PRAGMA synchronous = OFF")
        connection.execute("PRAGMA journal_mode = MEMORY")
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        if version != _FORMAT:
            connection.execute("DROP TABLE IF EXISTS headers")
            connection.execute(f"PRAGMA user_version = {_FORMAT}")
        connection.execute(
            "CREATE TABLE IF NOT EXISTS headers (path TEXT PRIMARY KEY, size INTEGER,"
            " ino INTEGER, mtime_ns INTEGER, header TEXT)")
        connection.execute("SELECT count(*) FROM headers").fetchone()
    except sqlite3.Error:
        connection.close()
        raise
    return connection


def _close() -> None:
    for connection in _open_db.values():
        with contextlib.suppress(sqlite3.Error):
            connection.close()
    _open_db.clear()


def _query(sql: str, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    row: tuple[Any, ...] | None = _use(lambda db: db.execute(sql, args).fetchone(),
                                       "header cache not used")
    return row


def _store(key: str, signature: tuple[int, int, int], text: str) -> None:
    def write(db: sqlite3.Connection) -> None:
        db.execute("INSERT OR REPLACE INTO headers VALUES (?, ?, ?, ?, ?)", (key, *signature, text))
        db.execute("DELETE FROM headers WHERE rowid <= (SELECT max(rowid) FROM headers) - ?",
                   (_MAX_ROWS,))

    _use(write, "header cache not updated")


def _use(work: Callable[[sqlite3.Connection], T], failure: str) -> T | None:
    """Run ``work`` on the cache; a damaged cache file is dropped and ``work`` tried once
    more on a new one; a locked one (another process) is done without."""
    with _lock:
        for attempt in range(2):
            connection = _connection()
            if connection is None:
                return None
            try:
                return work(connection)
            except sqlite3.DatabaseError as err:  # damaged since it was opened
                _discard(err, attempt)
            except sqlite3.Error as err:
                logger.info("%s: %s", failure, err)
                return None
        return None


def _discard(err: sqlite3.Error, attempt: int) -> None:
    """Drop a damaged cache file so the next attempt starts a new one."""
    if not _open_db:
        return
    file = next(iter(_open_db))
    _close()
    if not attempt:
        logger.warning("header cache %s is damaged (%s); rebuilding it", file, err)
        with contextlib.suppress(OSError):
            file.unlink()


# Stored form: plain JSON; metadata arrays become [type, length, values or null].


def _encode(header: GGUFHeader) -> dict[str, Any]:
    return {
        "version": header.version,
        "metadata": {k: [int(v.type), v.length, v.values] if isinstance(v, ArrayInfo) else v
                     for k, v in header.metadata.items()},
        "tensors": [[t.name, t.shape, t.type, t.offset] for t in header.tensors],
        "alignment": header.alignment,
        "data_offset": header.data_offset,
        "file_size": header.file_size,
        "kv_spans": header.kv_spans,
        "tensor_info_span": header.tensor_info_span,
    }


def _decode(path: Path, data: dict[str, Any]) -> GGUFHeader:
    metadata: dict[str, MetaValue] = {}
    for key, value in data["metadata"].items():
        if isinstance(value, list):
            metadata[key] = ArrayInfo(ValueType(value[0]), int(value[1]), value[2])
        elif isinstance(value, (str, int, float)):
            metadata[key] = value
        else:
            raise ValueError(f"unexpected value for {key!r}")
    start, end = data["tensor_info_span"]
    return GGUFHeader(
        path=path,
        version=int(data["version"]),
        metadata=metadata,
        tensors=[TensorInfo(str(n), tuple(int(d) for d in s), int(t), int(o))
                 for n, s, t, o in data["tensors"]],
        alignment=int(data["alignment"]),
        data_offset=int(data["data_offset"]),
        file_size=int(data["file_size"]),
        kv_spans={str(k): (int(a), int(b)) for k, (a, b) in data["kv_spans"].items()},
        tensor_info_span=(int(start), int(end)),
    )
