"""Speculative decoding: tokens drafted ahead, checked by the model in one forward pass.

A forward pass over several tokens costs less than as many passes over one (on a
2-core CPU, 16 tokens cost about 5 to 8 single passes; on a GPU about one), so where a
reply repeats text it has seen (an edit, a fix, a quote) drafting the next tokens and
checking them together writes several per pass. Drafts come from the conversation
itself (:class:`PromptLookup`: what followed the last few tokens where they occurred
before) or from a small model of the same vocabulary (:class:`DraftModel`, with its own
context).

Checking: the reply's own sampler chain samples each position of the checked batch in
order, as plain decoding would, and a drafted token is kept only where the chain picks
it; the first token it does not keep is replaced by the chain's pick. The chain draws
one random number per token either way, so at the same seed the reply is the one plain
decoding writes, sampled or greedy, and stops, grammars and penalties see the same
tokens. (Rejection sampling would keep more of a draft model's tokens at a temperature
above 0, but needs the draft's probabilities and writes another reply at that seed.)

The numbers are llama.cpp's, and its CPU kernels for one token and for a batch round
differently (by up to about one unit of a logit, measured here): with several threads,
flash attention splits a single token's attention across them once the context holds
over 256 tokens (ggml-cpu's split-KV path) and merges the parts; repacked weights (Q4_0,
Q4_K) take a gemm kernel from four tokens on. So a greedy choice between two near-equal
tokens can fall differently with and without drafting, as it can between thread counts
(llama.cpp's maintainers call this expected: issues #4479, #23335).

Each drafter drafts further while its drafts are kept, and rests while fewer of them
are kept than checking them costs (:class:`Drafters`, :class:`Pace`), so that a reply
drafting cannot help is not slowed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Generator, Sequence
from typing import Any, Protocol

import llama_cpp
import numpy as np

from app.core.backend import reusable_prefix

MAX_DRAFT = 15  # tokens drafted at most per pass: a checked batch of 16


class Drafter(Protocol):
    def propose(self, seq: np.ndarray[Any, Any], limit: int) -> list[int]:
        """Up to ``limit`` tokens likely to follow ``seq`` (the sequence so far)."""
        ...


@dataclasses.dataclass
class Tally:
    """What drafting did in one reply."""

    proposed: int = 0
    accepted: int = 0


class PromptLookup:
    """Drafts what followed, most recently, the last few tokens where they occurred
    before in the sequence (the prompt and the reply so far). It asks for a longer
    match after a draft none of which was kept, and less again as drafts are kept:
    a copy matches at any length, while in prose a few words seen before ("of the
    water") say little of what comes next."""

    SHORTEST, LONGEST = 3, 12

    def __init__(self) -> None:
        self.need = self.SHORTEST  # the match it drafts from, in tokens

    def propose(self, seq: np.ndarray[Any, Any], limit: int) -> list[int]:
        n = len(seq)
        for size in range(max(self.need, 4), self.need - 1, -1):
            if n <= size:
                continue
            tail = seq[n - size:]
            hits = np.flatnonzero(seq[:n - size] == tail[0])
            for j in range(1, size):
                hits = hits[seq[hits + j] == tail[j]]
            if len(hits):
                start = int(hits[-1]) + size
                return [int(t) for t in seq[start:start + limit]]
        return []

    def taught(self, drafted: int, kept: int) -> None:
        """How its last draft went."""
        if kept == 0:
            self.need = min(self.LONGEST, 2 * self.need)
        elif kept == drafted:
            self.need = max(self.SHORTEST, self.need - 1)


class DraftModel:
    """A small model of the same vocabulary, in a context of its own, that drafts
    greedily while it is confident. Its context follows the main sequence: each
    proposal reuses what it holds of it and reads the rest."""

    def __init__(self, llm: llama_cpp.Llama, name: str, p_min: float = 0.6) -> None:
        self.llm, self.name, self._p_min = llm, name, p_min
        self._n_vocab = llm.n_vocab()

    def propose(self, seq: np.ndarray[Any, Any], limit: int) -> list[int]:
        llm = self.llm
        limit = min(limit, llm.n_ctx() - len(seq) - 1)
        if limit <= 0:
            return []
        same = min(_shared(llm.input_ids[:llm.n_tokens], seq), len(seq) - 1)
        llm.n_tokens = same  # eval removes what follows; the last token gives logits
        llm.eval([int(t) for t in seq[same:]])
        drafted: list[int] = []
        while True:
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1),
                                           shape=(self._n_vocab,))
            best = int(np.argmax(logits))
            # its probability: 1 / sum(exp(logit - best logit))
            if 1.0 / float(np.exp(logits - logits[best]).sum()) < self._p_min:
                break
            drafted.append(best)
            if len(drafted) >= limit:
                break
            llm.eval([best])
        return drafted

    def clear(self) -> None:
        self.llm.reset()
        self.llm._ctx.kv_cache_clear()

    def close(self) -> None:
        self.llm.close()


