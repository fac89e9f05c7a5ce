"""Conversations and their messages, kept in one SQLite file.

Every write commits at once (WAL, ``synchronous=NORMAL``), so a reply that is saved
as it streams survives the app being killed mid-sentence. Deleting a conversation
only marks it (``deleted_at``) so the window can offer Undo; ``purge_deleted()``
removes marked conversations for good.

Text is stored exactly as given. Valid Unicode is stored as TEXT, readable by any
SQLite tool; a string holding lone surrogates, which UTF-8 cannot carry, is stored as
its ``surrogatepass`` bytes in a BLOB (SQLite keeps a BLOB as it is, whatever the
column type).

Search is a case-insensitive substring match over titles and message text:
``query.lower() in text.lower()``. Finished messages are found through an FTS5
trigram index of their lower-cased text; titles, replies still streaming and queries
the index cannot answer (shorter than three characters, or holding NUL bytes or
surrogates) are scanned with the same rule, so both paths agree.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast, get_args

from app.core import paths
from app.core.paths import database_path
from app.core.reply.replies import ReplyStats, ToolRun

Role = Literal["system", "user", "assistant"]
JSONDict = dict[str, Any]


class StoreError(Exception):
    """Conversations could not be read or saved; the text is meant for the user."""


class NotFoundError(StoreError):
    """The conversation or message no longer exists."""


class CorruptDatabaseError(StoreError):
    """The database file is damaged or is not a database at all."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


class DatabaseTooNewError(StoreError):
    """The database was written by a newer Fireside; it is left untouched."""


@dataclass(frozen=True, slots=True)
class Conversation:
    id: int
    title: str
    model: str
    created_at: float
    updated_at: float
    settings: JSONDict


@dataclass(frozen=True, slots=True)
class Message:
    id: int
    conversation_id: int
    role: Role
    text: str
    created_at: float
    stats: JSONDict | None
    complete: bool
    thinking: str = ""  # a reply's reasoning before its answer; never a title or a snippet
    calls: tuple[ToolRun, ...] = ()  # functions the reply called, with their results
    # A user message's documents: the text the model was given before it, and its
    # sources (documents.shelf.Given), numbered from 1.
    attached: str = ""
    sources: tuple[JSONDict, ...] = ()

    @property
    def reply_stats(self) -> ReplyStats | None:
        """A reply's figures, from what was stored with it."""
        return ReplyStats.from_json(self.stats)


# Schema ---------------------------------------------------------------------------

def _create_tables(db: sqlite3.Connection) -> None:
    # AUTOINCREMENT: ids are never reused, so a late write for a deleted reply can
    # never land in a newer message.
    for statement in (
        """CREATE TABLE conversations (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            title TEXT NOT NULL,
            model TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            settings TEXT NOT NULL DEFAULT '{}',
            deleted_at REAL
        )""",
        """CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL
                REFERENCES conversations(id) ON DELETE CASCADE,
            role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
            text TEXT NOT NULL,
            created_at REAL NOT NULL,
            stats TEXT,
            complete INTEGER NOT NULL DEFAULT 1 CHECK (complete IN (0, 1))
        )""",
        "CREATE INDEX messages_by_conversation ON messages(conversation_id, id)",
        "CREATE INDEX messages_unfinished ON messages(id) WHERE complete = 0",
        "CREATE INDEX conversations_by_activity ON conversations(updated_at)"
        " WHERE deleted_at IS NULL",
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ):
        db.execute(statement)


def _add_thinking(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE messages ADD COLUMN thinking TEXT NOT NULL DEFAULT ''")


def _add_calls(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE messages ADD COLUMN calls TEXT NOT NULL DEFAULT '[]'")


def _add_documents(db: sqlite3.Connection) -> None:
    # JSON {"text": ..., "sources": [...]}; '' for a message with no documents.
    db.execute("ALTER TABLE messages ADD COLUMN documents TEXT NOT NULL DEFAULT ''")


# Applied in order at open; version N is MIGRATIONS[N - 1]. Append, never edit.
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _create_tables, _add_thinking, _add_calls, _add_documents)

# The search index is derived data, so it is kept out of the migrations: it is built
# at open whenever it is missing or marked stale (written to while FTS5 was unavailable).
# A table with its own copy of the text, not a contentless one: deleting from it then
# needs only the rowid, never a re-derivation of the exact text that was indexed.
_SEARCH_TABLE = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS message_search"
    " USING fts5(text, tokenize = 'trigram case_sensitive 1')"
)
_STALE_KEY = "search_index_stale"

