"""The conversation store, on real SQLite files."""

from __future__ import annotations

import hashlib
import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import unicodedata
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.conversations import store as store_module
from app.core.conversations.store import (
    TITLE_LIMIT,
    UNTITLED,
    CorruptDatabaseError,
    DatabaseTooNewError,
    NotFoundError,
    Store,
    StoreError,
    default_title,
)
from app.core.paths import database_path
from app.core.reply.replies import ToolCall, ToolRun
from tests.core import helpers

REPO = Path(__file__).resolve().parents[2]

HOSTILE_TEXTS = [
    "",
    "NUL \x00 in the middle and at the end\x00",
    "lone surrogates \ud800 and \udfff",
    "\udc80 a surrogateescape'd byte first",
    "halves of a pair stored apart: \ud83d\ude00",
    "right-to-left \u202eevil\u202c שלום مرحبا",
    "zero\u200bwidth\u200djoiner 👨\u200d👩\u200d👧 and e\u0301",
    "quotes ' \" ` and -- ; DROP TABLE messages; %_*",
    "\r\nCRLF, \t tabs, \x1b[31m ANSI \x7f DEL",
    "big: " + "abc🙂é" * 200_000,  # 1.8 MB of UTF-8
]

HOSTILE_QUERIES = [
    '"', "'", '""', "*", "-", "-x", "a*", '" OR "', "NEAR(a b)", "text:abc",
    "^abc", "%", "_", "\\", "' OR 1=1 --", "\x00", "in \x00 the", "\ud800",
    "\ufffd", "🙂é", "ABC🙂", "ÉCLAIR", "-- ;", "()", "{a b}", "a AND b", "x" * 5000,
]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "conversations.sqlite3"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    with Store(db_path) as opened:
        yield opened


def _matches(store: Store, query: str | None) -> list[int]:
    return [c.id for c in store.list_conversations(query)]


def _expected_matches(store: Store, query: str | None) -> list[int]:
    """The rule, applied by hand: a case-insensitive substring of the title or any text."""
    everything = store.list_conversations()
    if not query or not query.strip():
        return [c.id for c in everything]
    needle = query.lower()
    return [c.id for c in everything
            if needle in c.title.lower()
            or any(needle in m.text.lower() for m in store.messages(c.id))]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# Conversations ----------------------------------------------------------------------


def test_default_location_is_the_data_folder() -> None:
    with Store() as opened:
        created = opened.create_conversation("hello", "model.gguf")
    assert database_path().is_file()
    with Store(database_path()) as reopened:
        assert reopened.get_conversation(created.id) == created


def test_conversation_fields_survive_reopening(db_path: Path) -> None:
    settings_ = {"system_prompt": "Be brief.\x00\ud800", "temperature": 0.2, "nested": [1, {}]}
    with Store(db_path) as first:
        created = first.create_conversation("Trip plans", "/models/a b/SmolLM2.gguf", settings_)
    with Store(db_path) as second:
        assert second.get_conversation(created.id) == created
    assert created.settings == settings_


def test_rename_model_and_settings_changes_persist(db_path: Path) -> None:
    with Store(db_path) as first:
        conversation = first.create_conversation("old", "a.gguf", {"temperature": 1.0})
        first.rename_conversation(conversation.id, "new name")
        first.set_conversation_model(conversation.id, "b.gguf")
        first.update_settings(conversation.id, {"system_prompt": "hi"})
    with Store(db_path) as second:
        reloaded = second.get_conversation(conversation.id)
    assert reloaded is not None
    assert (reloaded.title, reloaded.model, reloaded.settings) == (
        "new name", "b.gguf", {"system_prompt": "hi"})


def test_changes_to_a_missing_conversation_are_refused(store: Store) -> None:
    for change in (lambda: store.rename_conversation(999, "x"),
                   lambda: store.set_conversation_model(999, "x"),
                   lambda: store.update_settings(999, {}),
                   lambda: store.delete_conversation(999),
                   lambda: store.add_message(999, "user", "hello")):
        with pytest.raises(NotFoundError, match="no longer exists"):
            change()
    assert store.get_conversation(999) is None


