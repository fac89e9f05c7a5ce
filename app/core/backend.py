"""What the chat service needs from whatever produces replies: the ``Backend`` interface.

The local engine (:mod:`app.core.engine`, the one inference thread over llama.cpp) is
one; the tests' scripted engine is another. Everything here is plain Python, so code
that only drives a backend never loads llama.cpp.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from app.core.options import LoadOptions, Sampling
from app.core.replies import Reply
from app.core.templates import ChatTemplate, Segment


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


@dataclass(frozen=True)
class PromptPlan:
    tokens: list[int]
    dropped_turns: int = 0


class Session(Protocol):
    """What a prompt builder may use while its reply is set up: template, size, tokenizer."""

    @property
    def template(self) -> ChatTemplate: ...

    @property
    def n_ctx(self) -> int: ...

    def encode(self, segments: Sequence[Segment]) -> list[int]:
        """Template text with special tokens parsed; message text always as plain text."""
        ...


PromptBuilder = Callable[[Session], PromptPlan]
PieceCallback = Callable[[str], None]


@dataclass(eq=False)
class ReplyHandle:
    """A reply being generated: its future, and a way to stop it."""

    future: Future[Reply] = field(default_factory=Future)
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

    def generate(self, build: PromptBuilder, sampling: Sampling,
                 on_piece: PieceCallback | None = None) -> ReplyHandle:
        """Stream a reply; ``on_piece`` is called (on the backend's thread) per piece."""
        ...

    def stop(self) -> None:
        """Stop the running reply and any queued ones; their text so far is kept."""
        ...

    def close(self, timeout: float = 2.0) -> bool:
        """Stop everything and release the model; True if that finished in time."""
        ...
