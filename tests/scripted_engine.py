"""A scripted backend, for logic that does not depend on what a model says.

It takes the real model files (a file the real engine refuses at its first check,
this one refuses too) and the real chat templates, but writes each reply from a
hash of its prompt, instantly, word by word, one operation at a time in order, like
the inference thread. Tokens are characters. The same prompt always gets the same
reply, so "a new chat answers like a fresh start" still means something; the words
say nothing about any model. Every behaviour a user sees is still tested on the real
models; this makes the tests of ordering, saving and dropping turns fast enough to
run thousands of sequences.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from app.core import gguf, templates
from app.core.backend import (
    EngineClosed,
    LoadCancelled,
    LoadedModel,
    ModelLoadError,
    NoModelLoaded,
    PieceCallback,
    PromptBuilder,
    PromptTooLong,
    ReplyHandle,
)
from app.core.options import LoadOptions, Sampling
from app.core.replies import FinishReason, Reply, ReplyStats
from app.core.templates import ChatTemplate, Segment

T = TypeVar("T")
WORDS = ("amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "heath", "inlet",
         "juniper", "kestrel", "lichen", "meadow", "nettle", "orchard", "pebble")
N_CTX = 2048
# What llama.cpp knows, as far as the tests' files go: another architecture is refused.
KNOWN_ARCHITECTURES = frozenset({"llama", "gemma3"})


class _Session:
    def __init__(self, model: LoadedModel) -> None:
        self.model = model

    @property
    def template(self) -> ChatTemplate:
        return self.model.template

    @property
    def n_ctx(self) -> int:
        return self.model.n_ctx

    def encode(self, segments: Sequence[Segment]) -> list[int]:
        return [ord(c) for segment in segments for c in segment.text]


class ScriptedEngine:
    """A Backend (see app/core/backend.py) that needs no model weights."""

    def __init__(self, piece_delay_s: float = 0.0) -> None:
        self.piece_delay_s = piece_delay_s  # a pause per word: time to stop a reply
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scripted")
        self._loaded: LoadedModel | None = None
        self._sequence: list[int] = []
        self._replies: set[ReplyHandle] = set()
        self._cancels: set[threading.Event] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()

    @property
    def loaded(self) -> LoadedModel | None:
        return self._loaded

    def load(self, path: Path | str, options: LoadOptions | None = None,
             on_progress: Callable[[float], None] | None = None) -> Future[LoadedModel]:
        cancel = threading.Event()
        with self._lock:
            self._cancels.add(cancel)

        def run() -> LoadedModel:
            try:
                return self._load(Path(path), options or LoadOptions(), on_progress, cancel)
            finally:
                with self._lock:
                    self._cancels.discard(cancel)

        return self._submit(run)

    def _load(self, path: Path, options: LoadOptions,
              on_progress: Callable[[float], None] | None, cancel: threading.Event
              ) -> LoadedModel:
        if cancel.is_set():
            raise LoadCancelled(f"Loading {path.name} was cancelled.")
        try:
            header = gguf.read_header(path)
        except gguf.GGUFError as err:
            raise ModelLoadError(f"{path.name} cannot be used: {err}") from err
        if header.architecture not in KNOWN_ARCHITECTURES:
            raise ModelLoadError(f"{path.name} cannot be used: unknown model architecture: "
                                 f"'{header.architecture}'")
        template = templates.resolve(header.metadata, lambda _text: False,
                                     override=options.template_override)
        for step in range(1, 5):
            if cancel.is_set():
                raise LoadCancelled(f"Loading {path.name} was cancelled.")
            if on_progress is not None:
                on_progress(step / 4)
        self._sequence = []
        self._loaded = LoadedModel(
            path=path, name=path.stem, architecture=header.architecture or "unknown",
            n_ctx=options.n_ctx or N_CTX, n_ctx_train=header.context_length or N_CTX,
            n_threads=options.n_threads or 1, template=template, seconds=0.0,
            options=options)
        return self._loaded

    def cancel_load(self) -> None:
        with self._lock:
            for cancel in self._cancels:
                cancel.set()

    def tokenize(self, text: str, special: bool = False) -> Future[list[int]]:
        return self._submit(lambda: (self._require(), [ord(c) for c in text])[1])

    def clear(self) -> Future[None]:
        def run() -> None:
            self._require()
            self._sequence = []

        return self._submit(run)

    def generate(self, build: PromptBuilder, sampling: Sampling,
                 on_piece: PieceCallback | None = None) -> ReplyHandle:
        handle = ReplyHandle()
        with self._lock:
            self._replies.add(handle)

        def run() -> Reply:
            try:
                return self._generate(handle, build, sampling, on_piece)
            finally:
                with self._lock:
                    self._replies.discard(handle)

        self._submit(run, handle.future)
        return handle

    def _generate(self, handle: ReplyHandle, build: PromptBuilder, sampling: Sampling,
                  on_piece: PieceCallback | None) -> Reply:
        model = self._require()
        plan = build(_Session(model))
        tokens = plan.tokens
        if not tokens:
            raise PromptTooLong("There is nothing to send.")
        if len(tokens) >= model.n_ctx:
            raise PromptTooLong(
                f"The message is too long for this model's context ({len(tokens):,} tokens, "
                f"the context holds {model.n_ctx:,}).")
        cached = 0
        for a, b in zip(self._sequence, tokens, strict=False):
            if a != b:
                break
            cached += 1
        cached = min(cached, len(tokens) - 1)
        seed = sampling.seed if sampling.temperature > 0 else 0
        digest = hashlib.sha256(f"{tokens}|{seed}".encode()).digest()
        length = 3 + digest[0] % 10
        words = [WORDS[b % len(WORDS)] for b in digest[1:1 + length]]
        parts: list[str] = []
        finish: FinishReason = "stop"
        started = time.perf_counter()
        for i, word in enumerate(words):
            if handle.stop_requested or self._closed.is_set():
                finish = "stopped"
                break
            if i >= sampling.max_tokens:
                finish = "length"
                break
            if len(tokens) + i + 1 >= model.n_ctx:
                finish = "context"
                break
            piece = word if i == 0 else f" {word}"
            parts.append(piece)
            if on_piece is not None:
                on_piece(piece)
            if self.piece_delay_s:
                time.sleep(self.piece_delay_s)
        text = "".join(parts)
        self._sequence = tokens + [ord(c) for c in text]
        elapsed = time.perf_counter() - started
        stats = ReplyStats(prompt_tokens=len(tokens), cached_tokens=cached,
                           tokens=len(parts), ttft_s=0.0,
                           tokens_per_s=len(parts) / elapsed if elapsed > 0 else 0.0,
                           finish_reason=finish, dropped_turns=plan.dropped_turns,
                           model=model.name)
        return Reply(text, stats)

    def stop(self) -> None:
        with self._lock:
            for handle in self._replies:
                handle.stop()

    def close(self, timeout: float = 2.0) -> bool:
        self._closed.set()
        self.stop()
        self.cancel_load()
        self._worker.shutdown(wait=True)  # what is queued ends at once: EngineClosed
        self._loaded = None
        return True

    def _require(self) -> LoadedModel:
        if self._loaded is None:
            raise NoModelLoaded()
        return self._loaded

    def _submit(self, run: Callable[[], T], future: Future[T] | None = None) -> Future[T]:
        future = future if future is not None else Future()

        def job() -> None:
            if not future.set_running_or_notify_cancel():
                return
            if self._closed.is_set():
                future.set_exception(EngineClosed())
                return
            try:
                future.set_result(run())
            except BaseException as exc:  # delivered to the caller, never lost
                future.set_exception(exc)

        try:
            self._worker.submit(job)
        except RuntimeError:
            future.set_exception(EngineClosed())
        return future
