"""The tools a conversation can use: the MCP servers the user added, connected on first
use, their tools by name, and what the user has allowed.

Nothing connects until a reply with tools on needs the list: a session whose user
added no server, or switched tools off, starts no process and opens no socket. A server
that cannot start is named once in ``problems`` and its tools are left out; the others
go on.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from app.core import settings
from app.core.mcp_tools import McpConnection, McpError, McpServer, read_config
from app.core.replies import ToolCall
from app.core.tools import Tool

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Route:
    connection: McpConnection
    tool: Tool  # as the server names it


class Toolbox:
    def __init__(self, prefs: settings.Settings,
                 connect: Callable[[McpServer], McpConnection] = McpConnection,
                 save: Callable[[], None] = lambda: None) -> None:
        self.settings = prefs
        self._save = save  # the settings, once a tool is always allowed
        # Servers for this session only (the terminal's --tools file), over the saved ones.
        self.session_servers: dict[str, object] | None = None
        self._connect = connect
        self._connections: dict[str, McpConnection] = {}  # by the server's name
        self._failed: dict[str, tuple[McpServer, str]] = {}  # the server, and why
        self._told: set[str] = set()
        self._routes: dict[str, _Route] = {}
        self._lock = threading.Lock()

    # What the user set ------------------------------------------------------------------

    def servers(self) -> list[McpServer]:
        """The servers added, in their order; [] if the stored list cannot be read
        (``config_problem`` says why)."""
        try:
            return read_config({"mcpServers": self._config()})
        except McpError:
            return []

    @property
    def config_problem(self) -> str | None:
        try:
            read_config({"mcpServers": self._config()})
        except McpError as err:
            return f"The tool servers in the settings cannot be used: {err}"
        return None

    def enabled(self) -> list[McpServer]:
        if self.session_servers is not None:
            return self.servers()
        return [s for s in self.servers() if s.name not in self.settings.tools_off]

    def _config(self) -> object:
        if self.session_servers is not None:
            return self.session_servers
        return self.settings.mcp_servers

    @property
    def configured(self) -> bool:
        """Some server is added and switched on: a conversation can have tools."""
        return bool(self.enabled())

    def always_allowed(self, server: str, tool: str) -> bool:
        return f"{server}/{tool}" in self.settings.always_allowed_tools

    def allow_always(self, server: str, tool: str) -> None:
        key = f"{server}/{tool}"
        if key not in self.settings.always_allowed_tools:
            self.settings.always_allowed_tools.append(key)
            self._save()

    # Connected -----------------------------------------------------------------------------

    def tools(self) -> tuple[Tool, ...]:
        """The tools of every server switched on, connecting those not connected yet
        (blocking: a server's start). A name two servers share is the first one's."""
        enabled = self.enabled()
        with self._lock:
            for name, connection in list(self._connections.items()):
                # Switched off or changed: its process ends. Stopped (it crashed): it is
                # started again for this reply.
                if connection.server not in enabled or not connection.alive:
                    self._connections.pop(name).close()
            self._failed = {n: f for n, f in self._failed.items() if f[0] in enabled}
            for server in enabled:
                if server.name not in self._connections and server.name not in self._failed:
                    connection = self._connect(server)
                    try:
                        connection.start()
                    except McpError as err:
                        logger.warning("%s", err)
                        self._failed[server.name] = (server, str(err))
                        continue
                    self._connections[server.name] = connection
            self._routes = {}
            for server in enabled:
                found = self._connections.get(server.name)
                if found is not None and found.alive:
                    for tool in found.tools:
                        self._routes.setdefault(tool.name, _Route(found, tool))
            return tuple(route.tool for route in self._routes.values())

    @property
    def problems(self) -> list[str]:
        """Why servers switched on are not in use."""
        with self._lock:
            return [why for _, why in self._failed.values()]

    def take_problems(self) -> list[str]:
        """The problems not told yet, for a face to tell once."""
        with self._lock:
            new = [why for _, why in self._failed.values() if why not in self._told]
            self._told.update(new)
            return new

    def server_of(self, tool: str) -> str:
        route = self._routes.get(tool)
        return route.connection.server.name if route else ""

    def call(self, call: ToolCall, cancel: threading.Event | None = None) -> str:
        """The tool's output; McpError with what to tell the model and the user."""
        route = self._routes.get(call.name)
        if route is None:
            raise McpError(f"There is no tool named {call.name}.")
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError as err:
            raise McpError(f"The arguments of {call.name} are not JSON: {err}") from err
        if not isinstance(arguments, dict):
            raise McpError(f"The arguments of {call.name} must be a JSON object.")
        return route.connection.call(call.name, arguments,
                                     timeout_s=self.settings.tool_timeout_s, cancel=cancel)

    def reset(self) -> None:
        """Start over with the servers as set now: those that failed are tried again."""
        self.close()
        with self._lock:
            self._failed, self._told = {}, set()

    def close(self) -> None:
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
            self._routes = {}
        for connection in connections:
            connection.close()
