"""Tools in the window: a real MCP server (tests/mcp_server.py) added in Settings → Tools,
called by the real SmolLM2 model, each call shown in the chat and run only once the
user allows it."""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton

from app.core import settings
from app.core.conversations.chat import ALLOW_ONCE, DENY
from app.core.reply.replies import ToolCall, ToolRun
from app.ui.messages.tool_call_view import ToolCallView
from app.ui.window import MainWindow
from tests.mcp_server import tools_ran
from tests.ui.conftest import REPLY_TIMEOUT_MS, WindowFactory, greedy_settings, type_and_send

SERVER = Path(__file__).resolve().parents[1] / "mcp_server.py"
ADD = "Use the add tool to add 17 and 25, then tell me the sum."


@pytest.fixture
def window(open_window: WindowFactory, qtbot: Any, tmp_path: Path) -> MainWindow:
    """A window whose user added the test server in Settings → Tools, as a person would.
    The small model does not call tools of its own accord: replies here must call add,
    as `fireside chat --tool-choice add` asks (the model's choice is tested elsewhere)."""
    greedy_settings(max_tokens=64)
    window = open_window()
    window.show_settings()
    page = window._settings_dialog.tools_page  # type: ignore[union-attr]
    page.name_edit.setText("test")
    # `env` hands the server the log of the tools that really ran.
    page.command_edit.setText(shlex.join(["env", f"FIRESIDE_TEST_TOOL_LOG={tmp_path}/ran.log",
                                          sys.executable, str(SERVER)]))
    qtbot.mouseClick(page.findChild(QPushButton, "addToolServerButton"),
                     Qt.MouseButton.LeftButton)
    window._settings_dialog.close()  # type: ignore[union-attr]
    core = window.controller.core  # type: ignore[union-attr]
    core.session = dataclasses.replace(core.session, tool_choice="add")
    return window


def ran(tmp_path: Path) -> list[str]:
    return tools_ran(tmp_path / "ran.log")


def cards(window: MainWindow) -> list[ToolCallView]:
    return [view for row in window.transcript.message_widgets() for view in row.call_views]


def asking(window: MainWindow) -> ToolCallView | None:
    found = [c for c in cards(window) if c.run.status == "asking" and c.allow_once.isVisible()]
    return found[-1] if found else None