def test_list_puts_the_latest_activity_first(store: Store) -> None:
    a, b, c = (store.create_conversation(name, "m") for name in "abc")
    assert _matches(store, None) == [c.id, b.id, a.id]
    store.add_message(a.id, "user", "hello")
    assert _matches(store, None) == [a.id, c.id, b.id]
    reply = store.begin_reply(b.id)
    assert _matches(store, None) == [b.id, a.id, c.id]
    store.add_message(c.id, "user", "hi")
    store.finish_reply(reply.id, "done", None)
    assert _matches(store, None) == [b.id, c.id, a.id]
    store.rename_conversation(a.id, "renamed")  # a rename is not activity
    assert _matches(store, None) == [b.id, c.id, a.id]


def test_updated_at_moves_with_each_message(store: Store) -> None:
    conversation = store.create_conversation("t", "m")
    message = store.add_message(conversation.id, "user", "hi")
    reloaded = store.get_conversation(conversation.id)
    assert reloaded is not None
    assert reloaded.updated_at == message.created_at > conversation.updated_at


# Messages ---------------------------------------------------------------------------


def test_messages_come_back_in_order_and_in_pages(store: Store) -> None:
    conversation = store.create_conversation("t", "m")
    other = store.create_conversation("other", "m")
    store.add_message(conversation.id, "system", "be nice")
    for i in range(6):
        store.add_message(conversation.id, "user" if i % 2 == 0 else "assistant", f"turn {i}")
        store.add_message(other.id, "user", f"elsewhere {i}")
    everything = store.messages(conversation.id)
    assert [m.text for m in everything] == ["be nice"] + [f"turn {i}" for i in range(6)]
    assert [m.role for m in everything] == ["system"] + ["user", "assistant"] * 3
    assert store.message_count(conversation.id) == 7
    for offset, limit in [(0, 3), (3, 3), (6, 3), (7, 3), (2, 0), (0, 100)]:
        assert store.messages_page(conversation.id, offset, limit) == \
            everything[offset:offset + limit]


def test_unknown_role_is_refused(store: Store) -> None:
    conversation = store.create_conversation("t", "m")
    with pytest.raises(ValueError, match="role"):
        store.add_message(conversation.id, "tool", "x")  # type: ignore[arg-type]
    assert store.message_count(conversation.id) == 0


def test_delete_messages_from_removes_that_message_and_the_later_ones(store: Store) -> None:
    conversation = store.create_conversation("t", "m")
    other = store.create_conversation("o", "m")
    sent = [store.add_message(conversation.id, "user", f"message {i}") for i in range(6)]
    kept_elsewhere = store.add_message(other.id, "user", "message 9")
    assert store.delete_messages_from(sent[3].id) == 3
    assert store.messages(conversation.id) == sent[:3]
    assert store.messages(other.id) == [kept_elsewhere]
    assert _matches(store, "message 4") == []
    newer = store.add_message(conversation.id, "user", "again")
    assert newer.id > max(m.id for m in sent)  # ids are never reused
    with pytest.raises(NotFoundError):
        store.delete_messages_from(sent[4].id)


def test_delete_hides_undo_restores_and_purge_removes(store: Store) -> None:
    kept = store.create_conversation("kept", "m")
    gone = store.create_conversation("gone", "m")
    store.add_message(gone.id, "user", "a secret about zebras")
    store.delete_conversation(gone.id)
    assert _matches(store, None) == [kept.id]
    assert store.get_conversation(gone.id) is None
    assert _matches(store, "zebras") == []

    store.undelete_conversation(gone.id)
    assert _matches(store, "zebras") == [gone.id]
    assert [m.text for m in store.messages(gone.id)] == ["a secret about zebras"]

    store.delete_conversation(gone.id)
    assert store.purge_deleted() == 1
    assert store.purge_deleted() == 0
    assert store.message_count(gone.id) == 0
    with pytest.raises(NotFoundError):
        store.undelete_conversation(gone.id)
    assert _matches(store, None) == [kept.id]


def _tables_holding(path: Path, secret: str) -> list[str]:
    """Every table (search index included) with a row that still holds ``secret``."""
    db = sqlite3.connect(path)
    tables = [row[0] for row in db.execute("SELECT name FROM sqlite_schema WHERE type = 'table'"
                                            " AND sql NOT LIKE 'CREATE VIRTUAL%'")]
    holding = [table for table in tables
               if any(secret.encode() in (value if isinstance(value, bytes)
                                          else str(value).encode())
                      for row in db.execute(f'SELECT * FROM "{table}"') for value in row)]
    db.close()
    return holding


