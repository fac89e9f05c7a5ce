"""An embedding model in a llama.cpp context of its own, beside the chat model's.

Passages become unit-length vectors, many passages to a decode. The chat engine's model
and sequence are never touched: this is a second ``Llama`` (``embedding=True``), on the
CPU, owned by whichever one thread uses it. A model is taken if its header says how it
pools its tokens into one vector (``<arch>.pooling_type``: mean, CLS or last token), as
llama.cpp's converter writes for BERT, nomic-bert, bge, e5, gte and the like; a chat
model, which says nothing of pooling, is refused before anything is loaded.
"""

from __future__ import annotations

import gc
import traceback
from collections.abc import Sequence
from pathlib import Path

import llama_cpp
import numpy as np

from app.core.llama import llama_runtime
from app.core.llama.engine import default_threads
from app.core.models import gguf, header_cache

# Tokens packed into one decode, from as many passages as fit (a longer passage goes
# alone). Attention spans all of a decode's tokens, masked between passages, so more is
# slower: 17.4 passages/s at 512, 16.2 at 1024, 14.1 at 2048, 12.1 at 4096
# (all-MiniLM-L6-v2, 500 passages of 160 tokens on average, two cores, flash attention;
# tests/benchmarks/bench_embeddings.py --batches).
PACK_TOKENS = 512
# Sequences in one decode: llama.cpp's LLAMA_MAX_SEQ.
MAX_SEQUENCES = 256

_ONE_VECTOR = frozenset({llama_cpp.LLAMA_POOLING_TYPE_MEAN, llama_cpp.LLAMA_POOLING_TYPE_CLS,
                         llama_cpp.LLAMA_POOLING_TYPE_LAST})
_NO_VECTOR = {llama_cpp.LLAMA_POOLING_TYPE_NONE: "gives a vector per token, not per passage",
              llama_cpp.LLAMA_POOLING_TYPE_RANK: "ranks passages (a reranker) and gives no "
                                                 "vectors"}


class EmbedderError(Exception):
    """The file cannot be used as an embedding model; the message names it and says why."""


