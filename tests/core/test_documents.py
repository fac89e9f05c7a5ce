"""Documents in a conversation: what a reply is given of them (whole, or the passages that
answer), their sources, indexing that waits for replies, only changed files read again,
an embedding model change, bad files, and documents deleted with their conversation.

Retrieval runs on the real bundled embedding model over text nobody here wrote (dpkg's
own specifications on this machine). The logic of the indexing thread (waiting,
cancelling, re-embedding) runs on a scripted embedding, whose vectors mean nothing,
because it depends on order and bookkeeping only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from app.core.documents.index import DocumentIndex
from app.core.documents.shelf import Shelf
from app.core.fireside import Fireside
from tests.scripted_engine import ScriptedEngine

TIMEOUT = 120
DPKG_SPECS = Path("/usr/share/doc/dpkg/spec")


def _specs(tmp_path: Path) -> Path:
    """A folder of real documents: dpkg's specifications as this machine has them."""
    if not DPKG_SPECS.is_dir():
        pytest.skip("dpkg's specifications are not on this machine")
    folder = tmp_path / "specs"
    shutil.copytree(DPKG_SPECS, folder)
    return folder


class ScriptedEmbedding:
    """Vectors from hashed words: equal texts get equal vectors, nothing more."""

    dim = 32

    def __init__(self, path: Path, delay_s: float = 0.0) -> None:
        self.path = path
        self.name = path.name
        self.delay_s = delay_s
        self.embedded: list[str] = []
        self.gate = threading.Event()
        self.gate.set()

    def count(self, text: str) -> int:
        return len(text.split())

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.gate.wait()
        time.sleep(self.delay_s * len(texts))
        self.embedded.extend(texts)
        rows = np.zeros((len(texts), self.dim), np.float32)
        for number, text in enumerate(texts):
            for word in text.lower().split():
                rows[number, hashlib.sha1(word.encode()).digest()[0] % self.dim] += 1
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-6)

    def close(self) -> None:
        pass


@pytest.fixture
def engine() -> ScriptedEngine:
    return ScriptedEngine()


@pytest.fixture
def core(engine: ScriptedEngine, smollm2_path: Path, minilm_path: Path) -> Iterator[Fireside]:
    opened = Fireside.open(engine=engine)
    opened.load(smollm2_path).result(TIMEOUT)
    yield opened
    opened.close()


def _shelf(tmp_path: Path, **embedding: float) -> tuple[Shelf, dict[str, ScriptedEmbedding]]:
    """A shelf on its own database, with scripted embeddings by model file name."""
    made: dict[str, ScriptedEmbedding] = {}
    chosen = [tmp_path / "model-a.gguf"]

    def open_embedder(path: Path) -> ScriptedEmbedding:
        made[path.name] = ScriptedEmbedding(path, **embedding)
        return made[path.name]

    shelf = Shelf(DocumentIndex(tmp_path / "fireside.db"), lambda: chosen[0], open_embedder)
    shelf.chosen = chosen  # type: ignore[attr-defined]
    return shelf, made


