"""A real MCP server for the tests, written with the official SDK, spoken to over stdio,
or over streamable HTTP on 127.0.0.1 (a free port; its URL is the first line it prints):

    python tests/mcp_server.py [http]

ping -> "pong"; add(a, b); wait(seconds) sleeps then answers; hang() answers after
ten minutes; crash() ends the process; manual() returns sixty lines of text;
flood(n) returns n characters; fail() reports an error. With FIRESIDE_TEST_TOOL_LOG
set, each call's name is appended to that file, so a test can tell which tools really
ran ("wait cancelled" when a wait is cancelled); with FIRESIDE_TEST_STARTED set, that
file is written as the server starts. Over HTTP, with FIRESIDE_TEST_MCP_TOKEN set, a
request without "Authorization: Bearer <token>" is refused (401).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send

server = MCPServer("fireside-test-tools", log_level="WARNING")


def tools_ran(log: Path) -> list[str]:
    """The tools this server ran, in order, from its FIRESIDE_TEST_TOOL_LOG."""
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def _ran(name: str) -> None:
    log = os.environ.get("FIRESIDE_TEST_TOOL_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(name + "\n")


@server.tool()
def ping() -> str:
    """Check that the service answers."""
    _ran("ping")
    return "pong"


@server.tool()
def add(a: int, b: int) -> str:
    """Add two whole numbers."""
    _ran("add")
    return str(a + b)


@server.tool()
async def wait(seconds: float) -> str:
    """Answer after some seconds."""
    _ran("wait")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        _ran("wait cancelled")
        raise
    return "waited"


@server.tool()
async def hang() -> str:
    """Look up something that takes very long."""
    _ran("hang")
    await asyncio.sleep(600)
    return "found"


@server.tool()
def crash() -> str:
    """End the server's process at once."""
    os._exit(3)


MANUAL = "\n".join(f"Step {i}: turn the brass dial to {i * 7} and wait for the bell."
                   for i in range(1, 61))


@server.tool()
def manual() -> str:
    """Read the machine's manual."""
    return MANUAL


@server.tool()
def flood(n: int) -> str:
    """Return n characters."""
    return "x" * n


@server.tool()
def fail() -> str:
    """Report an error."""
    raise ValueError("the sensor is offline")


class _Token:
    """Refuses a request that does not carry the token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers", []))
        if scope["type"] == "http" and \
                headers.get(b"authorization") != f"Bearer {self.token}".encode():
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"no token"})
            return
        await self.app(scope, receive, send)


def _serve_http() -> None:
    import uvicorn

    app: ASGIApp = server.streamable_http_app()
    token = os.environ.get("FIRESIDE_TEST_MCP_TOKEN")
    if token:
        app = _Token(app, token)
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    print(f"http://127.0.0.1:{listening.getsockname()[1]}/mcp", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[listening])


@contextlib.contextmanager
def over_http(**env: str) -> Iterator[str]:
    """For a test: this server over HTTP in a process of its own, with ``env``; its URL."""
    process = subprocess.Popen([sys.executable, __file__, "http"], stdout=subprocess.PIPE,
                               text=True, env={**os.environ, **env})
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://"), f"the server did not start ({process.wait()})"
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


if __name__ == "__main__":
    started = os.environ.get("FIRESIDE_TEST_STARTED")
    if started:
        Path(started).write_text("started", encoding="utf-8")
    if sys.argv[1:] == ["http"]:
        _serve_http()
    else:
        server.run("stdio")
