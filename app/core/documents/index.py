"""The documents' index in Fireside's own database: collections (a file or a folder the
user brought in), their files with the text read, the passages cut from them with their
vectors, and SQLite's FTS5 over the passages' words.

One file for conversations and documents, so a backup is one file. The tables are this
module's own (``doc_*``), created if missing; the conversation store never reads them.
Vectors are kept as float16 (half the disk, no loss that changes a ranking) and searched
in memory as float32: a brute-force product over 100,000 passages of 384 dimensions
takes a few milliseconds, and needs no SQLite extension (many Pythons cannot load one).
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.core.documents.passages import Passage, location

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS doc_collections (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        path TEXT NOT NULL UNIQUE,
        folder INTEGER NOT NULL,
        added_at REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS doc_files (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        collection_id INTEGER NOT NULL REFERENCES doc_collections(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        text TEXT NOT NULL DEFAULT '',
        error TEXT,
        UNIQUE (collection_id, path))""",
    """CREATE TABLE IF NOT EXISTS doc_passages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        file_id INTEGER NOT NULL REFERENCES doc_files(id) ON DELETE CASCADE,
        ord INTEGER NOT NULL,
        text TEXT NOT NULL,
        page INTEGER,
        first_line INTEGER,
        last_line INTEGER,
        heading TEXT,
        model TEXT,
        vector BLOB)""",
    "CREATE INDEX IF NOT EXISTS doc_passages_by_file ON doc_passages(file_id, ord)",
    "CREATE INDEX IF NOT EXISTS doc_passages_unembedded ON doc_passages(id) WHERE vector IS NULL",
    """CREATE TABLE IF NOT EXISTS doc_links (
        conversation_id INTEGER NOT NULL,
        collection_id INTEGER NOT NULL REFERENCES doc_collections(id) ON DELETE CASCADE,
        PRIMARY KEY (conversation_id, collection_id))""",
    # The words of each passage, kept in step by triggers; porter stems English words so
    # "installing" finds "install".
    """CREATE VIRTUAL TABLE IF NOT EXISTS doc_words USING fts5(
        text, content = 'doc_passages', content_rowid = 'id',
        tokenize = 'porter unicode61 remove_diacritics 2')""",
    """CREATE TRIGGER IF NOT EXISTS doc_words_add AFTER INSERT ON doc_passages BEGIN
        INSERT INTO doc_words (rowid, text) VALUES (new.id, new.text); END""",
    """CREATE TRIGGER IF NOT EXISTS doc_words_drop AFTER DELETE ON doc_passages BEGIN
        INSERT INTO doc_words (doc_words, rowid, text) VALUES ('delete', old.id, old.text);
        END""",
)

_WORD = re.compile(r"\w+", re.UNICODE)
# A question's word found in more passages than this is left out of the word search
# ("the", "file"): it ranks nothing, and scoring every passage that holds it is what
# makes a search over 100,000 passages slow. The floor keeps a small collection's words.
COMMON_SHARE = 0.10
COMMON_FLOOR = 2000


@dataclass(frozen=True)
class Collection:
    id: int
    path: Path
    folder: bool


@dataclass(frozen=True)
class FileRecord:
    id: int
    collection_id: int
    path: Path
    size: int
    mtime_ns: int
    error: str | None


@dataclass(frozen=True)
class Found:
    """A passage as a reply is given it, and as its source is shown."""

    id: int
    path: Path
    text: str
    page: int | None
    first_line: int | None
    last_line: int | None

    @property
    def location(self) -> str:
        return location(Passage(self.text, self.page, self.first_line, self.last_line, None))

    def as_source(self, number: int) -> dict[str, object]:
        return {"n": number, "id": self.id, "path": str(self.path), "location": self.location,
                "page": self.page, "first_line": self.first_line,
                "last_line": self.last_line, "text": self.text}


