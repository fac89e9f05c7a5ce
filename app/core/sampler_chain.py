"""llama-cpp-python's sampler chain, reordered to pick the same tokens in less time.

``Llama._init_sampler`` puts the repeat penalty first, over the whole vocabulary: a
hash lookup for each of Gemma 3's 262,144 tokens before every token it writes (7 % of
its decoding time on a 2-core CPU; measured by tests/benchmarks/bench_llama_cpp.py).
A repeat penalty of 1 or more only lowers the logits of the tokens among the last
``last_n_tokens_size``, so the k best after it always lie among the
``k + last_n_tokens_size`` best before it: a top-k of that size first leaves the chain's
choice unchanged (tests/core/test_sampler_chain.py compares both chains token by token)
and the penalty then looks at about a hundred candidates.

Anything this reasoning does not cover (a grammar, logits processors, mirostat, a
frequency or presence penalty, a bonus below 1, no top-k) keeps the stock chain.
"""

from __future__ import annotations

import functools
from typing import Any

import llama_cpp
import llama_cpp._internals as llama_internals


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
    if (repeat_penalty <= 1.0 or frequency_penalty or presence_penalty or temp < 0.0
            or mirostat_mode or logits_processor is not None or grammar is not None
            or keep <= 0):
        chosen: llama_internals.LlamaSampler = stock()
        return chosen
    last_n = llm.last_n_tokens_size
    sampler = llama_internals.LlamaSampler()
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
