"""Fast hands on the real chat service: random sequences of everything a user can do.

Hypothesis drives ChatService with the real SmolLM2 and Gemma 3 models, real broken
files and a real SQLite store, and after every step checks what a user would notice:
nothing crashes or hangs, no reply lands in another conversation, a failed model switch
leaves the previous model answering, the store holds exactly what the service reported,
and a new chat answers exactly like a freshly started process.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from app.core.conversations.chat import ChatResult, ChatService, ChatTurn
from app.core.conversations.store import Store
from app.core.llama.engine import Engine, EngineError, ModelLoadError, Sampling
from tests.core.helpers import PROBE, fresh_process_reply
from tests.scripted_engine import ScriptedEngine
from tests.streams import Taker

T = TypeVar("T")
BOUND_S = 120  # an action that takes longer than this is a deadlock
PROBE_TOKENS = 8
PROBE_SAMPLING = Sampling(temperature=0.0, seed=1, max_tokens=PROBE_TOKENS)
TEXTS = ["Hi!", "Name a colour.", "2+2?", "Say yes.", "NUL \x00 here", "שלום עולם?",
         "zero\u200bwidth\u200djoin", "lone \ud800 surrogate", "emoji 🙂👍🏽"]


def _within_bound(future: Future[T]) -> T:
    try:
        return future.result(timeout=BOUND_S)
    except FutureTimeout:
        pytest.fail(f"no answer within {BOUND_S} s: deadlock")


class ChatMachine(RuleBasedStateMachine):
    conversations = Bundle("conversations")

    def __init__(self, models: dict[str, Path], broken: list[Path],
                 fresh: dict[str, str], engine: Callable[[], Any] = Engine) -> None:
        super().__init__()
        self.models = models
        self.broken = broken
        self.fresh = fresh  # the probe's reply from a brand-new process, per model
        self.folder = Path(tempfile.mkdtemp(prefix="fireside-machine-"))
        self.engine = engine()
        self.store = Store(self.folder / "conversations.sqlite3")
        self.chat = ChatService(self.engine, self.store)
        self.sampling = Sampling(temperature=0.7, max_tokens=8, seed=3)
        self.model_key = ""
        self.expected: dict[int, list[tuple[str, str]]] = {}  # what the service reported
        self.titles: dict[int, str] = {}

    def teardown(self) -> None:
        assert self.engine.close(timeout=10), "the inference thread did not finish"
        self.store.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    # Helpers ------------------------------------------------------------------------

    def _model_name(self) -> str:
        loaded = self.chat.model
        assert loaded is not None, "no model is loaded: a half-done switch"
        return loaded.name

    def _finish(self, turn: ChatTurn, open_before: int | None) -> ChatResult:
        result = _within_bound(turn.future)
        assert result.saved and result.save_error is None
        assert result.conversation_id == self.chat.conversation_id
        if open_before is not None:
            assert result.conversation_id == open_before, "reply in the wrong conversation"
        return result

    def _record(self, result: ChatResult, question: str | None) -> int:
        turns = self.expected.setdefault(result.conversation_id, [])
        if question is not None:
            turns.append(("user", question))
        turns.append(("assistant", result.reply.text))
        return result.conversation_id

    # Rules --------------------------------------------------------------------------

    @initialize(key=st.sampled_from(["smollm2", "gemma"]))
    def load_first_model(self, key: str) -> None:
        _within_bound(self.chat.load_model(self.models[key]))
        self.model_key = key

    @rule(target=conversations, text=st.sampled_from(TEXTS))
    def send(self, text: str) -> int:
        open_before = self.chat.conversation_id
        turn = self.chat.send(text, self.sampling)
        taker = Taker(turn.pieces)
        result = self._finish(turn, open_before)
        assert taker.wait().answer == result.reply.text
        return self._record(result, text)

    @rule()
    def new_chat_answers_like_a_fresh_process(self) -> None:
        _within_bound(self.chat.new_chat())
        assert self.chat.conversation_id is None
        result = self._finish(self.chat.send(PROBE, PROBE_SAMPLING), None)
        self._record(result, PROBE)
        assert result.reply.text == self.fresh[self.model_key], \
            "a new chat is not the same as a fresh start"

    @rule(key=st.sampled_from(["smollm2", "gemma"]))
    def switch_model(self, key: str) -> None:
        _within_bound(self.chat.load_model(self.models[key]))
        self.model_key = key

    @rule(target=conversations, text=st.sampled_from(TEXTS))
    def send_and_stop_from_another_thread(self, text: str) -> int:
        open_before = self.chat.conversation_id
        turn = self.chat.send(text, Sampling(temperature=1.0, max_tokens=200, seed=5))
        # Stopped once its first piece has come.
        stopper = threading.Thread(target=lambda: (turn.pieces.wait(BOUND_S), turn.stop()))
        stopper.start()
        result = self._finish(turn, open_before)
        stopper.join(BOUND_S)
        assert result.reply.stats.tokens < 200 or not result.reply.stats.stopped
        return self._record(result, text)

    @rule(index=st.integers(0, 1))
    def switch_to_a_broken_file(self, index: int) -> None:
        before = self._model_name()
        with pytest.raises(ModelLoadError):
            _within_bound(self.chat.load_model(self.broken[index]))
        assert self._model_name() == before  # the previous model is still loaded...
        answer = _within_bound(self.chat.engine.tokenize("still here?"))
        assert answer  # ...and still works

    @precondition(lambda self: self.chat.conversation_id is not None)
    @rule()
    def regenerate(self) -> None:
        conversation_id = self.chat.conversation_id
        assert conversation_id is not None
        turns = self.expected[conversation_id]
        if turns and turns[-1][0] == "assistant":
            turns.pop()
        result = self._finish(self.chat.regenerate(self.sampling), conversation_id)
        self._record(result, None)

    @precondition(lambda self: self.chat.conversation_id is not None)
    @rule(text=st.sampled_from(TEXTS))
    def edit_last_and_resend(self, text: str) -> None:
        conversation_id = self.chat.conversation_id
        assert conversation_id is not None
        turns = self.expected[conversation_id]
        users = [i for i, (role, _) in enumerate(turns) if role == "user"]
        if users:
            del turns[users[-1]:]
        result = self._finish(self.chat.edit_last(text, self.sampling), conversation_id)
        self._record(result, text)

    @precondition(lambda self: self.chat.conversation_id is None)
    @rule()
    def continue_without_a_conversation_is_refused(self) -> None:
        with pytest.raises(EngineError, match="no conversation"):
            self.chat.regenerate(self.sampling)

    @rule(conversation_id=conversations)
    def open(self, conversation_id: int) -> None:
        if conversation_id not in self.expected:
            assert self.store.get_conversation(conversation_id) is None
            return
        history = self.chat.open(conversation_id)
        assert [(m.role, m.text) for m in history] == self.expected[conversation_id]

    @rule(conversation_id=conversations, title=st.sampled_from([*TEXTS, "../../x", "CON"]))
    def rename(self, conversation_id: int, title: str) -> None:
        if conversation_id in self.expected:
            self.store.rename_conversation(conversation_id, title)
            self.titles[conversation_id] = title

    @rule(conversation_id=consumes(conversations))
    def delete(self, conversation_id: int) -> None:
        if conversation_id not in self.expected:
            return
        self.store.delete_conversation(conversation_id)
        del self.expected[conversation_id]
        if self.chat.conversation_id == conversation_id:  # as the window does
            _within_bound(self.chat.new_chat())

    @rule(temperature=st.sampled_from([0.0, 0.5, 1.3]), top_k=st.sampled_from([0, 1, 40]),
          top_p=st.sampled_from([0.5, 1.0]), max_tokens=st.integers(1, 12),
          seed=st.none() | st.integers(0, 2**31 - 1))
    def change_sampling(self, temperature: float, top_k: int, top_p: float,
                        max_tokens: int, seed: int | None) -> None:
        self.sampling = Sampling(temperature=temperature, top_k=top_k, top_p=top_p,
                                 max_tokens=max_tokens, seed=seed)

    # Invariants ---------------------------------------------------------------------

    @invariant()
    def a_model_is_always_loaded(self) -> None:
        if self.model_key:
            assert self.engine.loaded is not None
            assert self.engine.loaded.path == self.models[self.model_key]

    @invariant()
    def the_store_holds_what_the_service_reported(self) -> None:
        listed = {c.id for c in self.store.list_conversations()}
        assert listed == set(self.expected)
        for conversation_id, turns in self.expected.items():
            stored = self.store.messages(conversation_id)
            assert [(m.role, m.text) for m in stored] == turns
            assert all(m.complete for m in stored)
        for conversation_id, title in self.titles.items():
            if conversation_id in self.expected:
                conversation = self.store.get_conversation(conversation_id)
                assert conversation is not None and conversation.title == title
        assert self.chat.unsaved == 0


@pytest.fixture(scope="session")
def fresh_replies(smollm2_path: Path, gemma_path: Path) -> dict[str, str]:
    """The probe's greedy reply from a brand-new `fireside chat` process, per model."""
    return {key: fresh_process_reply(path, PROBE, max_tokens=PROBE_TOKENS)
            for key, path in (("smollm2", smollm2_path), ("gemma", gemma_path))}


