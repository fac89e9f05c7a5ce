"""Markdown to HTML for Qt's rich-text engine, safe for untrusted model output.

Model output is untrusted: raw HTML in it is shown as text (markdown-it with ``html``
off), only http, https and mailto addresses become links, and an image becomes a link
to its address, so nothing is ever fetched. Qt lays a document out in one go on the
GUI thread, so very large inputs are cut down to what stays responsive (limits below);
a code block's Copy link always gets the whole block.

Also here: ``BlockSplitter``, which tells where the completed blocks of a streaming
Markdown text end, so a reply can render each block once as it arrives.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from html import escape
from typing import Any, NamedTuple

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

SAFE_SCHEMES = frozenset({"http", "https", "mailto"})
COPY_CODE_PREFIX = "fireside:copy/"  # + block index: the Copy link of a code block

# Limits, measured on a 2-core machine: markdown-it parses prose at ~2 µs a character,
# Pygments highlights at ~1 µs, Qt lays out what is shown at ~0.4 µs. Code blocks and
# tables too long to show whole are cut out before parsing (a 1 MB block renders in
# 5 ms, not 40; a 5,000-row table in 3 ms, not 0.7 s), so they cost what is shown:
# 20,000 characters of code lay out in ~8 ms, once as the block completes in a
# streamed reply and once in its final render, which may fall between the same two
# frames. Beyond the limits content is still shown, only plainer.
PROSE_LIMIT = 40_000  # characters outside code blocks; a longer message is plain text
HIGHLIGHT_LIMIT = 20_000  # characters of code in one message that get syntax colours
CODE_DISPLAY_LIMIT = 20_000  # characters of one code block shown; Copy still gets all
CODE_DISPLAY_BUDGET = 60_000  # characters of code shown in one message
TABLE_ROW_LIMIT = 200  # a longer table is shown as its source text
PLAIN_DISPLAY_LIMIT = 200_000  # characters of a plain-text message shown

LINE_HEIGHT = 130  # percent, for prose; code stays tight

_FENCE_OPEN = re.compile(r"( {0,3})(`{3,}|~{3,})(.*)$")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t\r]*$")
# Lines that may open or close a fence, or be the delimiter row under a table's head,
# with the "\n" before them: a literal start lets the scan skip ahead quickly.
_BLOCK_LINE = re.compile(r"\n( {0,3}(?:(?:`{3,}|~{3,}).*|[|:-][-:| \t]*$))", re.M)
_TABLE_CELL = re.compile(r":?-+:?")
_PIPE = re.compile(r"(?<!\\)\|")
# Where a table ends, as markdown-it ends one: at a blank line, indented code, or a line
# that starts a quote, heading, list, rule or fence.
_TABLE_END = re.compile(r"""\n(?: [ \t]*$ | \ {0,3}\t | \ {4}
    | \ {0,3}(?: > | \#{1,6}(?:[ \t]|$) | (?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)
               | (?:[-*_][ \t]*){3,}$ | `{3,}[^`\n]*$ | ~{3} ))""", re.M | re.X)


@dataclass(frozen=True)
class Theme:
    """The colours a rendered message uses; the view derives them from its palette."""

    dark: bool = False
    text: str = "#1f2328"
    muted: str = "#656d76"
    link: str = "#0969da"
    code_background: str = "#f6f8fa"
    code_header: str = "#eaeef2"
    border: str = "#d0d7de"
    inline_code: str = "#eceff2"
    mono_family: str = "monospace"

    @property
    def pygments_style(self) -> str:
        return "github-dark" if self.dark else "default"


@dataclass(frozen=True)
class Rendered:
    html: str
    code_blocks: tuple[str, ...]  # raw code of each block, by its Copy link's index


def is_safe_link(url: str) -> bool:
    """True for the only addresses that may become clickable: http, https, mailto."""
    scheme, sep, _ = url.strip().partition(":")
    return bool(sep) and scheme.lower() in SAFE_SCHEMES


def document_stylesheet(theme: Theme) -> str:
    """The default stylesheet of a message's QTextDocument."""
    return (
        f"a {{ color: {theme.link}; }}"
        f" code {{ font-family: '{theme.mono_family}', monospace;"
        f" background-color: {theme.inline_code}; }}"
        f" pre {{ font-family: '{theme.mono_family}', monospace; }}"
        " p, ul, ol { margin-top: 0px; margin-bottom: 10px; }"
        f" p, li {{ line-height: {LINE_HEIGHT}%; }}"
        " li { margin-bottom: 3px; }"
        " h1 { font-size: x-large; margin-top: 14px; margin-bottom: 8px; }"
        " h2 { font-size: large; margin-top: 14px; margin-bottom: 8px; }"
        " h3, h4, h5, h6 { font-size: medium; margin-top: 12px; margin-bottom: 6px; }"
        f" blockquote {{ color: {theme.muted}; margin-left: 14px; margin-right: 0px; }}"
        " th { font-weight: bold; }"
    )


