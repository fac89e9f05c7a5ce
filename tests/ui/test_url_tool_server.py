"""A tool server at a URL in the window: a real streamable-HTTP MCP server (the SDK's own,
tests/mcp_server.py) that wants a token, imported with its headers in Settings → Tools,
its tool called by the real SmolLM2 model once the user allows it in the chat."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from keyrings.alt.file import PlaintextKeyring
from PySide6.QtCore import Qt

from app.core import paths
from app.ui.messages.tool_call_view import ToolCallView
from app.ui.window import MainWindow
from tests.cli.test_servers import kept_keys, keyring_file  # noqa: F401 - a fixture
from tests.mcp_server import over_http
from tests.mcp_server import tools_ran as ran
from tests.ui.conftest import REPLY_TIMEOUT_MS, WindowFactory, greedy_settings, type_and_send

TOKEN = "mcp-window-token-81e"
ADD = "Use the add tool to add 17 and 25, then tell me the sum."


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "ran.log"


@pytest.fixture
def url(log: Path) -> Iterator[str]:
    with over_http(FIRESIDE_TEST_MCP_TOKEN=TOKEN, FIRESIDE_TEST_TOOL_LOG=str(log)) as address:
        yield address


@pytest.fixture
def window(open_window: WindowFactory, url: str, tmp_path: Path,
           request: pytest.FixtureRequest) -> MainWindow:
    """A window whose user imported the server, with the token its requests must carry
    (kept in a real keyring). The small model does not call tools of its own accord:
    its replies must call add."""
    request.getfixturevalue("keyring_file")
    greedy_settings(max_tokens=64)
    window = open_window()
    window.show_settings()
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"web": {
        "url": url, "headers": {"Authorization": f"Bearer {TOKEN}"}}}}), encoding="utf-8")
    assert window._settings_dialog is not None
    assert window._settings_dialog.tools_page.import_file(config) is None
    window._settings_dialog.close()
    assert window.controller is not None
    core = window.controller.core
    core.session = dataclasses.replace(core.session, tool_choice="add")
    return window


def cards(window: MainWindow) -> list[ToolCallView]:
    return [view for row in window.transcript.message_widgets() for view in row.call_views]


def asking(window: MainWindow) -> ToolCallView | None:
    found = [c for c in cards(window) if c.run.status == "asking" and c.allow_once.isVisible()]
    return found[-1] if found else None


def test_a_call_to_a_url_server_runs_once_allowed_with_the_servers_token(
        window: MainWindow, qtbot: Any, log: Path) -> None:
    assert TOKEN not in paths.settings_path().read_text(encoding="utf-8")
    assert kept_keys(Path(PlaintextKeyring().file_path)) == ["tool_20server_3a_20web"]
    assert window.controller is not None
    with qtbot.waitSignal(window.controller.reply_finished, timeout=REPLY_TIMEOUT_MS):
        type_and_send(qtbot, window, ADD)
        qtbot.waitUntil(lambda: asking(window) is not None, timeout=REPLY_TIMEOUT_MS)
        card = asking(window)
        assert card is not None and ran(log) == [], "nothing runs before the user allows it"
        arguments = json.loads(card.run.call.arguments)
        qtbot.mouseClick(card.allow_once, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: [c.run.status for c in cards(window)] == ["done"])
    (card,) = cards(window)
    # Whatever numbers the model chose, the server added them: it took the token.
    assert card.run.result == str(arguments["a"] + arguments["b"])
    assert ran(log) == ["add"]
