"""llama-cpp-python's sampler chain, reordered to pick the same tokens in less time.

``Llama._init_sampler`` puts the repeat penalty first, over the whole vocabulary: a
hash lookup for each of Gemma 3's 262,144 tokens before every token it writes (7 % of
its decoding time on a 2-core CPU; measured by tests/benchmarks/bench_llama_cpp.py).
A repeat penalty of 1 or more only lowers the logits of the tokens among the last
``last_n_tokens_size``, so the k best after it always lie among the
``k + last_n_tokens_size`` best before it: a top-k of that size first leaves the chain's
choice unchanged (tests/core/test_sampler_chain.py compares both chains token by token)
and the penalty then looks at about a hundred candidates.

The chain then runs over a narrowed set of candidates, not the whole vocabulary: its
first step keeps only the best few logits, and llama.cpp's own sampling copies all of
them (262,144 for Gemma 3) into an array and partly sorts it for every token, a third of
a millisecond here. :func:`narrowed` finds, from every 64th logit, a threshold that a
few hundred tokens pass, checks that they hold the chain's first k, and the chain runs
over those: the same tokens reach it (every other token lies below the threshold).

A :class:`Grammar` (a tool call's, :mod:`app.core.reply.tool_calls`) checks the token the chain
picks, and only when it refuses it goes over the whole vocabulary and the chain picks
again, as llama.cpp's own sampler does (a grammar over Gemma 3's vocabulary costs
more than the model's step; bench_tools.py); a lazy one holds only from its trigger on.

Anything else this reasoning does not cover (llama-cpp-python's own grammars, logits
processors, mirostat, a frequency or presence penalty, a repeat penalty below 1, no
top-k) keeps the stock chain.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any

import llama_cpp
import llama_cpp._internals as llama_internals
import numpy as np


@dataclass(frozen=True)
class Grammar:
    """A GBNF grammar for what the model writes: from the first token, or (``trigger``,
    a regex matched against the whole reply so far) from where its group begins."""

    gbnf: str
    trigger: str | None = None


class GrammarError(ValueError):
    """llama.cpp refused the grammar."""


def install(llm: llama_cpp.Llama) -> None:
    """Make ``llm.generate`` and ``llm.sample`` build the reordered chain."""
    llm._init_sampler = functools.partial(_chain, llm)  # type: ignore[method-assign]


def _chain(llm: llama_cpp.Llama, *, top_k: int = 40, top_p: float = 0.95,
           min_p: float = 0.05, typical_p: float = 1.0, temp: float = 0.80,
           repeat_penalty: float = 1.0, frequency_penalty: float = 0.0,
           presence_penalty: float = 0.0, mirostat_mode: int = 0,
           logits_processor: Any = None, grammar: Any = None,
           **others: Any) -> llama_internals.LlamaSampler:
    stock = functools.partial(
        llama_cpp.Llama._init_sampler, llm, top_k=top_k, top_p=top_p, min_p=min_p,
        typical_p=typical_p, temp=temp, repeat_penalty=repeat_penalty,
        frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
        mirostat_mode=mirostat_mode, logits_processor=logits_processor, grammar=grammar,
        **others)
    keep = 1 if temp == 0.0 else top_k  # greedy keeps the one best
    if (frequency_penalty or presence_penalty or temp < 0.0 or mirostat_mode
            or logits_processor is not None or keep <= 0
            or (grammar is not None and not isinstance(grammar, Grammar))
            or (repeat_penalty < 1.0 and grammar is None)):
        chosen: llama_internals.LlamaSampler = stock()
        return chosen
    last_n = llm.last_n_tokens_size
    # The best tokens the chain's first selective step keeps; a penalty below 1 raises
    # tokens from anywhere in the vocabulary, so then nothing is narrowed.
    first_k = keep + last_n if repeat_penalty > 1.0 else keep if repeat_penalty == 1.0 \
        else None
    sampler: llama_internals.LlamaSampler = _GrammarChecked(llm, grammar, first_k) \
        if isinstance(grammar, Grammar) else _Narrowed(llm, first_k)
    if repeat_penalty > 1.0:
        sampler.add_top_k(keep + last_n)
    sampler.add_penalties(n_vocab=llm.n_vocab(), penalty_last_n=last_n,
                          penalty_repeat=repeat_penalty, penalty_freq=0.0,
                          penalty_present=0.0)
    if temp == 0.0:
        sampler.add_greedy()
        return sampler
    # From here as llama-cpp-python orders it.
    sampler.add_top_k(top_k)
    sampler.add_typical(typical_p, 1)
    sampler.add_top_p(top_p, 1)
    sampler.add_min_p(min_p, 1)
    sampler.add_temp(temp)
    sampler.add_dist(llm._seed)
    return sampler


_TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)],
                       align=True)


# A threshold from every STRIDE-th logit; 2 * need / STRIDE + 8 of those above it lets
# about 2 * need + 500 tokens through: enough that falling short is rare.
_STRIDE = 64


def narrowed(logits: np.ndarray[Any, Any], need: int) -> np.ndarray[Any, Any] | None:
    """The ids (ascending) of the tokens whose logits reach a threshold that at least
    ``need`` of them reach, so that they hold the ``need`` best; None where too few do
    (the caller then takes the whole vocabulary)."""
    sample = logits[::_STRIDE]
    rank = len(sample) - min(len(sample), 2 * (need // _STRIDE) + 8)
    threshold = np.partition(sample, rank)[rank]
    ids = np.flatnonzero(logits >= threshold)  # NaN passes nothing: too few, not wrong
    return ids if len(ids) >= need else None


class _Narrowed(llama_internals.LlamaSampler):
    """The chain (``self.sampler``), run over the candidates :func:`narrowed` finds for
    its first step's ``first_k`` (None: over the whole vocabulary)."""

    def __init__(self, llm: llama_cpp.Llama, first_k: int | None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._first_k = first_k
        self._n_vocab = llm.n_vocab()
        self._ids = np.arange(self._n_vocab, dtype=np.intc)
        self._cur = np.zeros(self._n_vocab, _TOKEN_DATA)

    def sample(self, ctx: llama_internals.LlamaContext, idx: int = -1) -> int:
        token = self._pick(self._logits(ctx, idx))
        llama_cpp.llama_sampler_accept(self.sampler, token)
        return token

    def _logits(self, ctx: llama_internals.LlamaContext, idx: int) -> np.ndarray[Any, Any]:
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx.ctx, idx),
                                     shape=(self._n_vocab,))

    def _pick(self, logits: np.ndarray[Any, Any], grammar: Any = None) -> int:
        """The chain's choice; with ``grammar`` (a llama_sampler) applied first, over the
        whole vocabulary, as only that grammar knows which tokens it allows."""
        ids = None if grammar is not None or self._first_k is None \
            else narrowed(logits, self._first_k)
        if ids is None:
            cur = self._cur
            cur["id"] = self._ids
            cur["logit"] = logits
        else:
            cur = self._cur[: len(ids)]
            cur["id"] = ids
            cur["logit"] = logits[ids]
        cur["p"] = 0.0
        array = self._array(cur)
        if grammar is not None:
            llama_cpp.llama_sampler_apply(grammar, ctypes.byref(array))
        llama_cpp.llama_sampler_apply(self.sampler, ctypes.byref(array))
        return int(array.data[array.selected].id)

    @staticmethod
    def _array(data: np.ndarray[Any, Any]) -> llama_cpp.llama_token_data_array:
        return llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)),
            size=len(data), selected=-1, sorted=False)