def test_deleted_text_does_not_linger_in_the_file(db_path: Path) -> None:
    with Store(db_path) as opened:
        regenerated = opened.create_conversation("t", "m")
        opened.add_message(regenerated.id, "user", "keep this")
        opened.add_message(regenerated.id, "assistant", "old reply: Kumquat")
        opened.delete_messages_from(opened.messages(regenerated.id)[-1].id)
        purged = opened.create_conversation("t", "m")
        opened.add_message(purged.id, "user", "my password is Rambutan")
        opened.delete_conversation(purged.id)
        assert _tables_holding(db_path, "rambutan") != []  # still there for Undo
        opened.purge_deleted()
        for secret in ("kumquat", "Kumquat", "rambutan", "Rambutan"):
            assert _tables_holding(db_path, secret) == []
        assert _tables_holding(db_path, "keep this") != []


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=range(len(HOSTILE_TEXTS)))
def test_text_is_stored_exactly(db_path: Path, text: str) -> None:
    with Store(db_path) as first:
        conversation = first.create_conversation(text, text, {"system_prompt": text})
        added = first.add_message(conversation.id, "user", text, stats={"note": text})
        reply = first.begin_reply(conversation.id)
        first.update_reply(reply.id, text)
        partial = first.begin_reply(conversation.id)
        first.update_reply(partial.id, text)
        finished = first.finish_reply(reply.id, text + "!", {"model": text})
    with Store(db_path) as second:
        reloaded = second.get_conversation(conversation.id)
        messages = second.messages(conversation.id)
    assert reloaded == replace(conversation, updated_at=reloaded.updated_at if reloaded else 0)
    assert messages == [added, finished, replace(partial, text=text)]
    assert [m.text for m in messages] == [text, text + "!", text]
    # JSON reads an escaped high+low pair as the one character it encodes.
    assert messages[0].stats == {"note": json.loads(json.dumps(text))}


# Replies saved as they stream -----------------------------------------------------------


def test_a_streaming_reply_is_visible_to_other_readers_before_it_finishes(
        db_path: Path) -> None:
    with Store(db_path) as writer, Store(db_path) as reader:
        conversation = writer.create_conversation("t", "m")
        reply = writer.begin_reply(conversation.id)
        assert (reply.role, reply.text, reply.complete) == ("assistant", "", False)
        writer.update_reply(reply.id, "The capital")
        writer.update_reply(reply.id, "The capital of France")
        seen = reader.messages(conversation.id)[-1]
        assert (seen.text, seen.complete) == ("The capital of France", False)

        stats = {"tokens": 7, "ttft_s": 0.1, "tokens_per_s": float("inf"), "stopped": False}
        finished = writer.finish_reply(reply.id, "The capital of France is Paris.", stats)
        seen = reader.messages(conversation.id)[-1]
        assert seen == finished
        assert seen.complete
        # A rate over zero seconds has no value; it is kept as null, not as invalid JSON.
        assert seen.stats == {**stats, "tokens_per_s": None}


def test_a_finished_or_deleted_reply_takes_no_more_text(store: Store) -> None:
    conversation = store.create_conversation("t", "m")
    reply = store.begin_reply(conversation.id)
    store.finish_reply(reply.id, "final", None)
    with pytest.raises(NotFoundError):
        store.update_reply(reply.id, "late piece")
    with pytest.raises(NotFoundError):
        store.finish_reply(reply.id, "again", None)
    doomed = store.begin_reply(conversation.id)
    store.delete_messages_from(doomed.id)
    with pytest.raises(NotFoundError):
        store.update_reply(doomed.id, "late piece")
    assert [m.text for m in store.messages(conversation.id)] == ["final"]


