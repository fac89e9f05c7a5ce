"""Speculative decoding: drafted tokens checked by the model, on the real models.

The reply must be the one plain decoding writes. llama.cpp computes a token alone and a
batch of tokens with different kernels where it runs several threads (and, for Gemma's
Q4_K weights, from four tokens on), which may round a logit differently by up to about
one unit; SmolLM2 on one thread computes both alike (checked first below), so there
the replies must match byte for byte. Elsewhere they must match up to the first token
the model was not sure of.
"""

from __future__ import annotations

import dataclasses
import gzip
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from app.core.llama import speculation
from app.core.llama.engine import Engine, Reply, Sampling
from app.core.options import LoadOptions
from tests.core.helpers import ask, user

CHANGELOG = Path("/usr/share/doc/bash/changelog.Debian.gz")
LICENSE = Path("/usr/share/common-licenses/GPL-3")


def source_text(words: int = 250) -> str:
    """A text of this machine, nobody's test data: bash's changelog (or the GPL)."""
    text = gzip.decompress(CHANGELOG.read_bytes()).decode() if CHANGELOG.exists() \
        else LICENSE.read_text()
    kept: list[str] = []
    for line in text.splitlines():
        kept.append(line)
        if sum(len(k.split()) for k in kept) >= words:
            break
    return "\n".join(kept)


REPEAT = "Write this text again exactly as it is:\n\n" + source_text()
PROMPTS = (REPEAT, "Write a short story about a lighthouse keeper.",
           "Explain why the sky is blue.",
           "Fix the bug in this function and show it whole:\n\ndef mean(xs):\n"
           "    return sum(xs) / len(xs) + 1\n")
GREEDY = Sampling(temperature=0.0, max_tokens=160, seed=1, speculation=True)


@dataclasses.dataclass
class Both:
    plain: Reply
    drafted: Reply
    plain_seq: list[int]  # the sequence each left behind
    drafted_seq: list[int]


def both(engine: Engine, prompt: str, sampling: Sampling = GREEDY) -> Both:
    """The reply without drafting, then with it, each in a new chat."""
    out: list[Reply] = []
    seqs: list[list[int]] = []
    for spec in (False, True):
        engine.clear().result()
        out.append(ask(engine, user(prompt), dataclasses.replace(sampling, speculation=spec)))
        llm = engine._llm
        assert llm is not None
        seqs.append([int(t) for t in llm._input_ids])
    return Both(out[0], out[1], seqs[0], seqs[1])


@pytest.fixture(scope="module")
def one_thread(smollm2_path: Path) -> Iterator[Engine]:
    """SmolLM2 on one thread: llama.cpp computes a token alone and in a batch alike."""
    engine = Engine()
    engine.load(smollm2_path, LoadOptions(n_threads=1)).result(120)
    yield engine
    engine.close()


# -- drafting, without a model ---------------------------------------------------------

def test_prompt_lookup_drafts_what_followed_the_last_tokens_most_recently() -> None:
    seq = np.array([5, 1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 4, 1, 2, 3], dtype=np.intc)
    assert speculation.PromptLookup().propose(seq, 3) == [7, 8, 4]
    assert speculation.PromptLookup().propose(seq, 10) == [7, 8, 4, 1, 2, 3]


def test_prompt_lookup_prefers_the_longest_match_and_drafts_nothing_without_one() -> None:
    # "1 2 3" last followed by 4, but "0 1 2 3" (longer) by 9
    seq = np.array([0, 1, 2, 3, 9, 7, 1, 2, 3, 4, 0, 1, 2, 3], dtype=np.intc)
    assert speculation.PromptLookup().propose(seq, 1) == [9]
    assert speculation.PromptLookup().propose(np.arange(50, dtype=np.intc), 4) == []


