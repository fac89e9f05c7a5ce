"""The reordered sampler chain picks exactly the tokens llama-cpp-python's own chain
picks, sampled and greedy, with the repeat penalty at work, on both bundled models."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from app.core.llama import sampler_chain
from app.core.llama.engine import llama_arguments
from app.core.options import LoadOptions, Sampling

PROMPT = (b"Write a long story about a lighthouse keeper, the storm, the storm again, "
          b"and the keeper, the keeper, the keeper.")


def written(llm: llama_cpp.Llama, seed: int, temp: float, n: int = 160,
            penalty: float = Sampling().repeat_penalty) -> list[int]:
    # Past an end-of-turn token too: the comparison wants many tokens, not an answer.
    llm.reset()
    llm._ctx.kv_cache_clear()
    llm.set_seed(seed)
    sampling = Sampling()
    tokens: list[int] = []
    for token in llm.generate(llm.tokenize(PROMPT, add_bos=True), top_k=sampling.top_k,
                              top_p=sampling.top_p, min_p=sampling.min_p, temp=temp,
                              repeat_penalty=penalty):
        tokens.append(token)
        if len(tokens) >= n:
            break
    return tokens


@pytest.mark.parametrize("model", ["smollm2_path", "gemma_path"])
def test_the_reordered_chain_writes_the_same_tokens_as_the_stock_one(
        model: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(model)
    llm = llama_cpp.Llama(str(path), n_ctx=1024, **llama_arguments(LoadOptions()),
                          verbose=False)
    penalised = []
    try:
        for temp, seed in ((0.7, 1), (0.7, 2), (1.3, 3), (0.0, 4)):
            unpenalised = written(llm, seed, temp, penalty=1.0)
            stock = written(llm, seed, temp)
            sampler_chain.install(llm)
            assert written(llm, seed, temp) == stock, (temp, seed)
            assert written(llm, seed, temp, penalty=1.0) == unpenalised, (temp, seed)
            del llm._init_sampler  # the stock chain again
            penalised.append(unpenalised != stock)
    finally:
        llm.close()
    assert any(penalised)  # the penalty was at work: without it the seeds write otherwise


@given(hnp.arrays(np.float32, st.integers(1, 3000),
                  elements=st.floats(-30, 30, width=32) | st.sampled_from([0.0, 1.0, -np.inf])),
       st.integers(1, 200))
def test_the_narrowed_candidates_hold_the_best_tokens_or_give_way(
        logits: np.ndarray, need: int) -> None:
    # Ties and -inf included: the chain must see every token that could be among its
    # first step's `need` best, or the whole vocabulary.
    ids = sampler_chain.narrowed(logits, need)
    if ids is None:
        return
    assert len(ids) >= need
    kept = set(ids.tolist())
    assert all(ids[i] < ids[i + 1] for i in range(len(ids) - 1))
    left_out = np.setdiff1d(np.arange(len(logits)), ids)
    if len(left_out):
        assert logits[left_out].max() < logits[ids].min()
    best = np.sort(logits)[::-1][:need]
    assert sorted(logits[list(kept)].tolist(), reverse=True)[:need] == best.tolist()