class DocumentIndex:
    """The index's tables in one SQLite file; safe to call from any thread."""

    def __init__(self, path: Path | str) -> None:
        self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=10,
                                   isolation_level=None)
        self._lock = threading.RLock()
        # The vectors of each set of collections, for the model that made them, until a
        # write changes them.
        self._generation = 0
        self._matrices: dict[tuple[tuple[int, ...], str], tuple[int, np.ndarray, np.ndarray]] = {}
        self._db.execute("PRAGMA foreign_keys = ON")
        # Passages' rows hold their text and vector: a search reads many of them.
        self._db.execute("PRAGMA cache_size = -131072")  # KiB: 128 MiB at most
        with contextlib.suppress(sqlite3.OperationalError):  # :memory: has no WAL
            self._db.execute("PRAGMA journal_mode = WAL")
        with self._writing():
            for statement in _SCHEMA:
                self._db.execute(statement)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            self._generation += 1

    def _rows(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    # Collections and the conversations they are attached to ------------------------

    def collection(self, path: Path, folder: bool) -> Collection:
        """The collection of ``path``, created if new."""
        with self._writing() as db:
            db.execute("INSERT OR IGNORE INTO doc_collections (path, folder, added_at)"
                       " VALUES (?, ?, ?)", (str(path), int(folder), time.time()))
            row = db.execute("SELECT id, folder FROM doc_collections WHERE path = ?",
                             (str(path),)).fetchone()
        return Collection(int(row[0]), path, bool(row[1]))

    def link(self, conversation_id: int, collection_id: int) -> None:
        with self._writing() as db:
            db.execute("INSERT OR IGNORE INTO doc_links VALUES (?, ?)",
                       (conversation_id, collection_id))

    def unlink(self, conversation_id: int, collection_id: int) -> None:
        with self._writing() as db:
            db.execute("DELETE FROM doc_links WHERE conversation_id = ? AND collection_id = ?",
                       (conversation_id, collection_id))

    def attached(self, conversation_id: int) -> list[Collection]:
        return [Collection(int(i), Path(str(p)), bool(f)) for i, p, f in self._rows(
            "SELECT c.id, c.path, c.folder FROM doc_collections c JOIN doc_links l"
            " ON l.collection_id = c.id WHERE l.conversation_id = ? ORDER BY c.id",
            conversation_id)]

    def forget_unlinked(self, keep: Sequence[int] = ()) -> int:
        """Delete the collections no conversation holds (but ``keep``); how many."""
        marks = ",".join("?" * len(keep))
        with self._writing() as db:
            return db.execute(
                "DELETE FROM doc_collections WHERE id NOT IN"
                f" (SELECT collection_id FROM doc_links) AND id NOT IN ({marks})",
                tuple(keep)).rowcount

    def unlink_conversations_except(self, living: Sequence[int]) -> None:
        """Drop the links of conversations that no longer exist."""
        marks = ",".join("?" * len(living))
        with self._writing() as db:
            db.execute(f"DELETE FROM doc_links WHERE conversation_id NOT IN ({marks})",
                       tuple(living))

    # Files and their passages -------------------------------------------------------

    def files(self, collection_id: int) -> list[FileRecord]:
        return [FileRecord(int(i), int(c), Path(str(p)), int(s), int(m),
                           None if e is None else str(e))
                for i, c, p, s, m, e in self._rows(
                    "SELECT id, collection_id, path, size, mtime_ns, error"
                    " FROM doc_files WHERE collection_id = ? ORDER BY path", collection_id)]

    def put_file(self, collection_id: int, path: Path, size: int, mtime_ns: int, *,
                 text: str = "", passages: Sequence[Passage] = (),
                 vectors: np.ndarray | None = None, model: str = "",
                 error: str | None = None) -> int:
        """Keep a file read (or why it could not be), replacing what it held before."""
        with self._writing() as db:
            db.execute("DELETE FROM doc_files WHERE collection_id = ? AND path = ?",
                       (collection_id, str(path)))
            file_id = db.execute(
                "INSERT INTO doc_files (collection_id, path, size, mtime_ns, text,"
                " error) VALUES (?, ?, ?, ?, ?, ?)",
                (collection_id, str(path), size, mtime_ns, text, error)).lastrowid
            assert file_id is not None
            for number, passage in enumerate(passages):
                blob = None if vectors is None else _blob(vectors[number])
                db.execute(
                    "INSERT INTO doc_passages (file_id, ord, text, page, first_line,"
                    " last_line, heading, model, vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (file_id, number, passage.text, passage.page, passage.first_line,
                     passage.last_line, passage.heading, model if blob else None, blob))
        return int(file_id)

    def drop_file(self, file_id: int) -> None:
        with self._writing() as db:
            db.execute("DELETE FROM doc_files WHERE id = ?", (file_id,))

    def any_passages(self) -> bool:
        return bool(self._rows("SELECT 1 FROM doc_passages LIMIT 1"))

    def whole(self, collection_ids: Sequence[int]) -> list[tuple[Path, str]]:
        """Each file read from these collections with its whole text, by path."""
        marks = ",".join("?" * len(collection_ids)) or "NULL"
        return [(Path(str(p)), str(t)) for p, t in self._rows(
            f"SELECT path, text FROM doc_files WHERE collection_id IN ({marks})"
            " AND error IS NULL AND text != '' ORDER BY path", *collection_ids)]

    # Vectors ------------------------------------------------------------------------

    def unembedded(self, model: str, limit: int) -> list[tuple[int, str]]:
        """Passages without a vector from ``model`` (new, or made by another model)."""
        return [(int(i), str(t)) for i, t in self._rows(
            "SELECT id, text FROM doc_passages WHERE vector IS NULL OR model IS NOT ?"
            " ORDER BY id LIMIT ?", model, limit)]

    def set_vectors(self, ids: Sequence[int], vectors: np.ndarray, model: str) -> None:
        with self._writing() as db:
            db.executemany("UPDATE doc_passages SET vector = ?, model = ? WHERE id = ?",
                           [(_blob(v), model, i) for i, v in zip(ids, vectors, strict=True)])

    def matrix(self, collection_ids: Sequence[int],
               model: str) -> tuple[np.ndarray, np.ndarray]:
        """The passages' ids and their vectors (rows) made by ``model``, kept in memory
        until the index changes."""
        key = (tuple(sorted(collection_ids)), model)
        with self._lock:
            cached = self._matrices.get(key)
            if cached is not None and cached[0] == self._generation:
                return cached[1], cached[2]
            generation = self._generation
            marks = ",".join("?" * len(collection_ids)) or "NULL"
            rows = self._db.execute(
                f"SELECT p.id, p.vector FROM doc_passages p JOIN doc_files f"
                f" ON f.id = p.file_id WHERE f.collection_id IN ({marks}) AND p.model = ?",
                (*collection_ids, model)).fetchall()
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        vectors = (np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float16)
                   .reshape(len(rows), -1).astype(np.float32) if rows
                   else np.zeros((0, 0), np.float32))
        with self._lock:
            self._matrices = {k: v for k, v in self._matrices.items()
                              if v[0] == self._generation}
            self._matrices[key] = (generation, ids, vectors)
        return ids, vectors

    # Search -------------------------------------------------------------------------

    def by_words(self, query: str, collection_ids: Sequence[int], limit: int) -> list[int]:
        """Passage ids whose words match ``query`` best (BM25), best first."""
        words = {w.lower() for w in _WORD.findall(query)}
        if not words or not collection_ids:
            return []
        holding = {w: self._rows("SELECT count(*) FROM doc_words WHERE doc_words MATCH ?",
                                 f'"{w}"')[0][0] for w in words}
        total = self._rows("SELECT count(*) FROM doc_passages")[0][0]
        common = max(COMMON_FLOOR, COMMON_SHARE * total)
        kept = [w for w in words if holding[w] <= common] or [min(words, key=holding.__getitem__)]
        match = " OR ".join(f'"{w}"' for w in sorted(kept))
        marks = ",".join("?" * len(collection_ids))
        return [int(r[0]) for r in self._rows(
            f"SELECT w.rowid FROM doc_words w JOIN doc_passages p ON p.id = w.rowid"
            f" JOIN doc_files f ON f.id = p.file_id WHERE doc_words MATCH ?"
            f" AND f.collection_id IN ({marks}) ORDER BY bm25(doc_words) LIMIT ?",
            match, *collection_ids, limit)]

    def found(self, ids: Sequence[int]) -> list[Found]:
        """These passages, in the order given."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = {int(r[0]): r for r in self._rows(
            f"SELECT p.id, f.path, p.text, p.page, p.first_line, p.last_line"
            f" FROM doc_passages p JOIN doc_files f ON f.id = p.file_id WHERE p.id IN ({marks})",
            *ids)}
        return [Found(int(r[0]), Path(str(r[1])), str(r[2]), _int(r[3]), _int(r[4]),
                      _int(r[5])) for i in ids if (r := rows.get(i)) is not None]


def _blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float16).tobytes()


def _int(value: Any) -> int | None:
    return None if value is None else int(value)
