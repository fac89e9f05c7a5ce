"""The documents of each conversation, read and indexed in the background, and what a
reply is given of them.

One thread of its own ("fireside-documents") owns the embedding model's llama.cpp
context and does all the work: reading and indexing the files brought in, embedding a
question, embedding for the local API, and watching the open conversation's folders.
Indexing waits while a reply is being written (``hold``): the chat has the CPU first.
A question's embedding never waits behind more than one small batch of indexing.

Each file is kept in one transaction once read and embedded, so quitting or cancelling
keeps every file done; the next look at the collection reads only files that are new
or changed (by size and modification time) and forgets those gone.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from app.core.documents import readers
from app.core.documents.index import Collection, DocumentIndex, Found
from app.core.documents.passages import approx_tokens, cut
from app.core.documents.search import hybrid

logger = logging.getLogger(__name__)

T = TypeVar("T")

# An indexing batch's target time: what a question, or a reply's first token, may wait
# behind it (a batch under way is not interrupted; larger ones are hardly faster).
BATCH_S = 0.05
WATCH_S = 5.0  # how often the open conversation's folders are looked at again, at least
WATCH_SHARE = 0.02  # of one core's time spent looking: a large folder is looked at less
SOURCES = 8  # passages at most in a reply's prompt
WHOLE_SOURCE_CHARS = 10_000  # of a whole file, kept with its source to be shown
# Estimated tokens are words and punctuation; a chat model's tokenizer can count more.
ESTIMATE_MARGIN = 1.25

INTRO_PASSAGES = ("Passages from the user's documents follow, numbered. Answer from them "
                  "where they hold the answer, and cite the numbers you use, like [1].")
INTRO_WHOLE = ("The user's documents follow, numbered. Answer from them where they hold "
               "the answer, and cite the numbers you use, like [1].")


class Embedding(Protocol):
    """An embedding model in a llama.cpp context of its own (llama.embedder.Embedder)."""

    name: str
    dim: int

    def count(self, text: str) -> int: ...
    def embed(self, texts: Sequence[str]) -> np.ndarray: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class Given:
    """What a reply is given of the conversation's documents, placed before the user's
    message, and the sources it holds (numbered from 1, best first)."""

    text: str
    sources: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Embedded:
    vectors: np.ndarray  # one unit-length row per text
    tokens: int
    model: str


@dataclass(frozen=True)
class Progress:
    """The indexing under way, for a progress bar."""

    path: str = ""  # the collection being indexed; "" when idle
    done: int = 0  # files looked at
    total: int = 0
    current: str = ""  # the file being read
    queued: int = 0  # collections waiting after it
    paused: bool = False  # waiting for a reply to end
    problems: tuple[str, ...] = ()  # files not indexed, each with why, since attached
    passages: int = 0  # kept so far in this collection

    @property
    def active(self) -> bool:
        return bool(self.path)


class Cancelled(Exception):
    pass


@dataclass
class _Job:
    collection: Collection
    quiet: bool = False  # a watcher's look: no bar unless something changed


@dataclass
class _State:
    progress: Progress = field(default_factory=Progress)
    problems: dict[str, str] = field(default_factory=dict)  # path: why


class Shelf:
    """Attach, index, search. Safe to call from any thread; the work runs on its own."""

    def __init__(self, index: DocumentIndex,
                 embedding_model: Callable[[], Path | None],
                 open_embedder: Callable[[Path], Embedding] | None = None) -> None:
        self.index = index
        self._model_path = embedding_model
        self._open_embedder = open_embedder or _llama_embedder
        self._embedder: Embedding | None = None
        self._embedder_problem: str | None = None
        self._cond = threading.Condition()
        self._urgent: deque[tuple[Callable[[], Any], Future[Any]]] = deque()
        self._jobs: deque[_Job] = deque()
        self._held = 0
        self._cancel = threading.Event()
        self._closed = False
        self._state = _State()
        self._pending: list[Collection] = []  # attached to a chat not saved yet
        self._open: int | None = None  # the conversation whose folders are watched
        self._last_watch = 0.0
        self._watch_every = WATCH_S
        self._checked_model: Path | None = None  # the embedding model last made current
        self._working = False  # a job taken from the queue and not yet done
        self._batch = 4  # passages per decode, sized to BATCH_S as it goes
        self._thread = threading.Thread(target=self._serve, name="fireside-documents",
                                        daemon=True)
        self._thread.start()

    # Attaching ----------------------------------------------------------------------

    def attach(self, conversation_id: int | None, paths: Sequence[Path]) -> list[Collection]:
        """Bring files or folders into a conversation (None: the new chat, until its
        first message saves it) and index them in the background. A path that does not
        exist is refused with ValueError naming it, before anything is attached."""
        for path in paths:
            if not path.exists():
                raise ValueError(f"{path} does not exist.")
        added = []
        for path in paths:
            collection = self.index.collection(path.resolve(), path.is_dir())
            if conversation_id is None:
                if collection.id not in {c.id for c in self._pending}:
                    self._pending.append(collection)
            else:
                self.index.link(conversation_id, collection.id)
            added.append(collection)
            self._enqueue(_Job(collection))
        return added

    def detach(self, conversation_id: int | None, collection_id: int) -> None:
        if conversation_id is None:
            self._pending = [c for c in self._pending if c.id != collection_id]
        else:
            self.index.unlink(conversation_id, collection_id)
        self.index.forget_unlinked(keep=[c.id for c in self._pending])

    def attached(self, conversation_id: int | None) -> list[Collection]:
        if conversation_id is None:
            return list(self._pending)
        return self.index.attached(conversation_id)

    def adopt(self, conversation_id: int) -> None:
        """The new chat was saved as ``conversation_id``: its documents go with it."""
        pending, self._pending = self._pending, []
        for collection in pending:
            self.index.link(conversation_id, collection.id)

    def new_chat(self) -> None:
        self._pending = []
        self.focus(None)

    def focus(self, conversation_id: int | None) -> None:
        """The open conversation: its folders are watched, and looked at now."""
        self._open = conversation_id
        for collection in self.attached(conversation_id):
            self._enqueue(_Job(collection, quiet=True))

    def forget_conversations_except(self, living: Sequence[int]) -> None:
        """Conversations deleted for good take their collections with them."""
        self.index.unlink_conversations_except(living)
        self.index.forget_unlinked(keep=[c.id for c in self._pending])

    # Indexing, as it goes -----------------------------------------------------------

    def progress(self) -> Progress:
        """The indexing under way, with the problems of the open conversation's files."""
        roots = [str(c.path) for c in self.attached(self._open)]
        with self._cond:
            problems = tuple(why for path, why in self._state.problems.items()
                             if any(path == root or path.startswith(root + os.sep)
                                    for root in roots))
            return replace(self._state.progress, queued=len(self._jobs),
                           paused=self._held > 0 and self._state.progress.active,
                           problems=problems)

    def cancel(self) -> None:
        """Stop indexing: what is done is kept; the files left are read at the next look."""
        with self._cond:
            self._jobs.clear()
            self._cancel.set()
            self._cond.notify_all()

    def hold(self) -> None:
        """A reply is being written: indexing waits."""
        with self._cond:
            self._held += 1

    def release(self) -> None:
        with self._cond:
            self._held = max(0, self._held - 1)
            self._cond.notify_all()

    def idle(self, timeout: float) -> bool:
        """Wait until no indexing is under way or queued (tests, the terminal)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._jobs or self._working:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    # What a reply is given ----------------------------------------------------------

    def embed(self, texts: Sequence[str]) -> Future[np.ndarray]:
        """Vectors for ``texts`` from the embedding model, ahead of any indexing."""
        return self._urgently(lambda: self._require_embedder().embed(list(texts)))

    def embeddings(self, texts: Sequence[str]) -> Future[Embedded]:
        """Vectors for ``texts`` with the tokens they took and the model's name (the
        local API's /v1/embeddings)."""
        def run() -> Embedded:
            embedder = self._require_embedder()
            return Embedded(embedder.embed(list(texts)),
                            sum(embedder.count(t) for t in texts), embedder.name)
        return self._urgently(run)

    def embedding_name(self) -> Future[str]:
        return self._urgently(lambda: self._require_embedder().name)

    def given(self, conversation_id: int | None, questions: Sequence[str],
              earlier: Sequence[Sequence[dict[str, Any]]], room: int,
              count: Callable[[str], int] | None = None) -> Given | None:
        """What the next reply is given of the conversation's documents in ``room``
        tokens (of the chat model, as ``count`` counts them): the files whole when they
        fit, else the passages that best answer the conversation's recent ``questions``
        (newest last). Files given whole before (``earlier``: the sources of earlier
        messages) are in the conversation already and are not given again."""
        ids = [c.id for c in self.attached(conversation_id)]
        if not ids or room <= 0:
            return None
        count = count or estimate_tokens
        given_whole = {s["path"] for sources in earlier for s in sources if s.get("whole")}
        files = self.index.whole(ids)
        new = [(p, t) for p, t in files if str(p) not in given_whole]
        if files and not new:
            return None
        # Counted exactly only when the estimate says it may fit: a long file's tokens
        # are not worth making to learn it does not.
        if new and sum(_estimate(t) for _, t in new) <= 2 * room:
            whole = _whole(new)
            if count(whole.text) <= room:
                return whole
        question = "\n".join(questions[-3:])
        vector, model = None, ""
        try:
            vector = self.embed([question]).result(timeout=60)[0]
            model = self.embedding_name().result(timeout=60)
        except Exception as err:  # words alone still find passages
            logger.info("question not embedded: %s", err)
        found = hybrid(self.index, ids, question, query=vector, model=model, limit=SOURCES)
        kept: list[Found] = []
        used = count(INTRO_PASSAGES)
        for passage in found:
            cost = count(passage.text) + 15  # and its number, file and place
            if used + cost > room:
                break
            kept.append(passage)
            used += cost
        return _passages(kept) if kept else None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cancel.set()
            self._cond.notify_all()
        self._thread.join(timeout=5)
        self.index.close()

    # The documents' thread --------------------------------------------------------

    def _enqueue(self, job: _Job) -> None:
        with self._cond:
            if any(j.collection.id == job.collection.id for j in self._jobs):
                return
            if not job.quiet:
                self._cancel.clear()
            self._jobs.append(job)
            self._cond.notify_all()

    def _urgently(self, run: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        with self._cond:
            if self._closed:
                future.set_exception(RuntimeError("Documents are closed."))
                return future
            self._urgent.append((run, future))
            self._cond.notify_all()
        return future

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._urgent and (
                        self._held or not self._jobs) and not self._watch_due():
                    self._cond.wait(0.5)
                if self._closed:
                    return
                urgent = self._urgent.popleft() if self._urgent else None
                job = None
                if urgent is None and not self._held and self._jobs:
                    job = self._jobs.popleft()
                    self._working = True
            if urgent is not None:
                _run_into(*urgent)
            elif job is not None:
                self._run_job(job)
            elif not self._held:
                self._watch()

    def _watch_due(self) -> bool:
        if self._model_path() != self._checked_model:  # another embedding model chosen
            return True
        return self._open is not None and \
            time.monotonic() - self._last_watch > self._watch_every

    def _watch(self) -> None:
        if self._model_path() != self._checked_model:
            self._reembed()
        if self._open is None or time.monotonic() - self._last_watch < self._watch_every:
            return
        began = self._last_watch = time.monotonic()
        for collection in self.attached(self._open):
            self._run_job(_Job(collection, quiet=True))
        self._watch_every = max(WATCH_S, (time.monotonic() - began) / WATCH_SHARE)

    def _run_job(self, job: _Job) -> None:
        collection = job.collection
        try:
            listed = list(_documents_in(collection))
            known = {f.path: f for f in self.index.files(collection.id)}
            changed = [(p, s) for p, s in listed
                       if (f := known.get(p)) is None or (f.size, f.mtime_ns) != s]
            for gone in known.keys() - {p for p, _ in listed}:
                self.index.drop_file(known[gone].id)
                self._problem(gone, None)
            if not changed:
                return
            self._set(Progress(str(collection.path), 0, len(changed)))
            for done, (path, (size, mtime_ns)) in enumerate(changed):
                self._wait_turn()
                self._set(replace(self._state.progress, done=done, current=path.name))
                self._index_file(collection, path, size, mtime_ns)
            self._reembed()
        except Cancelled:
            logger.info("indexing %s cancelled", collection.path)
        except FileNotFoundError:
            self._problem(collection.path, f"{collection.path} is no longer there: it was "
                          "moved or deleted.")
        except OSError as err:
            self._problem(collection.path, f"{collection.path} could not be read: "
                          f"{err.strerror or err}.")
        finally:
            with self._cond:
                self._working = False
            self._set(Progress())

    def _index_file(self, collection: Collection, path: Path, size: int,
                    mtime_ns: int) -> None:
        try:
            sections = readers.read(path)
        except readers.Unreadable as err:
            self._problem(path, str(err))
            self.index.put_file(collection.id, path, size, mtime_ns, error=str(err))
            return
        self._problem(path, None)
        embedder = self._embedder_or_none()
        passages = cut(sections, count=embedder.count if embedder else approx_tokens)
        vectors = self._embed_in_batches([p.text for p in passages]) if embedder else None
        text = "\n\n".join(s.text for s in sections)
        self.index.put_file(collection.id, path, size, mtime_ns, text=text,
                            passages=passages, vectors=vectors,
                            model=embedder.name if embedder else "")
        progress = self._state.progress
        self._set(replace(progress, passages=progress.passages + len(passages)))

    def _embed_in_batches(self, texts: list[str]) -> np.ndarray:
        embedder = self._require_embedder()
        parts = []
        at = 0
        while at < len(texts):
            self._wait_turn()
            batch = texts[at:at + self._batch]
            began = time.monotonic()
            parts.append(embedder.embed(batch))
            took = time.monotonic() - began
            at += len(batch)
            # Batches of about BATCH_S: larger ones are faster, smaller ones keep a
            # question (or a reply's start) from waiting.
            each = took / len(batch)
            self._batch = max(1, min(64, int(BATCH_S / max(each, 1e-4))))
        return np.concatenate(parts) if parts else np.zeros((0, embedder.dim), np.float32)

    def _reembed(self) -> None:
        """Passages kept by another embedding model (or none) get this one's vectors."""
        self._checked_model = self._model_path()
        if not self.index.any_passages():
            return  # nothing kept: the model is not loaded for nothing
        embedder = self._embedder_or_none()
        if embedder is None:
            return
        try:
            while rows := self.index.unembedded(embedder.name, 256):
                vectors = self._embed_in_batches([text for _, text in rows])
                self.index.set_vectors([i for i, _ in rows], vectors, embedder.name)
        except Cancelled:
            pass

    def _wait_turn(self) -> None:
        """Between files and batches: answer what is urgent, wait out a reply."""
        while True:
            with self._cond:
                if self._closed or self._cancel.is_set():
                    self._cancel.clear()
                    raise Cancelled()
                urgent = self._urgent.popleft() if self._urgent else None
                if urgent is None and not self._held:
                    return
                if urgent is None:
                    self._cond.wait(0.5)
                    continue
            _run_into(*urgent)

    def _problem(self, path: Path, why: str | None) -> None:
        with self._cond:
            if why is None:
                self._state.problems.pop(str(path), None)
            else:
                self._state.problems[str(path)] = why

    def _set(self, progress: Progress) -> None:
        with self._cond:
            self._state.progress = progress
            self._cond.notify_all()

    def _embedder_or_none(self) -> Embedding | None:
        try:
            return self._require_embedder()
        except Exception as err:
            if self._embedder_problem != str(err):
                logger.warning("no embedding model: %s", err)
            self._embedder_problem = str(err)
            return None

    def _require_embedder(self) -> Embedding:
        path = self._model_path()
        if path is None:
            raise LookupError("No embedding model is installed: passages are found by "
                              "their words only.")
        current = self._embedder
        if current is None or getattr(current, "path", None) != path:
            if current is not None:
                current.close()
                self._embedder = None
            current = self._embedder = self._open_embedder(path)
        return current


def _run_into(run: Callable[[], Any], future: Future[Any]) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(run())
    except BaseException as err:
        future.set_exception(err)


def _llama_embedder(path: Path) -> Embedding:
    from app.core.llama.embedder import Embedder  # noqa: PLC0415 - llama.cpp: when needed

    embedder: Embedding = Embedder(path)
    return embedder


def _documents_in(collection: Collection) -> Iterator[tuple[Path, tuple[int, int]]]:
    """The files of a collection Fireside reads, with their size and modification time.
    Hidden files and folders are left out, as a file manager does."""
    if not collection.folder:
        stat = collection.path.stat()
        yield collection.path, (stat.st_size, stat.st_mtime_ns)
        return
    for root, folders, names in os.walk(collection.path):
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        for name in sorted(names):
            path = Path(root) / name
            if name.startswith(".") or not path.is_file():
                continue
            if readers.kind_of(path) is None:
                continue
            stat = path.stat()
            yield path, (stat.st_size, stat.st_mtime_ns)


def room_for(n_ctx: int, reserve: int, asked: Sequence[str], history: Sequence[str],
             count: Callable[[str], int]) -> int:
    """Tokens left for documents in a prompt of ``n_ctx`` tokens: after the room for
    the reply, what is asked now (the system prompt and the message), and the history;
    of the history at most a quarter of the context counts, as older turns are dropped
    (chat.plan_prompt) before the newest message's documents are. 128 for the template's
    own tokens."""
    history_tokens = min(sum(count(t) for t in history), n_ctx // 4)
    return n_ctx - reserve - history_tokens - sum(count(t) for t in asked) - 128


def estimate_tokens(text: str) -> int:
    """Tokens a chat model may make of ``text``, without its tokenizer (a server's)."""
    return _estimate(text)


def _estimate(text: str) -> int:
    return int(approx_tokens(text) * ESTIMATE_MARGIN)


def _whole(files: Sequence[tuple[Path, str]]) -> Given:
    parts = [INTRO_WHOLE]
    sources = []
    for number, (path, text) in enumerate(files, start=1):
        parts.append(f"[{number}] {path.name}\n{text}")
        sources.append({"n": number, "path": str(path), "location": "whole file",
                        "whole": True, "text": text[:WHOLE_SOURCE_CHARS]})
    return Given("\n\n".join(parts), tuple(sources))


def _passages(found: Sequence[Found]) -> Given:
    parts = [INTRO_PASSAGES]
    sources = []
    for number, passage in enumerate(found, start=1):
        where = f", {passage.location}" if passage.location else ""
        parts.append(f"[{number}] {passage.path.name}{where}\n{passage.text}")
        sources.append(passage.as_source(number))
    return Given("\n\n".join(parts), tuple(sources))