def _scripted_fresh_replies(models: dict[str, Path]) -> dict[str, str]:
    """The probe's reply from a brand-new scripted engine and store, per model."""
    replies = {}
    for key, path in models.items():
        engine = ScriptedEngine()
        store = Store()
        try:
            engine.load(path).result(BOUND_S)
            turn = ChatService(engine, store).send(PROBE, PROBE_SAMPLING)
            replies[key] = turn.future.result(BOUND_S).reply.text
        finally:
            engine.close()
            store.close()
    return replies


def _broken_files(folder: Path, smollm2_path: Path) -> list[Path]:
    truncated = folder / "truncated.gguf"
    with smollm2_path.open("rb") as source:
        truncated.write_bytes(source.read(smollm2_path.stat().st_size // 2))
    not_gguf = folder / "notes.gguf"
    not_gguf.write_text("just some notes, not a model\n" * 100)
    return [truncated, not_gguf]


def test_thousands_of_sequences_keep_the_chat_sound(smollm2_path: Path, gemma_path: Path,
                                                    tmp_path: Path) -> None:
    """The same machine on the scripted engine: order and bookkeeping, many times over."""
    models = {"smollm2": smollm2_path, "gemma": gemma_path}
    broken = _broken_files(tmp_path, smollm2_path)
    fresh = _scripted_fresh_replies(models)
    run_state_machine_as_test(
        lambda: ChatMachine(models, broken, fresh, ScriptedEngine),
        settings=settings(max_examples=300, stateful_step_count=25, deadline=None,
                          database=None, suppress_health_check=list(HealthCheck)))


@pytest.mark.slow
def test_any_sequence_of_actions_keeps_the_chat_sound(
        smollm2_path: Path, gemma_path: Path, fresh_replies: dict[str, str],
        tmp_path: Path) -> None:
    models = {"smollm2": smollm2_path, "gemma": gemma_path}
    broken = _broken_files(tmp_path, smollm2_path)
    run_state_machine_as_test(
        lambda: ChatMachine(models, broken, fresh_replies),
        settings=settings(max_examples=15, stateful_step_count=10, deadline=None,
                          derandomize=True, database=None,
                          suppress_health_check=list(HealthCheck)))