_SURROGATE = re.compile("[\ud800-\udfff]")
# Characters the index cannot hold as themselves (replaced by U+FFFD when indexing).
_UNINDEXABLE = re.compile("[\x00\ud800-\udfff\ufffd]")

_REASONS = {
    sqlite3.SQLITE_FULL: "the disk is full",
    sqlite3.SQLITE_BUSY: "the database is locked by another program",
    sqlite3.SQLITE_LOCKED: "the database is locked by another program",
    sqlite3.SQLITE_READONLY: "the database file is read-only",
    sqlite3.SQLITE_PERM: "permission denied",
    sqlite3.SQLITE_CANTOPEN: "the database file cannot be opened",
    sqlite3.SQLITE_IOERR: "the disk could not be read or written",
    sqlite3.SQLITE_NOMEM: "out of memory",
    sqlite3.SQLITE_TOOBIG: "the text is too large to store",
}

_REPLY_GONE = "Could not save the reply: it was deleted or is already finished"
_CONVERSATION_COLUMNS = "id, title, model, created_at, updated_at, settings"
_MESSAGE_COLUMNS = ("id, conversation_id, role, text, created_at, stats, complete, thinking,"
                    " calls, documents")


class Store:
    """The conversation database. Safe to call from any thread."""

    def __init__(self, path: Path | str | None = None, *, search_index: bool = True,
                 timeout: float = 5.0) -> None:
        """Open (creating or migrating) the database; ``search_index=False`` skips FTS5."""
        self.path = Path(path) if path is not None else database_path()
        self._lock = threading.Lock()
        action = f"open the conversation database {self.path}"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"Could not {action}: {exc.strerror or exc}") from exc
        try:
            db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None,
                                 check_same_thread=False)
        except sqlite3.Error as exc:
            raise _store_error(action, exc, self.path) from exc
        try:
            self._indexed = _prepare(db, self.path, search_index)
            latest = db.execute("SELECT max(updated_at) FROM conversations").fetchone()[0]
        except sqlite3.Error as exc:
            db.close()
            raise _store_error(action, exc, self.path) from exc
        except BaseException:
            db.close()
            raise
        self._last_time = float(latest or 0.0)
        self._db: sqlite3.Connection | None = db
        # Set by open_store() when a damaged file was set aside: a message for the user.
        self.notice: str | None = None
        self.set_aside: Path | None = None

    def close(self) -> None:
        with self._lock:
            if self._db is None:
                return
            with suppress(sqlite3.Error):
                self._db.execute("PRAGMA optimize")
            self._db.close()
            self._db = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # Conversations ------------------------------------------------------------------

    def create_conversation(self, title: str, model: str,
                            settings: Mapping[str, Any] | None = None) -> Conversation:
        settings_json = _dump_json(settings or {})
        with self._using("create the conversation") as db:
            now = self._now()
            cursor = db.execute(
                "INSERT INTO conversations (title, model, created_at, updated_at, settings)"
                " VALUES (?, ?, ?, ?, ?)",
                (_to_db(title), _to_db(model), now, now, settings_json))
            return Conversation(_rowid(cursor), title, model, now, now,
                                _load_json(settings_json) or {})

    def list_conversations(self, query: str | None = None) -> list[Conversation]:
        """Conversations not deleted, latest activity first, optionally only matches."""
        sql = f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE deleted_at IS NULL"
        params: dict[str, object] = {}
        if query and query.strip():
            needle = query.lower()
            params["needle"] = _to_db(needle)
            if self._indexed and len(needle) >= 3 and not _UNINDEXABLE.search(needle):
                params["phrase"] = '"' + needle.replace('"', '""') + '"'
                found = (
                    "SELECT conversation_id FROM messages WHERE id IN (SELECT rowid"
                    " FROM message_search WHERE message_search MATCH :phrase)"
                    " UNION ALL SELECT conversation_id FROM messages"
                    " WHERE complete = 0 AND fs_contains(text, :needle)")
            else:
                found = "SELECT conversation_id FROM messages WHERE fs_contains(text, :needle)"
            sql += f" AND (fs_contains(title, :needle) OR id IN ({found}))"
        sql += " ORDER BY updated_at DESC, id DESC"
        with self._using("read the conversation list") as db:
            return [_conversation(row) for row in db.execute(sql, params)]

    def get_conversation(self, conversation_id: int) -> Conversation | None:
        """The conversation, or None if it does not exist or is deleted."""
        with self._using("read the conversation") as db:
            row = db.execute(
                f"SELECT {_CONVERSATION_COLUMNS} FROM conversations"
                " WHERE id = ? AND deleted_at IS NULL", (conversation_id,)).fetchone()
        return None if row is None else _conversation(row)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self._update_conversation(conversation_id, "title", _to_db(title))

    def set_conversation_model(self, conversation_id: int, model: str) -> None:
        self._update_conversation(conversation_id, "model", _to_db(model))

    def update_settings(self, conversation_id: int, settings: Mapping[str, Any]) -> None:
        """Replace the conversation's settings."""
        self._update_conversation(conversation_id, "settings", _dump_json(settings))

    def delete_conversation(self, conversation_id: int) -> None:
        """Hide the conversation; ``undelete_conversation`` brings it back."""
        with self._using("delete the conversation") as db:
            cursor = db.execute(
                "UPDATE conversations SET deleted_at = coalesce(deleted_at, ?) WHERE id = ?",
                (time.time(), conversation_id))
            _require(cursor, "Could not delete the conversation: it no longer exists")

    def undelete_conversation(self, conversation_id: int) -> None:
        with self._using("restore the conversation") as db:
            cursor = db.execute("UPDATE conversations SET deleted_at = NULL WHERE id = ?",
                                (conversation_id,))
            _require(cursor, "Could not restore the conversation: it no longer exists")

    def purge_deleted(self) -> int:
        """Remove deleted conversations and their messages for good; returns how many."""
        with self._writing("remove deleted conversations") as db:
            if self._indexed:
                db.execute(
                    "DELETE FROM message_search WHERE rowid IN (SELECT m.id FROM messages m"
                    " JOIN conversations c ON c.id = m.conversation_id"
                    " WHERE c.deleted_at IS NOT NULL)")
            return db.execute("DELETE FROM conversations WHERE deleted_at IS NOT NULL").rowcount

    # Messages -----------------------------------------------------------------------

    def add_message(self, conversation_id: int, role: Role, text: str,
                    stats: Mapping[str, Any] | None = None, complete: bool = True, *,
                    thinking: str = "", calls: Sequence[ToolRun] = (), attached: str = "",
                    sources: Sequence[JSONDict] = ()) -> Message:
        if role not in get_args(Role):
            raise ValueError(f"unknown message role {role!r}")
        stats_json = None if stats is None else _dump_json(stats)
        with self._writing("save the conversation") as db:
            now = self._now()
            cursor = db.execute(
                "INSERT INTO messages (conversation_id, role, text, created_at, stats, complete,"
                " thinking, calls, documents) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, role, _to_db(text), now, stats_json, complete,
                 _to_db(thinking), _dump_calls(calls), _dump_documents(attached, sources)))
            message_id = _rowid(cursor)
            if complete:
                self._index(db, message_id, text)
            db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?",
                       (now, conversation_id))
        return Message(message_id, conversation_id, role, text, now,
                       _load_json(stats_json), complete, thinking, tuple(calls), attached,
                       tuple(sources))

    def messages(self, conversation_id: int) -> list[Message]:
        """All messages of the conversation, oldest first."""
        return self.messages_page(conversation_id, 0, -1)

    def messages_page(self, conversation_id: int, offset: int, limit: int) -> list[Message]:
        """``limit`` messages (all if negative) from position ``offset``, oldest first."""
        if offset < 0:
            raise ValueError("offset must not be negative")
        with self._using("read the messages") as db:
            rows = db.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ?"
                " ORDER BY id LIMIT ? OFFSET ?", (conversation_id, limit, offset))
            return [_message(row) for row in rows]

    def message_count(self, conversation_id: int) -> int:
        with self._using("read the messages") as db:
            row = db.execute("SELECT count(*) FROM messages WHERE conversation_id = ?",
                             (conversation_id,)).fetchone()
        return int(row[0])

    def delete_messages_from(self, message_id: int) -> int:
        """Remove this message and every later one of its conversation; returns how many."""
        with self._writing("delete the messages") as db:
            row = db.execute("SELECT conversation_id FROM messages WHERE id = ?",
                             (message_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"Could not delete messages: message {message_id}"
                                    " no longer exists")
            later = (row[0], message_id)
            if self._indexed:
                db.execute("DELETE FROM message_search WHERE rowid IN (SELECT id FROM messages"
                           " WHERE conversation_id = ? AND id >= ?)", later)
            return db.execute("DELETE FROM messages WHERE conversation_id = ? AND id >= ?",
                              later).rowcount

    # A reply saved as it streams -------------------------------------------------------

    def begin_reply(self, conversation_id: int) -> Message:
        """An empty, unfinished assistant message to stream into."""
        return self.add_message(conversation_id, "assistant", "", complete=False)

    def update_reply(self, message_id: int, text: str, thinking: str = "") -> None:
        """Save the reply's text so far: one UPDATE, committed at once."""
        with self._using("save the conversation") as db:
            cursor = db.execute("UPDATE messages SET text = ?, thinking = ?"
                                " WHERE id = ? AND complete = 0",
                                (_to_db(text), _to_db(thinking), message_id))
            _require(cursor, _REPLY_GONE)

    def finish_reply(self, message_id: int, text: str,
                     stats: Mapping[str, Any] | None, thinking: str = "",
                     calls: Sequence[ToolRun] = ()) -> Message:
        """Save the reply's final text, thinking, stats and calls and mark it complete."""
        stats_json = None if stats is None else _dump_json(stats)
        with self._writing("save the conversation") as db:
            cursor = db.execute(
                "UPDATE messages SET text = ?, stats = ?, complete = 1, thinking = ?, calls = ?"
                " WHERE id = ? AND complete = 0",
                (_to_db(text), stats_json, _to_db(thinking), _dump_calls(calls), message_id))
            _require(cursor, _REPLY_GONE)
            self._index(db, message_id, text)
            row = db.execute(f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE id = ?",
                             (message_id,)).fetchone()
            db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?",
                       (self._now(), row[1]))
        return _message(row)

    def set_calls(self, message_id: int, calls: Sequence[ToolRun]) -> None:
        """Save what became of a finished reply's calls (allowed, run, their results)."""
        with self._using("save the conversation") as db:
            cursor = db.execute("UPDATE messages SET calls = ? WHERE id = ?",
                                (_dump_calls(calls), message_id))
            _require(cursor, _REPLY_GONE)

    # Internals ----------------------------------------------------------------------

    def _now(self) -> float:
        # Strictly increasing, so the list follows the order of writes even on a coarse
        # clock or one that steps back.
        self._last_time = max(time.time(), self._last_time + 1e-6)
        return self._last_time

    def _index(self, db: sqlite3.Connection, message_id: int, text: str) -> None:
        if self._indexed:
            db.execute("INSERT INTO message_search (rowid, text) VALUES (?, ?)",
                       (message_id, _searchable(text)))

    def _update_conversation(self, conversation_id: int, column: str, value: object) -> None:
        with self._using("save the conversation") as db:
            cursor = db.execute(f"UPDATE conversations SET {column} = ? WHERE id = ?",
                                (value, conversation_id))
            _require(cursor, "Could not save the conversation: it no longer exists")

    @contextmanager
    def _using(self, action: str) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._db is None:
                raise StoreError(f"Could not {action}: the conversation store is closed")
            try:
                yield self._db
            except sqlite3.Error as exc:
                raise _store_error(action, exc, self.path) from exc

    @contextmanager
    def _writing(self, action: str) -> Iterator[sqlite3.Connection]:
        with self._using(action) as db, _transaction(db):
            yield db


