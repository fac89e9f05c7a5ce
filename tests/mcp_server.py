"""A real MCP server for the tests, written with the official SDK, spoken to over stdio:

    python tests/mcp_server.py

ping -> "pong"; add(a, b); wait(seconds) sleeps then answers; hang() answers after
ten minutes; crash() ends the process; flood(n) returns n characters; fail() reports
an error. With FIRESIDE_TEST_TOOL_LOG set, each call's name is appended to that file,
so a test can tell which tools really ran.
"""

from __future__ import annotations

import asyncio
import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("fireside-test-tools")


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
    await asyncio.sleep(seconds)
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


@server.tool()
def flood(n: int) -> str:
    """Return n characters."""
    return "x" * n


@server.tool()
def fail() -> str:
    """Report an error."""
    raise ValueError("the sensor is offline")


if __name__ == "__main__":
    server.run("stdio")