class _GrammarChecked(_Narrowed):
    """The chain (``self.sampler``) picks; the grammar, kept apart, checks its pick."""

    def __init__(self, llm: llama_cpp.Llama, grammar: Grammar, first_k: int | None) -> None:
        super().__init__(llm, first_k)
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        text = grammar.gbnf.encode()
        if grammar.trigger is None:
            made = llama_cpp.llama_sampler_init_grammar(vocab, text, b"root")
        else:
            patterns = (ctypes.c_char_p * 1)(grammar.trigger.encode())
            made = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
                vocab, text, b"root", patterns, 1, None, 0)
        if not made:
            self.close()  # type: ignore[no-untyped-call]
            raise GrammarError("llama.cpp could not read the grammar for this call")
        self._grammar = made
        self._exit_stack.callback(lambda: llama_cpp.llama_sampler_free(made))
        self._one = np.zeros(1, _TOKEN_DATA)

    def sample(self, ctx: llama_internals.LlamaContext, idx: int = -1) -> int:
        logits = self._logits(ctx, idx)
        token = self._pick(logits)
        self._one[0] = (token, logits[token], 0.0)
        llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(self._array(self._one)))
        if not np.isfinite(self._one[0]["logit"]):  # refused: the grammar's full pass
            token = self._pick(logits, self._grammar)
        llama_cpp.llama_sampler_accept(self._grammar, token)
        llama_cpp.llama_sampler_accept(self.sampler, token)
        return token
