"""The transcript as a user meets it: reading, copying, clicking, streaming, scrolling."""

from __future__ import annotations

import itertools
import re
import time

import pytest
from PySide6.QtCore import QPoint, Qt, QUrl
from PySide6.QtGui import QColor, QPalette, QTextCursor, QTextTable
from PySide6.QtWidgets import QApplication, QFrame, QLabel, QScrollArea, QScrollBar
from pytestqt.qtbot import QtBot

from app.core.conversations.store import Message, Store
from app.core.reply.pieces import Pieces
from app.core.reply.replies import ReplyStats
from app.ui.bridge import PieceStream
from app.ui.messages import live_reply, markdown, message_column
from app.ui.messages.message_widget import MessageText, MessageWidget, theme_for
from app.ui.transcript import TranscriptView

_ids = itertools.count(1)

STATS = {"prompt_tokens": 412, "cached_tokens": 380, "tokens": 156, "ttft_s": 0.21,
         "tokens_per_s": 71.3, "stopped": True, "dropped_turns": 2,
         "model": "SmolLM2-135M-Instruct", "finish_reason": "stopped"}

REPLY = """Use the `csv` module:

```python
import csv

with open("data.csv", newline="") as f:
    total = sum(float(row["amount"]) for row in csv.DictReader(f))
```

Then print it:

```bash
python total.py
```

| Approach | Memory |
|---|---|
| csv | low |
| pandas | high |

See [the csv docs](https://docs.python.org/3/library/csv.html) for details."""


def message(role: str, text: str, stats: dict[str, object] | None = None,
            complete: bool = True) -> Message:
    return Message(next(_ids), 1, role, text, time.time(), stats, complete)  # type: ignore[arg-type]


def conversation(count: int) -> list[Message]:
    """Alternating questions and realistic replies with code, lists and tables."""
    return [message("user", f"Question {i}: how do I total a CSV column?") if i % 2 == 0
            else message("assistant", f"Answer {i}.\n\n{REPLY}", STATS)
            for i in range(count)]


def scroll_bar(view: TranscriptView) -> QScrollBar:
    area = view.findChild(QScrollArea, "transcriptScroll")
    assert area is not None
    return area.verticalScrollBar()


def anchor_point(text: MessageText, href: str) -> QPoint:
    """Where a user would click to follow the link ``href`` in the message."""
    document = text.document()
    block = document.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().anchorHref() == href:
                cursor = QTextCursor(document)
                cursor.setPosition(fragment.position())
                rect = text.cursorRect(cursor)
                return QPoint(rect.x() + 4, rect.center().y())
            it += 1
        block = block.next()
    raise AssertionError(f"no link to {href}")


def text_point(text: MessageText, needle: str) -> QPoint:
    cursor = text.document().find(needle)
    assert not cursor.isNull(), needle
    cursor.setPosition(cursor.selectionStart() + 2)
    return text.cursorRect(cursor).center()


def click(qtbot: QtBot, text: MessageText, point: QPoint) -> None:
    qtbot.mouseClick(text.viewport(), Qt.MouseButton.LeftButton, pos=point)


def last(view: TranscriptView) -> MessageWidget:
    return view.message_widgets()[-1]


# Reading -------------------------------------------------------------------------

def test_messages_are_shown_rendered(view: TranscriptView) -> None:
    view.set_messages([message("user", "Total a *CSV* column?"),
                       message("assistant", REPLY, STATS)])
    user, reply = view.message_widgets()
    assert user.text.toPlainText() == "Total a CSV column?"
    document = reply.text.document()
    assert "import csv" in document.toPlainText()
    assert any(isinstance(f, QTextTable) for f in document.rootFrame().childFrames())


def test_user_and_reply_look_different(view: TranscriptView, qtbot: QtBot) -> None:
    view.set_messages([message("user", "Hi"), message("assistant", "Hello! " * 40)])
    user, reply = view.message_widgets()
    qtbot.waitUntil(lambda: user.width() > 0 and user.text.width() > 0)
    bubble = user.findChild(QFrame, "userBubble")
    assert bubble is not None
    right_edge = bubble.mapTo(user, QPoint(bubble.width(), 0)).x()
    assert abs(right_edge - user.width()) <= 1, "the user's bubble sits on the right"
    assert bubble.width() < user.width() / 3, "a short message gets a small bubble"
    assert reply.text.width() == reply.width(), "a reply takes the column's full width"


