"""MCP servers the user adds: a real stdio server and a real streamable-HTTP server, both
written with the official SDK, are connected, their tools listed with their schemas and
called; a slow call is cancelled at its bound or when stopped, on the server too; a
crash gives a clear error and the next call says the server stopped; long output is cut
with a note; a URL's headers go with its requests; a disabled server never starts;
Claude Desktop's JSON is read."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from keyrings.alt.file import PlaintextKeyring

from app.core import settings
from app.core.remote import secrets
from app.core.tools import mcp_keys, mcp_tools
from app.core.tools.mcp_tools import McpConnection, McpError, McpServer
from app.core.tools.toolbox import Toolbox
from tests.cli.test_servers import kept_keys, keyring_file  # noqa: F401 - a fixture
from tests.mcp_server import over_http
from tests.mcp_server import tools_ran as ran

SERVER = Path(__file__).resolve().parents[1] / "mcp_server.py"
TOKEN = "mcp-test-token-5d1"


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """Where the server writes the name of each tool it runs."""
    return tmp_path / "ran.log"


def wait_for(condition: Callable[[], bool], what: str, guard_s: float = 60) -> None:
    deadline = time.monotonic() + guard_s  # a guard against a hang, not a bound
    while not condition():
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.02)


def stdio_server(name: str = "test", **env: str) -> McpServer:
    return McpServer(name, sys.executable, (str(SERVER),), env)


@pytest.fixture
def connection(log: Path) -> Iterator[McpConnection]:
    conn = McpConnection(stdio_server(FIRESIDE_TEST_TOOL_LOG=str(log)))
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
        connection: McpConnection, log: Path) -> None:
    # Ten minutes of waiting: the call ends at its bound, and the server is told to
    # stop (it says so), long before the wait would end.
    with pytest.raises(McpError, match="took longer than 1 s and was cancelled"):
        connection.call("wait", {"seconds": 600}, timeout_s=1)
    wait_for(lambda: ran(log).count("wait cancelled") == 1, "the server's cancel")
    stop = threading.Event()

    def stop_once_running() -> None:
        wait_for(lambda: ran(log).count("wait") == 2, "the second wait")
        stop.set()

    threading.Thread(target=stop_once_running, daemon=True).start()
    with pytest.raises(McpError, match="was stopped"):
        connection.call("wait", {"seconds": 600}, cancel=stop)
    wait_for(lambda: ran(log).count("wait cancelled") == 2, "the server's cancel")
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
        "remote": {"url": "https://example.invalid/mcp",
                   "headers": {"Authorization": "Bearer x"}},
        "resting": {"command": "npx", "disabled": True}}})
    assert servers[0] == McpServer("files", "npx", ("-y", "@modelcontextprotocol/server-"
                                                    "filesystem", "/tmp"), {"DEBUG": "1"})
    assert servers[1].url == "https://example.invalid/mcp"  # read, never connected to
    assert servers[1].headers == {"Authorization": "Bearer x"}
    assert servers[2].disabled and not servers[0].disabled
    for bad, said in (({}, '"mcpServers"'), ({"mcpServers": {"a": {}}}, "command or a url"),
                      ({"mcpServers": {"a": {"command": "x", "args": "y"}}}, "list of strings"),
                      ({"mcpServers": {"a": {"url": "ftp://x"}}}, "http://"),
                      ({"mcpServers": {"a": {"url": "http://x", "headers": {"A": 1}}}},
                       "headers of server 'a' must map names to strings"),
                      ({"mcpServers": {"a": {"command": "x", "headers": {"A": "b"}}}},
                       "go with a url"),
                      ({"mcpServers": {"a": {"command": "x", "disabled": "yes"}}},
                       "true or false")):
        with pytest.raises(McpError, match=said):
            mcp_tools.read_config(bad)


def test_a_url_servers_headers_go_with_its_requests(log: Path) -> None:
    with over_http(FIRESIDE_TEST_MCP_TOKEN=TOKEN, FIRESIDE_TEST_TOOL_LOG=str(log)) as url:
        with pytest.raises(McpError, match="'bare' could not be started"):
            McpConnection(McpServer("bare", url=url)).start(timeout_s=30)
        keyed = McpConnection(McpServer("keyed", url=url,
                                        headers={"Authorization": f"Bearer {TOKEN}"}))
        try:
            assert "add" in {tool.name for tool in keyed.start()}
            assert keyed.call("add", {"a": 2, "b": 40}) == "42"
        finally:
            keyed.close()
    assert ran(log) == ["add"]


@pytest.mark.parametrize("where", ["settings", "session"])
def test_a_disabled_server_never_starts(tmp_path: Path, where: str) -> None:
    """As the window keeps servers and as the terminal's --tools file gives them."""
    started = {name: tmp_path / f"{name}.started" for name in ("on", "off")}
    config = {name: {"command": sys.executable, "args": [str(SERVER)],
                     "env": {"FIRESIDE_TEST_STARTED": str(marker)}}
              for name, marker in started.items()}
    config["off"]["disabled"] = True
    box = Toolbox(settings.Settings(mcp_servers=config if where == "settings" else {}))
    if where == "session":
        box.session_servers = config
    try:
        assert [s.name for s in box.enabled()] == ["on"]
        assert "ping" in {tool.name for tool in box.tools()}
        assert box.server_of("ping") == "on" and not box.problems
    finally:
        box.close()
    assert started["on"].exists(), "the marker shows a start"
    assert not started["off"].exists(), "the disabled server's process was started"


@pytest.mark.usefixtures("keyring_file")
def test_a_kept_servers_values_live_in_the_keyring_and_start_it(log: Path) -> None:
    kept_in = Path(PlaintextKeyring().file_path)
    imported = stdio_server("keyed", FIRESIDE_TEST_TOOL_LOG=str(log), API_KEY="sk-secret-9")
    stored = imported.kept()
    assert stored.kept_in == "keyring" and not stored.env
    assert "sk-secret-9" not in json.dumps(stored.entry())
    held = PlaintextKeyring().get_password(secrets.SERVICE, mcp_keys.PREFIX + "keyed")
    assert held is not None and json.loads(held)["env"]["API_KEY"] == "sk-secret-9"
    assert kept_keys(kept_in) == ["tool_20server_3a_20keyed"]  # as the file escapes it

    # Started from what settings.json holds, with the values from the keyring: the log
    # the server writes is named only there.
    [again] = mcp_tools.read_config({"mcpServers": {"keyed": stored.entry()}})
    connection = McpConnection(again)
    try:
        connection.start()
        assert connection.call("ping", {}) == "pong" and ran(log) == ["ping"]
    finally:
        connection.close()
    mcp_keys.forget("keyed")
    assert kept_keys(kept_in) == []
    with pytest.raises(McpError, match="no longer in the keyring"):
        McpConnection(again).start(timeout_s=30)
