"""Saved states of the one sequence: what returning to a conversation restores instead of
reading its whole history again.

A state is llama.cpp's per-sequence state (``llama_state_seq_get_data``) with the tokens
it stands for and the model it was made with. The engine saves the sequence before it
is overwritten (another conversation's prompt, a new chat, a model switch) and, when a
prompt shares a longer start with a saved state than with what the sequence holds now,
restores it into the same sequence (up to where the two part). The most recent ones
are kept within a memory budget, the least recently used going first; with a folder
(:mod:`app.core.llama.state_files`), every state is also written to disk in the background,
where older ones stay within a budget of their own and a restart finds them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import psutil

from app.core.backend import KeptStates
from app.core.llama.saved_state import GIB, ModelKey, SavedState

if TYPE_CHECKING:
    from app.core.llama.state_files import StateFolder

MIN_TOKENS = 64  # shorter histories are read again faster than a state is copied


def default_budget() -> int:
    """The smaller of 1 GiB and a tenth of this computer's memory."""
    return min(GIB, int(psutil.virtual_memory().total) // 10)


class StateCache:
    """The states kept, used on the inference thread (the folder writes on its own)."""

    def __init__(self, budget_bytes: int | None = None,
                 disk: StateFolder | None = None) -> None:
        self.budget = default_budget() if budget_bytes is None else budget_bytes
        self.disk = disk if disk is not None and disk.usable else None
        self._states: OrderedDict[tuple[ModelKey, tuple[int, ...]], SavedState] = \
            OrderedDict()
        self.used = 0  # bytes in memory
        self._lock = threading.Lock()  # for usage(), read from other threads

    def __len__(self) -> int:
        return len(self._states)

    def usage(self) -> KeptStates:
        """What is kept, in memory and on disk (any thread)."""
        with self._lock:
            keys = set(self._states)
            used = self.used
        if self.disk is None:
            return KeptStates(len(keys), used, 0)
        entries = self.disk.entries(None)
        keys.update((entry.model, entry.tokens) for entry in entries)
        return KeptStates(len(keys), used, sum(entry.size for entry in entries))

    def put(self, state: SavedState) -> None:
        """Keep ``state`` as the most recent; states it makes redundant (a shorter start
        of the same history) and the least recent past the budget go."""
        if self.disk is not None:
            self.disk.save(state)
        for key, kept in list(self._states.items()):
            if kept.model == state.model and state.tokens[:len(kept.tokens)] == kept.tokens:
                self._drop(key)
        self._remember(state)

    def _remember(self, state: SavedState) -> None:
        if len(state.data) > self.budget:
            return
        key = (state.model, state.tokens)
        if key in self._states:
            self._drop(key)
        with self._lock:
            self._states[key] = state
            self.used += len(state.data)
        while self.used > self.budget:
            self._drop(next(iter(self._states)))

    def best(self, model: ModelKey, prompt: Sequence[int],
             reused: int) -> tuple[SavedState, int] | None:
        """The saved state that shares the longest start with the prompt, and how many
        of its tokens to keep (never the prompt's last: it is read for its logits); only
        if that is more than ``reused``, what the sequence holds already. It becomes the
        most recent."""
        least = max(reused, MIN_TOKENS - 1)
        found: tuple[SavedState, int] | None = None
        for state in self._states.values():
            if state.model != model:
                continue
            shared = min(_shared_start(state.tokens, prompt), len(prompt) - 1)
            if shared > least and (found is None or shared > found[1]):
                found = (state, shared)
        if found is not None:
            with self._lock:
                self._states.move_to_end((found[0].model, found[0].tokens))
        return self._from_disk(model, prompt, max(least, found[1] if found else 0)) or found

    def forget(self, owner: int) -> None:
        """Drop the states of conversation ``owner`` (it was deleted), here and on disk."""
        for key, state in list(self._states.items()):
            if state.owner == owner:
                self._drop(key)
        if self.disk is not None:
            self.disk.forget(owner)

    def clear(self) -> None:
        with self._lock:
            self._states.clear()
            self.used = 0
        if self.disk is not None:
            self.disk.clear()

    def close(self, timeout: float) -> None:
        """Let the disk writes under way finish, for at most ``timeout`` seconds."""
        if self.disk is not None:
            self.disk.close(timeout)

    def _from_disk(self, model: ModelKey, prompt: Sequence[int],
                   beat: int) -> tuple[SavedState, int] | None:
        """A state on disk that shares more than ``beat`` tokens with the prompt, read
        and checked (a damaged file is passed over for the next best)."""
        if self.disk is None:
            return None
        ranked = sorted(((min(_shared_start(entry.tokens, prompt), len(prompt) - 1), entry)
                         for entry in self.disk.entries(model)),
                        key=lambda item: item[0], reverse=True)
        for shared, entry in ranked:
            if shared <= beat:
                break
            state = self.disk.read(entry)
            if state is not None:
                self._remember(state)
                return state, shared
        return None

    def _drop(self, key: tuple[ModelKey, tuple[int, ...]]) -> None:
        with self._lock:
            self.used -= len(self._states.pop(key).data)


def _shared_start(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