_STREAMING_CHILD = """
import sys
from app.core.conversations.store import Store

store = Store(sys.argv[1])
conversation = store.create_conversation("streaming", "model.gguf")
reply = store.begin_reply(conversation.id)
print(reply.id, flush=True)
text = ""
i = 0
while True:
    text += f"{i} "
    store.update_reply(reply.id, text)
    i += 1
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
def test_killing_the_process_mid_reply_keeps_the_text_so_far(db_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", _STREAMING_CHILD, str(db_path)],
                             cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        message_id = int(child.stdout.readline())
        watcher = sqlite3.connect(db_path)
        seen = ""
        deadline = time.monotonic() + 120  # guards against a hang only
        while len(seen) < 5_000:
            assert child.poll() is None, "the writing process died on its own"
            assert time.monotonic() < deadline, "the reply never grew"
            seen = watcher.execute("SELECT text FROM messages WHERE id = ?",
                                   (message_id,)).fetchone()[0]
        watcher.close()
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL

    check = sqlite3.connect(db_path)
    assert check.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    check.close()
    with Store(db_path) as reopened:
        (conversation,) = reopened.list_conversations()
        (reply,) = reopened.messages(conversation.id)
    assert reply.id == message_id
    assert not reply.complete
    assert reply.text.startswith(seen)  # nothing committed was lost
    written = "".join(f"{i} " for i in range(len(reply.text)))
    assert written.startswith(reply.text)  # and nothing is torn or garbled


# Search -------------------------------------------------------------------------------


def _corpus(store: Store) -> None:
    paris = store.create_conversation("Trip to Paris", "m")
    store.add_message(paris.id, "user", "Where should we eat?")
    store.add_message(paris.id, "assistant", "The ÉCLAIR place near the Louvre.")
    food = store.create_conversation("Recipes", "m")
    store.add_message(food.id, "user", "Bake an éclair, ABC🙂é style")
    for text in HOSTILE_TEXTS[1:-1]:
        conversation = store.create_conversation(f"hostile {text[:10]}", "m")
        store.add_message(conversation.id, "user", text)
    streaming = store.create_conversation("streaming", "m")
    reply = store.begin_reply(streaming.id)
    store.update_reply(reply.id, "an unfinished thought about zebras")


def test_search_finds_titles_and_text_regardless_of_case(store: Store) -> None:
    _corpus(store)
    titles = {c.id: c.title for c in store.list_conversations()}

    def found(query: str) -> set[str]:
        return {titles[i] for i in _matches(store, query)}

    assert found("PARIS") == {"Trip to Paris"}
    assert found("éclair") == {"Trip to Paris", "Recipes"}
    assert found("eclair") == set()
    assert found("clair place") == {"Trip to Paris"}
    assert found("zebras") == {"streaming"}
    assert found("ip") == {"Trip to Paris", "Recipes"}  # short queries too
    assert found("no such words anywhere") == set()
    assert _matches(store, "   ") == _matches(store, None) == _matches(store, "")


@pytest.mark.parametrize("search_index", [True, False], ids=["indexed", "scanned"])
@pytest.mark.parametrize("query", HOSTILE_QUERIES, ids=range(len(HOSTILE_QUERIES)))
def test_hostile_queries_follow_the_substring_rule(db_path: Path, query: str,
                                                   search_index: bool) -> None:
    with Store(db_path, search_index=search_index) as opened:
        _corpus(opened)
        quoted = opened.create_conversation("every query, quoted", "m")
        opened.add_message(quoted.id, "user", " | ".join(HOSTILE_QUERIES))
        found = _matches(opened, query)
        assert found == _expected_matches(opened, query)
        assert quoted.id in found


def test_search_agrees_with_the_substring_rule_for_any_text(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("search") / "c.sqlite3"
    anything = st.text(st.characters(exclude_categories=()), max_size=40)
    with Store(path) as indexed, Store(path, search_index=False) as scanned:

        @settings(max_examples=150, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow])
        @given(texts=st.lists(anything, min_size=1, max_size=4), data=st.data())
        def check(texts: list[str], data: st.DataObject) -> None:
            conversation = indexed.create_conversation(texts[0], "m")
            for text in texts[1:]:
                indexed.add_message(conversation.id, "user", text)
            source = data.draw(st.sampled_from(texts))
            start = data.draw(st.integers(0, len(source)))
            piece = source[start:start + data.draw(st.integers(0, 8))]
            query = data.draw(st.sampled_from([piece, piece.upper(), piece.swapcase()])
                              | anything)
            expected = _expected_matches(indexed, query)
            assert _matches(indexed, query) == expected
            assert _matches(scanned, query) == expected

        check()


def test_search_index_catches_up_after_writes_without_it(db_path: Path) -> None:
    with Store(db_path) as first:
        early = first.create_conversation("early", "m")
        first.add_message(early.id, "user", "written while indexed: kumquat")
    with Store(db_path, search_index=False) as unindexed:
        late = unindexed.create_conversation("late", "m")
        unindexed.add_message(late.id, "user", "written without the index: rambutan")
        unindexed.delete_conversation(early.id)
        unindexed.purge_deleted()
    with Store(db_path) as reopened:
        assert _matches(reopened, "rambutan") == [late.id]
        assert _matches(reopened, "kumquat") == []
    check = sqlite3.connect(db_path)
    check.execute("INSERT INTO message_search (message_search) VALUES ('integrity-check')")
    check.close()


# Opening: versions, damage, errors ---------------------------------------------------------


def _older_build_database(path: Path) -> None:
    """What the first release left on disk: schema version 1 and its rows."""
    db = sqlite3.connect(path, isolation_level=None)
    store_module.MIGRATIONS[0](db)
    db.execute("PRAGMA user_version = 1")
    db.execute("INSERT INTO conversations (title, model, created_at, updated_at, settings)"
               " VALUES ('from the old build', 'old.gguf', 1.0, 2.0, '{\"temperature\": 0.5}')")
    db.execute("INSERT INTO messages (conversation_id, role, text, created_at, stats, complete)"
               " VALUES (1, 'user', 'hello from before', 1.5, NULL, 1)")
    db.close()


def _add_pinned(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0")


def _columns(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    names = [row[1] for row in db.execute("PRAGMA table_info(conversations)")]
    db.close()
    return names


def _version(path: Path) -> int:
    db = sqlite3.connect(path)
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    db.close()
    return version


def test_an_older_database_opens_with_its_data(db_path: Path) -> None:
    _older_build_database(db_path)
    with Store(db_path) as opened:
        (conversation,) = opened.list_conversations()
        assert (conversation.title, conversation.model, conversation.settings) == (
            "from the old build", "old.gguf", {"temperature": 0.5})
        assert [m.text for m in opened.messages(conversation.id)] == ["hello from before"]
        assert _matches(opened, "FROM BEFORE") == [conversation.id]
    assert _version(db_path) == len(store_module.MIGRATIONS)


def test_a_new_migration_upgrades_an_older_database_and_keeps_its_data(
        db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _older_build_database(db_path)
    monkeypatch.setattr(store_module, "MIGRATIONS", (*store_module.MIGRATIONS, _add_pinned))
    with Store(db_path) as opened:
        assert [m.text for m in opened.messages(1)] == ["hello from before"]
        opened.add_message(1, "assistant", "hello from after")
    assert _version(db_path) == len(store_module.MIGRATIONS)  # every step, the new one last
    assert "pinned" in _columns(db_path)


def test_a_failing_migration_leaves_the_database_as_it_was(
        db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _older_build_database(db_path)

    def half_done(db: sqlite3.Connection) -> None:
        _add_pinned(db)
        store_module.MIGRATIONS[0](db)  # creating the tables again fails for real

    monkeypatch.setattr(store_module, "MIGRATIONS", (store_module.MIGRATIONS[0], half_done))
    with pytest.raises(StoreError, match="already exists"):
        Store(db_path)
    assert _version(db_path) == 1
    assert "pinned" not in _columns(db_path)
    monkeypatch.undo()
    with Store(db_path) as opened:
        assert [m.text for m in opened.messages(1)] == ["hello from before"]


def test_a_database_from_a_newer_version_is_refused_and_left_untouched(
        db_path: Path) -> None:
    with Store(db_path) as first:
        first.create_conversation("from the future", "m")
    db = sqlite3.connect(db_path)
    db.execute("PRAGMA journal_mode = DELETE")  # so that even a switch to WAL would show
    db.execute(f"PRAGMA user_version = {len(store_module.MIGRATIONS) + 5}")
    db.close()
    before = _digest(db_path)
    with pytest.raises(DatabaseTooNewError, match="newer version of Fireside"):
        Store(db_path)
    assert _digest(db_path) == before


def test_a_file_that_is_not_a_database_is_reported_as_damaged(db_path: Path) -> None:
    db_path.write_bytes(b"this is a shopping list, not a database\n" * 200)
    before = _digest(db_path)
    with pytest.raises(CorruptDatabaseError, match="damaged") as caught:
        Store(db_path)
    assert caught.value.path == db_path
    assert str(db_path) in str(caught.value)
    assert _digest(db_path) == before  # reported, not moved or rewritten


def test_damage_is_reported_at_open_even_where_opening_does_not_read(
        db_path: Path) -> None:
    helpers.database_with_a_damaged_page(db_path, messages_root=True)
    with pytest.raises(CorruptDatabaseError, match="damaged"):
        Store(db_path)


def test_a_folder_in_place_of_the_file_gives_a_readable_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="Could not open the conversation database"):
        Store(tmp_path)


def test_a_locked_database_gives_a_readable_error(db_path: Path) -> None:
    with Store(db_path, timeout=0.05) as opened:
        conversation = opened.create_conversation("t", "m")
        other = sqlite3.connect(db_path, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreError, match="database is locked"):
            opened.add_message(conversation.id, "user", "hello")
        other.execute("ROLLBACK")
        other.close()
        opened.add_message(conversation.id, "user", "hello")
        assert opened.message_count(conversation.id) == 1


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB file system that fills up."""
    with helpers.small_disk(tmp_path / "small", "1m") as folder:
        yield folder


