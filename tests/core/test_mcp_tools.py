"""MCP servers the user adds: a real stdio server written with the official SDK is
connected, its tools listed with their schemas and called; a slow call is cancelled
at its bound or when stopped; a crash gives a clear error and the next call says the
server stopped; long output is cut with a note; Claude Desktop's JSON is read."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.tools import mcp_tools
from app.core.tools.mcp_tools import McpConnection, McpError, McpServer

SERVER = Path(__file__).resolve().parents[1] / "mcp_server.py"


@pytest.fixture
def connection() -> Iterator[McpConnection]:
    conn = McpConnection(McpServer("test", sys.executable, (str(SERVER),)))
    conn.start()
    yield conn
    conn.close()


def test_tools_are_listed_with_their_schemas_and_called(connection: McpConnection) -> None:
    tools = {t.name: t for t in connection.tools}
    assert {"ping", "add", "wait", "crash", "flood", "fail"} <= set(tools)
    assert tools["add"].parameters["properties"].keys() == {"a", "b"}
    assert tools["ping"].description == "Check that the service answers."
    assert connection.call("ping", {}) == "pong"
    assert connection.call("add", {"a": 2, "b": 40}) == "42"
    assert connection.call("fail", {}).startswith("Error:")  # the model is told


def test_a_slow_call_is_cancelled_at_its_bound_or_when_stopped(
        connection: McpConnection) -> None:
    started = time.monotonic()
    with pytest.raises(McpError, match="took longer than 1 s and was cancelled"):
        connection.call("wait", {"seconds": 30}, timeout_s=1)
    assert time.monotonic() - started < 3
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    with pytest.raises(McpError, match="was stopped"):
        connection.call("wait", {"seconds": 30}, cancel=stop)
    assert connection.call("ping", {}) == "pong"  # the server goes on


def test_long_output_enters_within_the_cap_with_a_note(connection: McpConnection) -> None:
    text = connection.call("flood", {"n": 50_000})
    assert len(text) < mcp_tools.MAX_RESULT_CHARS + 100
    assert "34,000 more characters of the tool's output cut" in text


def test_a_server_that_crashes_gives_an_error_and_the_next_call_says_so(
        connection: McpConnection) -> None:
    with pytest.raises(McpError, match="'test' has stopped during the call of crash"):
        connection.call("crash", {}, timeout_s=10)
    assert not connection.alive
    with pytest.raises(McpError, match="'test' has stopped"):
        connection.call("ping", {})


def test_a_command_that_does_not_exist_is_said() -> None:
    with pytest.raises(McpError, match="'nowhere' could not be started"):
        McpConnection(McpServer("nowhere", "/no/such/server")).start(timeout_s=10)


def test_claude_desktops_json_is_read_and_mistakes_are_named() -> None:
    servers = mcp_tools.read_config({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem",
                                             "/tmp"], "env": {"DEBUG": "1"}},
        "remote": {"url": "https://example.invalid/mcp"}}})
    assert servers[0] == McpServer("files", "npx", ("-y", "@modelcontextprotocol/server-"
                                                    "filesystem", "/tmp"), {"DEBUG": "1"})
    assert servers[1].url == "https://example.invalid/mcp"  # read, never connected to
    for bad, said in (({}, '"mcpServers"'), ({"mcpServers": {"a": {}}}, "command or a url"),
                      ({"mcpServers": {"a": {"command": "x", "args": "y"}}}, "list of strings"),
                      ({"mcpServers": {"a": {"url": "ftp://x"}}}, "http://")):
        with pytest.raises(McpError, match=said):
            mcp_tools.read_config(bad)