def render(text: str, theme: Theme, first_code: int = 0) -> Rendered:
    """Render ``text`` as HTML; Copy links of code blocks count from ``first_code``.

    Cached: reopening a conversation, switching palettes back or finishing a reply that
    is one block renders nothing twice.
    """
    return _render(text, theme, first_code)  # one cache key however it is called


@lru_cache(maxsize=128)
def _render(text: str, theme: Theme, first_code: int) -> Rendered:
    source, cuts = _cut_big_blocks(_normalise(text))
    if _prose_length(source) > PROSE_LIMIT:
        return Rendered(_plain_html(text, theme), ())
    env: dict[str, Any] = {"theme": theme, "code": [], "first_code": first_code,
                           "highlight": HIGHLIGHT_LIMIT, "display": CODE_DISPLAY_BUDGET}
    tokens = _shrink_tables(_MD.parse(source, env), source)
    if cuts:  # each empty fence standing in for a block gets the block back
        tokens = [cuts.get(t.map[0], t) if t.type == "fence" and t.map else t
                  for t in tokens]
    html = _MD.renderer.render(tokens, _MD.options, env).rstrip()  # Qt shows a trailing "\n"
    return Rendered(html, tuple(env["code"]))


class BlockSplitter:
    """Finds where the completed Markdown blocks of a growing text end.

    ``feed`` takes each new piece and returns how many characters from the start
    now form complete blocks. A block is complete once a blank line outside a code
    fence is followed by an unindented line (indented lines may still belong to a
    list item), or when a top-level code fence closes. Work per piece is linear in
    the piece, never in the text so far.
    """

    _HEAD = 80  # characters of a line kept to recognise fences

    def __init__(self) -> None:
        self.committed = 0
        self._length = 0
        self._line_start = 0
        self._head = ""
        self._line_blank = True
        self._after_blank = False
        self._fence: _Fence | None = None

    @property
    def in_fence(self) -> bool:
        return self._fence is not None

    def feed(self, piece: str) -> int:
        start = 0
        while True:
            newline = piece.find("\n", start)
            end = len(piece) if newline < 0 else newline
            if end > start:
                self._add_to_line(piece[start:end], self._length + start)
            if newline < 0:
                break
            self._end_line(self._length + newline + 1)
            start = newline + 1
        self._length += len(piece)
        return self.committed

    def _add_to_line(self, chunk: str, offset: int) -> None:
        if offset == self._line_start and self._after_blank and self._fence is None \
                and chunk[0] not in " \t":
            self.committed = self._line_start
            self._after_blank = False
        if len(self._head) < self._HEAD:
            self._head += chunk[: self._HEAD - len(self._head)]
        if self._line_blank and chunk.strip():
            self._line_blank = False

    def _end_line(self, next_start: int) -> None:
        head = self._head
        if self._fence is not None:
            if _closes(head, self._fence):
                if self._fence.indent == 0:
                    self.committed = next_start
                self._fence = None
        elif self._line_blank:
            self._after_blank = next_start - 1 > self.committed
        else:
            self._after_blank = False
            self._fence = _opens(head.rstrip("\r"))
        self._line_start = next_start
        self._head = ""
        self._line_blank = True