def test_a_full_disk_gives_a_readable_error_and_keeps_what_was_saved(
        small_disk: Path) -> None:
    path = small_disk / "conversations.sqlite3"
    with Store(path) as opened:
        conversation = opened.create_conversation("t", "m")
        question = opened.add_message(conversation.id, "user", "tell me everything")
        reply = opened.begin_reply(conversation.id)
        saved = text = ""
        with pytest.raises(StoreError, match="disk is full") as caught:
            for _ in range(100):
                text += "word " * 10_000
                opened.update_reply(reply.id, text)
                saved = text
        assert str(caught.value) == "Could not save the conversation: the disk is full"
        assert saved
        assert [m.text for m in opened.messages(conversation.id)] == [question.text, saved]
    with Store(path) as reopened:
        assert [m.text for m in reopened.messages(conversation.id)] == [question.text, saved]


# Threads and lifetime -------------------------------------------------------------------


def test_many_threads_can_write_at_once(store: Store) -> None:
    shared = store.create_conversation("shared", "m")
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            own = store.create_conversation(f"worker {worker}", "m")
            for i in range(40):
                store.add_message(own.id, "user", f"{worker}:{i}")
                reply = store.begin_reply(shared.id)
                store.update_reply(reply.id, f"{worker}:{i}")
                store.finish_reply(reply.id, f"{worker}:{i} done", None)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert store.message_count(shared.id) == 6 * 40
    texts = {m.text for m in store.messages(shared.id)}
    assert texts == {f"{w}:{i} done" for w in range(6) for i in range(40)}