# Opening ----------------------------------------------------------------------------

def open_store(path: Path | str | None = None, **options: Any) -> Store:
    """Open the database; a damaged one is set aside, never deleted, and a new one begun.

    The returned store's ``notice`` then tells the user where the old file is kept.
    Any other problem (a full disk, a newer format, a lock) is raised as it is.
    """
    try:
        return Store(path, **options)
    except CorruptDatabaseError as err:
        kept = _set_aside(err.path)
    store = Store(path, **options)
    store.set_aside = kept
    store.notice = (f"The conversation database was damaged and could not be read. It is "
                    f"kept as {kept}; a new one was started.")
    return store


def _set_aside(path: Path) -> Path:
    """Rename ``path`` (with its journal files) to a free ``<name>.corrupt-<time>`` name."""
    try:
        return paths.set_aside(path, lambda stamp: f"{path.name}.corrupt-{stamp}",
                               ("-wal", "-shm"))
    except OSError as exc:
        raise StoreError(f"The conversation database {path} is damaged and could not be set "
                         f"aside: {exc.strerror or exc}") from exc


def _prepare(db: sqlite3.Connection, path: Path, search_index: bool) -> bool:
    """Check, migrate and configure a fresh connection; returns whether search is indexed."""
    # Nothing may write before the version check: a newer database stays untouched
    # (even switching the journal mode rewrites its header).
    version = _user_version(db)
    if version > len(MIGRATIONS):
        raise DatabaseTooNewError(
            f"The conversation database {path} was written by a newer version of Fireside"
            f" (format {version}; this version reads up to {len(MIGRATIONS)})."
            " Update Fireside to open it.")
    problems = [row[0] for row in db.execute("PRAGMA integrity_check")]
    if problems != ["ok"]:
        raise CorruptDatabaseError(
            f"The conversation database {path} is damaged ({problems[0]}).", path)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("PRAGMA foreign_keys = ON")
    db.create_function("fs_contains", 2, _contains, deterministic=True)
    with _transaction(db):
        version = _user_version(db)  # another process may have migrated meanwhile
        for migrate in MIGRATIONS[version:]:
            migrate(db)
        if version < len(MIGRATIONS):
            db.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
    indexed = search_index and _fts5_trigram_available(db)
    with _transaction(db):
        exists = _has_row(db, "SELECT 1 FROM sqlite_schema WHERE name = 'message_search'")
        stale = _has_row(db, "SELECT 1 FROM meta WHERE key = ?", _STALE_KEY)
        if indexed and (stale or not exists):
            _rebuild_search(db)
        elif not indexed and exists:
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, '1')", (_STALE_KEY,))
    return indexed