class Drafters:
    """The drafters of one reply, tried in order: the first with a draft gives it.

    Each drafts as far as its drafts have lately been kept (twice as far while all are,
    back to what was kept and one more when not), and only while they pay: a drafted
    token costs ``Pace.cost`` of a single step to check, so drafting pays while more
    than that share of the drafted tokens is kept. A drafter whose share falls below it
    rests, longer each time, then tries again."""

    START = 2  # tokens a drafter drafts first: a miss costs little
    WEIGHT = 0.3  # of the last draft in a drafter's share kept

    def __init__(self, drafters: Sequence[Drafter], most: int = MAX_DRAFT) -> None:
        self._drafters = tuple(drafters)
        n = len(self._drafters)
        self._limits = [self.START] * n
        self._kept = [1.0] * n  # share of drafted tokens kept, lately
        self._rest_until = [0] * n  # a pass count
        self._rest = [16] * n
        self._most = most
        self._last = 0  # the drafter of the last draft
        self.passes = 0

    def propose(self, seq: np.ndarray[Any, Any], cap: int) -> list[int]:
        for i, drafter in enumerate(self._drafters):
            if self.passes < self._rest_until[i]:
                continue
            drafted = drafter.propose(seq, min(self._limits[i], cap))[:cap]
            if drafted:
                self._last = i
                return drafted
        return []

    def record(self, drafted: int, kept: int, cost: float) -> None:
        """How the last draft went; ``cost``: a drafted token's, in single steps."""
        i = self._last
        drafter = self._drafters[i]
        if isinstance(drafter, PromptLookup):
            drafter.taught(drafted, kept)
        limit = self._limits[i]
        self._limits[i] = min(self._most, 2 * limit) if kept == drafted \
            else max(2, min(limit, kept + 1))
        self._kept[i] += self.WEIGHT * (kept / drafted - self._kept[i])
        if self._kept[i] < cost:
            self._rest_until[i] = self.passes + self._rest[i]
            self._rest[i] = min(2 * self._rest[i], 1024)
            # Tried afresh after its rest: a draft not kept then rests it again.
            self._kept[i] = cost + (1 - cost) / 4


class Pace:
    """What checking a drafted token costs, in single steps, measured in this reply:
    the time of single steps, and what each drafted token adds to a pass."""

    WARM_UP = 3  # single steps timed before the measure is trusted
    PROBE_EVERY = 8  # until then, one pass in 8 drafts nothing
    GUESS = 0.5  # the cost before it is measured
    EMA = 0.25

    def __init__(self) -> None:
        self._single = 0.0  # seconds
        self._singles = 0
        self._extra = -1.0  # seconds a drafted token adds; -1: none seen yet

    def probing(self, passes: int) -> bool:
        """Whether this pass should go without a draft, to time a single step."""
        return self._singles < self.WARM_UP and passes % self.PROBE_EVERY == 0

    @property
    def cost(self) -> float:
        if self._singles < self.WARM_UP or self._extra < 0:
            return self.GUESS
        return self._extra / self._single

    def record(self, drafted: int, seconds: float) -> None:
        if not drafted:
            self._single = seconds if not self._singles \
                else self._single + self.EMA * (seconds - self._single)
            self._singles += 1
        elif self._singles:
            extra = max(0.0, seconds - self._single) / drafted
            self._extra = extra if self._extra < 0 else self._extra + self.EMA * (
                extra - self._extra)


