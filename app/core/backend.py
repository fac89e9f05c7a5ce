"""What the chat service needs from whatever produces replies: the ``Backend`` interface,
and ``OneThreadBackend``, the thread and queue that make one.

The local engine (:mod:`app.core.llama.engine`, llama.cpp on that one thread) is one; the
tests' scripted engine is another, on the same thread and queue. Everything here is
plain Python, so code that only drives a backend never loads llama.cpp.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

from app.core.options import LoadOptions, Sampling
from app.core.reply import thinking
from app.core.reply.pieces import Pieces
from app.core.reply.replies import Reply
from app.core.reply.templates import ChatTemplate, Segment
from app.core.reply.tool_calls import ToolPlan

T = TypeVar("T")


class EngineError(Exception):
    """Something the user should read: the message is written for them."""


class ModelLoadError(EngineError):
    pass


class LoadCancelled(ModelLoadError):
    pass


class NotEnoughMemory(ModelLoadError):
    """The model would not fit in the memory available; nothing was unloaded."""


class NoModelLoaded(EngineError):
    def __init__(self) -> None:
        super().__init__("No model is loaded. Choose a model first.")


class PromptTooLong(EngineError):
    pass


class EngineClosed(EngineError):
    def __init__(self) -> None:
        super().__init__("Fireside is shutting down.")


class Placement(Protocol):
    """Where a loaded model's layers are: the local engine's offload plan."""

    @property
    def gpu_layers(self) -> int: ...

    @property
    def n_layers(self) -> int: ...

    @property
    def device(self) -> str | None: ...

    @property
    def device_bytes(self) -> int:
        """Memory it takes on the GPU."""
        ...

    @property
    def where(self) -> str:
        """Beside the loaded model: "GPU 40/63", "CPU"."""
        ...

    def summary(self) -> str:
        """Where the layers go and the memory on each side."""
        ...


class KeptStates(NamedTuple):
    """The sequence states a backend keeps for conversations left."""

    histories: int  # that can be restored
    memory: int  # bytes
    disk: int


@dataclass(frozen=True)
class LoadedModel:
    path: Path
    name: str
    architecture: str
    n_ctx: int
    n_ctx_train: int
    n_threads: int
    template: ChatTemplate
    seconds: float
    options: LoadOptions
    base_model: bool = False  # not tuned for chat (catalog.is_base_model)
    # Text that ends a reply besides the end-of-generation tokens: for a base model, a
    # blank line or the user's next turn.
    stops: tuple[str, ...] = ()
    notice: str | None = None  # what the user should know of how it loaded
    placement: Placement | None = None  # where its layers are (None: a server's model)
    # The model drafting for it (its display name), loaded beside it; None: prompt
    # lookup alone (a refused draft model is told in ``notice``).
    draft: str | None = None

    @property
    def thinks(self) -> bool:
        """Whether its template marks thinking (a reasoning model)."""
        return thinking.is_thinking_template(self.template.text)


@dataclass(frozen=True)
class PromptPlan:
    tokens: list[int]
    dropped_turns: int = 0
    # The same prompt as messages, for a server that applies its own chat template.
    messages: tuple[dict[str, str], ...] = ()
    tools: ToolPlan | None = None  # functions the model may call, and how it writes calls


class Session:
    """What a prompt builder may use while its reply is set up: template, size, tokenizer.
    A backend gives its own tokenizer (``encode``)."""

    # Whether Fireside writes the prompt and reads the reply itself, and so can give
    # the model tools (a server applies its own template).
    calls_tools = True

    def __init__(self, model: LoadedModel) -> None:
        self.model = model

    @property
    def template(self) -> ChatTemplate:
        return self.model.template

    @property
    def n_ctx(self) -> int:
        return self.model.n_ctx

    def encode(self, segments: Sequence[Segment]) -> list[int]:
        """Template text with special tokens parsed; message text always as plain text."""
        raise NotImplementedError


PromptBuilder = Callable[[Session], PromptPlan]


def plan_prompt(build: PromptBuilder, session: Session) -> PromptPlan:
    """The prompt ``build`` makes for ``session``; PromptTooLong if it is empty or fills
    the context."""
    plan = build(session)
    if not plan.tokens:
        raise PromptTooLong("There is nothing to send.")
    if len(plan.tokens) >= session.n_ctx:
        raise PromptTooLong(
            f"The message is too long for this model's context ({len(plan.tokens):,} "
            f"tokens, the context holds {session.n_ctx:,}). Shorten it or raise the context "
            "size.")
    return plan


def reusable_prefix(held: Iterable[int], tokens: Sequence[int]) -> int:
    """How many prompt tokens a sequence holding ``held`` already has: what evaluating
    ``tokens`` reuses. The last one is always evaluated again, for its logits."""
    n = 0
    for a, b in zip(held, tokens, strict=False):
        if a != b:
            break
        n += 1
    return min(n, len(tokens) - 1)


@dataclass(eq=False)
class ReplyHandle:
    """A reply being generated: its text as it streams (``pieces``), its future (the
    whole Reply with its figures), and a way to stop it."""

    future: Future[Reply] = field(default_factory=Future)
    owner: int | None = None  # the conversation the reply is for (its states are its own)
    pieces: Pieces = field(default_factory=Pieces)
    _stop: threading.Event = field(default_factory=threading.Event)

    def stop(self) -> None:
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()


class Backend(Protocol):
    """Loads a model and streams replies from it, one operation at a time, in order."""

    @property
    def loaded(self) -> LoadedModel | None: ...

    def load(self, path: Path | str, options: LoadOptions | None = None,
             on_progress: Callable[[float], None] | None = None) -> Future[LoadedModel]:
        """Replace the current model; a file that cannot work leaves the current one."""
        ...

    def cancel_load(self) -> None: ...

    def clear(self) -> Future[None]:
        """Start a new chat: forget the sequence's history; the model stays."""
        ...

    def generate(self, build: PromptBuilder, sampling: Sampling, owner: int | None = None,
                 pieces: Pieces | None = None) -> ReplyHandle:
        """Stream a reply into ``pieces`` (a turn's, shared by its replies; else one of
        the reply's own, ended with it). ``owner``: the stored conversation it answers."""
        ...

    def stop(self) -> None:
        """Stop the running reply and any queued ones; their text so far is kept."""
        ...

    def kept_states(self) -> KeptStates:
        """Sequence states kept for conversations left (none where none are kept)."""
        ...

    def clear_states(self) -> Future[None]: ...

    def forget_states(self, owner: int) -> Future[None]:
        """Delete what is kept of conversation ``owner`` (it was deleted)."""
        ...

    def close(self, timeout: float = 2.0) -> bool:
        """Stop everything and release the model; True if that finished in time."""
        ...