def send_and_answer(qtbot: Any, window: MainWindow, button: str) -> tuple[str, ToolCallView]:
    """Send ADD, answer the call's question with ``button``; the reply's last text."""
    assert window.controller is not None
    with qtbot.waitSignal(window.controller.reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        type_and_send(qtbot, window, ADD)
        qtbot.waitUntil(lambda: asking(window) is not None, timeout=REPLY_TIMEOUT_MS)
        card = asking(window)
        assert card is not None
        qtbot.mouseClick(getattr(card, button), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: cards(window)[-1].run.status not in ("asking", "running"))
    return done.args[0], cards(window)[-1]


def test_a_call_runs_only_when_allowed_and_its_result_reaches_the_answer(
        window: MainWindow, qtbot: Any, tmp_path: Path) -> None:
    assert window.composer_bar.tools_button.isVisible()
    assert window.composer_bar.tools_button.isChecked()
    assert window.controller is not None
    with qtbot.waitSignal(window.controller.reply_finished, timeout=REPLY_TIMEOUT_MS):
        type_and_send(qtbot, window, ADD)
        qtbot.waitUntil(lambda: asking(window) is not None, timeout=REPLY_TIMEOUT_MS)
        qtbot.wait(300)
        assert ran(tmp_path) == [], "nothing runs before the user allows it"
        card = asking(window)
        assert card is not None and "add" in card.title.text()
        # Whatever numbers the model chose (its words differ between CPUs), the card
        # shows them before anything runs, and the result is the tool's sum of them.
        arguments = json.loads(card.run.call.arguments)
        assert all(f'"{name}"' in card.title.text() for name in arguments)
        qtbot.mouseClick(card.allow_once, Qt.MouseButton.LeftButton)
    # Shown again as stored: the calling reply with its call, then the answer.
    qtbot.waitUntil(lambda: [c.run.status for c in cards(window)] == ["done"])
    (card,) = cards(window)
    rows = window.transcript.message_widgets()
    total = str(arguments["a"] + arguments["b"])
    assert ran(tmp_path) == ["add"]
    assert card.run.status == "done" and card.run.result == total
    assert not card.result.isVisible(), "the result is folded under the call"
    qtbot.mouseClick(card.result_toggle, Qt.MouseButton.LeftButton)
    assert card.result.isVisible() and card.result.toPlainText() == total
    assert rows.index(next(r for r in rows if card in r.call_views)) < len(rows) - 1, \
        "after the result the model answers in a reply of its own"

    _, denied = send_and_answer(qtbot, window, "deny")
    assert denied.run.status == "denied" and ran(tmp_path) == ["add"], \
        "Allow once is asked again next time, and a denied call never runs"


def test_always_allow_is_remembered_and_the_calls_stay_with_the_conversation(
        window: MainWindow, qtbot: Any, tmp_path: Path) -> None:
    send_and_answer(qtbot, window, "allow_always")
    assert "test/add" in settings.load().settings.always_allowed_tools
    assert window.controller is not None
    with qtbot.waitSignal(window.controller.reply_finished, timeout=REPLY_TIMEOUT_MS):
        type_and_send(qtbot, window, ADD)
    assert ran(tmp_path) == ["add", "add"], "the second call ran without a question"
    assert asking(window) is None

    conversation_id = window.controller.conversation_id
    assert conversation_id is not None
    window.controller.new_chat()
    qtbot.waitUntil(lambda: not cards(window), timeout=REPLY_TIMEOUT_MS)
    window.controller.open_conversation(conversation_id)
    qtbot.waitUntil(lambda: len(cards(window)) == 2, timeout=REPLY_TIMEOUT_MS)
    assert [(c.run.call.name, c.run.status, c.run.result) for c in cards(window)] == [
        ("add", "done", "42")] * 2


def test_tools_switched_off_for_a_conversation_are_not_offered(
        window: MainWindow, qtbot: Any, tmp_path: Path) -> None:
    qtbot.mouseClick(window.composer_bar.tools_button, Qt.MouseButton.LeftButton)
    assert not window.composer_bar.tools_button.isChecked()
    assert window.controller is not None
    with qtbot.waitSignal(window.controller.reply_finished, timeout=REPLY_TIMEOUT_MS):
        type_and_send(qtbot, window, ADD)
    assert cards(window) == [] and ran(tmp_path) == []
    conversation = window.controller.conversation()
    assert conversation is not None and conversation.settings["tools"] is False
    window.controller.new_chat()
    qtbot.waitUntil(window.composer_bar.tools_button.isChecked,
                    timeout=REPLY_TIMEOUT_MS)


def test_stop_while_a_call_waits_for_the_user_ends_the_reply_and_runs_nothing(
        window: MainWindow, qtbot: Any, tmp_path: Path) -> None:
    assert window.controller is not None
    with qtbot.waitSignal(window.controller.reply_finished, timeout=REPLY_TIMEOUT_MS):
        type_and_send(qtbot, window, ADD)
        qtbot.waitUntil(lambda: asking(window) is not None, timeout=REPLY_TIMEOUT_MS)
        qtbot.mouseClick(window.composer_bar.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: cards(window)[-1].run.status == "stopped",
                    timeout=REPLY_TIMEOUT_MS)
    assert ran(tmp_path) == []
    assert not window.controller.streaming


def test_an_answer_clicked_before_the_question_arrives_is_kept_for_it(
        window: MainWindow) -> None:
    # The card is shown just before the calls' thread asks its question; on a busy
    # machine the click can come first (seen in CI): that answer must not be lost.
    controller = window.controller
    assert controller is not None
    hooks = controller._reply.tools()
    early = ToolRun(ToolCall("add", "{}", "call_early"), "test")
    controller.decide("call_early", DENY)
    controller.decide("call_early", ALLOW_ONCE)  # a second click changes nothing
    answer = hooks.ask(early)
    assert answer.done() and answer.result() == DENY
    late = ToolRun(ToolCall("add", "{}", "call_late"), "test")
    waiting = hooks.ask(late)
    assert not waiting.done()
    controller.decide("call_late", ALLOW_ONCE)
    assert waiting.result(timeout=1) == ALLOW_ONCE