def stream(llm: llama_cpp.Llama, prompt: Sequence[int], sampler: Any, drafters: Drafters,
           tally: Tally) -> Generator[int, None, None]:
    """``llm.generate(prompt)`` with drafting: the same tokens, fewer forward passes
    where drafts are kept. ``sampler`` is the reply's chain (``llm._init_sampler``).

    As with ``generate``, a token yielded is not yet in the sequence: ``llm.n_tokens``
    counts those before it. Drafted tokens the model checked past the one yielded are
    removed when the stream is closed, so the sequence is what plain decoding leaves.
    """
    tokens = _resume(llm, list(prompt))
    llm._sampler = sampler
    llm.eval(tokens)
    pace = Pace()
    n_ctx = llm.n_ctx()
    last: tuple[int, int, float] | None = None  # the pass before: drafted, kept, start
    try:
        token = sampler.sample(llm._ctx, -1)
        while True:
            yield token
            # A pass is timed from its start to the next one's: drafting, checking and
            # the reply's own handling of each token, as a single step is.
            started = time.perf_counter()
            if last is not None:
                pace.record(last[0], started - last[2])
                if last[0]:
                    drafters.record(last[0], last[1], pace.cost)
            drafters.passes += 1
            past = llm.n_tokens
            llm.input_ids[past] = token
            room = n_ctx - past - 2
            drafted = drafters.propose(llm.input_ids[:past + 1], room) \
                if room > 0 and not pace.probing(drafters.passes) else []
            if len(drafted) > 3:
                # Batches in fours: llama.cpp's kernels for repacked weights (Q4_0, Q4_K)
                # take rows four at a time and the rest one by one, slower; the last
                # drafted tokens are the least likely to be kept.
                del drafted[len(drafted) - (len(drafted) + 1) % 4:]
            batch = [token, *drafted]
            _decode(llm, batch, past)
            kept = 0
            tally.proposed += len(drafted)
            for i in range(len(batch)):
                token = sampler.sample(llm._ctx, i if drafted else -1)
                llm.n_tokens = past + i + 1  # the tokens checked before the one yielded
                if i == len(drafted) or token != drafted[i]:
                    break
                kept += 1
                tally.accepted += 1
                yield token
            last = (len(drafted), kept, started)
    finally:
        llm._ctx.kv_cache_seq_rm(-1, llm.n_tokens, -1)
        # The logits held may be a checked draft's: ``generate`` must read again.
        llm._requires_eval = True


def _shared(held: np.ndarray[Any, Any], seq: np.ndarray[Any, Any]) -> int:
    """How many tokens ``held`` and ``seq`` begin with alike (``reusable_prefix`` in
    numpy, for the draft model's context, compared at every pass)."""
    n = min(len(held), len(seq))
    differ = np.flatnonzero(held[:n] != seq[:n])
    return int(differ[0]) if len(differ) else n


def _resume(llm: llama_cpp.Llama, tokens: list[int]) -> list[int]:
    """What of ``tokens`` must still be read: the sequence keeps the prefix it shares
    with them (as ``generate`` does), less the last token, read again for its logits."""
    same = reusable_prefix(llm._input_ids, tokens)  # as the engine counted it
    if same > 0 and llm._ctx.kv_cache_seq_rm(-1, same, -1):
        llm.n_tokens = same
        return tokens[same:]
    llm.reset()
    return tokens


def _decode(llm: llama_cpp.Llama, batch: list[int], past: int) -> None:
    """``batch`` into the sequence at ``past``, with the logits of every position when
    it holds a draft (one token: as ``Llama.eval`` reads it)."""
    llm._ctx.kv_cache_seq_rm(-1, past, -1)
    llm._batch.set_batch(batch=batch, n_past=past, logits_all=len(batch) > 1)
    llm._ctx.decode(llm._batch)
    llm.input_ids[past:past + len(batch)] = batch
    llm.n_tokens = past + len(batch)


def same_vocabulary(main: llama_cpp.Llama, draft: llama_cpp.Llama) -> str | None:
    """None where ``draft``'s tokens are ``main``'s (its drafts mean the same text);
    else why not, in words."""
    vocabs = [llama_cpp.llama_model_get_vocab(m.model) for m in (main, draft)]
    sizes = [llama_cpp.llama_vocab_n_tokens(v) for v in vocabs]
    differ = "their vocabularies differ"
    if abs(sizes[0] - sizes[1]) > 128:  # as llama.cpp's own speculative decoding allows
        return f"{differ} ({sizes[0]:,} and {sizes[1]:,} tokens)"
    if len({llama_cpp.llama_vocab_type(v) for v in vocabs}) > 1:
        return f"{differ} (their tokenizers are of different kinds)"
    for name in ("bos", "eos"):
        ids = [getattr(llama_cpp, f"llama_vocab_{name}")(v) for v in vocabs]
        if ids[0] != ids[1]:
            return f"{differ} (their {name.upper()} tokens are not the same)"
    for token in range(min(sizes)):
        texts = [llama_cpp.llama_vocab_get_text(v, token) for v in vocabs]
        if texts[0] != texts[1]:
            shown = [(t or b"").decode("utf-8", "replace") for t in texts]
            return f"{differ} (token {token} is {shown[0]!r} in one, {shown[1]!r} in the other)"
    return None


