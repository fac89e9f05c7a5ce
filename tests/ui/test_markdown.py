"""Markdown rendering: every construct a model writes, and nothing it could smuggle in."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PySide6.QtCore import QUrl
from PySide6.QtGui import QTextDocument, QTextFormat, QTextTable
from pytestqt.qtbot import QtBot

from app.ui.messages import markdown
from app.ui.messages.markdown import BlockSplitter, Theme, render
from app.ui.messages.message_widget import MessageText

LIGHT = Theme()
DARK = Theme(dark=True, text="#e6e6e6", muted="#9a9aa3", link="#58a6ff",
             code_background="#232327", code_header="#2c2c31", border="#34343a",
             inline_code="#2c2c31")


def document(text: str, theme: Theme = LIGHT) -> QTextDocument:
    """The message as Qt holds it after rendering."""
    doc = QTextDocument()
    doc.setDefaultStyleSheet(markdown.document_stylesheet(theme))
    doc.setHtml(render(text, theme).html)
    return doc


def fragments(doc: QTextDocument) -> list[tuple[str, QTextFormat]]:
    out = []
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            out.append((fragment.text(), fragment.charFormat()))
            it += 1
        block = block.next()
    return out


def anchors(doc: QTextDocument) -> dict[str, str]:
    """Link text -> address, for every link in the document."""
    found: dict[str, str] = {}
    for text, fmt in fragments(doc):
        if fmt.toCharFormat().isAnchor():
            found[text] = fmt.toCharFormat().anchorHref()
    return found


def tables(doc: QTextDocument) -> list[QTextTable]:
    out = []
    for frame in doc.rootFrame().childFrames():
        if isinstance(frame, QTextTable):
            out.append(frame)
    return out


# Constructs ------------------------------------------------------------------------

def test_paragraphs_and_emphasis(qtbot: QtBot) -> None:
    doc = document("First paragraph with **bold** and *italic*.\n\nSecond paragraph.")
    assert doc.toPlainText().split("\n") == [
        "First paragraph with bold and italic.", "Second paragraph."]
    weights = {text: fmt.toCharFormat().fontWeight() for text, fmt in fragments(doc)}
    assert weights["bold"] > weights["First paragraph with "]


def test_lists_keep_their_items(qtbot: QtBot) -> None:
    doc = document("- apples\n- pears\n\n1. one\n2. two\n3. three")
    lists = {id(b.textList()): b.textList() for b in _blocks(doc) if b.textList()}
    assert sorted(lst.count() for lst in lists.values()) == [2, 3]
    assert "pears" in doc.toPlainText()


def test_table_cells_are_real_cells(qtbot: QtBot) -> None:
    doc = document("| Name | Size |\n|---|--:|\n| a.gguf | 98 MB |\n| b.gguf | 253 MB |")
    (table,) = tables(doc)
    assert (table.rows(), table.columns()) == (3, 2)
    cell = table.cellAt(2, 1)
    text = doc.toPlainText()[cell.firstPosition():cell.lastPosition()]
    assert text == "253 MB"


def test_links_keep_their_address(qtbot: QtBot) -> None:
    doc = document("See [the docs](https://example.org/guide) or <mailto:help@example.org>.")
    assert anchors(doc) == {"the docs": "https://example.org/guide",
                            "mailto:help@example.org": "mailto:help@example.org"}


def test_inline_code_is_monospaced(qtbot: QtBot) -> None:
    doc = document("Call `load_model()` first.")
    formats = {text: fmt.toCharFormat() for text, fmt in fragments(doc)}
    families = formats["load_model()"].fontFamilies() or []
    assert LIGHT.mono_family in families
    assert formats["load_model()"].background() != formats["Call "].background()


def test_code_block_is_highlighted_and_copyable(qtbot: QtBot) -> None:
    code = 'def greet(name):\n    return f"Hello, {name}"\n'
    rendered = render(f"```python\n{code}```", LIGHT)
    assert rendered.code_blocks == (code,)
    assert f'href="{markdown.COPY_CODE_PREFIX}0"' in rendered.html
    doc = document(f"```python\n{code}```")
    colours = {text.strip(): fmt.toCharFormat().foreground().color().name()
               for text, fmt in fragments(doc)}
    assert colours["def"] != colours["greet"], "keywords and names get their own colours"
    assert "return f\"Hello, {name}\"" in doc.toPlainText()


def test_dark_palette_gets_dark_colours(qtbot: QtBot) -> None:
    code = "```python\nimport os\n```"
    light, dark = render(code, LIGHT).html, render(code, DARK).html
    assert LIGHT.code_background in light and DARK.code_background in dark
    assert _span_colours(light) != _span_colours(dark)


def test_unknown_language_is_shown_plain(qtbot: QtBot) -> None:
    rendered = render("```no-such-language\nx = 1\n```", LIGHT)
    assert "x = 1" in rendered.html and "<span style=\"color" not in rendered.html


# Untrusted input -------------------------------------------------------------------

def test_raw_html_is_shown_as_text(qtbot: QtBot) -> None:
    doc = document("Hi <b>there</b> <script>alert(1)</script> <img src=x onerror=y>")
    assert doc.toPlainText() == "Hi <b>there</b> <script>alert(1)</script> <img src=x onerror=y>"
    assert all(fmt.toCharFormat().fontWeight() <= 400 for _, fmt in fragments(doc))


@pytest.mark.parametrize("address", [
    "javascript:alert(1)", "JavaScript:alert(1)", "file:///etc/passwd",
    "data:text/html,<b>x</b>", "vbscript:msgbox", "fireside:copy/0", "relative/page.html",
])
def test_unsafe_addresses_are_not_links(qtbot: QtBot, address: str) -> None:
    doc = document(f"[click me]({address}) and <{address}>")
    assert anchors(doc) == {}
    assert "click me" in doc.toPlainText()


@pytest.mark.parametrize("address", ["https://example.org/cat.png", "file:///etc/hostname",
                                     "data:image/png;base64,iVBORw0KGgo="])
def test_images_are_never_loaded(qtbot: QtBot, address: str) -> None:
    rendered = render(f"Look: ![a cat]({address})", LIGHT)
    assert "<img" not in rendered.html
    doc = document(f"Look: ![a cat]({address})")
    assert not any(fmt.isImageFormat() for _, fmt in fragments(doc))
    if address.startswith("https:"):  # shown as a link the user may choose to open
        assert anchors(doc) == {"a cat": address}
    else:
        assert anchors(doc) == {}


class _RecordingText(MessageText):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[str, object]] = []

    def loadResource(self, kind: int, name: QUrl) -> object:
        answer = super().loadResource(kind, name)
        self.asked.append((name.toString(), answer))
        return answer


def test_message_text_loads_nothing_even_when_asked(qtbot: QtBot, tmp_path: Path) -> None:
    picture = tmp_path / "secret.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n")
    view = _RecordingText()
    qtbot.addWidget(view)
    # Rendered Markdown never asks for anything ...
    view.setHtml(render(f"![x](https://example.org/a.png) ![y]({picture.as_uri()})",
                        LIGHT).html)
    view.resize(400, 200)
    view.show()
    view.grab()
    assert view.asked == []
    # ... and even raw HTML that would fetch gets nothing back.
    view.setHtml(f'<img src="{picture.as_uri()}"><img src="https://example.org/b.png">')
    view.grab()
    assert view.asked, "Qt asks the view for the images"
    assert all(answer is None for _, answer in view.asked)


# Enormous input --------------------------------------------------------------------

def test_huge_table_is_shown_as_text(qtbot: QtBot) -> None:
    table = "| n | name |\n|---|---|\n" + "".join(f"| {i} | item {i} |\n" for i in range(5000))
    rendered = render(f"Here **it** is:\n\n{table}", LIGHT)
    assert rendered.html.count("<tr") < 10, "no 5,000-row rich table"
    assert "<strong>it</strong>" in rendered.html, "the table leaves the rest Markdown"
    assert "A table of 5,000 rows, shown as text." in rendered.html
    shown = len(re.findall(r"\| \d+ \| item", rendered.html))
    assert "| 0 | item 0 |" in rendered.html and 0 < shown < 5000
    assert f"{5000 - shown:,} more lines not shown. Copy gets the whole block." in rendered.html
    assert rendered.code_blocks == (table.removesuffix("\n"),)


def test_long_table_becomes_copyable_text(qtbot: QtBot) -> None:
    rows = "".join(f"| {i} | x |\n" for i in range(1000))
    rendered = render(f"Here:\n\n| n | v |\n|---|---|\n{rows}", LIGHT)
    assert "A table of 1,000 rows, shown as text." in rendered.html
    assert ">table</span>" in rendered.html, "labelled as what it is"
    assert rendered.html.count("<tr") < 10
    assert rendered.code_blocks[0].endswith("| 999 | x |")


def test_table_within_limit_stays_a_table(qtbot: QtBot) -> None:
    rows = "".join(f"| {i} | x |\n" for i in range(markdown.TABLE_ROW_LIMIT - 1))
    rendered = render(f"| n | v |\n|---|---|\n{rows}", LIGHT)
    assert rendered.html.count("<tr") == markdown.TABLE_ROW_LIMIT


def test_huge_code_block_is_cut_for_display_but_copied_whole(qtbot: QtBot) -> None:
    code = "".join(f"value_{i} = compute({i})\n" for i in range(20_000))
    rendered = render(f"```python\n{code}```", LIGHT)
    assert rendered.code_blocks == (code,)
    assert len(rendered.html) < 3 * markdown.CODE_DISPLAY_LIMIT
    shown = rendered.html.count("value_")
    assert 0 < shown < 20_000
    assert f"{20_000 - shown:,} more lines not shown" in rendered.html
    assert '<span style="color' not in rendered.html, "too long to highlight"


def test_code_budget_is_shared_by_the_blocks_of_a_message(qtbot: QtBot) -> None:
    block = "```python\n" + "x = compute(1)\n" * 600 + "```\n\n"  # ~9,000 characters
    rendered = render(block * 3, LIGHT)
    highlighted = [part.count('<span style="color') > 0
                   for part in rendered.html.split(markdown.COPY_CODE_PREFIX)[1:]]
    assert highlighted == [True, True, False], "colours for the first 20,000 characters"
    big = "```\n" + "y\n" * (markdown.CODE_DISPLAY_BUDGET * 2 // 15) + "```\n\n"  # 4/15 each
    rendered = render(big * 5, LIGHT)
    assert len(rendered.code_blocks) == 5, "each one still copyable whole"
    assert rendered.html.count("more lines not shown") == 2, "the 4th is cut, the 5th empty"
    assert len(rendered.html) < 2 * markdown.CODE_DISPLAY_BUDGET


def test_a_single_enormous_line_is_cut(qtbot: QtBot) -> None:
    line = "[" + "1, " * 100_000 + "]"
    rendered = render(f"```json\n{line}\n```", LIGHT)
    assert rendered.code_blocks == (line + "\n",)
    assert len(rendered.html) < 2 * markdown.CODE_DISPLAY_LIMIT


def test_markdown_around_huge_blocks_still_renders(qtbot: QtBot) -> None:
    code = "x = 1\n" * markdown.CODE_DISPLAY_LIMIT
    table = "| n |\n|---|\n" + "".join(f"| {i} |\n" for i in range(5000))
    text = (f"See [the docs][d].\n\n```python\n{code}```\nThen **this**:\n{table}"
            "- one\n- two\n\n[d]: https://example.org/docs\n")
    rendered = render(text, LIGHT)
    assert rendered.code_blocks == (code, table.removesuffix("\n")), "Copy gets each whole"
    assert f"{markdown.COPY_CODE_PREFIX}1" in rendered.html
    assert "A table of 5,000 rows, shown as text." in rendered.html
    assert "<strong>this</strong>" in rendered.html and "<li>two</li>" in rendered.html
    assert anchors(document(text)) == {"the docs": "https://example.org/docs",
                                       "Copy": f"{markdown.COPY_CODE_PREFIX}1"}


def _parsed_whole(text: str) -> markdown.Rendered:
    """``text`` rendered the slow way: nothing cut out before markdown-it parses it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(markdown, "_cut_big_blocks", lambda source: (source, {}))
        return markdown._render.__wrapped__(text, LIGHT, 0)