def test_empty_conversation_shows_a_hint(view: TranscriptView) -> None:
    view.set_messages([message("user", "Hi")])
    view.set_empty_text("Ask SmolLM2 anything.")
    view.clear()
    hint = view.findChild(QLabel, "transcriptEmpty")
    assert hint is not None and hint.isVisible()
    assert hint.text() == "Ask SmolLM2 anything."
    assert view.message_widgets() == []


def test_messages_from_the_store(view: TranscriptView) -> None:
    with Store() as store:
        chat = store.create_conversation("CSV", "SmolLM2")
        store.add_message(chat.id, "user", "How do I total a column?")
        store.add_message(chat.id, "assistant", REPLY, STATS)
        store.add_message(chat.id, "assistant", "Half a rep", None, complete=False)
        view.set_messages(store.messages(chat.id))
    rows = view.message_widgets()
    assert [row.markdown() for row in rows] == ["How do I total a column?", REPLY,
                                                "Half a rep"]
    error = rows[-1].findChild(QLabel, "replyError")
    assert error is not None and "interrupted" in error.text() and error.isVisible()


def test_palette_change_recolours_messages(view: TranscriptView, qtbot: QtBot) -> None:
    view.set_messages([message("assistant", REPLY, STATS)])
    dark = QPalette(view.palette())
    for role, colour in ((QPalette.ColorRole.Base, "#1c1c1e"),
                         (QPalette.ColorRole.Window, "#1c1c1e"),
                         (QPalette.ColorRole.Text, "#ececee")):
        dark.setColor(role, QColor(colour))
    view.setPalette(dark)
    expected = theme_for(dark, "").code_background
    qtbot.waitUntil(lambda: expected in last(view).text.toHtml())


# Copying and links -------------------------------------------------------------

def test_copy_message_copies_its_markdown(view: TranscriptView, qtbot: QtBot) -> None:
    view.set_messages([message("user", "Q"), message("assistant", REPLY, STATS)])
    with qtbot.waitSignal(view.copy_done) as copied:
        qtbot.mouseClick(last(view).copy_button, Qt.MouseButton.LeftButton)
    assert copied.args == ["Message copied"]
    assert QApplication.clipboard().text() == REPLY


def test_copy_link_of_a_code_block_copies_that_block(view: TranscriptView,
                                                     qtbot: QtBot) -> None:
    view.set_messages([message("assistant", REPLY, STATS)])
    text = last(view).text
    with qtbot.waitSignal(view.copy_done) as copied:
        click(qtbot, text, anchor_point(text, f"{markdown.COPY_CODE_PREFIX}1"))
    assert copied.args == ["Code copied"]
    assert QApplication.clipboard().text() == "python total.py\n"
    with qtbot.waitSignal(view.copy_done):
        click(qtbot, text, anchor_point(text, f"{markdown.COPY_CODE_PREFIX}0"))
    assert QApplication.clipboard().text().startswith("import csv\n\nwith open(")


def test_clicking_a_link_asks_the_window(view: TranscriptView, qtbot: QtBot) -> None:
    view.set_messages([message("assistant", REPLY, STATS)])
    text = last(view).text
    address = "https://docs.python.org/3/library/csv.html"
    with qtbot.waitSignal(view.link_clicked) as clicked:
        click(qtbot, text, anchor_point(text, address))
    assert clicked.args == [QUrl(address)]


def test_unsafe_links_do_nothing(view: TranscriptView, qtbot: QtBot) -> None:
    view.set_messages([message("assistant", "[Win a prize](javascript:alert(1)) and "
                                            "[open](file:///etc/passwd)")])
    text = last(view).text
    with qtbot.assertNotEmitted(view.link_clicked):
        click(qtbot, text, text_point(text, "Win a prize"))
        click(qtbot, text, text_point(text, "open"))
        # Even if Qt reported such a link, it would not be passed on.
        text.anchorClicked.emit(QUrl("javascript:alert(1)"))
        text.anchorClicked.emit(QUrl("file:///etc/passwd"))
    assert text.source() == QUrl(), "the view never navigated anywhere"