def test_prompt_lookup_asks_for_longer_matches_after_drafts_not_kept() -> None:
    lookup = speculation.PromptLookup()
    seq = np.array([*range(100, 110), 1, 2, 3, 4, 5, 6, 7, *range(200, 210), 2, 3, 4, 5],
                   dtype=np.intc)
    assert lookup.propose(seq, 2) == [6, 7]  # a match of four
    lookup.taught(2, 0)
    assert lookup.need == 6
    assert lookup.propose(seq, 2) == []  # "2 3 4 5" is too short a match now
    lookup.taught(2, 2)
    lookup.taught(2, 2)
    assert lookup.need == 4
    assert lookup.propose(seq, 2) == [6, 7]


def test_each_drafter_drafts_further_while_kept_and_shorter_when_not() -> None:
    seq = np.array([1, 2, 3, *range(10, 40), 1, 2, 3], dtype=np.intc)
    drafters = speculation.Drafters([speculation.PromptLookup()])
    assert len(drafters.propose(seq, 100)) == speculation.Drafters.START == 2
    drafters.record(2, 2, cost=0.0)
    assert len(drafters.propose(seq, 100)) == 4
    drafters.record(4, 4, cost=0.0)
    assert len(drafters.propose(seq, 100)) == 8
    drafters.record(8, 2, cost=0.0)
    assert len(drafters.propose(seq, 100)) == 3
    drafters.record(3, 1, cost=0.0)
    assert len(drafters.propose(seq, 100)) == 2
    assert len(drafters.propose(seq, 1)) == 1  # never past the room left


def test_a_drafter_rests_while_fewer_of_its_drafts_are_kept_than_checking_costs() -> None:
    seq = np.array([1, 2, 3, 4, *range(10, 40), 1, 2, 3, 4], dtype=np.intc)
    lookup = speculation.PromptLookup()
    drafters = speculation.Drafters([lookup])

    def miss() -> None:
        assert drafters.propose(seq, 100)
        drafters.record(2, 0, cost=0.5)  # none of its draft kept
        lookup.need = lookup.SHORTEST  # (lookup asks for longer matches: not tested here)

    def rest() -> int:
        start = drafters.passes
        while not drafters.propose(seq, 100):
            drafters.passes += 1
        return drafters.passes - start

    miss()  # its share kept falls from 1 to 0.7: it goes on
    assert rest() == 0
    miss()  # 0.49, below what a drafted token costs: it rests
    rests = [rest()]
    miss()  # tried afresh, and missed: it rests again at once, longer
    rests.append(rest())
    drafters.record(2, 2, cost=0.5)  # kept: it goes on
    assert rest() == 0
    assert 10 < rests[0] < rests[1]


def test_the_cost_of_a_drafted_token_is_measured_against_single_steps() -> None:
    pace = speculation.Pace()
    assert pace.cost == speculation.Pace.GUESS
    assert [pace.probing(n) for n in range(1, 17)].count(True) == 2
    for _ in range(speculation.Pace.WARM_UP):
        pace.record(0, 0.010)
    pace.record(4, 0.030)  # four drafted tokens added 20 ms: 5 ms each
    assert pace.cost == pytest.approx(0.5)
    assert not any(pace.probing(n) for n in range(1, 17))


# -- the same reply --------------------------------------------------------------------

def test_one_thread_computes_a_token_alone_and_in_a_batch_alike(one_thread: Engine) -> None:
    """What the byte-for-byte tests below stand on."""
    def logits_of(llm: llama_cpp.Llama, n: int) -> np.ndarray:
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, n),
                                     shape=(llm.n_vocab(),)).copy()

    def check(llm: llama_cpp.Llama) -> float:
        tokens = llm.tokenize(REPEAT.encode())[:64]
        llm.reset()
        llm._ctx.kv_cache_clear()
        llm.eval(tokens[:56])
        alone = []
        for token in tokens[56:]:
            llm.eval([token])
            alone.append(logits_of(llm, -1))
        llm.n_tokens = 56
        llm._ctx.kv_cache_seq_rm(-1, 56, -1)
        llm._batch.set_batch(tokens[56:], 56, logits_all=True)
        llm._ctx.decode(llm._batch)
        return max(float(np.abs(logits_of(llm, i) - a).max()) for i, a in enumerate(alone))

    future = one_thread._submit(lambda: check(one_thread._require_llm()))
    assert future.result() == 0.0
    one_thread.clear().result()