_LIMIT, _ROWS = markdown.CODE_DISPLAY_LIMIT, markdown.TABLE_ROW_LIMIT
_MARKDOWN_BLOCKS = st.sampled_from([
    "Some **text** with [a link][ref] and `code`.", "- one\n- two", "> quoted",
    "```python\nx = 1\n```", "~~~\n" + "y\n" * (_LIMIT // 2) + "~~~",  # exactly the limit
    "```python\n" + "y = [1]\n" * (_LIMIT // 8 + 1) + "```",  # just over it
    "~~~~ js\n" + "z;\n" * _LIMIT + "~~~~~",
    "| a | b |\n|:--|--:|\n" + "| 1 | *2* \\| |\n" * (_ROWS - 1),  # the limit, with its head
    "a | b\n--- | ---\n" + "1 | 2\n" * _ROWS + "# After the table",
    "| x |\n|---|\n" + "| `y` |\n" * 3 * _ROWS + "- a list right after",
    "[ref]: https://example.org/ref",
])


@settings(max_examples=40, deadline=None)
@given(st.lists(_MARKDOWN_BLOCKS, min_size=1, max_size=5), st.sampled_from(["\n", "\r\n"]))
def test_blocks_cut_before_parsing_look_as_if_parsed_whole(blocks: list[str],
                                                           newline: str) -> None:
    text = "\n\n".join(blocks).replace("\n", newline)
    assert markdown._render.__wrapped__(text, LIGHT, 0) == _parsed_whole(text)


def test_huge_prose_is_shown_as_plain_text(qtbot: QtBot) -> None:
    text = "A **long** line of prose.\n\n" * (markdown.PROSE_LIMIT // 20)
    rendered = render(text, LIGHT)
    assert "**long**" in rendered.html, "not parsed: plain text"
    small = render(text[:1000], LIGHT)
    assert "<strong>long</strong>" in small.html


def test_large_code_does_not_count_as_prose(qtbot: QtBot) -> None:
    code = "x = 1\n" * (markdown.PROSE_LIMIT // 4)
    rendered = render(f"Some **intro**.\n\n```python\n{code}```\n", LIGHT)
    assert "<strong>intro</strong>" in rendered.html


# Block splitting for streaming -------------------------------------------------------

def test_splitter_commits_a_paragraph_when_the_next_one_starts() -> None:
    splitter = BlockSplitter()
    assert splitter.feed("First paragraph.\n") == 0
    assert splitter.feed("\n") == 0, "a blank line alone does not end the block yet"
    assert splitter.feed("Second") == len("First paragraph.\n\n")


def test_splitter_waits_for_indented_continuations() -> None:
    splitter = BlockSplitter()
    splitter.feed("1. item\n\n    more of the item\n")
    assert splitter.committed == 0


def test_splitter_never_commits_inside_a_fence() -> None:
    splitter = BlockSplitter()
    text = "```python\nx = 1\n\ny = 2\n\n"
    assert splitter.feed(text) == 0
    assert splitter.in_fence
    assert splitter.feed("```\n") == len(text) + 4, "a closing fence completes the block"
    assert not splitter.in_fence


_LINES = st.sampled_from(["Some text.", "", "- item", "    indented", "```python", "```",
                          "~~~", "| a | b |", "|---|---|", "# Title", "x = 1", "  ", "1. one"])


@settings(max_examples=200, deadline=None)
@given(st.lists(_LINES, max_size=30), st.data())
def test_splitter_does_not_depend_on_how_text_is_cut(lines: list[str], data: st.DataObject) -> None:
    text = "\n".join(lines)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=12)))
    whole = BlockSplitter()
    whole.feed(text)
    pieces = BlockSplitter()
    previous, offsets = 0, []
    for cut in [*cuts, len(text)]:
        offsets.append(pieces.feed(text[previous:cut]))
        previous = cut
    assert offsets == sorted(offsets), "commits only move forward"
    assert pieces.committed == whole.committed
    assert pieces.committed <= len(text)
    committed = text[:pieces.committed]
    # What is committed ends at a line start and never inside an open fence.
    assert committed == "" or committed.endswith("\n")
    assert _open_fence(committed) is None


def _open_fence(text: str) -> str | None:
    fence = None
    for line in text.split("\n"):
        match = re.match(r" {0,3}(`{3,}|~{3,})", line)
        if match:
            if fence is None:
                fence = match.group(1)
            elif match.group(1)[0] == fence[0] and line.strip() == line.strip()[0] * len(
                    line.strip()) and len(line.strip()) >= len(fence):
                fence = None
    return fence


def _blocks(doc: QTextDocument) -> list:
    out, block = [], doc.begin()
    while block.isValid():
        out.append(block)
        block = block.next()
    return out


def _span_colours(html: str) -> list[str]:
    return re.findall(r'<span style="color: (#[0-9A-Fa-f]+)', html)