# Regenerate, edit, details --------------------------------------------------------

def test_only_the_newest_messages_offer_regenerate_and_edit(view: TranscriptView,
                                                            qtbot: QtBot) -> None:
    view.set_messages([message("user", "first"), message("assistant", "one", STATS),
                       message("user", "second"), message("assistant", "two", STATS)])
    user1, reply1, user2, reply2 = view.message_widgets()
    assert [w.regenerate_button.isVisible() for w in (reply1, reply2)] == [False, True]
    assert [w.edit_button.isVisible() for w in (user1, user2)] == [False, True]
    with qtbot.waitSignal(view.regenerate_requested):
        qtbot.mouseClick(reply2.regenerate_button, Qt.MouseButton.LeftButton)
    with qtbot.waitSignal(view.edit_requested) as edit:
        qtbot.mouseClick(user2.edit_button, Qt.MouseButton.LeftButton)
    assert edit.args == ["second"]


def test_a_replys_actions_sit_side_by_side_under_it(view: TranscriptView, qtbot: QtBot) -> None:
    view.set_messages([message("user", "Hi"), message("assistant", "Hello there.", STATS)])
    _, reply = view.message_widgets()
    qtbot.waitUntil(reply.regenerate_button.isVisible)
    buttons = [reply.copy_button, reply.regenerate_button, reply.details_button]
    lefts = [b.mapTo(reply, QPoint(0, 0)).x() for b in buttons]
    assert lefts == sorted(lefts) and len(set(lefts)) == 3, "one beside the other, in order"
    assert min(b.mapTo(reply, QPoint(0, 0)).y() for b in buttons) > \
        reply.text.mapTo(reply, QPoint(0, reply.text.height())).y() - 1, "below the text"


def test_actions_work_from_the_keyboard(view: TranscriptView, qtbot: QtBot) -> None:
    view.set_messages([message("user", "q"), message("assistant", "a", STATS)])
    button = last(view).regenerate_button
    assert button.focusPolicy() & Qt.FocusPolicy.TabFocus
    assert button.accessibleName() == "Regenerate reply"
    button.setFocus()
    with qtbot.waitSignal(view.regenerate_requested):
        qtbot.keyClick(button, Qt.Key.Key_Space)


def test_streaming_hides_regenerate_and_edit_until_the_reply_ends(view: TranscriptView) -> None:
    view.set_messages([message("user", "first"), message("assistant", "one", STATS)])
    view.add_user_message("second")
    view.begin_reply("SmolLM2", PieceStream(Pieces(), view))
    rows = view.message_widgets()
    assert not any(r.regenerate_button.isVisible() or r.edit_button.isVisible() for r in rows)
    view.finish_reply("two", ReplyStats.from_json(STATS))
    user2, reply2 = view.message_widgets()[-2:]
    assert reply2.regenerate_button.isVisible() and user2.edit_button.isVisible()
    assert not view.message_widgets()[1].regenerate_button.isVisible()


def test_details_show_the_reply_stats(view: TranscriptView, qtbot: QtBot) -> None:
    view.set_messages([message("user", "q"), message("assistant", "a", STATS)])
    reply = last(view)
    assert not reply.details.isVisible()
    qtbot.mouseClick(reply.details_button, Qt.MouseButton.LeftButton)
    assert reply.details.isVisible()
    shown = reply.details.text()
    for fact in ("156 tokens at 71.3 tokens/s", "First token after 0.21 s",
                 "380 of 412 prompt tokens reused from cache",
                 "2 earlier turns left out to fit the context", "Stopped"):
        assert fact in shown
    assert reply.details_button.accessibleName() == "Hide reply details"
    qtbot.mouseClick(reply.details_button, Qt.MouseButton.LeftButton)
    assert not reply.details.isVisible()


