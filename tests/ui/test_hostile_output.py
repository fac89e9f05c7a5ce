"""A reply written to harm or to hang the window, streamed in as the chat controller
streams it: raw HTML, script, links and images to remote and local addresses, a
5,000-row table, a 1 MB code block. Nothing is fetched or opened; all of it is shown,
or of a huge block as much as stays quick, with a note, and Copy gets the whole block.
(What the renderer makes of each construct is checked in test_markdown.py; clicking
unsafe links in test_transcript.py; how long the GUI thread stalls while such replies
render is measured by tests/benchmarks/bench_hostile.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PySide6.QtCore import QObject, QUrl, Slot
from PySide6.QtGui import QDesktopServices
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.core.reply.pieces import Pieces
from app.core.reply.replies import ReplyStats
from app.ui.bridge import PieceStream
from app.ui.messages.markdown import COPY_CODE_PREFIX
from app.ui.messages.message_widget import MessageText
from app.ui.transcript import FRAME_MS, TranscriptView
from tests.heartbeat import Heartbeat
from tests.ui.test_transcript import anchor_point, click

pytestmark = pytest.mark.slow

PIECE = 4096  # characters per delivery: more than a 2-core machine decodes in 33 ms
SCHEMES = ("http", "https", "file", "javascript", "data", "ftp")

HOSTILE_HTML = """Hello <b>there</b> <script>fetch("https://example.org/steal")</script>
<img src="https://example.org/pixel.png"> <img src="file:///etc/hostname" onerror="x()">
<iframe src="https://example.org/frame"></iframe> <a href="javascript:alert(1)">raw link</a>

[a prize](javascript:alert(1)) and [your files](file:///etc/passwd) and
[fine](https://example.org/page).

![remote picture](https://example.org/cat.png) ![local picture](file:///etc/hostname)
<style>body { background: url(https://example.org/bg.png) }</style>
"""
HUGE_TABLE = "Here it is:\n\n| n | name |\n|---|---|\n" + "".join(
    f"| {i} | item {i} ![i](https://example.org/{i}.png) |\n" for i in range(5000))
HUGE_CODE = "```python\n" + "".join(
    f"value_{i:06d} = compute({i})  # <img src='https://example.org/{i}.png'>\n"
    for i in range(16_000)) + "```\n"


class _Opened(QObject):
    """Stands in for the desktop: records every address it is asked to open."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    @Slot(QUrl)
    def open(self, url: QUrl) -> None:
        self.urls.append(url.toString())


@pytest.fixture
def opened() -> Iterator[_Opened]:
    catcher = _Opened()
    for scheme in SCHEMES:
        QDesktopServices.setUrlHandler(scheme, catcher, "open")
    yield catcher
    for scheme in SCHEMES:
        QDesktopServices.unsetUrlHandler(scheme)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every resource any message view is asked for (and it answers nothing)."""
    requests: list[str] = []
    refuse = MessageText.loadResource

    def recording(self: MessageText, kind: int, name: QUrl | str) -> object:
        requests.append(name.toString() if isinstance(name, QUrl) else str(name))
        return refuse(self, kind, name)

    monkeypatch.setattr(MessageText, "loadResource", recording)
    return requests


def stream(view: TranscriptView, text: str) -> float:
    """Stream ``text`` into a new reply, a piece a frame as the model writes it, finish
    it, and return the longest stall of the GUI thread meanwhile (seconds)."""
    heartbeat = Heartbeat()
    heartbeat.start()
    view.add_user_message("Show me something.")
    pieces = Pieces()
    view.begin_reply("SmolLM2-135M-Instruct", PieceStream(pieces, view))
    for start in range(0, len(text), PIECE):
        pieces.put(text[start:start + PIECE])
        QTest.qWait(FRAME_MS)
    view.finish_reply(text, ReplyStats(0, 0, len(text) // 4, 0.0, 0.0, "length"))
    QTest.qWait(200)  # what the last render left for later (layout, painting)
    view.grab()
    return heartbeat.stop()


@pytest.mark.parametrize("text", [HOSTILE_HTML, HUGE_TABLE, HUGE_CODE],
                         ids=["html-links-images", "table-5000-rows", "code-1MB"])
def test_a_hostile_reply_fetches_nothing_and_opens_nothing(
        view: TranscriptView, opened: _Opened, asked: list[str], text: str) -> None:
    stream(view, text)
    row = view.message_widgets()[-1]
    assert row.role == "assistant" and row.markdown() == text
    assert asked == [], "a message view was asked to load something"
    assert opened.urls == [], "something was opened without a click"


@pytest.mark.parametrize(("text", "note", "copied"), [
    (HUGE_TABLE, "A table of 5,000 rows, shown as text.",
     HUGE_TABLE.removeprefix("Here it is:\n\n").removesuffix("\n")),
    (HUGE_CODE, "more lines not shown. Copy gets the whole block.",
     HUGE_CODE.removeprefix("```python\n").removesuffix("```\n")),
], ids=["table-5000-rows", "code-1MB"])
def test_copy_gets_all_of_a_block_too_long_to_show(
        view: TranscriptView, qtbot: QtBot, text: str, note: str, copied: str) -> None:
    stream(view, text)
    shown = view.message_widgets()[-1].text
    assert note in shown.toPlainText()
    assert len(shown.toPlainText()) < len(copied) / 10
    with qtbot.waitSignal(view.copy_done):
        click(qtbot, shown, anchor_point(shown, f"{COPY_CODE_PREFIX}0"))
    assert QApplication.clipboard().text() == copied


def test_raw_html_in_a_reply_is_shown_as_the_text_it_is(
        view: TranscriptView, opened: _Opened, asked: list[str]) -> None:
    stream(view, HOSTILE_HTML)
    shown = view.message_widgets()[-1].text.toPlainText()
    assert '<script>fetch("https://example.org/steal")</script>' in shown
    assert '<img src="file:///etc/hostname" onerror="x()">' in shown
    assert asked == [] and opened.urls == []
