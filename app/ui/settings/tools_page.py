"""Settings → Tools: the MCP servers whose functions the model may call.

Servers are kept as the ``mcpServers`` JSON of Claude Desktop, LM Studio and Cursor
holds them, so a file from one of those imports as it is. Every entry is checked with
``mcp_tools.read_config`` before it is saved: what is stored can always be started. Its
env values and headers go to the keyring (``McpServer.kept``), never to settings.json;
a server the file says is ``disabled`` comes in switched off.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QFormLayout,
    QFrame,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.settings import Settings
from app.core.tools import mcp_keys
from app.core.tools.mcp_tools import McpError, read_config
from app.ui.settings.form_parts import button_row, line_edit, note

NAME_ROLE = Qt.ItemDataRole.UserRole


class ToolsPage(QWidget):
    tools_changed = Signal()
    """Servers added, removed or switched on or off: the toolbox starts over."""

    def __init__(self, prefs: Settings, save: Callable[[], None],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.prefs = prefs
        self._save = save
        self._filling = False  # the lists are being set from the settings, not by the user
        # The page is taller than the dialog: it scrolls rather than squeezing the lists.
        scroll = QScrollArea(self)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        body = QWidget(scroll)
        scroll.setWidget(body)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)
        # Rows stay together at the top when the dialog is taller than they are.
        column = QVBoxLayout(body)
        form = QFormLayout()
        column.addLayout(form)
        column.addStretch(1)
        form.addRow(note("Tools let the model call functions of programs you add here "
                         "(MCP servers). Each call is shown to you and asked about before "
                         "it runs. A local server is a program Fireside starts; a URL is "
                         "connected to only because you added it.", body))
        self._build_servers(body, form)
        self._build_new_server(body, form)
        self._build_limits(body, form)
        self._build_allowed(body, form)
        self.refresh()

    def _build_servers(self, body: QWidget, form: QFormLayout) -> None:
        """The servers added, each switched on or off by its check box."""
        self.server_list = QListWidget(body)
        self.server_list.setObjectName("toolServerList")
        self.server_list.setAccessibleName("Tool servers")
        self.server_list.setMaximumHeight(110)
        self.server_list.itemChanged.connect(self._on_server_item_changed)
        remove = _button(body, "Remove", "removeToolServerButton", self._on_remove_clicked)
        form.addRow("Tool servers", self.server_list)
        form.addRow("", button_row(remove))

    def _build_new_server(self, body: QWidget, form: QFormLayout) -> None:
        """A server to add by hand, or many from a JSON file, and what is wrong with it."""
        self.name_edit = line_edit(body, "toolServerNameEdit", "Name", "files")
        self.command_edit = line_edit(
            body, "toolServerCommandEdit", "Command line",
            "npx -y @modelcontextprotocol/server-filesystem ~/Documents")
        self.url_edit = line_edit(body, "toolServerUrlEdit", "URL",
                              "or the address of a running server: https://…/mcp")
        add = _button(body, "Add tool server", "addToolServerButton", self.add_server)
        importer = _button(body, "Import mcpServers JSON…", "importToolServersButton",
                           self._on_import_clicked)
        self.problem = QLabel("", body)
        self.problem.setObjectName("toolServerProblem")
        self.problem.setWordWrap(True)
        self.problem.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        for label, widget in (("Name", self.name_edit), ("Command line", self.command_edit),
                              ("URL", self.url_edit)):
            form.addRow(label, widget)
        form.addRow("", button_row(add, importer))
        form.addRow(self.problem)

    def _build_limits(self, body: QWidget, form: QFormLayout) -> None:
        """How many calls a reply may make, and how long each may take."""
        self.max_calls_spin = _spin(body, "maxToolCallsSpin", "Calls per reply", 1, 50)
        self.max_calls_spin.setValue(self.prefs.max_tool_calls)
        self.max_calls_spin.valueChanged.connect(self._on_max_calls_changed)
        form.addRow("Calls per reply", self.max_calls_spin)
        self.timeout_spin = _spin(body, "toolTimeoutSpin", "Time limit for a call", 5, 600)
        self.timeout_spin.setSuffix(" s")
        self.timeout_spin.setValue(round(self.prefs.tool_timeout_s))
        self.timeout_spin.valueChanged.connect(self._on_timeout_changed)
        form.addRow("Time limit for a call", self.timeout_spin)

    def _build_allowed(self, body: QWidget, form: QFormLayout) -> None:
        """The tools allowed always, each to forget."""
        self.allowed_list = QListWidget(body)
        self.allowed_list.setObjectName("alwaysAllowedList")
        self.allowed_list.setAccessibleName("Always allowed tools")
        self.allowed_list.setMaximumHeight(90)
        forget = _button(body, "Forget", "forgetAllowedButton", self._on_forget_clicked)
        form.addRow(note("These tools run without asking. Forget one to be asked again.",
                         body))
        form.addRow("Always allowed", self.allowed_list)
        form.addRow("", button_row(forget))

    def refresh(self) -> None:
        """Both lists again from the settings (a tool may have been allowed meanwhile)."""
        self._fill_servers()
        self.allowed_list.clear()
        for key in self.prefs.always_allowed_tools:
            self.allowed_list.addItem(key)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.refresh()  # the chat may have allowed a tool since the page was built

    def add_server(self) -> None:
        name = self.name_edit.text().strip()
        command_line = self.command_edit.text().strip()
        url = self.url_edit.text().strip()
        if not name:
            self._say("Give the tool server a name.")
            return
        if name in self.prefs.mcp_servers:
            self._say(f"There is already a tool server called “{name}”.")
            return
        if command_line and url:
            self._say("Give a command line or a URL, not both.")
            return
        if not (command_line or url):
            self._say("Give the command line that starts the server, or its URL.")
            return
        entry: dict[str, Any] = {"url": url}
        if command_line:
            try:
                words = _split(command_line)
            except ValueError as err:
                self._say(f"The command line cannot be read: {err}.")
                return
            entry = {"command": words[0], "args": words[1:], "env": {}}
        try:
            [server] = read_config({"mcpServers": {name: entry}})
        except McpError as err:
            self._say(str(err))
            return
        self.prefs.mcp_servers = {**self.prefs.mcp_servers, name: server.kept().entry()}
        self._changed()
        for edit in (self.name_edit, self.command_edit, self.url_edit):
            edit.clear()
        self._say(f"Added {name}. Its tools are listed the next time a reply can use "
                  "them.")

    def import_file(self, path: Path) -> str | None:
        """Add every server of an ``mcpServers`` file; the problem, or None."""
        try:
            found = read_config(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as err:  # JSON and Unicode errors are ValueErrors
            return self._fail(f"{path.name} could not be read: {err}")
        except McpError as err:
            return self._fail(f"{path.name} cannot be used: {err}")
        if not found:
            return self._fail(f"{path.name} names no tool server.")
        servers = dict(self.prefs.mcp_servers)
        off = list(self.prefs.tools_off)
        replaced = []
        for server in found:
            # Off as the file says, by the page's own switch: the user can turn it on.
            entry = dataclasses.replace(server.kept(), disabled=False).entry()
            if server.disabled and server.name not in off:
                off.append(server.name)
            if server.name in servers:
                replaced.append(server.name)
                if servers[server.name] != entry:
                    self._forget_allowed(server.name)  # another program: ask again
                if _keeps_keys(servers[server.name]) and not _keeps_keys(entry):
                    mcp_keys.forget(server.name)
            servers[server.name] = entry
        self.prefs.mcp_servers = servers
        self.prefs.tools_off = off
        self._changed()
        count = len(found)
        text = f"Imported {count} tool server{'' if count == 1 else 's'}: " \
               f"{', '.join(s.name for s in found)}."
        if replaced:
            text += f" Replaced the earlier {', '.join(replaced)}."
        self._say(text)
        return None

    def _on_import_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import mcpServers JSON", str(Path.home()),
                                              "JSON files (*.json);;All files (*)")
        if path:
            self.import_file(Path(path))

    def _on_server_item_changed(self, item: QListWidgetItem) -> None:
        if self._filling:
            return
        name = item.data(NAME_ROLE)
        off = [n for n in self.prefs.tools_off if n != name]
        if item.checkState() != Qt.CheckState.Checked:
            off.append(name)
        else:  # a hand-edited "disabled" gives way to the switch
            entry = self.prefs.mcp_servers.get(name)
            if isinstance(entry, dict) and "disabled" in entry:
                self.prefs.mcp_servers = {**self.prefs.mcp_servers, name: {
                    k: v for k, v in entry.items() if k != "disabled"}}
        self.prefs.tools_off = off
        self._save()
        self._say(f"{name} is {'on' if name not in off else 'off'}.")
        self.tools_changed.emit()

    def _on_remove_clicked(self) -> None:
        item = self.server_list.currentItem()
        if item is None:
            return
        name = item.data(NAME_ROLE)
        if _keeps_keys(self.prefs.mcp_servers.get(name)):
            mcp_keys.forget(name)
        self.prefs.mcp_servers = {n: e for n, e in self.prefs.mcp_servers.items() if n != name}
        # A later server of the same name starts switched on and asks about its tools.
        self.prefs.tools_off = [n for n in self.prefs.tools_off if n != name]
        self._forget_allowed(name)
        self._changed()
        self._say(f"Removed {name}.")

    def _on_forget_clicked(self) -> None:
        item = self.allowed_list.currentItem()
        if item is None:
            return
        key = item.text()
        self.prefs.always_allowed_tools = [k for k in self.prefs.always_allowed_tools
                                           if k != key]
        self._save()
        self.allowed_list.takeItem(self.allowed_list.row(item))

    def _on_max_calls_changed(self, count: int) -> None:
        self.prefs.max_tool_calls = count
        self._save()

    def _on_timeout_changed(self, seconds: int) -> None:
        self.prefs.tool_timeout_s = float(seconds)
        self._save()

    def _forget_allowed(self, server: str) -> None:
        prefix = f"{server}/"
        self.prefs.always_allowed_tools = [k for k in self.prefs.always_allowed_tools
                                           if not k.startswith(prefix)]

    def _changed(self) -> None:
        self._save()
        self.refresh()
        self.tools_changed.emit()

    def _fill_servers(self) -> None:
        self._filling = True
        try:
            self.server_list.clear()
            for name, entry in self.prefs.mcp_servers.items():
                text = f"{name} — {_describe(name, entry)}"
                item = QListWidgetItem(text)
                item.setToolTip(text)  # a long command line is cut in the list
                item.setData(NAME_ROLE, name)
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                off = name in self.prefs.tools_off or (
                    isinstance(entry, dict) and entry.get("disabled") is True)
                item.setCheckState(Qt.CheckState.Unchecked if off else Qt.CheckState.Checked)
                self.server_list.addItem(item)
        finally:
            self._filling = False

    def _fail(self, problem: str) -> str:
        self._say(problem)
        return problem

    def _say(self, text: str) -> None:
        self.problem.setText(text)


def _keeps_keys(entry: Any) -> bool:
    """The entry's env values and headers are in the keyring (``McpServer.kept``)."""
    return isinstance(entry, dict) and bool(entry.get("keptIn"))


def _describe(name: str, entry: Any) -> str:
    # One entry that cannot be read (a hand-edited file) is shown, to be removed.
    try:
        [server] = read_config({"mcpServers": {name: entry}})
    except McpError as err:
        return f"cannot be used: {err}"
    return server.describe()


def _split(command_line: str) -> list[str]:
    """A command line as its words, quoted as in the system's own shell."""
    if os.name != "nt":
        return shlex.split(command_line)
    # POSIX rules would take the backslashes of Windows paths for escapes.
    words = shlex.split(command_line, posix=False)
    return [w[1:-1] if len(w) > 1 and w[0] == w[-1] and w[0] in "\"'" else w
            for w in words]



def _button(parent: QWidget, text: str, name: str, slot: Callable[[], None]) -> QPushButton:
    button = QPushButton(text, parent)
    button.setObjectName(name)
    button.clicked.connect(slot)
    return button


def _spin(parent: QWidget, name: str, label: str, low: int, high: int) -> QSpinBox:
    box = QSpinBox(parent)
    box.setObjectName(name)
    box.setAccessibleName(label)
    box.setRange(low, high)
    box.setKeyboardTracking(False)  # one save per finished edit, not per keystroke
    return box