def test_details_leave_out_what_did_not_happen(view: TranscriptView) -> None:
    stats = {**STATS, "dropped_turns": 0, "stopped": False, "finish_reason": "stop"}
    view.set_messages([message("assistant", "a", stats)])
    shown = last(view).details.text()
    assert "left out" not in shown and "Stopped" not in shown
    assert "tokens/s" in shown


def test_messages_have_accessible_names(view: TranscriptView) -> None:
    assert (view.objectName(), view.accessibleName()) == ("transcript", "Conversation")
    view.set_messages([message("user", "q"), message("assistant", "a", STATS)])
    user, reply = view.message_widgets()
    assert user.text.accessibleName() == "Your message"
    assert reply.text.accessibleName() == "Reply from SmolLM2-135M-Instruct"
    for button in (reply.copy_button, reply.details_button, user.copy_button):
        assert button.accessibleName() and button.toolTip()


# Streaming ---------------------------------------------------------------------

def pieces_of(text: str) -> list[str]:
    return re.findall(r" ?[\w']+| ?[^\w\s]+|\s+", text)


def test_streamed_pieces_become_exactly_the_reply(view: TranscriptView, qtbot: QtBot) -> None:
    text = ("Here is the first paragraph, with emoji 🔥 and 日本語.\n\n"
            "A second paragraph that ends.\n\n"
            "A third paragraph still being written")
    view.add_user_message("Tell me")
    stream = begin(view)
    for piece in pieces_of(text):
        stream.put(piece)  # as the inference thread does; the transcript takes it
    assert "".join(pieces_of(text)) == text
    reply = last(view)
    qtbot.waitUntil(lambda: reply.markdown() == text)
    shown = reply.text.toPlainText()
    for paragraph in text.split("\n\n"):
        assert paragraph in shown


