"""The chat service: conversations stored in real SQLite, replies from real models."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core import paths
from app.core.conversations.chat import SAVE_INTERVAL_S, ChatService
from app.core.conversations.store import Store
from app.core.llama.engine import Engine, LoadOptions, PromptTooLong, Sampling
from tests.core.helpers import GREEDY, PROBE
from tests.reference import Reference
from tests.scripted_engine import ScriptedEngine
from tests.streams import Taker


@pytest.fixture
def chat(smollm2_path: Path) -> Iterator[ChatService]:
    engine = Engine()
    store = Store()
    engine.load(smollm2_path).result()
    yield ChatService(engine, store)
    assert engine.close()
    store.close()


def test_a_message_and_its_reply_are_stored(chat: ChatService, reference: Reference,
                                            smollm2_path: Path) -> None:
    turn = chat.send(PROBE, GREEDY)
    taker = Taker(turn.pieces)
    result = turn.future.result()
    assert result.reply.text == reference.reply(smollm2_path, PROBE, GREEDY) and result.saved
    assert taker.wait().answer == result.reply.text
    conversation = chat.conversation()
    assert conversation is not None and "capital of France" in conversation.title
    messages = chat.store.messages(conversation.id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].text == result.reply.text and messages[1].complete
    assert messages[1].stats is not None
    assert messages[1].stats["tokens"] == result.reply.stats.tokens


def test_new_chat_starts_a_new_conversation(chat: ChatService) -> None:
    first = chat.send(PROBE, GREEDY).future.result()
    chat.new_chat().result()
    second = chat.send(PROBE, GREEDY).future.result()
    assert second.conversation_id != first.conversation_id
    assert second.reply.text == first.reply.text
    assert second.reply.stats.cached_tokens == 0


def test_switching_model_keeps_the_conversation(chat: ChatService, gemma_path: Path) -> None:
    first = chat.send("My name is Ada. What is the capital of France?", GREEDY).future.result()
    chat.load_model(gemma_path).result()
    second = chat.send("What is my name?", GREEDY).future.result()
    assert second.conversation_id == first.conversation_id
    # The whole history went into the new model's prompt, in its own turn format.
    assert second.reply.stats.prompt_tokens > 25
    messages = chat.store.messages(first.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[-1].stats is not None
    assert messages[-1].stats["model"] != messages[1].stats["model"]  # type: ignore[index]


def test_regenerate_and_edit_replace_the_last_turn(chat: ChatService, reference: Reference,
                                                   smollm2_path: Path) -> None:
    chat.send("Name a color.", Sampling(temperature=1.0, max_tokens=12, seed=1)).future.result()
    regenerated = chat.regenerate(Sampling(temperature=1.0, max_tokens=12, seed=2)).future.result()
    conversation_id = regenerated.conversation_id
    messages = chat.store.messages(conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].text == regenerated.reply.text
    edited = chat.edit_last(PROBE, GREEDY).future.result()
    messages = chat.store.messages(conversation_id)
    assert [m.text for m in messages] == [PROBE, edited.reply.text]
    # The model was asked the edited question alone: the prompt a new chat would build.
    assert edited.reply.stats.prompt_tokens == len(
        reference.prompt_tokens(smollm2_path, PROBE, GREEDY))
    assert edited.reply.text.strip() and edited.reply.stats.finish_reason in {"stop", "length"}


def test_a_full_context_drops_the_oldest_turns(smollm2_path: Path) -> None:
    # Bookkeeping, not words: on the scripted engine (a token per character). The real
    # models' contexts are filled in test_engine.py and test_hostile_input.py.
    engine = ScriptedEngine()
    store = Store()
    try:
        engine.load(smollm2_path, LoadOptions(n_ctx=1024)).result()
        chat = ChatService(engine, store)
        sampling = Sampling(temperature=0.0, max_tokens=40, seed=1)
        results = []
        for i in range(12):
            text = f"Fact {i}: " + "the quick brown fox jumps over the lazy dog. " * 4
            results.append(chat.send(text, sampling).future.result())
        dropped = [r.reply.stats.dropped_turns for r in results]
        assert dropped[0] == 0 and dropped[-1] > 0
        assert dropped == sorted(dropped), "turns once dropped stay dropped"
        assert all(r.reply.text.strip() for r in results)
        # After a drop, the next turns reuse the new prefix instead of starting over.
        assert any(r.reply.stats.cached_tokens > 100 for r in results[-4:])
        # Nothing is deleted from the conversation itself.
        assert len(store.messages(results[0].conversation_id)) == 24
        with pytest.raises(PromptTooLong, match="too long"):
            chat.send("word " * 1000, sampling).future.result()
    finally:
        engine.close()
        store.close()


@pytest.mark.slow
def test_kill_9_mid_reply_keeps_the_text_so_far(smollm2_path: Path) -> None:
    # A chat model: a base model's reply would end at its first blank line.
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "chat", "--json", "--model", str(smollm2_path),
         "--temperature", "0.8", "--seed", "7", "--max-tokens", "3000",
         "Write a very long story about a lighthouse keeper."],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=dict(os.environ))
    assert process.stdout is not None
    deltas: list[str] = []
    long_at = 0.0
    for line in process.stdout:
        event = json.loads(line)
        if event["event"] == "delta":
            deltas.append(event["text"])
            if not long_at and len("".join(deltas)) > 100:
                long_at = time.monotonic()
            # Long enough, however slowly it came, for the growing reply to have been
            # saved a few times since it was more than a word.
            if long_at and time.monotonic() - long_at > 4 * SAVE_INTERVAL_S:
                break
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    streamed = "".join(deltas)
    connection = sqlite3.connect(paths.database_path())
    assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    connection.close()
    store = Store()
    try:
        conversation = store.list_conversations()[0]
        reply = store.messages(conversation.id)[-1]
        assert reply.role == "assistant" and not reply.complete
        assert len(reply.text) > 10 and streamed.startswith(reply.text)
    finally:
        store.close()
