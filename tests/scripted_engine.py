"""A scripted backend, for logic that does not depend on what a model says.

It takes the real model files (a file the real engine refuses at its first check,
this one refuses too) and the real chat templates, and runs on the engine's own
thread and queue (``OneThreadBackend``), but writes each reply from a hash of its
prompt, instantly, word by word. Tokens are characters. The same prompt always gets the same
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
from concurrent.futures import Future
from pathlib import Path

from app.core.backend import (
    LoadCancelled,
    LoadedModel,
    ModelLoadError,
    NoModelLoaded,
    OneThreadBackend,
    PromptBuilder,
    ReplyHandle,
    Session,
    plan_prompt,
    reusable_prefix,
)
from app.core.models import gguf
from app.core.options import LoadOptions, Sampling
from app.core.reply import templates
from app.core.reply.replies import FinishReason, Reply, ReplyStats, ToolCall
from app.core.reply.templates import Segment

WORDS = ("amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "heath", "inlet",
         "juniper", "kestrel", "lichen", "meadow", "nettle", "orchard", "pebble")
N_CTX = 2048
# What llama.cpp knows, as far as the tests' files go: another architecture is refused.
KNOWN_ARCHITECTURES = frozenset({"llama", "gemma3"})


class _Session(Session):
    def encode(self, segments: Sequence[Segment]) -> list[int]:
        return [ord(c) for segment in segments for c in segment.text]


class ScriptedEngine(OneThreadBackend):
    """A Backend on the engine's own thread and queue that needs no model weights."""

    def __init__(self, piece_delay_s: float = 0.0) -> None:
        self.piece_delay_s = piece_delay_s  # a pause per word: time to stop a reply
        # Set: after its first word the reply waits for it, deaf to stop (a machine too
        # busy to end a reply in the time leaving allows).
        self.stalled: threading.Event | None = None
        # Where the prompt offers tools and allows a call: the calls this reply makes
        # (given the reply's number among those allowed to call), after its words.
        self.calls: Callable[[int], Sequence[ToolCall]] | None = None
        self.calling_replies = 0
        self._sequence: list[int] = []
        super().__init__("scripted")

    def tokenize(self, text: str, special: bool = False) -> Future[list[int]]:
        return self._submit(lambda: (self._require(), [ord(c) for c in text])[1])

    def _switch(self, path: Path, options: LoadOptions,
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

    def _clear(self) -> None:
        self._require()
        self._sequence = []

    def _unload(self) -> None:
        self._loaded = None

    def _generate(self, handle: ReplyHandle, build: PromptBuilder, sampling: Sampling) -> Reply:
        model = self._require()
        plan = plan_prompt(build, _Session(model))
        tokens = plan.tokens
        cached = reusable_prefix(self._sequence, tokens)
        seed = sampling.seed if sampling.temperature > 0 else 0
        digest = hashlib.sha256(f"{tokens}|{seed}".encode()).digest()
        length = 3 + digest[0] % 10
        words = [WORDS[b % len(WORDS)] for b in digest[1:1 + length]]
        parts: list[str] = []
        finish: FinishReason = "stop"
        started = time.perf_counter()
        for i, word in enumerate(words):
            if handle.stop_requested or self._closing.is_set():
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
            handle.pieces.put(piece)
            if self.stalled is not None:
                self.stalled.wait()
            if self.piece_delay_s:
                time.sleep(self.piece_delay_s)
        text = "".join(parts)
        calls: tuple[ToolCall, ...] = ()
        if self.calls is not None and plan.tools is not None and plan.tools.allowed \
                and finish == "stop":
            self.calling_replies += 1
            calls = tuple(self.calls(self.calling_replies))
            finish = "tool_calls" if calls else finish
        self._sequence = tokens + [ord(c) for c in text]
        elapsed = time.perf_counter() - started
        stats = ReplyStats(prompt_tokens=len(tokens), cached_tokens=cached,
                           tokens=len(parts), ttft_s=0.0,
                           tokens_per_s=len(parts) / elapsed if elapsed > 0 else 0.0,
                           finish_reason=finish, dropped_turns=plan.dropped_turns,
                           model=model.name)
        return Reply(text, stats, tool_calls=calls)

    @property
    def last_prompt(self) -> str:
        """The text of the last reply's prompt and the reply (tokens are characters)."""
        return "".join(map(chr, self._sequence))

    def _require(self) -> LoadedModel:
        if self._loaded is None:
            raise NoModelLoaded()
        return self._loaded
