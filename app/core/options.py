"""What a model load and a reply can be asked for: plain values, no llama.cpp.

Apart from the engine so that reading the settings (before the window's first paint,
or for ``fireside models``) does not import llama.cpp and numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_CONTEXT = 8192  # longer contexts cost memory most chats never use


def default_context(trained: int | None) -> int:
    """The context a model loads with when none is chosen: its trained one, capped."""
    return min(trained or DEFAULT_MAX_CONTEXT, DEFAULT_MAX_CONTEXT)


@dataclass(frozen=True)
class LoadOptions:
    n_ctx: int | None = None  # None: the trained length, capped at DEFAULT_MAX_CONTEXT
    n_threads: int | None = None  # None: default_threads()
    template_override: str | None = None


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    max_tokens: int = 1024
    seed: int | None = None  # None: a new random seed per reply
