"""Saved states of the one sequence: what returning to a conversation restores instead of
reading its whole history again.

A state is llama.cpp's per-sequence state (``llama_state_seq_get_data``) with the tokens
it stands for and the model it was made with. The engine saves the sequence before it
is overwritten (another conversation's prompt, a new chat, a model switch) and, when a
prompt shares a longer start with a saved state than with what the sequence holds now,
restores it into the same sequence (up to where the two part). The most recent ones
are kept within a memory budget; the least recently used go first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import psutil

GIB = 1024**3
MIN_TOKENS = 64  # shorter histories are read again faster than a state is copied


def default_budget() -> int:
    """The smaller of 1 GiB and a tenth of this computer's memory."""
    return min(GIB, int(psutil.virtual_memory().total) // 10)


@dataclass(frozen=True)
class ModelKey:
    """What a state's meaning depends on: the file as it is, and how it was loaded."""

    path: str
    size: int
    mtime_ns: int
    n_ctx: int
    options: str  # the load options that change the state (repr of those)


@dataclass(frozen=True)
class SavedState:
    model: ModelKey
    tokens: tuple[int, ...]
    data: bytes


class StateCache:
    def __init__(self, budget_bytes: int | None = None) -> None:
        self.budget = default_budget() if budget_bytes is None else budget_bytes
        self._states: OrderedDict[tuple[ModelKey, tuple[int, ...]], SavedState] = \
            OrderedDict()
        self.used = 0  # bytes; read from any thread (the cache lives on the inference one)

    def __len__(self) -> int:
        return len(self._states)

    def put(self, state: SavedState) -> None:
        """Keep ``state`` as the most recent; states it makes redundant (a shorter start
        of the same history) and the least recent past the budget go."""
        if len(state.data) > self.budget:
            return
        for key, kept in list(self._states.items()):
            if kept.model == state.model and state.tokens[:len(kept.tokens)] == kept.tokens:
                self._drop(key)
        self._states[(state.model, state.tokens)] = state
        self.used += len(state.data)
        while self.used > self.budget:
            self._drop(next(iter(self._states)))

    def best(self, model: ModelKey, prompt: Sequence[int],
             reused: int) -> tuple[SavedState, int] | None:
        """The saved state that shares the longest start with the prompt, and how many
        of its tokens to keep (never the prompt's last: it is read for its logits); only
        if that is more than ``reused``, what the sequence holds already. It becomes the
        most recent."""
        found: tuple[SavedState, int] | None = None
        for state in self._states.values():
            if state.model != model:
                continue
            shared = min(_shared_start(state.tokens, prompt), len(prompt) - 1)
            if shared > max(reused, MIN_TOKENS - 1) and (found is None or shared > found[1]):
                found = (state, shared)
        if found is not None:
            self._states.move_to_end((found[0].model, found[0].tokens))
        return found

    def clear(self) -> None:
        self._states.clear()
        self.used = 0

    def _drop(self, key: tuple[ModelKey, tuple[int, ...]]) -> None:
        self.used -= len(self._states.pop(key).data)


def _shared_start(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
