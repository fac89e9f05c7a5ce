"""A conversation's tool calls in the core: asked, run by a real MCP server
(tests/mcp_server.py), stored, bounded. The model is the scripted engine, told which
calls to make: what is tested here does not depend on a model's words (the real models
call the same server in tests/cli/test_tools.py and tests/ui/test_tool_calls.py)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from app.core.conversations.chat import ALLOW_ONCE, DENY, ToolHooks
from app.core.conversations.store import Store
from app.core.fireside import Fireside, SessionSettings
from app.core.reply.replies import ToolCall, ToolRun
from tests.mcp_server import tools_ran
from tests.scripted_engine import ScriptedEngine

SERVER = Path(__file__).resolve().parents[1] / "mcp_server.py"
TIMEOUT = 60


@pytest.fixture
def core(smollm2_path: Path, tmp_path: Path) -> Iterator[Fireside]:
    opened = Fireside.open(engine=ScriptedEngine())
    # The scripted engine's tokens are characters: room for the tools' descriptions.
    opened.session = SessionSettings(n_ctx=32_768, sampling={"max_tokens": 64})
    opened.settings.mcp_servers = {"test": {
        "command": sys.executable, "args": [str(SERVER)],
        "env": {"FIRESIDE_TEST_TOOL_LOG": str(tmp_path / "ran.log")}}}
    opened.load(smollm2_path).result(TIMEOUT)
    yield opened
    opened.close()


def ran(tmp_path: Path) -> list[str]:
    return tools_ran(tmp_path / "ran.log")


def engine(core: Fireside) -> ScriptedEngine:
    backend = core.engine.local  # type: ignore[attr-defined]
    assert isinstance(backend, ScriptedEngine)
    return backend


class Person:
    """The face's part: answers every question with ``answer``; sees each change."""

    def __init__(self, answer: str = ALLOW_ONCE) -> None:
        self.answer = answer
        self.asked: list[ToolRun] = []
        self.seen: list[ToolRun] = []

    def hooks(self) -> ToolHooks:
        def ask(run: ToolRun) -> Future[str]:
            self.asked.append(run)
            future: Future[str] = Future()
            if self.answer:
                future.set_result(self.answer)
            return future

        return ToolHooks(ask, self.seen.append)


def calls_of(store: Store, conversation_id: int) -> list[list[tuple[str, str]]]:
    return [[(r.call.name, r.status) for r in m.calls]
            for m in store.messages(conversation_id) if m.role == "assistant"]


def test_a_model_that_repeats_a_call_is_told_and_the_tool_runs_once(
        core: Fireside, tmp_path: Path) -> None:
    engine(core).calls = lambda n: [ToolCall("ping", "{}")]
    person = Person()
    turn = core.send("Check the service.", tools=person.hooks()).result(TIMEOUT)
    result = turn.future.result(TIMEOUT)
    assert ran(tmp_path) == ["ping"]
    assert calls_of(core.store, result.conversation_id) == [
        [("ping", "done")], [("ping", "done")], []], "a loop is cut, then the model answers"
    repeated = core.store.messages(result.conversation_id)[2].calls[0]
    assert repeated.result.startswith("pong") and "not run again" in repeated.result
    assert len(person.asked) == 1, "the repeat was not asked about: it did not run"


def test_calls_per_reply_stop_at_the_bound_and_the_model_then_answers(
        core: Fireside, tmp_path: Path) -> None:
    core.settings.max_tool_calls = 3
    engine(core).calls = lambda n: [ToolCall("add", json.dumps({"a": n, "b": 1}))]
    turn = core.send("Count.", tools=Person().hooks()).result(TIMEOUT)
    result = turn.future.result(TIMEOUT)
    assert ran(tmp_path) == ["add"] * 3
    assert calls_of(core.store, result.conversation_id) == [[("add", "done")]] * 3 + [[]]
    assert result.reply.text and not result.reply.tool_calls
    results = [m.calls[0].result for m in core.store.messages(result.conversation_id)
               if m.calls]
    assert results == ["2", "3", "4"], "each result went back to the model in its own step"


def test_a_denied_call_never_runs_and_the_model_is_told(core: Fireside,
                                                        tmp_path: Path) -> None:
    engine(core).calls = lambda n: [ToolCall("add", '{"a": 1, "b": 2}')] if n == 1 else []
    turn = core.send("Add.", tools=Person(DENY).hooks()).result(TIMEOUT)
    result = turn.future.result(TIMEOUT)
    assert ran(tmp_path) == []
    (denied,) = core.store.messages(result.conversation_id)[1].calls
    assert denied.status == "denied" and "did not allow" in denied.result


def test_stop_cancels_a_running_call_and_ends_the_turn(core: Fireside,
                                                       tmp_path: Path) -> None:
    engine(core).calls = lambda n: [ToolCall("hang", "{}")]
    person = Person()
    turn = core.send("Look it up.", tools=person.hooks()).result(TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while "hang" not in ran(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    core.stop()
    # hang answers after 600 s: a turn that ends within TIMEOUT was cut short by the stop.
    result = turn.future.result(TIMEOUT)
    assert [r.status for r in person.seen][-1] == "stopped"
    assert calls_of(core.store, result.conversation_id) == [[("hang", "stopped")]], \
        "no reply follows a stopped call"


def test_without_a_face_to_ask_or_with_tools_off_no_tool_is_offered(
        core: Fireside, tmp_path: Path) -> None:
    engine(core).calls = lambda n: [ToolCall("ping", "{}")]
    plain = core.send("Hello.").result(TIMEOUT).future.result(TIMEOUT)
    assert not plain.reply.tool_calls
    core.set_tools_on(False)
    off = core.send("Again.", tools=Person().hooks()).result(TIMEOUT).future.result(TIMEOUT)
    assert not off.reply.tool_calls and ran(tmp_path) == []
    assert core.conversation() is not None and core.tools_on is False


def test_a_server_entry_that_cannot_be_used_costs_only_itself(core: Fireside,
                                                               tmp_path: Path) -> None:
    core.settings.mcp_servers["broken"] = {"args": ["no command"]}
    names = [t.name for t in core.toolbox.tools()]
    assert "add" in names
    (problem,) = core.toolbox.take_problems()
    assert "'broken'" in problem and "command or a url" in problem
    assert core.toolbox.take_problems() == [], "each problem is told once"


def test_always_allowing_a_terminal_sessions_server_lasts_for_that_session(
        core: Fireside) -> None:
    core.toolbox.session_servers = dict(core.settings.mcp_servers)
    core.toolbox.allow_always("test", "add")
    assert core.toolbox.always_allowed("test", "add")
    assert core.settings.always_allowed_tools == [], \
        "a --tools file's server may share a name with another program in the window"


def test_a_long_output_reaches_the_model_within_the_cap_with_a_note(core: Fireside) -> None:
    engine(core).calls = lambda n: [ToolCall("flood", '{"n": 40000}')] if n == 1 else []
    turn = core.send("Fetch it all.", tools=Person().hooks()).result(TIMEOUT)
    result = turn.future.result(TIMEOUT)
    (run,) = core.store.messages(result.conversation_id)[1].calls
    kept, note = run.result.rsplit("\n", 1)
    assert kept == "x" * 16_000 and "24,000 more characters" in note