@pytest.mark.parametrize("prompt", PROMPTS, ids=["repeat", "story", "question", "code"])
def test_a_greedy_reply_is_the_same_with_and_without_drafting(one_thread: Engine,
                                                              prompt: str) -> None:
    got = both(one_thread, prompt)
    assert got.drafted.text == got.plain.text
    assert got.drafted.stats.tokens == got.plain.stats.tokens
    assert got.drafted_seq == got.plain_seq  # drafts checked past the end are removed
    assert got.plain.stats.draft_proposed == 0
    if prompt is REPEAT:  # what it copies is drafted from the prompt, and kept
        assert got.drafted.stats.draft_accepted >= 10
        assert got.drafted.stats.draft_accepted <= got.drafted.stats.draft_proposed


def test_a_sampled_reply_at_a_seed_is_the_same_with_and_without_drafting(
        one_thread: Engine) -> None:
    got = both(one_thread, REPEAT, Sampling(temperature=0.8, max_tokens=120, seed=7))
    assert got.drafted.text == got.plain.text
    assert got.drafted.stats.draft_accepted > 0


def test_a_stop_string_inside_a_kept_draft_ends_the_reply_at_the_same_place(
        one_thread: Engine) -> None:
    plain = both(one_thread, REPEAT).plain.text
    # A word of the copy well after its start: drafted, kept, and cut there.
    stop = next(w for w in plain.split()[10:] if len(w) >= 4 and w in REPEAT)
    got = both(one_thread, REPEAT, dataclasses.replace(GREEDY, stop=(stop,)))
    assert got.plain.stats.finish_reason == got.drafted.stats.finish_reason == "stop"
    assert got.drafted.text == got.plain.text
    assert stop not in got.drafted.text
    assert got.drafted.stats.draft_accepted > 0
    assert got.drafted_seq == got.plain_seq


def test_a_thinking_budget_ends_the_thought_at_the_same_token(
        thinking_model_path: Path) -> None:
    engine = Engine()
    try:
        engine.load(thinking_model_path, LoadOptions(n_threads=1)).result(120)
        got = both(engine, REPEAT, dataclasses.replace(GREEDY, thinking_budget=30))
        assert got.drafted.thinking == got.plain.thinking
        assert got.drafted.stats.thinking_tokens == got.plain.stats.thinking_tokens <= 31
        assert got.drafted.text == got.plain.text
    finally:
        engine.close()


def test_a_reply_held_to_a_schema_is_the_same_with_and_without_drafting(
        one_thread: Engine) -> None:
    schema = '{"type": "object", "properties": {"title": {"type": "string"}, ' \
        '"year": {"type": "integer"}}, "required": ["title", "year"]}'
    got = both(one_thread, "Give the title and year of this changelog's first entry as "
               "JSON:\n\n" + source_text(60), dataclasses.replace(GREEDY, schema=schema))
    assert got.drafted.text == got.plain.text
    assert got.plain.text.lstrip().startswith("{")


