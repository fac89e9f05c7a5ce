"""A saved state of the one sequence: the model it belongs to, the tokens it stands for,
and its bytes, as llama.cpp wrote them. Kept in memory (:mod:`app.core.llama.seq_states`)
and on disk (:mod:`app.core.llama.state_files`)."""

from __future__ import annotations

import ctypes
import mmap
from dataclasses import dataclass

GIB = 1024**3


# A state's bytes: llama.cpp writes them in place. Mapped from the system rather than
# allocated by Python (a bytearray, a ctypes array), which zeroes them while holding the
# GIL: for a 60 MB state, a 50 ms pause the window's thread would feel.
Bytes = ctypes.Array[ctypes.c_ubyte]


def new_bytes(size: int) -> Bytes:
    """``size`` bytes, zeroed by the system as they are first touched (not now)."""
    return (ctypes.c_ubyte * size).from_buffer(mmap.mmap(-1, max(size, 1)))


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
    data: bytes | Bytes  # never changed once made
    owner: int | None = None  # the conversation it is the history of, if one
