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
from app.core.reply.replies import ToolCall
from app.core.reply.tool_calls import Tool
from app.core.tools.mcp_tools import (
    MAX_RESULT_CHARS,
    McpConnection,
    McpError,
    McpServer,
    read_config,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Route:
    connection: McpConnection
    tool: Tool  # as the server names it


OFFLINE = ("Fireside is offline: the tool server '{}' (a url) is not asked. Turn Offline "
           "off in Settings → Network to use it.")


class Toolbox:
    def __init__(self, prefs: settings.Settings,
                 connect: Callable[[McpServer], McpConnection] = McpConnection,
                 save: Callable[[], None] = lambda: None) -> None:
        self.settings = prefs
        self._save = save  # the settings, once a tool is always allowed
        # Servers for this session only (the terminal's --tools file), over the saved ones.
        self.session_servers: dict[str, object] | None = None
        self._session_allowed: list[str] = []
        self._connect = connect
        self._connections: dict[str, McpConnection] = {}  # by the server's name
        self._failed: dict[str, tuple[McpServer, str]] = {}  # the server, and why
        self._told: set[str] = set()
        self._offline: set[str] = set()  # why url servers are not asked while offline
        self._routes: dict[str, _Route] = {}
        self._lock = threading.Lock()

    # What the user set ------------------------------------------------------------------

    def servers(self) -> list[McpServer]:
        """The servers added that can be used, in their order (``config_problems`` says
        why any other cannot)."""
        return self._read()[0]

    @property
    def config_problems(self) -> list[str]:
        return self._read()[1]

    def _read(self) -> tuple[list[McpServer], list[str]]:
        config = self._config()
        found: list[McpServer] = []
        problems: list[str] = []
        if not isinstance(config, dict):
            return found, ["The tool servers in the settings are not a JSON object."]
        for name, entry in config.items():  # one by one: a mistake costs its own server
            try:
                found += read_config({"mcpServers": {name: entry}})
            except McpError as err:
                problems.append(f"The tool server '{name}' cannot be used: {err}")
        return found, problems

    def enabled(self) -> list[McpServer]:
        on = [s for s in self.servers() if not s.disabled]
        if self.session_servers is not None:
            return on
        return [s for s in on if s.name not in self.settings.tools_off]

    def _config(self) -> object:
        if self.session_servers is not None:
            return self.session_servers
        return self.settings.mcp_servers

    @property
    def configured(self) -> bool:
        """Some server is added and switched on: a conversation can have tools."""
        return bool(self.enabled())

    @property
    def call_bound(self) -> int:
        """Calls per reply (a hand-edited setting below 1 counts as 1)."""
        return max(1, self.settings.max_tool_calls)

    def always_allowed(self, server: str, tool: str) -> bool:
        return f"{server}/{tool}" in self._allowed()

    def allow_always(self, server: str, tool: str) -> None:
        allowed = self._allowed()
        key = f"{server}/{tool}"
        if key not in allowed:
            allowed.append(key)
            if self.session_servers is None:
                self._save()

    def _allowed(self) -> list[str]:
        # The terminal's --tools servers may share a name with the window's but be other
        # programs: what is allowed for them lasts for the session only.
        if self.session_servers is not None:
            return self._session_allowed
        return self.settings.always_allowed_tools

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
            starting = [s for s in enabled
                        if s.name not in self._connections and s.name not in self._failed]
        for server in starting:  # outside the lock: a start may take seconds
            if server.url and self.settings.offline:
                # Not failed for good: it is asked again once Offline is off.
                with self._lock:
                    self._offline.add(OFFLINE.format(server.name))
                continue
            connection = self._connect(server)
            try:
                connection.start()
            except McpError as err:
                logger.warning("%s", err)
                with self._lock:
                    self._failed[server.name] = (server, str(err))
                continue
            with self._lock:
                self._connections[server.name] = connection
        with self._lock:
            routes: dict[str, _Route] = {}
            for server in enabled:
                found = self._connections.get(server.name)
                if found is not None and found.alive:
                    for tool in found.tools:
                        routes.setdefault(tool.name, _Route(found, tool))
            self._routes = routes
            return tuple(route.tool for route in routes.values())

    @property
    def problems(self) -> list[str]:
        """Why servers switched on are not in use."""
        with self._lock:
            return [why for _, why in self._failed.values()]

    def take_problems(self) -> list[str]:
        """The problems not told yet, for a face to tell once."""
        with self._lock:
            known = [*self.config_problems, *(why for _, why in self._failed.values()),
                     *sorted(self._offline)]
            new = [why for why in known if why not in self._told]
            self._told.update(new)
            return new

    def server_of(self, tool: str) -> str:
        route = self._routes.get(tool)
        return route.connection.server.name if route else ""

    def call(self, call: ToolCall, cancel: threading.Event | None = None,
             limit: int = MAX_RESULT_CHARS) -> str:
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
        return route.connection.call(call.name, arguments, cancel=cancel, limit=limit,
                                     timeout_s=max(1.0, self.settings.tool_timeout_s))

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
