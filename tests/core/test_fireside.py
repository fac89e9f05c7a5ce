"""The core object: one queue of actions on the model's sequence, settings as a face
sets them, a store that survives a refusing disk, and a bounded shutdown.

On the scripted engine (tests/scripted_engine.py): what is tested here is order and
bookkeeping, not a model's words. The same paths on the real models are covered by the
terminal's and the window's tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core import paths, settings
from app.core.backend import LoadCancelled
from app.core.conversations.chat import ChatTurn
from app.core.fireside import Fireside, Rewound, SessionSettings
from app.core.llama import cpu_backends
from tests.core.helpers import fill_disk, small_disk
from tests.scripted_engine import ScriptedEngine

TIMEOUT = 30


@pytest.fixture
def engine() -> ScriptedEngine:
    return ScriptedEngine()


@pytest.fixture
def core(engine: ScriptedEngine, smollm2_path: Path) -> Iterator[Fireside]:
    opened = Fireside.open(engine=engine)
    opened.load(smollm2_path).result(TIMEOUT)
    yield opened
    opened.close()


def reply_text(turn: ChatTurn) -> str:
    return turn.future.result(TIMEOUT).reply.text


def test_a_reply_holds_the_queue_until_it_is_saved(core: Fireside,
                                                   engine: ScriptedEngine) -> None:
    engine.piece_delay_s = 0.02
    first = core.send("Tell me a story.").result(TIMEOUT)
    cleared = core.new_chat()  # queued behind the reply, which it does not stop
    second = core.send("And another.").result(TIMEOUT)
    assert cleared.done()
    result = first.future.result(TIMEOUT)
    assert result.reply.stats.finish_reason != "stopped"
    assert core.store.messages(result.conversation_id)[-1].text == result.reply.text
    assert second.conversation_id != first.conversation_id


def test_a_preempting_action_stops_every_reply_before_it(core: Fireside,
                                                         engine: ScriptedEngine) -> None:
    engine.piece_delay_s = 0.2
    streaming = core.send("A long one.").result(TIMEOUT)
    queued = core.send("Another long one.")  # not started yet
    cleared = core.new_chat(preempt=True)
    cleared.result(TIMEOUT)
    assert streaming.future.result(TIMEOUT).reply.stats.finish_reason == "stopped"
    later = queued.result(TIMEOUT).future.result(TIMEOUT)
    assert later.reply.stats.finish_reason == "stopped" and later.reply.stats.tokens == 0
    assert core.conversation_id is None


def test_a_load_cancelled_while_it_waits_never_starts(core: Fireside, engine: ScriptedEngine,
                                                      smollm2_path: Path,
                                                      gemma_path: Path) -> None:
    engine.piece_delay_s = 0.05
    core.send("Keep the queue busy.")
    switch = core.load(gemma_path)
    core.cancel_load()
    with pytest.raises(LoadCancelled, match="cancelled"):
        switch.result(TIMEOUT)
    assert core.model is not None and core.model.path == smollm2_path
    assert core.settings.last_model == str(smollm2_path)


def test_an_edit_whose_conversation_was_left_is_sent_where_the_user_is(
        core: Fireside) -> None:
    first = core.send("First question.").result(TIMEOUT)
    first_id = first.conversation_id
    reply_text(first)
    core.new_chat().result(TIMEOUT)
    core.send("Another conversation.").result(TIMEOUT).future.result(TIMEOUT)
    other = core.conversation_id
    assert other is not None
    sent = core.edit_last("Edited question.", first_id).result(TIMEOUT)
    assert isinstance(sent, ChatTurn) and sent.conversation_id == other
    sent.future.result(TIMEOUT)
    assert [m.text for m in core.store.messages(first_id)][:1] == ["First question."]
    assert [m.role for m in core.store.messages(other)] == ["user", "assistant"] * 2


def test_an_edit_in_the_open_conversation_rewinds_it(core: Fireside) -> None:
    reply_text(core.send("Question one.").result(TIMEOUT))
    reply_text(core.send("Question two.").result(TIMEOUT))
    conversation_id = core.conversation_id
    assert conversation_id is not None
    rewound = core.edit_last("Question two, better.", conversation_id).result(TIMEOUT)
    assert isinstance(rewound, Rewound)
    assert [m.text for m in rewound.before][:1] == ["Question one."]
    assert len(rewound.before) == 2
    answer = reply_text(rewound.turn)
    texts = [m.text for m in core.store.messages(conversation_id)]
    assert texts[2:] == ["Question two, better.", answer]


def test_session_settings_beat_the_saved_and_the_models_own(core: Fireside,
                                                           smollm2_path: Path) -> None:
    core.settings.max_tokens = 50
    core.settings.set_model_value(smollm2_path, "max_tokens", 40)
    core.session = SessionSettings(n_ctx=1024, sampling={"max_tokens": 2, "top_k": None},
                                   system_prompt="Be brief.")
    assert core.sampling().max_tokens == 2 and core.sampling().top_k == 40
    assert core.system_prompt() == "Be brief."
    assert core.load_options(smollm2_path).n_ctx == 1024
    result = core.send("Say many words.").result(TIMEOUT).future.result(TIMEOUT)
    assert result.reply.stats.tokens <= 2
    conversation = core.conversation()
    assert conversation is not None and conversation.settings["system_prompt"] == "Be brief."


def test_leaving_mid_reply_stops_it_and_keeps_the_text_so_far(
        engine: ScriptedEngine, smollm2_path: Path) -> None:
    core = Fireside.open(engine=engine)
    core.load(smollm2_path).result(TIMEOUT)
    engine.piece_delay_s = 0.5
    turn = core.send("A story that takes a while.").result(TIMEOUT)
    queued = core.new_chat()
    assert turn.pieces.wait(TIMEOUT), "the first word is out"
    # Left mid-reply: close stops the reply rather than waiting for its end (the thread
    # join is only a guard against a close that never returns).
    closing = threading.Thread(target=core.close)
    closing.start()
    closing.join(TIMEOUT)
    assert not closing.is_alive()
    result = turn.future.result(TIMEOUT)
    assert result.reply.stats.stopped and result.reply.text
    assert queued.cancelled() or queued.exception(TIMEOUT) is not None
    reopened = Fireside.open(engine=ScriptedEngine())
    try:
        (_question, answer) = reopened.store.messages(result.conversation_id)
        assert answer.text == result.reply.text and answer.complete
    finally:
        reopened.close()


def test_leaving_while_the_reply_cannot_stop_in_time_keeps_its_text_as_stopped(
        engine: ScriptedEngine, smollm2_path: Path) -> None:
    core = Fireside.open(engine=engine)
    core.load(smollm2_path).result(TIMEOUT)
    engine.stalled = threading.Event()
    turn = core.send("A story on a busy machine.").result(TIMEOUT)
    assert turn.pieces.wait(TIMEOUT), "the first word is out"
    first_word = turn.pieces.take().answer
    try:
        core.close()  # gives up on the reply after its bound: it never ended
    finally:
        engine.stalled.set()
    assert not turn.future.done()
    reopened = Fireside.open(engine=ScriptedEngine())
    try:
        (question, answer) = reopened.store.messages(turn.conversation_id)
        assert question.text == "A story on a busy machine."
        assert answer.text == first_word and answer.complete
        assert answer.stats["finish_reason"] == "stopped"
    finally:
        reopened.close()


def test_a_database_that_cannot_be_opened_gives_one_in_memory(smollm2_path: Path) -> None:
    paths.database_path().mkdir(parents=True)  # a folder where the file should be
    core = Fireside.open(engine=ScriptedEngine())
    try:
        assert core.store_error is not None
        core.load(smollm2_path).result(TIMEOUT)
        result = core.send("Still answered?").result(TIMEOUT).future.result(TIMEOUT)
        assert result.reply.text and result.saved  # in memory, for this session
    finally:
        core.close()


def test_deleting_the_open_conversation_starts_a_new_chat_and_can_be_undone(
        core: Fireside) -> None:
    reply_text(core.send("Keep me.").result(TIMEOUT))
    conversation_id = core.conversation_id
    assert conversation_id is not None
    deleted = core.delete_conversation(conversation_id).result(TIMEOUT)
    assert deleted is not None and deleted.title == "Keep me."
    assert core.conversation_id is None and core.conversations() == []
    core.undelete_conversation(conversation_id)
    assert [c.id for c in core.conversations()] == [conversation_id]
    assert core.open_conversation(conversation_id + 1000).result(TIMEOUT) is None


def test_the_window_reopens_the_conversation_it_left_and_the_terminal_moves_nothing(
        core: Fireside) -> None:
    reply_text(core.send("From a terminal.").result(TIMEOUT))
    assert settings.load().settings.open_conversation is None  # not the window's to reopen
    core.session = SessionSettings(remember_open=True)  # the window's session
    reply_text(core.send("From the window.").result(TIMEOUT))
    assert settings.load().settings.open_conversation == core.conversation_id is not None
    core.new_chat().result(TIMEOUT)
    assert settings.load().settings.open_conversation is None


def test_a_conversation_the_disk_refused_has_no_id_until_it_is_saved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, smollm2_path: Path) -> None:
    with small_disk(tmp_path / "small") as folder:
        monkeypatch.setenv("FIRESIDE_DATA_DIR", str(folder))
        core = Fireside.open(engine=ScriptedEngine())
        try:
            core.session = SessionSettings(remember_open=True)
            core.load(smollm2_path).result(TIMEOUT)
            filler = fill_disk(folder)
            reply_text(core.send("Held in memory.").result(TIMEOUT))
            assert core.conversation_id is None and core.conversation() is None
            assert [m.text for m in core.history()][:1] == ["Held in memory."]
            rewound = core.regenerate().result(TIMEOUT)
            assert rewound is not None and rewound.conversation_id is None
            reply_text(rewound.turn)
            filler.unlink()
            reply_text(core.send("Room again.").result(TIMEOUT))
            saved = core.conversation_id
            assert saved is not None and saved > 0
            assert [m.text for m in core.store.messages(saved)][::2] == \
                ["Held in memory.", "Room again."]
            assert core.settings.open_conversation == saved
        finally:
            core.close()


def test_the_start_model_is_the_users_default_else_the_best_one_found(
        core: Fireside, gemma_path: Path, smollm2_path: Path) -> None:
    best = core.startup_model()
    assert best is not None and best == core.library.choose(None)
    core.settings.default_model = str(gemma_path)
    assert core.startup_model() == gemma_path
    core.settings.default_model = str(gemma_path.with_name("gone.gguf"))
    assert core.startup_model() == best
    core.settings.default_model, core.settings.last_model = None, str(gemma_path)
    assert core.startup_model() == gemma_path  # none set: the last one used
    assert core.startup_model(str(smollm2_path)) == smollm2_path  # one named wins


def test_the_library_finds_the_bundled_models(core: Fireside, smollm2_path: Path) -> None:
    assert smollm2_path in {e.path for e in core.library.entries}
    assert core.library.choose(None) == smollm2_path
    with pytest.raises(LookupError, match="No model called"):
        core.library.choose("no-such-model")


@pytest.mark.model  # the bundled model, found as the app finds it
def test_the_face_in_the_readme_runs(tmp_path: Path) -> None:
    """The README's whole face, run as a user would, on the real bundled model."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    marker = readme.index("<!-- a whole face")
    start = readme.index("```python\n", marker) + len("```python\n")
    code = readme[start:readme.index("\n```", start)]
    face = tmp_path / "face.py"
    face.write_text(code, encoding="utf-8")
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, str(face)], input="Hello!\n/new\nName a fruit.\n",
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "is ready" in done.stderr
    endings = [line for line in done.stdout.splitlines() if line.startswith("[")]
    assert len(endings) == 2 and all(" tokens, " in line for line in endings), done.stdout
    core = Fireside.open(engine=ScriptedEngine())
    try:
        assert len(core.conversations()) == 2  # /new started a second one
    finally:
        core.close()


def test_a_cpu_level_passed_over_is_told_at_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    passed_over = [{"variant": "sapphirerapids", "ending": "SIGSEGV"}]
    monkeypatch.setattr(cpu_backends, "_checked_now", cpu_backends.Choice("zen4", passed_over))
    core = Fireside.open(engine=ScriptedEngine())
    try:
        assert any("sapphirerapids (SIGSEGV)" in notice and "zen4" in notice
                   for notice in core.notices), core.notices
    finally:
        core.close()