@dataclass
class _Job:
    run: Callable[[], Any]
    future: Future[Any]


class OneThreadBackend:
    """What makes a Backend one: a thread of its own runs every operation on the model
    (load, clear, generate, close), one at a time, in the order submitted, and nothing
    is fire-and-forget. Callers get futures. Stopping a reply and cancelling a load are
    flags, not queued jobs, because the queue is busy while a reply streams.

    A subclass says what the operations do: ``_switch``, ``_clear``, ``_generate`` and
    ``_unload`` (called on that thread, the last one when it ends).
    """

    def __init__(self, thread_name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._loaded: LoadedModel | None = None
        self._load_cancels: set[threading.Event] = set()  # one per queued or running load
        self._replies: set[ReplyHandle] = set()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name=thread_name, daemon=True)
        self._thread.start()

    # -- any thread ----------------------------------------------------------------

    @property
    def loaded(self) -> LoadedModel | None:
        return self._loaded

    def load(self, path: Path | str, options: LoadOptions | None = None,
             on_progress: Callable[[float], None] | None = None) -> Future[LoadedModel]:
        """Check ``path``, then replace the current model with it.

        A file that fails the check is refused and the current model stays. If the load
        itself fails or is cancelled, the previous model is loaded again.
        """
        cancel = threading.Event()
        with self._lock:
            self._load_cancels.add(cancel)

        def run() -> LoadedModel:
            try:
                return self._switch(Path(path), options or LoadOptions(), on_progress, cancel)
            finally:
                with self._lock:
                    self._load_cancels.discard(cancel)

        return self._submit(run)

    def kept_states(self) -> KeptStates:
        return KeptStates(0, 0, 0)  # a backend that keeps states says what it keeps

    def clear_states(self) -> Future[None]:
        """Forget the sequence states kept (on the thread that uses them)."""
        return self._submit(self._clear_states)

    def forget_states(self, owner: int) -> Future[None]:
        return self._submit(lambda: self._forget(owner))

    def cancel_load(self) -> None:
        """Cancel the running load and any queued ones; the previous model comes back."""
        with self._lock:
            for cancel in self._load_cancels:
                cancel.set()

    def clear(self) -> Future[None]:
        """Start a new chat: forget the sequence's history; the model and context stay."""
        return self._submit(self._clear)

    def generate(self, build: PromptBuilder, sampling: Sampling, owner: int | None = None,
                 pieces: Pieces | None = None) -> ReplyHandle:
        """Stream a reply into its handle's ``pieces`` (see Backend.generate)."""
        handle = ReplyHandle(owner=owner, pieces=pieces or Pieces())
        if pieces is None:  # its own: it ends with the reply, after the future is set
            handle.future.add_done_callback(lambda _done: handle.pieces.end())
        with self._lock:
            self._replies.add(handle)

        def run() -> Reply:
            try:
                return self._generate(handle, build, sampling)
            finally:
                with self._lock:
                    self._replies.discard(handle)

        self._submit(run, handle.future)
        return handle

    def stop(self) -> None:
        """Stop the running reply and any queued ones; their text so far is kept."""
        with self._lock:
            for handle in self._replies:
                handle.stop()

    def close(self, timeout: float = 2.0) -> bool:
        """Stop everything, close the model on its own thread. True if it finished."""
        if not self._closing.is_set():
            self._closing.set()
            self.stop()
            self.cancel_load()
            self._jobs.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the backend's thread -------------------------------------------------------

    def _submit(self, run: Callable[[], T], future: Future[T] | None = None) -> Future[T]:
        future = future if future is not None else Future()
        if self._closing.is_set():
            future.set_exception(EngineClosed())
        else:
            self._jobs.put(_Job(run, future))
        return future

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                break
            if not job.future.set_running_or_notify_cancel():
                continue
            if self._closing.is_set():
                job.future.set_exception(EngineClosed())
                continue
            try:
                job.future.set_result(job.run())
            except BaseException as exc:  # delivered to the caller, never lost
                job.future.set_exception(exc)
        self._leave()
        # Jobs that raced with close() must not wait forever.
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None and job.future.set_running_or_notify_cancel():
                job.future.set_exception(EngineClosed())

    def _switch(self, path: Path, options: LoadOptions,
                on_progress: Callable[[float], None] | None,
                cancel: threading.Event) -> LoadedModel:
        raise NotImplementedError

    def _clear(self) -> None:
        raise NotImplementedError

    def _generate(self, handle: ReplyHandle, build: PromptBuilder, sampling: Sampling) -> Reply:
        """Write the reply into ``handle.pieces`` as it comes; return it whole."""
        raise NotImplementedError

    def _unload(self) -> None:
        raise NotImplementedError

    def _clear_states(self) -> None:
        """Forget every state kept (none here)."""

    def _forget(self, owner: int) -> None:
        """Forget what is kept of conversation ``owner`` (nothing here)."""

    def _leave(self) -> None:
        """The last thing the thread does, as the backend closes."""
        self._unload()