# Rendering ------------------------------------------------------------------------

class _Fence(NamedTuple):
    char: str
    length: int
    indent: int
    info: str


def _opens(line: str) -> _Fence | None:
    """The fence ``line`` opens, if it opens one."""
    match = _FENCE_OPEN.match(line)
    if not match or (match[2][0] == "`" and "`" in match[3]):  # no "`" after "```"
        return None
    return _Fence(match[2][0], len(match[2]), len(match[1]), match[3])


def _closes(line: str, fence: _Fence) -> bool:
    match = _FENCE_CLOSE.match(line)
    return match is not None and match[1][0] == fence.char and len(match[1]) >= fence.length


class _Block(NamedTuple):
    """A fenced code block or a table, as offsets into the text."""

    start: int  # of its first line
    body: int  # where what Copy gets starts: the code, or the table from its head
    end: int  # where that ends
    stop: int  # after its last line
    fence: _Fence | None  # None for a table
    rows: int = 0  # of a table, its head included


def _blocks(text: str) -> Iterator[_Block]:
    """The fenced code blocks and tables of ``text``, in order.

    Linear, and quick even for megabytes: only lines that may open or close a fence or
    be a table's delimiter row are looked at in Python.
    """
    fence: _Fence | None = None
    opening = resume = 0  # where the open fence starts; where the last table ends
    for line in _BLOCK_LINE.finditer("\n" + text):
        start = line.start()  # of the "\n" before it, so of the line in ``text``
        if fence is not None:
            if _closes(line[1][:80], fence):
                yield _Block(opening, _after(text, opening), start, _after(text, start), fence)
                fence = None
        elif start < resume:
            continue
        elif (fence := _opens(line[1][:80])) is not None:
            opening = start
        elif (table := _table(text, start)) is not None and table.start >= resume:
            yield table
            resume = table.stop
    if fence is not None:
        yield _Block(opening, _after(text, opening), len(text), len(text), fence)


def _after(text: str, start: int) -> int:
    """Where the line after the one at ``start`` begins."""
    newline = text.find("\n", start)
    return len(text) if newline < 0 else newline + 1


def _table(text: str, delimiter: int) -> _Block | None:
    """The table whose delimiter row starts at ``delimiter``, if its head is unindented."""
    if delimiter == 0:
        return None
    head = text.rfind("\n", 0, delimiter - 1) + 1
    line = text[head:delimiter - 1]
    if "|" not in line or line[0] in " \t":
        return None
    cells = _PIPE.split(line.strip())
    if cells and cells[0] == "":
        cells.pop(0)
    if cells and cells[-1] == "":
        cells.pop()
    body = _after(text, delimiter)
    if not cells or len(cells) != _columns(text[delimiter:body].strip()):
        return None
    end = _TABLE_END.search(text, body - 1)
    stop = end.start() + 1 if end else len(text)
    unended = stop == len(text) > body and not text.endswith("\n")  # a last row with no "\n"
    return _Block(head, head, stop, stop, None, 1 + text.count("\n", body, stop) + unended)


def _columns(row: str) -> int:
    """How many columns a table's delimiter row sets (0: it is not one)."""
    if len(row) < 2 or row[1] not in "|-: \t" or row.startswith(("- ", "-\t")):
        return 0
    cells = row.split("|")  # an empty cell is allowed only at either end
    cells = [c.strip() for i, c in enumerate(cells) if c.strip() or 0 < i < len(cells) - 1]
    return len(cells) if all(_TABLE_CELL.fullmatch(cell) for cell in cells) else 0


def _prose_length(text: str) -> int:
    """Characters outside fenced code: what markdown-it's slow inline parser sees."""
    if len(text) <= PROSE_LIMIT:
        return len(text)
    return len(text) - sum(b.end - b.body for b in _blocks(text) if b.fence)