def _has_row(db: sqlite3.Connection, sql: str, *params: object) -> bool:
    return db.execute(sql, params).fetchone() is not None


def _user_version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """Several statements committed together, or not at all."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            with suppress(sqlite3.Error):  # keep the error that got us here
                db.execute("ROLLBACK")
        raise


def _fts5_trigram_available(db: sqlite3.Connection) -> bool:
    try:
        db.execute("CREATE VIRTUAL TABLE temp.fts5_probe USING fts5(x, tokenize = 'trigram')")
    except sqlite3.OperationalError:
        return False
    db.execute("DROP TABLE temp.fts5_probe")
    return True


def _rebuild_search(db: sqlite3.Connection) -> None:
    db.execute(_SEARCH_TABLE)
    db.execute("DELETE FROM message_search")
    rows = db.execute("SELECT id, text FROM messages WHERE complete = 1").fetchall()
    db.executemany("INSERT INTO message_search (rowid, text) VALUES (?, ?)",
                   ((row[0], _searchable(_from_db(row[1]))) for row in rows))
    db.execute("DELETE FROM meta WHERE key = ?", (_STALE_KEY,))


# Values -----------------------------------------------------------------------------

def _to_db(text: str) -> str | bytes:
    return text.encode("utf-8", "surrogatepass") if _SURROGATE.search(text) else text


def _from_db(value: str | bytes) -> str:
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else value


def _searchable(text: str) -> str:
    return _UNINDEXABLE.sub("\ufffd", text.lower())


def _contains(value: str | bytes | None, needle: str | bytes) -> bool:
    return value is not None and _from_db(needle) in _from_db(value).lower()


def _plain(value: Any) -> Any:
    """JSON-ready: NaN and infinities (a rate over zero seconds) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(item) for item in value]
    return value


