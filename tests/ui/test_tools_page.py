"""Settings → Tools: tool servers typed in, imported from an mcpServers file, switched,
removed and forgotten, and what of it is in the settings file afterwards."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from keyrings.alt.file import PlaintextKeyring
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton, QSpinBox

from app.core import settings
from app.core.tools import mcp_keys
from app.core.tools.toolbox import Toolbox
from app.ui.settings.dialog import SettingsDialog
from app.ui.settings.tools_page import ToolsPage
from tests.cli.test_servers import kept_keys, keyring_file  # noqa: F401 - a fixture
from tests.mcp_server import over_http
from tests.ui.settings_pages import page_at, page_names

MCP_SERVER = Path(__file__).resolve().parents[1] / "mcp_server.py"
TOKEN = "mcp-test-token-0c4"
FILESYSTEM = {"command": "npx",
              "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/Documents"],
              "env": {}}
CLAUDE_DESKTOP = {"mcpServers": {
    "filesystem": FILESYSTEM,
    "github": {"command": "docker",
               "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN",
                        "ghcr.io/github/github-mcp-server"],
               "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_example"}},
}}


class Page:
    """The page on real settings, saved to a real file as the dialog saves them."""

    def __init__(self, qtbot: Any, path: Path, prefs: settings.Settings) -> None:
        self.qtbot = qtbot
        self.path = path
        self.prefs = prefs
        self.widget = ToolsPage(prefs, lambda: settings.save(prefs, path))
        qtbot.addWidget(self.widget)
        self.widget.show()
        self.changes = 0
        self.widget.tools_changed.connect(self._count)

    def _count(self) -> None:
        self.changes += 1

    def reopened(self) -> Page:
        """The page as the next session shows it, from the file."""
        return Page(self.qtbot, self.path, self.saved())

    def saved(self) -> settings.Settings:
        loaded = settings.load(self.path)
        assert loaded.problem is None
        return loaded.settings

    def click(self, name: str) -> None:
        button = self.widget.findChild(QPushButton, name)
        assert button is not None and button.isVisibleTo(self.widget)
        button.click()

    def add(self, name: str, command: str = "", url: str = "") -> None:
        self.widget.name_edit.setText(name)
        self.widget.command_edit.setText(command)
        self.widget.url_edit.setText(url)
        self.click("addToolServerButton")

    def spin(self, name: str) -> QSpinBox:
        box = self.widget.findChild(QSpinBox, name)
        assert box is not None
        return box

    @property
    def message(self) -> str:
        label = self.widget.findChild(QLabel, "toolServerProblem")
        assert label is not None
        return label.text()

    def server_rows(self) -> list[tuple[str, bool]]:
        rows = self.widget.server_list
        return [(rows.item(i).text(), rows.item(i).checkState() == Qt.CheckState.Checked)
                for i in range(rows.count())]

    def allowed_rows(self) -> list[str]:
        rows = self.widget.allowed_list
        return [rows.item(i).text() for i in range(rows.count())]


PageFactory = Callable[..., Page]


@pytest.fixture
def page_on(qtbot: Any, tmp_path: Path) -> PageFactory:
    def make(**values: Any) -> Page:
        prefs = settings.Settings(**values)
        return Page(qtbot, tmp_path / "settings.json", prefs)
    return make


@pytest.fixture
def page(page_on: PageFactory) -> Page:
    return page_on()


def test_a_command_line_is_saved_as_its_program_and_arguments(page: Page) -> None:
    page.add("files", 'npx -y @modelcontextprotocol/server-filesystem "/home/me/My Documents"')
    assert page.saved().mcp_servers == {"files": {
        "command": "npx",
        "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/My Documents"],
        "env": {}}}
    assert page.server_rows() == [
        ("files — npx -y @modelcontextprotocol/server-filesystem /home/me/My Documents", True)]
    assert page.message.startswith("Added files.")
    assert page.changes == 1
    widget = page.widget
    assert not (widget.name_edit.text() or widget.command_edit.text()
                or widget.url_edit.text())  # ready for the next one


def test_a_url_is_saved_as_a_remote_server(page: Page) -> None:
    page.add("search", url="https://tools.example.org/mcp")
    assert page.saved().mcp_servers == {"search": {"url": "https://tools.example.org/mcp"}}
    assert page.server_rows() == [("search — https://tools.example.org/mcp", True)]
    assert page.changes == 1


def test_a_server_typed_in_starts_and_lists_its_tools(page: Page) -> None:
    page.add("test tools", shlex.join([sys.executable, str(MCP_SERVER)]))
    box = Toolbox(page.saved())
    try:
        names = {tool.name for tool in box.tools()}
    finally:
        box.close()
    assert {"ping", "add"} <= names and not box.problems


@pytest.mark.parametrize(("name", "command", "url", "problem"), [
    ("", "npx server", "", "Give the tool server a name."),
    ("   ", "", "https://example.org/mcp", "Give the tool server a name."),
    ("files", "", "https://example.org/mcp", "There is already a tool server called “files”."),
    ("other", "npx server", "https://example.org/mcp",
     "Give a command line or a URL, not both."),
    ("other", "", "", "Give the command line that starts the server, or its URL."),
    ("other", 'npx "unclosed', "", "The command line cannot be read: No closing quotation."),
    ("other", "", "ftp://example.org/mcp",
     "The url of server 'other' must start with http:// or https://."),
])
def test_a_bad_entry_is_refused_with_a_reason_and_nothing_saved(
        page_on: PageFactory, name: str, command: str, url: str, problem: str) -> None:
    page = page_on(mcp_servers={"files": FILESYSTEM})
    page.add(name, command, url)
    assert page.message == problem
    assert not page.path.exists()  # nothing was saved
    assert page.prefs.mcp_servers == {"files": FILESYSTEM}
    assert page.changes == 0
    widget = page.widget
    assert (widget.name_edit.text(), widget.command_edit.text(),
            widget.url_edit.text()) == (name, command, url)  # kept, to be put right


@pytest.mark.usefixtures("keyring_file")
def test_a_claude_desktop_file_is_imported_whole(page_on: PageFactory, tmp_path: Path) -> None:
    page = page_on(mcp_servers={"filesystem": {"url": "http://localhost:9000/mcp"},
                                "notes": {"url": "http://localhost:9001/mcp"}},
                   always_allowed_tools=["filesystem/read_file", "notes/search"])
    config = tmp_path / "claude_desktop_config.json"
    config.write_text(json.dumps(CLAUDE_DESKTOP, indent=2), encoding="utf-8")
    assert page.widget.import_file(config) is None
    saved = page.saved()
    # The token went to the keyring; the settings say only where.
    github = {**CLAUDE_DESKTOP["mcpServers"]["github"], "env": {}, "keptIn": "keyring"}
    assert saved.mcp_servers == {"filesystem": FILESYSTEM, "notes": {
        "url": "http://localhost:9001/mcp"}, "github": github}
    assert "ghp_example" not in page.path.read_text(encoding="utf-8")
    assert mcp_keys.find("github", "keyring") == (
        {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_example"}, {})
    # The replaced server is another program: its tools are asked about again.
    assert saved.always_allowed_tools == ["notes/search"]
    assert page.allowed_rows() == ["notes/search"]
    assert "Imported 2 tool servers: filesystem, github." in page.message
    assert "Replaced the earlier filesystem." in page.message
    assert [text.split(" — ")[0] for text, _ in page.server_rows()] == [
        "filesystem", "notes", "github"]
    assert page.changes == 1


@pytest.mark.usefixtures("keyring_file")
def test_imported_keys_and_headers_stay_out_of_the_settings_and_start_the_servers(
        page: Page, tmp_path: Path) -> None:
    started = tmp_path / "local.started"
    with over_http(FIRESIDE_TEST_MCP_TOKEN=TOKEN) as url:
        config = tmp_path / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {
            "web": {"url": url, "headers": {"Authorization": f"Bearer {TOKEN}"}},
            "local": {"command": sys.executable, "args": [str(MCP_SERVER)],
                      "env": {"FIRESIDE_TEST_STARTED": str(started), "API_KEY": TOKEN}}}}),
            encoding="utf-8")
        assert page.widget.import_file(config) is None
        stored = page.path.read_text(encoding="utf-8")
        assert TOKEN not in stored
        assert page.saved().mcp_servers["web"] == {"url": url, "keptIn": "keyring"}
        assert kept_keys(Path(PlaintextKeyring().file_path)) == [
            "tool_20server_3a_20web", "tool_20server_3a_20local"]
        box = Toolbox(page.saved())
        try:
            assert "ping" in {tool.name for tool in box.tools()}
            # The web server took its token from the keyring (it refuses a request
            # without), and the local one its environment (the marker is named only there).
            assert not box.problems, box.problems
            assert box.server_of("ping") == "web"  # the first of two with the name
            assert started.exists()
        finally:
            box.close()
        # Removed: its keys go too.
        page.widget.server_list.setCurrentRow(0)
        page.click("removeToolServerButton")
        assert kept_keys(Path(PlaintextKeyring().file_path)) == ["tool_20server_3a_20local"]


@pytest.mark.usefixtures("keyring_file")
def test_a_server_the_file_disables_comes_in_off_and_never_starts(
        page: Page, tmp_path: Path) -> None:
    started = tmp_path / "off.started"
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"off": {
        "command": sys.executable, "args": [str(MCP_SERVER)], "disabled": True,
        "env": {"FIRESIDE_TEST_STARTED": str(started)}}}}), encoding="utf-8")
    assert page.widget.import_file(config) is None
    assert page.saved().tools_off == ["off"]
    assert page.server_rows()[0][1] is False
    box = Toolbox(page.saved())
    try:
        assert box.tools() == () and not box.configured
    finally:
        box.close()
    assert not started.exists(), "the disabled server's process was started"
    page.widget.server_list.item(0).setCheckState(Qt.CheckState.Checked)  # the user's say
    box = Toolbox(page.saved())
    try:
        assert "ping" in {tool.name for tool in box.tools()}
    finally:
        box.close()
    assert started.exists()


@pytest.mark.parametrize(("content", "problem"), [
    ('{"mcpServers": {"files": ', "could not be read"),
    (b"\xff\xfe{", "could not be read"),
    ('{"servers": {}}', 'The file must hold an object "mcpServers"'),
    ('{"mcpServers": {"a": {"url": "https://a.example/mcp"}, "b": {"env": {}}}}',
     "Server 'b' needs either a command or a url."),
    ('{"mcpServers": {}}', "names no tool server"),
])
def test_a_broken_file_is_refused_and_nothing_is_lost(
        page_on: PageFactory, tmp_path: Path, content: str | bytes, problem: str) -> None:
    page = page_on(mcp_servers={"files": FILESYSTEM})
    config = tmp_path / "mcp.json"
    if isinstance(content, bytes):
        config.write_bytes(content)
    else:
        config.write_text(content, encoding="utf-8")
    said = page.widget.import_file(config)
    assert said is not None and problem in said
    assert page.message == said
    assert not page.path.exists()
    assert page.prefs.mcp_servers == {"files": FILESYSTEM}
    assert page.server_rows() == [(f"files — {' '.join(['npx', *FILESYSTEM['args']])}", True)]
    assert page.changes == 0


def test_a_missing_file_is_named_in_the_message(page: Page, tmp_path: Path) -> None:
    said = page.widget.import_file(tmp_path / "nowhere.json")
    assert said is not None and said.startswith("nowhere.json could not be read")
    assert not page.path.exists()


def test_a_server_switched_off_stays_off_until_switched_on(page_on: PageFactory) -> None:
    page = page_on(mcp_servers={"files": FILESYSTEM,
                                "search": {"url": "https://tools.example.org/mcp"}})
    item = page.widget.server_list.item(0)
    item.setCheckState(Qt.CheckState.Unchecked)
    assert page.saved().tools_off == ["files"]
    assert page.changes == 1
    assert [on for _, on in page.reopened().server_rows()] == [False, True]
    item.setCheckState(Qt.CheckState.Checked)
    assert page.saved().tools_off == []
    assert [on for _, on in page.reopened().server_rows()] == [True, True]
    assert page.changes == 2


def test_a_removed_server_takes_its_switch_and_allowed_tools_with_it(page_on: PageFactory) -> None:
    page = page_on(mcp_servers={"files": FILESYSTEM,
                                "search": {"url": "https://tools.example.org/mcp"}},
                   tools_off=["files"],
                   always_allowed_tools=["files/read_file", "search/find"])
    page.widget.server_list.setCurrentRow(0)
    page.click("removeToolServerButton")
    saved = page.saved()
    assert saved.mcp_servers == {"search": {"url": "https://tools.example.org/mcp"}}
    assert saved.tools_off == []
    assert saved.always_allowed_tools == ["search/find"]
    assert page.server_rows() == [("search — https://tools.example.org/mcp", True)]
    assert page.allowed_rows() == ["search/find"]
    assert page.message == "Removed files."
    assert page.changes == 1


def test_remove_with_nothing_chosen_removes_nothing(page_on: PageFactory) -> None:
    page = page_on(mcp_servers={"files": FILESYSTEM})
    page.widget.server_list.setCurrentRow(-1)
    page.click("removeToolServerButton")
    assert not page.path.exists() and page.changes == 0
    assert len(page.server_rows()) == 1


def test_a_forgotten_tool_is_asked_about_again(page_on: PageFactory) -> None:
    page = page_on(mcp_servers={"files": FILESYSTEM},
                   always_allowed_tools=["files/read_file", "files/list_directory"])
    assert page.allowed_rows() == ["files/read_file", "files/list_directory"]
    page.widget.allowed_list.setCurrentRow(0)
    page.click("forgetAllowedButton")
    assert page.saved().always_allowed_tools == ["files/list_directory"]
    assert page.allowed_rows() == ["files/list_directory"]
    box = Toolbox(page.saved())
    assert not box.always_allowed("files", "read_file")
    assert box.always_allowed("files", "list_directory")
    assert page.changes == 0  # the servers are as they were


def test_a_tool_allowed_while_the_page_is_open_shows_after_refresh(page_on: PageFactory) -> None:
    page = page_on(mcp_servers={"files": FILESYSTEM})
    Toolbox(page.prefs, save=lambda: settings.save(page.prefs, page.path)).allow_always(
        "files", "read_file")
    page.widget.refresh()
    assert page.allowed_rows() == ["files/read_file"]
    page.widget.allowed_list.setCurrentRow(0)
    page.click("forgetAllowedButton")
    assert page.saved().always_allowed_tools == []


def test_the_limits_on_calls_are_saved(page: Page) -> None:
    calls, limit = page.spin("maxToolCallsSpin"), page.spin("toolTimeoutSpin")
    assert (calls.value(), limit.value()) == (10, 60)  # the defaults, shown
    calls.setValue(4)
    limit.setValue(120)
    saved = page.saved()
    assert (saved.max_tool_calls, saved.tool_timeout_s) == (4, 120.0)
    calls.setValue(500)
    limit.setValue(1)
    saved = page.saved()
    assert (saved.max_tool_calls, saved.tool_timeout_s) == (50, 5.0)  # held in range
    reopened = page.reopened()
    assert reopened.spin("maxToolCallsSpin").value() == 50
    assert reopened.spin("toolTimeoutSpin").value() == 5
    assert page.changes == 0


def test_the_dialog_has_a_tools_tab_after_servers_and_passes_changes_on(
        qtbot: Any, tmp_path: Path) -> None:
    prefs = settings.Settings()
    path = tmp_path / "settings.json"
    dialog = SettingsDialog(prefs, lambda: settings.save(prefs, path), tmp_path / "models")
    qtbot.addWidget(dialog)
    names = page_names(dialog)
    assert names[names.index("Servers") + 1] == "Tools"
    assert page_at(dialog, names.index("Tools")) is dialog.tools_page
    dialog.tools_page.url_edit.setText("https://tools.example.org/mcp")
    dialog.tools_page.name_edit.setText("search")
    add = dialog.tools_page.findChild(QPushButton, "addToolServerButton")
    assert add is not None
    with qtbot.waitSignal(dialog.tools_changed, timeout=1000):
        add.click()
    assert settings.load(path).settings.mcp_servers == {
        "search": {"url": "https://tools.example.org/mcp"}}
