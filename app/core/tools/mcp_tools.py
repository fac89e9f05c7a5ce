"""Tools from MCP servers the user adds, through the official ``mcp`` SDK.

A server is a local process spoken to over its stdin/stdout (a command and its
arguments), or a URL, connected to only because the user added it. The ``mcpServers``
JSON that Claude Desktop, LM Studio and Cursor use is read as it is: ``disabled`` keeps
a server off, a URL's ``headers`` go with each of its requests. A server the settings
keep has its env values and headers in the keyring (``mcp_keys``), filled in as it
starts.

Each connection runs the SDK's asyncio client on a thread of its own, so a call can be
made, bounded in time and cancelled from the inference thread or a face without an
event loop of theirs. A server that crashes or hangs costs its own calls an error
message, never the chat. The SDK is imported only when a server is connected: a
session without one loads none of it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.core.remote.secrets import KeyStore, store_named
from app.core.reply.tool_calls import Tool
from app.core.tools import mcp_keys

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
    headers: Mapping[str, str] = field(default_factory=dict)  # sent to a url
    disabled: bool = False  # the file says so: it stays off
    # Where its env values and headers are kept (mcp_keys), when not here.
    kept_in: KeyStore | None = None

    def describe(self) -> str:
        return self.url or " ".join([self.command, *self.args])

    def kept(self) -> McpServer:
        """The server as settings.json holds it: its env values and headers moved to the
        keyring (over any kept for an earlier server of its name)."""
        if not (self.env or self.headers):
            return self
        where = mcp_keys.keep(self.name, self.env, self.headers)
        return dataclasses.replace(self, env={}, headers={}, kept_in=where)

    def filled(self) -> McpServer:
        """The server with its env values and headers, from where they are kept."""
        if self.kept_in is None:
            return self
        found = mcp_keys.find(self.name, self.kept_in)
        if found is None:
            raise McpError(f"The keys and settings of '{self.name}' are no longer in the "
                           f"{self.kept_in}: import or add the server again.")
        return dataclasses.replace(self, env=found[0], headers=found[1], kept_in=None)

    def entry(self) -> dict[str, Any]:
        """The server as an ``mcpServers`` entry, as read_config reads it."""
        entry: dict[str, Any] = {"url": self.url} if self.url else {
            "command": self.command, "args": list(self.args), "env": dict(self.env)}
        if self.url and self.headers:
            entry["headers"] = dict(self.headers)
        if self.disabled:
            entry["disabled"] = True
        if self.kept_in:
            entry["keptIn"] = self.kept_in
        return entry


def read_config(data: Any) -> list[McpServer]:
    """The servers of an ``mcpServers`` JSON document (parsed), in its order."""
    servers = data.get("mcpServers") if isinstance(data, Mapping) else None
    if not isinstance(servers, Mapping):
        raise McpError('The file must hold an object "mcpServers" naming each server.')
    return [_read_entry(str(name), entry) for name, entry in servers.items()]


def _read_entry(name: str, entry: Any) -> McpServer:
    if not isinstance(entry, Mapping):
        raise McpError(f"Server '{name}' must be an object with a command or a url.")
    command, url = entry.get("command", ""), entry.get("url", "")
    args = entry.get("args", [])
    if not (isinstance(command, str) and isinstance(url, str)) or bool(command) == bool(url):
        raise McpError(f"Server '{name}' needs either a command or a url.")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise McpError(f"The args of server '{name}' must be a list of strings.")
    env, headers = _strings(entry, "env", name), _strings(entry, "headers", name)
    if url and not url.startswith(("http://", "https://")):
        raise McpError(f"The url of server '{name}' must start with http:// or https://.")
    if headers and not url:
        raise McpError(f"The headers of server '{name}' go with a url; a command takes env.")
    disabled, named = entry.get("disabled", False), entry.get("keptIn")
    if not isinstance(disabled, bool):
        raise McpError(f"'disabled' of server '{name}' must be true or false.")
    kept_in = store_named(named)
    if named is not None and kept_in is None:
        raise McpError(f"Server '{name}' names no known place for its keys.")
    return McpServer(name, command, tuple(args), env, url, headers, disabled, kept_in)


def _strings(entry: Mapping[str, Any], key: str, name: str) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise McpError(f"The {key} of server '{name}' must map names to strings.")
    return dict(value)


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
        async with _transport(self.server.filled()) as streams, \
                ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            listed = await session.list_tools()
            self.tools = tuple(
                Tool(t.name, t.description or "", t.input_schema or {"type": "object"})
                for t in listed.tools if isinstance(t, types.Tool))
            self._session = session
            self._ready.set()
            await self._closing.wait()


@contextlib.asynccontextmanager
async def _transport(server: McpServer) -> AsyncIterator[Any]:
    """The streams to ``server``: its process's stdin and stdout, or its url."""
    if server.url:
        import httpx2  # noqa: PLC0415 - the SDK's own HTTP client
        from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415

        # The SDK's own timeouts for a client it makes; a server may hold a stream open.
        timeout = httpx2.Timeout(30.0, read=300.0)
        async with httpx2.AsyncClient(headers=dict(server.headers), timeout=timeout) as http, \
                streamable_http_client(server.url, http_client=http) as streams:
            yield streams
        return
    from mcp import StdioServerParameters  # noqa: PLC0415
    from mcp.client.stdio import stdio_client  # noqa: PLC0415

    async with stdio_client(StdioServerParameters(
            command=server.command, args=list(server.args),
            env=dict(server.env) or None)) as streams:
        yield streams


def _closed(err: BaseException) -> bool:
    """The error says the connection to the server is gone."""
    import anyio  # noqa: PLC0415 - the SDK's own dependency, loaded with it

    return isinstance(err, anyio.ClosedResourceError | anyio.BrokenResourceError
                      | anyio.EndOfStream) or "Connection closed" in str(err)


def _reason(err: BaseException) -> str:
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return str(err) or type(err).__name__