def test_streaming_renders_each_block_once(view: TranscriptView, qtbot: QtBot,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rendered: list[str] = []
    original = live_reply.render

    def counting(text: str, *args: object, **kwargs: object) -> markdown.Rendered:
        rendered.append(text)
        return original(text, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(live_reply, "render", counting)
    stream = begin(view)
    reply = last(view)
    pieces = pieces_of(REPLY)
    for piece in pieces:
        stream.put(piece)
        view.deliver()  # each piece reaches the document on its own
    assert reply.markdown() == REPLY
    assert len(rendered) <= REPLY.count("\n\n") + 1 < len(pieces)
    assert "".join(rendered) == REPLY[:len("".join(rendered))], "blocks, in order, once"
    # Completed blocks are rendered (the code is highlighted), the tail is plain.
    document = reply.text.document()
    assert any(isinstance(f, QTextTable) for f in document.rootFrame().childFrames())
    assert "for details." in document.toPlainText()
    assert "[the csv docs]" in document.toPlainText(), "the last block is still plain text"


def test_finish_reply_renders_the_final_markdown(view: TranscriptView) -> None:
    stream = begin(view)
    for piece in pieces_of(REPLY):
        stream.put(piece)
    view.finish_reply(REPLY, ReplyStats.from_json(STATS))
    reply = last(view)
    assert reply.markdown() == REPLY
    assert "[the csv docs]" not in reply.text.toPlainText()
    assert "the csv docs" in reply.text.toPlainText()
    assert "156 tokens" in reply.details.text()
    assert reply.regenerate_button.isVisible()
    stream.put(" a piece still on its way")  # must not come back
    view.deliver()
    assert reply.markdown() == REPLY


def test_failed_reply_keeps_what_arrived(view: TranscriptView) -> None:
    view.add_user_message("q")
    stream = begin(view)
    stream.put("Partial **answer**")
    view.fail_reply("The model stopped responding.")
    reply = last(view)
    assert reply.markdown() == "Partial **answer**"
    assert reply.text.toPlainText() == "Partial answer"
    error = reply.findChild(QLabel, "replyError")
    assert error is not None and error.isVisible()
    assert "The model stopped responding." in error.text()
    stream.put("late piece")
    view.deliver()
    assert reply.markdown() == "Partial **answer**"


def test_view_follows_the_reply_only_while_at_the_bottom(view: TranscriptView,
                                                         qtbot: QtBot) -> None:
    view.set_messages(conversation(12))
    bar = scroll_bar(view)
    qtbot.waitUntil(lambda: bar.maximum() > 0 and bar.value() == bar.maximum())
    stream = begin(view)
    for _ in range(30):
        stream.put("A line of the reply that keeps growing.\n\n")
    qtbot.waitUntil(lambda: bar.value() == bar.maximum() and "growing" in
                    last(view).text.toPlainText())
    bar.setValue(bar.maximum() // 2)
    shown = first_visible(view)
    held = shown.mapTo(view, QPoint(0, 0)).y()
    for _ in range(30):
        stream.put("More text below the reader.\n\n")
    qtbot.waitUntil(lambda: "reader" in last(view).text.toPlainText())
    settle()  # the layout that follows the new text
    assert shown.mapTo(view, QPoint(0, 0)).y() == held, "what the user reads stays put"
    assert bar.value() < bar.maximum()


def begin(view: TranscriptView) -> Pieces:
    """A reply streaming into ``view``: what is put into its pieces shows in it."""
    pieces = Pieces()
    view.begin_reply("SmolLM2", PieceStream(pieces, view))
    return pieces


def settle() -> None:
    """Run what the event loop has pending (posted events, zero-time timers) to the end."""
    for _ in range(5):
        QApplication.sendPostedEvents()
        QApplication.processEvents()


def first_visible(view: TranscriptView) -> MessageWidget:
    return next(r for r in view.message_widgets()
                if r.mapTo(view, QPoint(0, r.height())).y() > 0)


# Laziness -----------------------------------------------------------------------

def test_opening_a_long_conversation_builds_only_its_end(view: TranscriptView,
                                                         qtbot: QtBot) -> None:
    messages = conversation(500)
    view.set_messages(messages)
    built = view.message_widgets()
    assert 0 < len(built) <= message_column.INITIAL_ROWS
    assert built[-1].markdown() == messages[-1].text
    qtbot.wait(200)  # the view sits at the bottom: nothing more is needed
    assert len(view.message_widgets()) < 30
    assert view.unbuilt_count() > 470


def test_scrolling_up_builds_older_messages_and_lets_far_ones_go(view: TranscriptView,
                                                                 qtbot: QtBot) -> None:
    messages = conversation(80)
    view.set_messages(messages)
    bar = scroll_bar(view)
    qtbot.waitUntil(lambda: bar.maximum() > 0)
    before = view.unbuilt_count()

    def at_top() -> bool:
        bar.setValue(0)
        return view.unbuilt_count() == 0 and bar.value() == 0

    qtbot.waitUntil(at_top, timeout=60_000)
    assert view.unbuilt_count() < before
    assert view.message_widgets()[0].markdown() == messages[0].text
    # Rows far below the view are released.
    qtbot.waitUntil(lambda: len(view.message_widgets()) < len(messages) / 2)
    # Scrolling back down builds them again.
    def at_bottom() -> bool:
        bar.setValue(bar.maximum())
        rows = view.message_widgets()
        return bool(rows) and rows[-1].markdown() == messages[-1].text

    qtbot.waitUntil(at_bottom, timeout=60_000)


def test_older_messages_appear_without_moving_the_view(view: TranscriptView,
                                                       qtbot: QtBot) -> None:
    messages = conversation(60)
    view.set_messages(messages)
    bar = scroll_bar(view)
    qtbot.waitUntil(lambda: bar.maximum() > 0 and bar.value() == bar.maximum())
    # A focused message far below must not pull the view back when it is released.
    view.activateWindow()
    last(view).copy_button.setFocus()
    newest_released = False
    while view.unbuilt_count() > 0:  # how many appear per step depends on the machine
        bar.setValue(bar.minimum() + 40)
        top_row = first_visible(view)
        before_y, before_built = top_row.mapTo(view, QPoint(0, 0)).y(), view.unbuilt_count()
        qtbot.waitUntil(lambda b=before_built: view.unbuilt_count() < b)
        qtbot.wait(20)
        assert top_row.mapTo(view, QPoint(0, 0)).y() == before_y
        newest_released = last(view).markdown() != messages[-1].text
    assert newest_released, "rows far below were released meanwhile"