class Embedder:
    """llama.cpp context of its own for an embedding model; used from one thread."""

    def __init__(self, path: Path, *, n_threads: int | None = None) -> None:
        self.path = Path(path)
        self.name = self.path.stem
        pooling, trained = _pooling_and_context(self.path)
        # Longer texts are cut to this many tokens: positions past the trained context
        # are out of a BERT's position table (ggml aborts the process).
        self.max_tokens = trained
        # Tokens one decode can hold: non-causal attention needs a passage whole in one.
        self.batch_tokens = max(PACK_TOKENS, trained)
        llm = _open(self.path, pooling, self.batch_tokens, n_threads or default_threads())
        self._llm: llama_cpp.Llama | None = llm
        self.dim = int(llama_cpp.llama_model_n_embd_out(llm.model)) or llm.n_embd()
        self._sequences = min(MAX_SEQUENCES, int(llm.context_params.n_seq_max))
        self._tail = self._special_tail()

    def count(self, text: str) -> int:
        """Tokens in the model's tokenizer, its special tokens included (before any cut)."""
        return len(self._tokenize(text))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised float32 row per text, in order; shape (len(texts), dim)."""
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        llm = self._require()
        batch, ctx = llm._batch, llm._ctx
        batch.reset()  # what a call that failed part-way left
        pending: list[int] = []  # the rows in the batch, by sequence id
        used = 0
        for row, text in enumerate(texts):
            tokens = self._cut(self._tokenize(text))
            if pending and (used + len(tokens) > PACK_TOKENS
                            or len(pending) >= self._sequences):
                self._decode(pending, vectors)
                pending, used = [], 0
            batch.add_sequence(tokens, len(pending), True)
            pending.append(row)
            used += len(tokens)
        if pending:
            self._decode(pending, vectors)
        ctx.kv_cache_clear()
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors /= np.maximum(norms, np.finfo(np.float32).tiny)
        return vectors

    def close(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            llm.close()
            del llm
            gc.collect()  # a closed Llama sits in reference cycles, holding its arrays
            llama_runtime.release_freed_memory()

    # ---------------------------------------------------------------------------------

    def _require(self) -> llama_cpp.Llama:
        llm = self._llm
        if llm is None:
            raise EmbedderError(f"{self.path.name}: the embedding model is closed.")
        return llm

    def _tokenize(self, text: str) -> list[int]:
        llm = self._require()
        tokens: list[int] = llm.tokenize(text.encode("utf-8", "replace"), add_bos=True)
        if not tokens:  # a model that adds no special token, given no text
            fallback = llm.token_eos() if llm.token_eos() >= 0 else llm.token_bos()
            tokens = [max(fallback, 0)]
        return tokens

    def _cut(self, tokens: list[int]) -> list[int]:
        """At most ``max_tokens``, keeping the special tokens that close a sequence."""
        if len(tokens) <= self.max_tokens:
            return tokens
        keep = self.max_tokens - self._tail
        return tokens[:keep] + tokens[len(tokens) - self._tail:]

    def _special_tail(self) -> int:
        """How many special tokens the tokenizer puts after a text ([SEP], </s>...)."""
        llm = self._require()
        plain = llm.tokenize(b"a", add_bos=False)
        full = llm.tokenize(b"a", add_bos=True)
        for start in range(len(full) - len(plain) + 1):
            if full[start:start + len(plain)] == plain:
                return min(len(full) - start - len(plain), self.max_tokens - 1)
        return 0

    def _decode(self, rows: list[int], vectors: np.ndarray) -> None:
        llm = self._require()
        ctx = llm._ctx
        ctx.kv_cache_clear()  # a causal model's cache holds the previous batch
        try:
            ctx.decode(llm._batch)
        except RuntimeError as err:  # llama.cpp's status, e.g. out of memory
            raise EmbedderError(f"{self.path.name}: llama.cpp could not embed ({err}).") from err
        finally:
            llm._batch.reset()
        for sequence, row in enumerate(rows):
            pointer = llama_cpp.llama_get_embeddings_seq(ctx.ctx, sequence)
            if not pointer:
                raise EmbedderError(f"{self.path.name}: llama.cpp gave no vector for a "
                                    "passage.")
            vectors[row] = np.ctypeslib.as_array(pointer, shape=(self.dim,))


def _pooling_and_context(path: Path) -> tuple[int, int]:
    """The pooling the header names and the trained context; EmbedderError if the file
    is no embedding model."""
    try:
        header = header_cache.cached_header(path)
    except gguf.GGUFError as err:
        raise EmbedderError(f"{path.name} cannot be used as an embedding model: "
                            f"{err.reason}") from err
    pooling = header.pooling_type
    if pooling is None:
        raise EmbedderError(f"{path.name} is not an embedding model: its header does not say "
                            "how to pool its tokens into one vector (a chat model's never "
                            "does).")
    if pooling not in _ONE_VECTOR:
        why = _NO_VECTOR.get(pooling, f"names an unknown pooling ({pooling})")
        raise EmbedderError(f"{path.name} cannot be used as an embedding model: it {why}.")
    return pooling, header.context_length or PACK_TOKENS


def _open(path: Path, pooling: int, batch: int, threads: int) -> llama_cpp.Llama:
    llama_runtime.router.recent_errors.clear()
    try:
        with llama_runtime.load_progress(lambda _fraction: True):
            return llama_cpp.Llama(
                model_path=str(path), embedding=True, pooling_type=pooling,
                n_ctx=batch, n_batch=batch, n_ubatch=batch, n_threads=threads,
                n_threads_batch=threads, flash_attn=True,
                # Read in, not mapped, as the engine does: a file changed while mapped
                # kills the process with SIGBUS.
                use_mmap=False,
                # All on the CPU, and no large product sent to a GPU either: the chat
                # model keeps the GPU's memory.
                n_gpu_layers=0, split_mode=llama_cpp.LLAMA_SPLIT_MODE_NONE, main_gpu=-1,
                verbose=False)
    except (ValueError, RuntimeError, OSError) as err:
        failure = err
    # Out of the except block: a half-built Llama holds its weights until collected, and
    # the traceback's frames hold it.
    traceback.clear_frames(failure.__traceback__)
    gc.collect()
    raise EmbedderError(f"{path.name} could not be loaded as an embedding model: "
                        f"{_llama_reason()}") from failure


def _llama_reason() -> str:
    errors = list(llama_runtime.router.recent_errors)
    detail = (errors[-1] if errors else "").removeprefix("llama_model_load: error loading model: ")
    return detail or "llama.cpp could not read it (the file may be damaged or unsupported)."