def test_a_closed_store_says_so(db_path: Path) -> None:
    opened = Store(db_path)
    opened.close()
    opened.close()
    with pytest.raises(StoreError, match="closed"):
        opened.list_conversations()


# Titles ---------------------------------------------------------------------------------


def test_default_title_takes_the_first_line_tidied() -> None:
    assert default_title("\n  \n  What is   the\tcapital\x00of France?\nMore text") == \
        "What is the capital of France?"
    assert default_title(" \n\t\x00\x1b ") == UNTITLED


def test_default_title_shortens_long_text_on_a_word() -> None:
    words = "a fairly long question about the history of bread making in old Europe"
    title = default_title(words + " " + words)
    assert len(title) <= TITLE_LIMIT
    assert title.endswith("…")
    assert words.startswith(title[:-1])
    assert words[len(title) - 1] == " "  # cut between words


@given(st.text(st.characters(exclude_categories=())))
def test_default_title_is_always_one_short_clean_line(text: str) -> None:
    title = default_title(text)
    assert 0 < len(title) <= TITLE_LIMIT
    assert len(title.splitlines()) == 1
    assert not any(unicodedata.category(ch) in ("Cc", "Cs") for ch in title)
    assert title.encode("utf-8")


def test_a_replys_calls_and_their_results_survive_reopening(db_path: Path) -> None:
    call = ToolCall("add", '{"a": 1, "b": 2}', "call_1")
    with Store(db_path) as opened:
        conversation = opened.create_conversation("Sums", "m.gguf")
        reply = opened.begin_reply(conversation.id)
        opened.finish_reply(reply.id, "", {"finish_reason": "tool_calls"}, "",
                            (ToolRun(call, "test"),))
        opened.set_calls(reply.id, (ToolRun(call, "test", "done", "3"),))
    with Store(db_path) as reopened:
        (kept,) = reopened.messages(conversation.id)
        assert kept.calls == (ToolRun(call, "test", "done", "3"),)
    db = sqlite3.connect(db_path)
    db.execute("UPDATE messages SET calls = '[{\"name\": 7}, not json'")
    db.commit()
    db.close()
    with Store(db_path) as edited:
        (message,) = edited.messages(conversation.id)
        assert message.calls == () and message.stats == {"finish_reason": "tool_calls"}, \
            "a record edited into nonsense costs its calls, never the message"
