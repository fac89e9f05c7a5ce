"""`fireside chat --tools`: the model calls the tools of a real MCP server (tests/mcp_server.py,
written with the official SDK), each call allowed or not, shown as JSON events, stored
with the conversation."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from app.core import settings
from tests.cli.test_commands import events, fireside
from tests.core.helpers import sigint_not_ignored
from tests.mcp_server import over_http, tools_ran

SERVER = Path(__file__).resolve().parents[1] / "mcp_server.py"
ADD = "Use the add tool to add 17 and 25, then tell me the sum."
ADD_SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"},
                                               "b": {"type": "integer"}},
              "required": ["a", "b"]}


@pytest.fixture
def mcp_json(tmp_path: Path) -> Path:
    """The mcpServers file a user would write, and a log of the tools that really ran
    (the SDK hands a server only the variables its entry names)."""
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"test": {
        "command": sys.executable, "args": [str(SERVER)],
        "env": {"FIRESIDE_TEST_TOOL_LOG": str(tmp_path / "ran.log")}}}}), encoding="utf-8")
    return path


def ran(mcp_json: Path) -> list[str]:
    return tools_ran(mcp_json.parent / "ran.log")


def chat(model: Path, mcp_json: Path, *args: str) -> list[dict[str, Any]]:
    result = fireside("chat", "--json", "--model", str(model), "--tools", str(mcp_json),
                      "--temperature", "0", "--max-tokens", "64", *args)
    assert result.returncode == 0, result.stderr
    return events(result.stdout)


def of(found: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in found if e["event"] == name]


@pytest.mark.parametrize("model", ["smollm2_path", "gemma_path"])
def test_an_allowed_call_runs_and_its_result_goes_back_to_the_model(
        model: str, mcp_json: Path, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(model)
    found = chat(path, mcp_json, "--allow-tools", "--tool-choice", "add", ADD)
    (call, *_), (result, *_) = of(found, "tool_call"), of(found, "tool_result")
    assert call["name"] == "add" and call["server"] == "test"
    jsonschema.validate(call["arguments"], ADD_SCHEMA)
    expected = str(call["arguments"]["a"] + call["arguments"]["b"])
    assert result == {"event": "tool_result", "id": call["id"], "name": "add",
                      "status": "done", "output": expected}
    assert "add" in ran(mcp_json)
    assert of(found, "reply"), "the model answers after the result"

    exported = json.loads(fireside("export", "--format", "json", "--all").stdout)
    (conversation,) = exported["conversations"]
    calling = conversation["messages"][1]
    assert [(c["name"], c["status"], c["result"]) for c in calling["tool_calls"]] == [
        ("add", "done", expected)], "the call and its result are kept with the conversation"
    assert len(conversation["messages"]) >= 3, "the answer after the call is stored too"


def test_the_tools_result_goes_back_into_the_models_prompt(smollm2_path: Path,
                                                           mcp_json: Path) -> None:
    """Whatever the model then writes: the answer's prompt holds the result, sixty lines
    of manual (hundreds of tokens) where ping gave one word. Both calls take no
    arguments, so the two prompts differ by the result alone."""
    def answer_after(tool: str) -> tuple[str, dict[str, Any]]:
        found = chat(smollm2_path, mcp_json, "--allow-tools", "--tool-choice", tool,
                     "Use the tool.")
        (result,) = of(found, "tool_result")
        return result["output"], of(found, "reply")[-1]

    manual, after_manual = answer_after("manual")
    pong, after_ping = answer_after("ping")
    assert pong == "pong" and len(manual.splitlines()) == 60
    assert after_manual["prompt_tokens"] - after_ping["prompt_tokens"] > 300


def test_without_a_person_to_ask_a_call_is_denied_and_the_tool_never_runs(
        smollm2_path: Path, mcp_json: Path) -> None:
    found = chat(smollm2_path, mcp_json, "--tool-choice", "add", ADD)
    (result, *_) = of(found, "tool_result")
    assert result["status"] == "denied" and "did not allow" in result["output"]
    assert any("--allow-tools" in e["message"] for e in of(found, "notice"))
    assert ran(mcp_json) == []
    assert of(found, "reply")


def test_a_tool_that_crashes_its_server_is_named_and_the_chat_goes_on(
        smollm2_path: Path, mcp_json: Path) -> None:
    result = fireside("chat", "--json", "--model", str(smollm2_path), "--tools", str(mcp_json),
                      "--allow-tools", "--tool-choice", "crash", "--temperature", "0",
                      "--max-tokens", "32", stdin="Crash the service.\nSay hello.\n")
    assert result.returncode == 0, result.stderr
    found = events(result.stdout)
    crashed = of(found, "tool_result")[0]
    assert crashed["status"] == "failed" and "has stopped during the call of crash" \
        in crashed["output"]
    assert len(of(found, "reply")) == 2, "the second message is answered too"


def test_bad_tool_options_are_refused_with_the_reason(smollm2_path: Path, mcp_json: Path,
                                                      tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"mcpServers": {"x": {"args": ["a"]}}}', encoding="utf-8")
    for args, reason in (
            (["--tools", str(broken)], "needs either a command or a url"),
            (["--tools", str(tmp_path / "missing.json")], "missing.json"),
            (["--tools", str(mcp_json), "--tool-choice", "nosuch"], "no tool has that name"),
            (["--allow-tools"], "go with --tools")):
        result = fireside("chat", "--json", "--model", str(smollm2_path), *args, "Hi")
        assert result.returncode == 2
        (error,) = of(events(result.stdout), "error")
        assert reason in error["message"]


def test_a_call_past_its_time_limit_is_cancelled_and_the_model_told(
        smollm2_path: Path, mcp_json: Path) -> None:
    prefs = settings.load().settings
    prefs.tool_timeout_s = 2
    settings.save(prefs)
    found = chat(smollm2_path, mcp_json, "--allow-tools", "--tool-choice", "hang",
                 "Look it up.")
    (result, *_) = of(found, "tool_result")
    # Cancelled at its bound: hang answers only after ten minutes.
    assert result["status"] == "failed" and "took longer than 2 s" in result["output"]
    assert "hang" in ran(mcp_json)  # it was running on the server
    assert of(found, "reply")


def test_ctrl_c_stops_a_running_call_and_keeps_the_session(smollm2_path: Path,
                                                           mcp_json: Path) -> None:
    sigint_not_ignored()
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "chat", "--json", "--model", str(smollm2_path),
         "--tools", str(mcp_json), "--allow-tools", "--tool-choice", "hang",
         "--max-tokens", "64"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, env=dict(os.environ))
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("Look it up.\n")
    process.stdin.flush()
    for line in process.stdout:
        event = json.loads(line)["event"]
        assert event != "reply", "the model was to call hang"
        if event == "tool_call":
            break
    deadline = time.monotonic() + 30
    while "hang" not in ran(mcp_json) and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    found = []
    for line in process.stdout:
        found.append(json.loads(line))
        if found[-1]["event"] == "reply":
            break
    # Stopped, not failed at the call's 60 s bound (nor done: hang takes ten minutes).
    (result,) = of(found, "tool_result")
    assert result["status"] == "stopped"
    process.stdin.write("/quit\n")
    process.stdin.flush()
    assert process.wait(timeout=30) == 0


def test_a_server_that_cannot_start_is_named_and_the_others_serve(
        smollm2_path: Path, mcp_json: Path) -> None:
    config = json.loads(mcp_json.read_text(encoding="utf-8"))
    config["mcpServers"]["nowhere"] = {"command": "/no/such/server"}
    mcp_json.write_text(json.dumps(config), encoding="utf-8")
    found = chat(smollm2_path, mcp_json, "--allow-tools", "--tool-choice", "add", ADD)
    assert any("'nowhere'" in e["message"] for e in of(found, "notice"))
    assert of(found, "tool_result")[0]["status"] == "done"


class Terminal:
    """`fireside chat` on a pseudo-terminal, as a person at the keyboard runs it."""

    def __init__(self, *args: str) -> None:
        import pty  # POSIX only, as this test

        self.master, slave = pty.openpty()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app", "chat", *args], stdin=slave, stdout=slave,
            stderr=slave, env=dict(os.environ), close_fds=True)
        os.close(slave)
        self.seen = ""

    def wait_for(self, text: str, since: int = 0, timeout: float = 120) -> None:
        """Until ``text`` shows, after the first ``since`` characters of the session."""
        import select

        deadline = time.monotonic() + timeout
        while text not in self.seen[since:]:
            left = deadline - time.monotonic()
            assert left > 0, f"{text!r} never came; the terminal shows:\n{self.seen}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                self.seen += os.read(self.master, 4096).decode(errors="replace")

    def type(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def asked_sum(self, since: int = 0) -> int:
        """The sum of the arguments of the add call asked about after ``since``: the
        model chooses the numbers (its words differ between CPUs), the tool adds them."""
        found = re.search(r"Allow add\((\{.*?\})\)\?", self.seen[since:])
        assert found, self.seen[since:]
        arguments = json.loads(found.group(1))
        return int(arguments["a"]) + int(arguments["b"])

    def close(self) -> int:
        self.type("/quit")
        try:
            return self.process.wait(timeout=30)
        finally:
            if self.process.poll() is None:  # a failed test left it mid-question
                self.process.kill()
                self.process.wait()
            os.close(self.master)


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal is POSIX")
def test_at_a_terminal_each_call_is_asked_and_the_answer_obeyed(
        smollm2_path: Path, mcp_json: Path) -> None:
    terminal = Terminal("--model", str(smollm2_path), "--tools", str(mcp_json),
                        "--tool-choice", "add", "--temperature", "0", "--max-tokens", "64")
    try:
        terminal.wait_for("is ready")
        terminal.type(ADD)
        terminal.wait_for("[o]nce / [a]lways / [n]o")
        assert ran(mcp_json) == [], "nothing runs before the answer"
        terminal.type("n")
        terminal.wait_for("[add: denied]")
        assert ran(mcp_json) == []
        asked = len(terminal.seen)
        terminal.type(ADD)
        terminal.wait_for("[o]nce / [a]lways / [n]o", since=asked)  # a no was for that call
        terminal.type("o")
        terminal.wait_for(f"[add: done] {terminal.asked_sum(asked)}", since=asked)
        assert ran(mcp_json) == ["add"]
    finally:
        assert terminal.close() == 0


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal is POSIX")
def test_at_a_terminal_a_url_servers_call_is_asked_and_sent_with_its_headers(
        smollm2_path: Path, tmp_path: Path) -> None:
    log = tmp_path / "ran.log"
    token = "mcp-terminal-token-3b7"
    with over_http(FIRESIDE_TEST_MCP_TOKEN=token, FIRESIDE_TEST_TOOL_LOG=str(log)) as url:
        config = tmp_path / "web.json"
        config.write_text(json.dumps({"mcpServers": {"web": {
            "url": url, "headers": {"Authorization": f"Bearer {token}"}}}}), encoding="utf-8")
        terminal = Terminal("--model", str(smollm2_path), "--tools", str(config),
                            "--tool-choice", "add", "--temperature", "0",
                            "--max-tokens", "32")
        try:
            terminal.wait_for("is ready")  # the server took the token: its tools listed
            terminal.type(ADD)
            terminal.wait_for("[o]nce / [a]lways / [n]o")
            assert not log.exists(), "nothing runs before the answer"
            terminal.type("o")
            terminal.wait_for(f"[add: done] {terminal.asked_sum()}")  # the server's sum
            assert log.read_text(encoding="utf-8").split() == ["add"]
        finally:
            assert terminal.close() == 0