def _write(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")


def _passage_ids(shelf: Shelf, collection_id: int) -> dict[str, list[int]]:
    ids: dict[str, list[int]] = {}
    for record in shelf.index.files(collection_id):
        rows = shelf.index._rows("SELECT id FROM doc_passages WHERE file_id = ? ORDER BY ord",
                                 record.id)
        ids[record.path.name] = [r[0] for r in rows]
    return ids


# What a reply is given -----------------------------------------------------------------


@pytest.mark.model
def test_a_document_that_fits_is_given_whole_with_its_source(
        core: Fireside, engine: ScriptedEngine, tmp_path: Path) -> None:
    notes = tmp_path / "boat.md"
    notes.write_text("# The boat\n\nOur sailing boat is called Wren. It is moored at "
                     "Pier 7.\n", encoding="utf-8")
    core.attach([notes])
    assert core.documents.idle(TIMEOUT)
    turn = core.send("Where is the boat moored?").result(TIMEOUT)
    turn.future.result(TIMEOUT)
    assert "It is moored at Pier 7." in engine.last_prompt
    assert [(s["n"], s["path"], s["whole"]) for s in turn.sources] == [(1, str(notes), True)]
    # Kept with the question, so a reopened conversation shows them.
    stored = [m for m in core.history() if m.role == "user"][-1]
    assert stored.sources == turn.sources and "Pier 7" in stored.attached
    # Given whole once: a follow-up finds it in the conversation already.
    follow_up = core.send("And what is it called?").result(TIMEOUT)
    follow_up.future.result(TIMEOUT)
    assert follow_up.sources == ()
    assert engine.last_prompt.count("Pier 7.") == 1


@pytest.mark.model
def test_documents_too_large_for_the_context_give_their_best_passages(
        core: Fireside, engine: ScriptedEngine, tmp_path: Path) -> None:
    folder = _specs(tmp_path)
    core.attach([folder])
    assert core.documents.idle(TIMEOUT * 3)
    assert not core.documents.progress().problems
    turn = core.send("How does a package declare interest in a file trigger?").result(TIMEOUT)
    turn.future.result(TIMEOUT)
    assert turn.sources and not any(s.get("whole") for s in turn.sources)
    assert Path(turn.sources[0]["path"]).name == "triggers.txt"
    assert all(s["location"].startswith("line") for s in turn.sources)
    prompt = engine.last_prompt
    assert turn.sources[0]["text"] in prompt and "[1] triggers.txt" in prompt
    # The follow-up names nothing itself: it is searched with the conversation.
    again = core.send("Which commands activate them?").result(TIMEOUT)
    again.future.result(TIMEOUT)
    assert Path(again.sources[0]["path"]).name == "triggers.txt"


@pytest.mark.model
def test_documents_attached_to_a_new_chat_go_with_its_conversation(
        core: Fireside, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("The meeting is on Tuesday.\n", encoding="utf-8")
    core.attach([notes])
    assert [c.path for c in core.attached()] == [notes]
    turn = core.send("When is the meeting?").result(TIMEOUT)
    turn.future.result(TIMEOUT)
    conversation = core.conversation_id
    assert conversation is not None
    core.new_chat().result(TIMEOUT)
    assert core.attached() == []  # a new chat starts with none
    core.open_conversation(conversation).result(TIMEOUT)
    assert [c.path for c in core.attached()] == [notes]
    # Deleted for good once Fireside closes: its documents go too.
    core.delete_conversation(conversation).result(TIMEOUT)
    core.close()
    reopened = Fireside.open(engine=ScriptedEngine())
    try:
        assert reopened.documents.index._rows("SELECT count(*) FROM doc_files")[0][0] == 0
    finally:
        reopened.close()


def test_a_path_that_does_not_exist_is_refused_by_name(tmp_path: Path) -> None:
    shelf, _ = _shelf(tmp_path)
    try:
        with pytest.raises(ValueError, match=r"gone\.pdf does not exist"):
            shelf.attach(None, [tmp_path / "gone.pdf"])
        assert shelf.attached(None) == []
    finally:
        shelf.close()


# Indexing --------------------------------------------------------------------------


def test_only_new_and_changed_files_are_read_again(tmp_path: Path) -> None:
    shelf, made = _shelf(tmp_path)
    folder = tmp_path / "notes"
    _write(folder, {"a.txt": "alpha beta gamma", "b.txt": "delta epsilon",
                    "c.txt": "zeta eta theta"})
    try:
        (collection,) = shelf.attach(1, [folder])
        assert shelf.idle(TIMEOUT)
        before = _passage_ids(shelf, collection.id)
        embedder = made["model-a.gguf"]
        embedder.embedded.clear()
        (folder / "b.txt").write_text("delta epsilon, changed", encoding="utf-8")
        (folder / "c.txt").unlink()
        _write(folder, {"d.txt": "iota kappa"})
        shelf.focus(1)
        assert shelf.idle(TIMEOUT)
        after = _passage_ids(shelf, collection.id)
        assert embedder.embedded == ["delta epsilon, changed", "iota kappa"]
        assert after["a.txt"] == before["a.txt"]  # untouched
        assert set(after) == {"a.txt", "b.txt", "d.txt"}
    finally:
        shelf.close()


def test_a_new_embedding_model_embeds_the_kept_passages_again(tmp_path: Path) -> None:
    shelf, made = _shelf(tmp_path)
    folder = tmp_path / "notes"
    _write(folder, {f"{i}.txt": f"note number {i} about topic {i * 7}" for i in range(5)})
    try:
        (collection,) = shelf.attach(1, [folder])
        assert shelf.idle(TIMEOUT)
        ids_a, _ = shelf.index.matrix([collection.id], "model-a.gguf")
        shelf.chosen[0] = tmp_path / "model-b.gguf"  # type: ignore[attr-defined]
        shelf.focus(1)  # the watcher's look: it finds the passages of another model
        assert shelf.idle(TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and shelf.index.unembedded("model-b.gguf", 1):
            time.sleep(0.05)
        ids_b, vectors_b = shelf.index.matrix([collection.id], "model-b.gguf")
        assert sorted(ids_b) == sorted(ids_a) and len(ids_a) == 5
        assert vectors_b.shape == (5, ScriptedEmbedding.dim)
        assert sorted(made["model-b.gguf"].embedded) == sorted(
            f"note number {i} about topic {i * 7}" for i in range(5))
    finally:
        shelf.close()


def test_indexing_waits_while_a_reply_is_written(tmp_path: Path) -> None:
    shelf, _ = _shelf(tmp_path)
    folder = tmp_path / "notes"
    _write(folder, {f"{i}.txt": f"text {i}" for i in range(3)})
    try:
        shelf.hold()  # a reply begins
        (collection,) = shelf.attach(1, [folder])
        time.sleep(1.0)
        assert shelf.index.files(collection.id) == []
        assert not shelf.idle(0.1)
        shelf.release()  # it ended
        assert shelf.idle(TIMEOUT)
        assert len(shelf.index.files(collection.id)) == 3
    finally:
        shelf.close()


def test_indexing_pauses_for_a_reply_and_goes_on_after(tmp_path: Path,
                                                       smollm2_path: Path) -> None:
    engine = ScriptedEngine(piece_delay_s=0.3)
    core = Fireside.open(engine=engine)
    shelf, _ = _shelf(tmp_path, delay_s=0.05)
    core.documents.close()
    core.documents = shelf
    folder = tmp_path / "notes"
    _write(folder, {f"{i:03}.txt": f"paragraph {i}\n\nmore text {i}" for i in range(40)})
    try:
        core.load(smollm2_path).result(TIMEOUT)
        core.attach([folder])
        deadline = time.monotonic() + TIMEOUT
        while shelf.progress().done < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        turn = core.send("Hello").result(TIMEOUT)
        time.sleep(0.5)  # the batch under way ends; then it waits
        progress = shelf.progress()
        assert progress.paused
        time.sleep(0.6)
        assert shelf.progress().done == progress.done  # nothing read while it writes
        turn.future.result(TIMEOUT)
        assert shelf.idle(TIMEOUT)
        collection = shelf.attached(core.conversation_id)[0]
        assert len(shelf.index.files(collection.id)) == 40
    finally:
        core.close()


def test_cancelling_keeps_what_was_indexed_and_the_next_look_reads_the_rest(
        tmp_path: Path) -> None:
    shelf, made = _shelf(tmp_path, delay_s=0.05)
    folder = tmp_path / "notes"
    _write(folder, {f"{i:03}.txt": f"note {i}" for i in range(30)})
    try:
        (collection,) = shelf.attach(1, [folder])
        deadline = time.monotonic() + TIMEOUT
        while shelf.progress().done < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        shelf.cancel()
        assert shelf.idle(TIMEOUT)
        kept = len(shelf.index.files(collection.id))
        assert 5 <= kept < 30
        shelf.focus(1)
        assert shelf.idle(TIMEOUT)
        assert len(shelf.index.files(collection.id)) == 30
        assert len(made["model-a.gguf"].embedded) == 30  # none read twice
    finally:
        shelf.close()


def test_files_that_cannot_be_read_are_named_and_the_others_indexed(tmp_path: Path) -> None:
    shelf, _ = _shelf(tmp_path)
    folder = tmp_path / "mixed"
    _write(folder, {"good.md": "# Title\n\nReadable words.", "other.txt": "More words."})
    (folder / "broken.pdf").write_bytes(os.urandom(4096))
    (folder / "fake.docx").write_bytes(b"PK\x03\x04 not really a zip")
    blob = tmp_path / "photo.bin"
    blob.write_bytes(bytes(range(256)) * 64)
    going = tmp_path / "going.txt"
    going.write_text("here for now", encoding="utf-8")
    try:
        shelf.hold()  # so the file can vanish before it is read
        shelf.focus(1)  # its problems are the open conversation's
        (mixed, _, _) = shelf.attach(1, [folder, blob, going])
        going.unlink()
        shelf.release()
        assert shelf.idle(TIMEOUT)
        problems = shelf.progress().problems
        for name in ("broken.pdf", "fake.docx", "photo.bin", "going.txt"):
            assert [p for p in problems if name in p], (name, problems)
        indexed = {f.path.name for f in shelf.index.files(mixed.id) if f.error is None}
        assert indexed == {"good.md", "other.txt"}
        shelf.focus(2)  # another conversation is not told of them
        assert shelf.progress().problems == ()
    finally:
        shelf.close()


@pytest.mark.slow
def test_a_folder_of_ten_thousand_files_is_indexed_with_its_bad_ones_named(
        tmp_path: Path) -> None:
    shelf, _ = _shelf(tmp_path)
    folder = tmp_path / "many"
    for group in range(100):
        _write(folder / f"g{group:02}", {f"n{i:03}.txt": f"note {group} {i}"
                                         for i in range(100)})
    for bad in range(3):
        (folder / f"g{bad:02}" / f"bad{bad}.pdf").write_bytes(b"%PDF-1.7 truncated")
    try:
        shelf.focus(1)
        (collection,) = shelf.attach(1, [folder])
        assert shelf.idle(600)
        records = shelf.index.files(collection.id)
        assert sum(r.error is None for r in records) == 10_000
        problems = " ".join(shelf.progress().problems)
        assert all(f"bad{i}.pdf" in problems for i in range(3))
    finally:
        shelf.close()