def _dump_json(value: Mapping[str, Any]) -> str:
    # ASCII escapes carry NUL bytes and lone surrogates through unchanged.
    return json.dumps(_plain(value), ensure_ascii=True, allow_nan=False, default=str)


def _load_json(text: str | None) -> JSONDict | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None  # edited by hand into something unreadable: show none, keep the row
    return value if isinstance(value, dict) else None


def _conversation(row: tuple[Any, ...]) -> Conversation:
    return Conversation(row[0], _from_db(row[1]), _from_db(row[2]), row[3], row[4],
                        _load_json(row[5]) or {})


def _message(row: tuple[Any, ...]) -> Message:
    attached, sources = _load_documents(row[9])
    return Message(row[0], row[1], cast(Role, row[2]), _from_db(row[3]), row[4],
                   _load_json(row[5]), bool(row[6]), _from_db(row[7]), _load_calls(row[8]),
                   attached, sources)


def _dump_documents(attached: str, sources: Sequence[JSONDict]) -> str:
    if not attached:
        return ""
    return json.dumps({"text": attached, "sources": list(sources)}, ensure_ascii=False)


def _load_documents(text: str | bytes | None) -> tuple[str, tuple[JSONDict, ...]]:
    record = _load_json(_from_db(text) if text else None)
    if not record or not isinstance(record.get("text"), str):
        return "", ()  # none, or edited by hand into something unreadable
    sources = record.get("sources")
    return record["text"], tuple(s for s in sources if isinstance(s, dict)) if isinstance(
        sources, list) else ()


