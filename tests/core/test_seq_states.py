"""Returning to a conversation restores the sequence's saved state instead of reading
the history again, and the reply is byte for byte the one a full reading gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.core import settings
from app.core.fireside import Fireside
from app.core.llama.engine import Engine
from app.core.llama.saved_state import ModelKey, SavedState
from app.core.llama.seq_states import StateCache
from app.core.reply.replies import ReplyStats

TOPICS = ("lighthouses", "tides", "ferries")


QUESTION = "Which of those facts is the most surprising?"


def greedy_core(engine: Engine | None = None) -> Fireside:
    prefs = settings.load().settings
    prefs.temperature, prefs.seed, prefs.max_tokens, prefs.context_size = 0.0, 1, 24, 4096
    return Fireside.open(prefs=prefs, engine=engine)


@pytest.fixture
def core() -> Iterator[Fireside]:
    core = greedy_core()
    yield core
    core.close()


@pytest.fixture
def memory_core() -> Iterator[Fireside]:
    """States kept in memory only (an engine with no folder)."""
    core = greedy_core(Engine())
    yield core
    core.close()


def say(core: Fireside, text: str) -> tuple[str, ReplyStats]:
    result = core.send(text).result().future.result()
    return result.reply.text, result.reply.stats


def regenerate(core: Fireside) -> tuple[str, ReplyStats]:
    rewound = core.regenerate().result()
    assert rewound is not None
    result = rewound.turn.future.result()
    return result.reply.text, result.reply.stats


def states(core: Fireside) -> Any:
    return core.engine.local.states  # the engine's own cache


def long_conversation(core: Fireside) -> int:
    for topic in TOPICS:
        say(core, f"Tell me three facts about {topic}, and explain each of them in a "
                  "sentence or two, as you would to a curious child.")
    assert core.conversation_id is not None
    return core.conversation_id


def never_left(core: Fireside, question: str) -> tuple[str, ReplyStats]:
    """The same conversation held once more from a new chat, with nothing saved to
    restore, and asked ``question`` at once: what coming back must answer, byte for byte.

    Not the reply to the whole conversation read again at once: with flash attention
    (on by default) llama.cpp rounds a batch of tokens differently from the same tokens
    decoded one by one, so that reply may differ from the one the user would have got
    had they never left, which is the one a restored sequence gives.
    """
    core.new_chat().result()
    core.engine.clear_states().result()
    long_conversation(core)
    return say(core, question)


@pytest.mark.parametrize("model", ["smollm2_path", "gemma_path"])
def test_coming_back_to_a_conversation_restores_it_and_answers_the_same(
        core: Fireside, model: str, request: pytest.FixtureRequest) -> None:
    core.load(request.getfixturevalue(model)).result()
    first = long_conversation(core)
    core.new_chat().result()
    say(core, "What is a harbour?")  # another conversation takes the sequence
    core.open_conversation(first).result()
    restored_text, restored = say(core, QUESTION)
    assert restored.restored_tokens > 100
    assert restored.cached_tokens >= restored.restored_tokens
    text, stayed = never_left(core, QUESTION)
    assert stayed.restored_tokens == 0
    assert text == restored_text  # byte for byte


def test_switching_model_and_back_restores_the_conversation(
        core: Fireside, smollm2_path: Path, gemma_path: Path) -> None:
    core.load(smollm2_path).result()
    first = long_conversation(core)
    core.load(gemma_path).result()
    say(core, "Hello!")  # Gemma answers in the same conversation
    core.load(smollm2_path).result()
    core.new_chat().result()
    core.open_conversation(first).result()
    _text, back = regenerate(core)  # SmolLM2 again, on the history it had saved
    assert back.restored_tokens > 100


def test_the_least_recent_state_goes_when_the_budget_is_spent(
        memory_core: Fireside, smollm2_path: Path) -> None:
    core = memory_core
    core.load(smollm2_path).result()
    first = long_conversation(core)
    core.new_chat().result()
    saved = states(core)
    one_state = saved.used
    assert len(saved) == 1 and one_state > 0
    saved.budget = one_state + one_state // 2  # room for one conversation only
    second = long_conversation(core)
    core.new_chat().result()
    assert len(saved) == 1  # the first one went
    core.open_conversation(second).result()
    _text, stats = say(core, "Which of those facts is the most surprising?")
    assert stats.restored_tokens > 100
    core.open_conversation(first).result()
    text, stats = say(core, "Which of those facts is the most surprising?")
    assert stats.restored_tokens == 0 and text  # read again in full, answered all the same


def test_a_state_is_used_only_for_its_model_and_as_far_as_the_prompt_shares_it() -> None:
    smol = ModelKey("/models/a.gguf", 100, 1, 4096, "")
    moved = ModelKey("/models/a.gguf", 100, 2, 4096, "")  # the file changed since
    history = tuple(range(200))
    cache = StateCache(budget_bytes=1000)
    cache.put(SavedState(smol, history, b"x" * 100))
    assert cache.best(smol, [*history, 7, 8], reused=0) == (cache_state(cache), 200)
    assert cache.best(moved, [*history, 7, 8], reused=0) is None
    # A prompt that parts from it (an edit, a regenerate) keeps what they share.
    assert cache.best(smol, [*history[:150], 9, 9], reused=0) == (cache_state(cache), 150)
    assert cache.best(smol, [*history[:150], 9, 9], reused=150) is None  # nothing to gain
    assert cache.best(smol, [*history[:10], 9, 9], reused=0) is None  # too little to gain
    cache.put(SavedState(smol, (*history, 200), b"y" * 100))  # the same history, longer
    assert len(cache) == 1 and cache.used == 100


def cache_state(cache: StateCache) -> SavedState:
    return next(iter(cache._states.values()))