def _normalise(text: str) -> str:
    """Line ends and NULs as markdown-it reads them, so that lines are numbered alike."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text.replace("\0", "\ufffd") if "\0" in text else text


def _cut_big_blocks(text: str) -> tuple[str, dict[int, Token]]:
    """``text`` with each code block or table too long to show whole replaced by an
    empty fence, and the token each of those fences stands for, by its line.

    markdown-it would spend long on what is not shown. Only blocks whose first line is
    unindented are cut: such a line starts a top-level block wherever it stands (except
    a table right under a list item or quote, which markdown-it would read as more of
    its paragraph); a huge block inside a list or quote is parsed and cut afterwards.
    """
    parts: list[str] = []
    cuts: dict[int, Token] = {}
    done = line = 0
    for block in _blocks(text):
        if block.fence is None and block.rows > TABLE_ROW_LIMIT:
            token = _big_table(text[block.body:block.end].removesuffix("\n"), block.rows)
        elif block.fence and block.fence.indent == 0 \
                and block.end - block.body > CODE_DISPLAY_LIMIT:
            token = Token("fence", "code", 0, info=block.fence.info,
                          content=text[block.body:block.end])
        else:
            continue
        parts.append(text[done:block.start])
        line += text.count("\n", done, block.start)
        cuts[line] = token
        parts.append("```\n```\n")
        line += 2
        done = block.stop
    if not cuts:
        return text, cuts
    parts.append(text[done:])
    return "".join(parts), cuts


def _plain_html(text: str, theme: Theme) -> str:
    shown, note = text, ""
    if len(text) > PLAIN_DISPLAY_LIMIT:
        shown = text[:PLAIN_DISPLAY_LIMIT]
        note = _note(f"{len(text) - len(shown):,} more characters not shown."
                     " Copy the message to get all of it.", theme)
    return f'<p style="white-space: pre-wrap;">{escape(shown, quote=False)}</p>{note}'


def _note(text: str, theme: Theme) -> str:
    return f'<p style="color: {theme.muted}; font-style: italic;">{escape(text)}</p>'


def _code_block(code: str, language: str, env: dict[str, Any], label: str = "") -> str:
    theme: Theme = env["theme"]
    index = env["first_code"] + len(env["code"])
    env["code"].append(code)
    shown, note = code, ""
    limit = min(CODE_DISPLAY_LIMIT, env["display"])
    if len(code) > limit:
        cut = code.rfind("\n", 0, limit) + 1 or limit  # a single huge line is cut
        shown = code[:cut]
        hidden = code.count("\n", cut) + (not code.endswith("\n"))
        note = f"{hidden:,} more lines not shown. Copy gets the whole block."
    env["display"] -= len(shown)
    if not note and len(shown) <= env["highlight"]:  # only a whole block gets colours
        env["highlight"] -= len(shown)
        body = _highlight(shown.removesuffix("\n"), language, theme)
    else:
        body = escape(shown.removesuffix("\n"), quote=False)
    label = escape(label or language or "code")
    edge = f"1px solid {theme.border}"
    head = f"padding: 4px 12px; background-color: {theme.code_header}; border-top: {edge};"
    note_row = (
        f'<tr><td colspan="2" style="padding: 0px 12px 8px 12px; color: {theme.muted};'
        f" font-style: italic; background-color: {theme.code_background};"
        f' border: {edge}; border-top: none;">{escape(note)}</td></tr>' if note else "")
    # Borders per cell: a table border would also draw one between the header cells.
    return (
        f'<table width="100%" cellspacing="0" cellpadding="0" border="0"'
        f' style="border-collapse: collapse; margin-top: 4px; margin-bottom: 12px;">'
        f'<tr><td style="{head} border-left: {edge}; color: {theme.muted};">'
        f'<span style="font-size: small;">{label}</span></td>'
        f'<td align="right" style="{head} border-right: {edge};">'
        f'<a href="{COPY_CODE_PREFIX}{index}" title="Copy this code"'
        f' style="color: {theme.muted}; text-decoration: none; font-size: small;">Copy</a>'
        f"</td></tr>"
        f'<tr><td colspan="2" style="padding: 10px 12px;'
        f' background-color: {theme.code_background}; border: {edge};">'
        f'<pre style="white-space: pre-wrap; margin: 0px;">{body}</pre></td></tr>'
        f"{note_row}</table>\n"
    )


def _highlight(code: str, language: str, theme: Theme) -> str:
    lexer = _lexer(language.lower()) if language else None
    if lexer is None:
        return escape(code, quote=False)
    return str(highlight(code, lexer, _formatter(theme.pygments_style))).removesuffix("\n")


@lru_cache(maxsize=64)
def _lexer(language: str) -> Lexer | None:
    try:
        return get_lexer_by_name(language, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None


@lru_cache(maxsize=4)
def _formatter(style: str) -> HtmlFormatter[str]:
    # Building one turns the whole style into CSS: worth doing once per style.
    return HtmlFormatter(noclasses=True, nowrap=True, style=style)


def _shrink_tables(tokens: list[Token], text: str) -> list[Token]:
    """Replace tables too long for Qt's table layout by their source text.

    Top-level ones are already cut before parsing; this catches those in a list or quote.
    """
    out: list[Token] = []
    lines: list[str] | None = None
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.type == "table_open" and token.map:
            close = next(i for i in range(index, len(tokens))
                         if tokens[i].type == "table_close" and tokens[i].level == token.level)
            rows = sum(t.type == "tr_open" for t in tokens[index:close])
            if rows > TABLE_ROW_LIMIT:
                if lines is None:
                    lines = text.split("\n")
                out.append(_big_table("\n".join(lines[token.map[0]:token.map[1]]), rows))
                index = close + 1
                continue
        out.append(token)
        index += 1
    return out


def _big_table(source: str, rows: int) -> Token:
    """A table shown as its source text."""
    return Token("big_table", "", 0, content=source, meta={"rows": rows})


class _Renderer(RendererHTML):
    """HTML that Qt's rich-text engine lays out well, and nothing it could fetch."""

    def fence(self, tokens: Any, idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        language = token.info.strip().split(maxsplit=1)[0] if token.info.strip() else ""
        return _code_block(token.content, language, env)

    def code_block(self, tokens: Any, idx: int, options: Any, env: Any) -> str:
        return _code_block(tokens[idx].content, "", env)

    def big_table(self, tokens: Any, idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        rows = token.meta["rows"] - 1  # its head aside
        note = _note(f"A table of {rows:,} rows, shown as text.", env["theme"])
        return note + _code_block(token.content, "", env, label="table")

    def image(self, tokens: Any, idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        alt = self.renderInlineAsText(token.children or [], options, env)
        src = str(token.attrGet("src") or "")
        label = escape(alt or src or "image")
        if is_safe_link(src):
            return (f'<a href="{escape(src)}" title="Image (not loaded): {escape(src)}">'
                    f"{label}</a>")
        return label

    def link_open(self, tokens: Any, idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        # Hovering shows where the link really goes, not a title the model chose.
        token.attrSet("title", str(token.attrGet("href") or ""))
        return self.renderToken(tokens, idx, options, env)

    def table_open(self, tokens: Any, idx: int, options: Any, env: Any) -> str:
        theme: Theme = env["theme"]
        return (f'<table border="1" cellspacing="0" cellpadding="6" style="border-collapse:'
                f" collapse; border-style: solid; border-color: {theme.border};"
                f' margin-top: 4px; margin-bottom: 12px;">\n')


def _make_parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}, renderer_cls=_Renderer)
    md.enable(["table", "strikethrough"])
    # Stricter than markdown-it's own check: anything but http(s)/mailto stays text.
    md.validateLink = is_safe_link  # type: ignore[method-assign]
    return md


_MD = _make_parser()