@pytest.mark.parametrize("model", ["smollm2_path", "gemma_path"])
def test_with_more_threads_only_a_token_the_model_was_unsure_of_can_differ(
        model: str, request: pytest.FixtureRequest) -> None:
    """On the default threads the kernels round differently alone and in a batch: the
    replies match, or part where the model's two best tokens were within rounding."""
    engine = Engine()
    sampling = dataclasses.replace(GREEDY, repeat_penalty=1.0)  # raw logits decide
    try:
        engine.load(request.getfixturevalue(model)).result(120)
        for prompt in PROMPTS:
            got = both(engine, prompt, sampling)
            if got.drafted_seq == got.plain_seq:
                assert got.drafted.text == got.plain.text
                continue
            at = next(i for i, (a, b) in enumerate(zip(got.plain_seq, got.drafted_seq,
                                                       strict=False)) if a != b)
            engine.clear().result()
            ask(engine, user(prompt), dataclasses.replace(sampling, speculation=False))

            def margin(at: int = at) -> float:
                llm = engine._require_llm()
                llm.n_tokens = at - 1
                llm.eval([llm.input_ids[at - 1]])  # as plain decoding read it: alone
                logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1),
                                               shape=(llm.n_vocab(),))
                top = np.sort(logits)[-2:]
                return float(top[1] - top[0])

            assert engine._submit(margin).result() < 2.0, prompt[:30]
    finally:
        engine.close()


# -- a draft model ---------------------------------------------------------------------

def test_a_model_drafting_for_itself_drafts_what_it_then_writes(
        smollm2_path: Path) -> None:
    engine = Engine()
    try:
        loaded = engine.load(smollm2_path, LoadOptions(
            n_threads=1, draft_model=str(smollm2_path))).result(120)
        assert loaded.draft and loaded.notice is None
        # No repeat penalty, which the draft model's greedy drafts do not apply.
        got = both(engine, PROMPTS[1], dataclasses.replace(GREEDY, repeat_penalty=1.0))
        assert got.drafted.text == got.plain.text
        assert got.drafted.stats.draft_accepted > 0
        draft = engine._draft
        assert draft is not None and draft.llm.n_tokens > 0

        def drafts() -> list[tuple[list[int], list[int]]]:
            """What it drafts at points of its own reply, and what it wrote there."""
            seq = np.array(got.plain_seq, dtype=np.intc)
            start = got.plain.stats.prompt_tokens
            return [(draft.propose(seq[:cut], 4), got.plain_seq[cut:cut + 4])
                    for cut in range(start + 1, len(seq) - 4, 7)]

        pairs = engine._submit(drafts).result()
        # It drafts only where it is sure (p ≥ 0.6): some of the points.
        assert sum(1 for drafted, _ in pairs if drafted) >= len(pairs) // 4
        for drafted, written in pairs:
            assert drafted == written[:len(drafted)]
        engine.clear().result()  # a new chat: the draft model's context is cleared too
        assert draft.llm.n_tokens == 0
    finally:
        engine.close()


def test_a_draft_model_of_another_vocabulary_is_refused_with_the_reason(
        smollm2_path: Path, gemma_path: Path) -> None:
    engine = Engine()
    try:
        loaded = engine.load(smollm2_path, LoadOptions(draft_model=str(gemma_path))).result(120)
        assert loaded.draft is None
        assert loaded.notice is not None
        assert f"{gemma_path.name} cannot draft for {smollm2_path.name}" in loaded.notice
        assert "vocabularies differ" in loaded.notice
        reply = ask(engine, user(REPEAT), GREEDY)  # still answers, drafting from the prompt
        assert reply.text and reply.stats.draft_proposed > 0
    finally:
        engine.close()


def test_a_base_model_still_ends_before_a_line_it_repeats(gemma_path: Path) -> None:
    """Gemma 3 270M (a base model here) asked to repeat lines: drafts of the repeated
    text are proposed and checked, and the reply still ends where a line would repeat
    or a blank line begins, as without drafting."""
    engine = Engine()
    try:
        model = engine.load(gemma_path).result(120)
        assert model.base_model
        drafted = 0
        for prompt in ("Say this twice:\nThe tide comes in.\nThe tide goes out.",
                       REPEAT, PROMPTS[3]):
            reply = ask(engine, user(prompt), dataclasses.replace(GREEDY, max_tokens=200))
            lines = [line.strip() for line in reply.text.splitlines() if line.strip()]
            assert len(lines) == len(set(lines)) and "\n\n" not in reply.text
            drafted += reply.stats.draft_proposed
        assert drafted > 0
    finally:
        engine.close()
