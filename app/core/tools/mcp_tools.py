"""Tools from MCP servers the user adds, through the official ``mcp`` SDK.

A server is a local process spoken to over its stdin/stdout (a command and its
arguments), or a URL, connected to only because the user added it. The ``mcpServers``
JSON that Claude Desktop, LM Studio and Cursor use is read as it is.

Each connection runs the SDK's asyncio client on a thread of its own, so a call can be
made, bounded in time and cancelled from the inference thread or a face without an
event loop of theirs. A server that crashes or hangs costs its own calls an error
message, never the chat. The SDK is imported only when a server is connected: a
session without one loads none of it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.core.reply.tool_calls import Tool

CALL_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 30.0
MAX_RESULT_CHARS = 16_000  # what of a tool's output enters the context


class McpError(Exception):
    """A server could not be used, or a call failed; the message is for the user."""


@dataclass(frozen=True)
class McpServer:
    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str = ""  # a remote server instead of a command

    def describe(self) -> str:
        return self.url or " ".join([self.command, *self.args])


def read_config(data: Any) -> list[McpServer]:
    """The servers of an ``mcpServers`` JSON document (parsed), in its order."""
    servers = data.get("mcpServers") if isinstance(data, Mapping) else None
    if not isinstance(servers, Mapping):
        raise McpError('The file must hold an object "mcpServers" naming each server.')
    found = []
    for name, entry in servers.items():
        if not isinstance(entry, Mapping):
            raise McpError(f"Server '{name}' must be an object with a command or a url.")
        command, url = entry.get("command", ""), entry.get("url", "")
        args, env = entry.get("args", []), entry.get("env", {})
        if not (isinstance(command, str) and isinstance(url, str)) or bool(command) == bool(url):
            raise McpError(f"Server '{name}' needs either a command or a url.")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise McpError(f"The args of server '{name}' must be a list of strings.")
        if not isinstance(env, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise McpError(f"The env of server '{name}' must map names to strings.")
        if url and not url.startswith(("http://", "https://")):
            raise McpError(f"The url of server '{name}' must start with http:// or https://.")
        found.append(McpServer(str(name), command, tuple(args), dict(env), url))
    return found


def result_text(content: list[Any], structured: Any, is_error: bool,
                limit: int = MAX_RESULT_CHARS) -> str:
    """A call's result as the text the model reads, within ``limit`` characters."""
    parts = []
    for block in content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        else:
            parts.append(f"[{kind or 'content'} not shown to the model]")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False))
    text = "\n".join(parts)
    if len(text) > limit:
        cut = len(text) - limit
        text = f"{text[:limit]}\n[… {cut:,} more characters of the tool's output cut]"
    return f"Error: {text}" if is_error else text


class McpConnection:
    """One server, connected: its tools, and calls to them from any thread."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.tools: tuple[Tool, ...] = ()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: Any = None
        self._ready = threading.Event()
        self._closing: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"fireside-mcp-{server.name}")

    def start(self, timeout_s: float = CONNECT_TIMEOUT_S) -> tuple[Tool, ...]:
        """Connect and list the server's tools; McpError says why it cannot be used."""
        self._thread.start()
        if not self._ready.wait(timeout_s):
            self.close()
            raise McpError(f"The tool server '{self.server.name}' did not answer within "
                           f"{timeout_s:.0f} s ({self.server.describe()}).")
        if self._failure is not None:
            raise McpError(f"The tool server '{self.server.name}' could not be started: "
                           f"{_reason(self._failure)}") from self._failure
        return self.tools

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self._failure is None

    def call(self, name: str, arguments: Mapping[str, Any],
             timeout_s: float = CALL_TIMEOUT_S,
             cancel: threading.Event | None = None, limit: int = MAX_RESULT_CHARS) -> str:
        """The tool's output as text. McpError if the server has stopped, the call took
        longer than ``timeout_s`` (it is cancelled) or ``cancel`` was set."""
        loop, session = self._loop, self._session
        if not self.alive or loop is None or session is None:
            raise McpError(f"The tool server '{self.server.name}' has stopped.")
        try:
            future = asyncio.run_coroutine_threadsafe(
                session.call_tool(name, dict(arguments)), loop)
        except RuntimeError as err:  # its event loop has just ended
            raise McpError(f"The tool server '{self.server.name}' has stopped.") from err
        waited = 0.0
        try:
            while True:
                try:
                    result = future.result(timeout=min(0.1, timeout_s - waited))
                    break
                except concurrent.futures.TimeoutError:
                    waited += 0.1
                    if cancel is not None and cancel.is_set():
                        future.cancel()
                        raise McpError(f"The call of {name} was stopped.") from None
                    if waited >= timeout_s:
                        future.cancel()
                        raise McpError(f"{name} took longer than {timeout_s:.0f} s and was "
                                       "cancelled.") from None
        except McpError:
            raise
        except Exception as err:
            if _closed(err):  # the process ended (crashed, or was killed)
                self._failure = err
                raise McpError(f"The tool server '{self.server.name}' has stopped "
                               f"during the call of {name}.") from err
            raise McpError(f"The call of {name} failed: {_reason(err)}") from err
        return result_text(list(getattr(result, "content", [])),
                           getattr(result, "structured_content", None),
                           bool(getattr(result, "is_error", False)), limit)

    def close(self) -> None:
        loop, closing = self._loop, self._closing
        if loop is not None and closing is not None and not loop.is_closed():
            loop.call_soon_threadsafe(closing.set)
        self._thread.join(5)

    # -- the connection's own thread -----------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as err:
            self._failure = self._failure or err
        finally:
            self._ready.set()

    async def _main(self) -> None:
        from mcp import ClientSession, types  # noqa: PLC0415 - only once a server is used

        self._loop = asyncio.get_running_loop()
        self._closing = asyncio.Event()
        async with self._transport() as streams, ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            listed = await session.list_tools()
            self.tools = tuple(
                Tool(t.name, t.description or "", t.input_schema or {"type": "object"})
                for t in listed.tools if isinstance(t, types.Tool))
            self._session = session
            self._ready.set()
            await self._closing.wait()

    def _transport(self) -> Any:
        if self.server.url:
            from mcp.client.streamable_http import (  # noqa: PLC0415
                streamable_http_client,
            )

            return streamable_http_client(self.server.url)
        from mcp import StdioServerParameters  # noqa: PLC0415
        from mcp.client.stdio import stdio_client  # noqa: PLC0415

        return stdio_client(StdioServerParameters(
            command=self.server.command, args=list(self.server.args),
            env=dict(self.server.env) or None))


def _closed(err: BaseException) -> bool:
    """The error says the connection to the server is gone."""
    import anyio  # noqa: PLC0415 - the SDK's own dependency, loaded with it

    return isinstance(err, anyio.ClosedResourceError | anyio.BrokenResourceError
                      | anyio.EndOfStream) or "Connection closed" in str(err)


def _reason(err: BaseException) -> str:
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return str(err) or type(err).__name__
