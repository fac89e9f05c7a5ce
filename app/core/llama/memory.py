"""How much memory a model will take once loaded, from its header alone, and whether it fits.

The estimate has three parts, sized the way llama.cpp (as built into llama-cpp-python
0.3.36, CPU only) sizes them:
- weights: the tensor bytes, all resident once a first reply has run through every layer;
- KV cache: per layer, KV heads x (key + value length) x 2 bytes (f16) per cell, with
  the context rounded up to 256 cells; sliding-window layers get the full-size cache
  llama-cpp-python asks for (`swa_full`), or n_swa + n_ubatch cells padded to 256;
- the rest (the part of the compute buffers a chat touches, the vocabulary's tables,
  the logits): a fixed part plus a part per vocabulary token, measured on the two
  bundled models (fresh process, RSS after load and a first short reply minus RSS
  before): SmolLM2 29 MB at 2k and 8k, Gemma 3 61-67 MB.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import psutil

from app.core.models.catalog import ModelEntry
from app.core.models.gguf import ArrayInfo, GGUFError, GGUFHeader
from app.core.models.header_cache import cached_header
from app.core.options import KV_CACHE_BYTES, default_context

CONTEXT_STEP = 256  # llama.cpp rounds the context up to a multiple of this
UBATCH = 512
CACHE_TYPE_BYTES = 2  # f16 keys and values
BASE_OVERHEAD = 21_000_000
OVERHEAD_PER_TOKEN = 165

# Which layers use the sliding window, for architectures whose files do not say: llama.cpp
# sets a repeating pattern in which the last layer of each group attends to everything.
_SWA_PATTERNS = {"gemma2": 2, "gemma3": 6, "cohere2": 4}


@dataclass(frozen=True)
class Estimate:
    n_ctx: int
    weights: int
    kv_cache: int
    other: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.other


def padded(n_ctx: int) -> int:
    return -(-max(n_ctx, 1) // CONTEXT_STEP) * CONTEXT_STEP


def swa_layers(header: GGUFHeader) -> list[bool]:
    """For each layer, whether it attends through the sliding window only."""
    layers = header.block_count or 0
    if not header.sliding_window:
        return [False] * layers
    pattern = header.metadata.get(f"{header.architecture}.attention.sliding_window_pattern")
    if isinstance(pattern, ArrayInfo) and pattern.values and len(pattern.values) == layers:
        return [bool(v) for v in pattern.values]
    period = _SWA_PATTERNS.get(header.architecture or "")
    if period is None:
        return [False] * layers  # unknown: size every layer for the full context
    return [i % period < period - 1 for i in range(layers)]


def kv_cache_layers(header: GGUFHeader, n_ctx: int, swa_full: bool = True,
                    kv_cache: str = "f16") -> list[int]:
    """The KV cache's bytes in each layer (each sits on its layer's device)."""
    cells = padded(n_ctx)
    per_cell = int((header.head_count_kv or 0) * ((header.key_length or 0)
                                                  + (header.value_length or 0))
                   * KV_CACHE_BYTES.get(kv_cache, CACHE_TYPE_BYTES))
    window = header.sliding_window or 0
    swa_cells = cells if swa_full else padded(min(cells, window + UBATCH))
    return [per_cell * (swa_cells if swa else cells) for swa in swa_layers(header)]


def kv_cache_bytes(header: GGUFHeader, n_ctx: int, swa_full: bool = True,
                   kv_cache: str = "f16") -> int:
    return sum(kv_cache_layers(header, n_ctx, swa_full, kv_cache))


def weights_bytes(header: GGUFHeader) -> int:
    sizes = [t.nbytes for t in header.tensors]
    if any(size is None for size in sizes):
        return header.file_size - header.data_offset
    return sum(size for size in sizes if size is not None)


def estimate(header: GGUFHeader, n_ctx: int | None = None, kv_cache: str = "f16") -> Estimate:
    """What loading `header`'s model with `n_ctx` (default: the engine's) and a KV cache
    of type `kv_cache` adds to memory."""
    n_ctx = n_ctx or default_context(header.context_length)
    other = BASE_OVERHEAD + OVERHEAD_PER_TOKEN * (header.vocab_size or 0)
    return Estimate(padded(n_ctx), weights_bytes(header),
                    kv_cache_bytes(header, n_ctx, kv_cache=kv_cache), other)


def available() -> int:
    """Memory the system can give now without swapping."""
    return int(psutil.virtual_memory().available)


def largest_context(header: GGUFHeader, budget: int, at_most: int,
                    kv_cache: str = "f16") -> int | None:
    """The largest context (a multiple of 1024, up to `at_most`) that fits in `budget`."""
    fixed = estimate(header, CONTEXT_STEP, kv_cache)
    if fixed.total > budget:
        return None
    per_cell = max(kv_cache_bytes(header, 2 * CONTEXT_STEP, kv_cache=kv_cache)
                   - fixed.kv_cache, 1) / CONTEXT_STEP
    cells = int((budget - fixed.total) / per_cell) + CONTEXT_STEP
    n_ctx = min(cells, at_most) // 1024 * 1024
    while n_ctx >= 1024 and estimate(header, n_ctx, kv_cache).total > budget:
        n_ctx -= 1024
    return n_ctx if n_ctx >= 1024 else None


def format_bytes(size: int) -> str:
    if size >= 10**9:
        return f"{size / 1e9:.1f} GB"
    return f"{size / 1e6:,.0f} MB"


def refusal(name: str, header: GGUFHeader, n_ctx: int, budget: int,
            kv_cache: str = "f16") -> str | None:
    """Why loading would not fit in `budget` bytes, with a context that would; None if it fits."""
    needed = estimate(header, n_ctx, kv_cache)
    if needed.total <= budget:
        return None
    message = (f"{name} would need about {format_bytes(needed.total)} of memory with a "
               f"{n_ctx:,}-token context, and only {format_bytes(budget)} is free.")
    fits = largest_context(header, budget, n_ctx - 1, kv_cache)
    if fits:
        message += f" A {fits:,}-token context would fit: lower the context size."
    return message


def smaller_variant(entry: ModelEntry, entries: Sequence[ModelEntry], budget: int,
                    n_ctx: int | None = None) -> ModelEntry | None:
    """The largest other quantization of the same model that fits in `budget` at `n_ctx`."""
    fitting = []
    for other in entries:
        if (other.path == entry.path or other.error or other.size_bytes >= entry.size_bytes
                or other.architecture != entry.architecture
                or not _same_model(entry, other)):
            continue
        needed = entry_estimate(other, n_ctx)
        if needed is not None and needed.total <= budget:
            fitting.append(other)
    return max(fitting, key=lambda e: e.size_bytes, default=None)


def _same_model(a: ModelEntry, b: ModelEntry) -> bool:
    if a.parameter_count and b.parameter_count:
        # Quantizing keeps the parameter count (within rounding of the metadata).
        return abs(a.parameter_count - b.parameter_count) <= a.parameter_count // 100
    return _bare_name(a) == _bare_name(b)


def _bare_name(entry: ModelEntry) -> str:
    name = entry.name.casefold()
    if entry.quantization:
        name = name.replace(entry.quantization.casefold(), "")
    return name.strip(" ()-_.:")


@functools.lru_cache(maxsize=1024)
def entry_estimate(entry: ModelEntry, n_ctx: int | None = None,
                   kv_cache: str = "f16") -> Estimate | None:
    """The estimate for a catalog entry at `n_ctx` (default: the engine's), or None."""
    if entry.error or entry.architecture == "remote":  # a server's memory, not ours
        return None
    try:
        return estimate(cached_header(entry.path), n_ctx, kv_cache)
    except GGUFError:
        return None
