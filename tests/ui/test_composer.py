"""The composer: what Enter does, how it grows, when Send and Stop are offered."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt

from app.ui.composer import MAX_LINES, ComposerBar


def make_bar(qtbot: Any) -> ComposerBar:
    bar = ComposerBar()
    qtbot.addWidget(bar)
    bar.resize(600, 200)
    bar.show()
    return bar


def test_enter_sends_the_text_and_blank_text_is_never_sent(qtbot: Any) -> None:
    bar = make_bar(qtbot)
    bar.set_can_send(True)
    sent: list[str] = []
    bar.send_requested.connect(sent.append)
    qtbot.keyClick(bar.composer, Qt.Key.Key_Return)
    qtbot.keyClicks(bar.composer, "   ")
    qtbot.keyClick(bar.composer, Qt.Key.Key_Return)
    assert sent == [] and not bar.send_button.isEnabled()
    bar.composer.clear()
    qtbot.keyClicks(bar.composer, "Hello")
    assert bar.send_button.isEnabled()
    qtbot.keyClick(bar.composer, Qt.Key.Key_Enter)  # the keypad's Enter too
    assert sent == ["Hello"]


def test_nothing_is_sent_until_a_model_is_ready_or_while_a_reply_streams(qtbot: Any) -> None:
    bar = make_bar(qtbot)
    sent: list[str] = []
    bar.send_requested.connect(sent.append)
    bar.set_can_send(False, "Waiting for the model to load")
    qtbot.keyClicks(bar.composer, "Hi")
    qtbot.keyClick(bar.composer, Qt.Key.Key_Return)
    assert sent == [] and not bar.send_button.isEnabled()
    assert bar.send_button.toolTip() == "Waiting for the model to load"
    bar.set_can_send(True)
    bar.set_streaming(True)
    assert bar.stop_button.isVisible() and not bar.send_button.isVisible()
    qtbot.keyClick(bar.composer, Qt.Key.Key_Return)
    assert sent == [] and bar.composer.text() == "Hi"  # kept for after the reply
    with qtbot.waitSignal(bar.stop_requested):
        qtbot.mouseClick(bar.stop_button, Qt.MouseButton.LeftButton)


def test_the_box_grows_with_its_text_up_to_a_few_lines(qtbot: Any) -> None:
    bar = make_bar(qtbot)
    one_line = bar.composer.height()
    for _ in range(3):
        qtbot.keyClick(bar.composer, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    four_lines = bar.composer.height()
    assert four_lines > one_line
    for _ in range(MAX_LINES * 2):
        qtbot.keyClick(bar.composer, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    tallest = bar.composer.height()
    qtbot.keyClick(bar.composer, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert bar.composer.height() == tallest > four_lines
    assert bar.composer.text() == "\n" * (3 + MAX_LINES * 2 + 1)