def _dump_calls(calls: Sequence[ToolRun]) -> str:
    return json.dumps([c.to_json() for c in calls], ensure_ascii=False)


def _load_calls(text: str | bytes | None) -> tuple[ToolRun, ...]:
    try:
        records = json.loads(text or "[]")
    except ValueError:
        return ()  # edited by hand into something unreadable: the message stays
    runs = (ToolRun.from_json(r) for r in records) if isinstance(records, list) else ()
    return tuple(r for r in runs if r is not None)


def _rowid(cursor: sqlite3.Cursor) -> int:
    return cast(int, cursor.lastrowid)  # always set after an INSERT


def _require(cursor: sqlite3.Cursor, message: str) -> None:
    if cursor.rowcount == 0:
        raise NotFoundError(message)


def _store_error(action: str, exc: sqlite3.Error, path: Path) -> StoreError:
    code: int = getattr(exc, "sqlite_errorcode", None) or 0
    if code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return CorruptDatabaseError(
            f"Could not {action}: the file {path} is damaged or is not a conversation"
            " database", path)
    if code == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
        return NotFoundError(f"Could not {action}: the conversation no longer exists")
    if code == sqlite3.SQLITE_IOERR_SHMSIZE:  # no room for the shared-memory file
        return StoreError(f"Could not {action}: the disk is full")
    return StoreError(f"Could not {action}: {_REASONS.get(code & 0xFF, str(exc))}")


# Titles -----------------------------------------------------------------------------

TITLE_LIMIT = 60
UNTITLED = "New conversation"


def default_title(first_user_text: str) -> str:
    """A one-line title from the first thing the user wrote."""
    for line in first_user_text.splitlines():
        words = "".join(" " if unicodedata.category(ch) in ("Cc", "Cs") else ch
                        for ch in line).split()
        if words:
            break
    else:
        return UNTITLED
    title = " ".join(words)
    if len(title) <= TITLE_LIMIT:
        return title
    cut = title[:TITLE_LIMIT - 1]
    space = cut.rfind(" ")
    if space >= TITLE_LIMIT // 2:  # end on a whole word when that keeps most of the line
        cut = cut[:space]
    return cut.rstrip(" \u200d") + "…"
