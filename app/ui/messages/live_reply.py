"""A reply streaming into a QTextDocument at a cost that does not grow with its length.

Completed Markdown blocks are rendered once and stay; the block still being written
is plain text appended at the end with a cursor. When it completes, only that stretch
of the document is replaced by its rendering.
"""

from __future__ import annotations

from PySide6.QtGui import (
    QColor,
    QFont,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
)

from app.ui.messages.markdown import CODE_DISPLAY_LIMIT, LINE_HEIGHT, BlockSplitter, Theme, render

# The unfinished block is shown up to as many characters as its rendering shows of a
# code block, so that completing it replaces little: not a whole 1 MB block.
TAIL_DISPLAY_LIMIT = CODE_DISPLAY_LIMIT
MORE = "\n…"  # shown after the part of a huge unfinished block that is on screen


class LiveReply:
    """Writes a growing Markdown text into ``document`` (which it owns meanwhile)."""

    def __init__(self, document: QTextDocument, theme: Theme) -> None:
        self._doc = document
        self._theme = theme
        self._splitter = BlockSplitter()
        self._done: list[str] = []  # text of the rendered blocks
        self._tail: list[str] = []  # text after them, shown plain
        self._tail_start = 0  # document position where the plain tail begins
        self._tail_shown = 0  # characters of the tail written into the document
        self.code_blocks: list[str] = []
        self._plain = QTextCharFormat()
        self._paragraph = QTextBlockFormat()  # the tail, spaced like rendered prose
        self._paragraph.setLineHeight(LINE_HEIGHT,
                                      QTextBlockFormat.LineHeightTypes.ProportionalHeight.value)
        self._mono = QTextCharFormat()
        self._mono.setFontStyleHint(QFont.StyleHint.Monospace)
        self._code_line = QTextBlockFormat()  # unfinished code: tight lines, code colours
        self._set_colours(theme)
        self._clear()

    def text(self) -> str:
        return "".join(self._done) + "".join(self._tail)

    def append(self, text: str) -> None:
        before = self._splitter.committed
        complete = self._splitter.feed(text)
        if complete == before:
            self._tail.append(text)
            self._write_tail(text)
            return
        tail = "".join(self._tail) + text
        cut = complete - before
        self._render_block(tail[:cut], tail[cut:])

    def restyle(self, theme: Theme) -> None:
        """Render what has arrived again in new colours."""
        self._set_colours(theme)
        done, tail = "".join(self._done), "".join(self._tail)
        self._clear()
        self._done, self._tail = [], []
        self.code_blocks.clear()  # the message holds this very list
        self._tail_start = self._tail_shown = 0
        if done:
            self._render_block(done, tail)
        elif tail:
            self._tail.append(tail)
            self._write_tail(tail)

    def _clear(self) -> None:
        self._doc.clear()
        QTextCursor(self._doc).setBlockFormat(self._paragraph)

    def _render_block(self, block: str, rest: str) -> None:
        rendered = render(block, self._theme, first_code=len(self.code_blocks))
        self.code_blocks.extend(rendered.code_blocks)
        self._done.append(block)
        cursor = QTextCursor(self._doc)
        cursor.beginEditBlock()  # laid out once at the end, not after each change
        cursor.setPosition(self._tail_start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        cursor.insertHtml(rendered.html)
        # The tail gets a fresh, unstyled paragraph of its own.
        cursor.movePosition(QTextCursor.MoveOperation.End)
        if cursor.block().length() > 1:
            cursor.insertBlock(self._paragraph, self._plain)
        else:
            cursor.setBlockFormat(self._paragraph)
            cursor.setBlockCharFormat(self._plain)
        self._tail_start = cursor.position()
        self._tail = [rest] if rest else []
        self._tail_shown = 0
        if rest:
            self._write_tail(rest)
        cursor.endEditBlock()

    def _write_tail(self, text: str) -> None:
        room = TAIL_DISPLAY_LIMIT - self._tail_shown
        if room <= 0:
            return
        shown = text[:room]
        self._tail_shown += len(text)
        self._write_plain(shown + (MORE if len(shown) < len(text) else ""),
                          self._splitter.in_fence)

    def _write_plain(self, text: str, in_code: bool) -> None:
        cursor = QTextCursor(self._doc)
        cursor.movePosition(QTextCursor.MoveOperation.End)
        char, block = (self._mono, self._code_line) if in_code else (self._plain,
                                                                    self._paragraph)
        # A lone "\r" would start a paragraph of its own; the final render keeps it.
        first, *lines = text.replace("\r", "").split("\n")
        cursor.beginEditBlock()
        cursor.insertText(first, char)
        for line in lines:
            cursor.insertBlock(block, char)
            if line:
                cursor.insertText(line, char)
        cursor.endEditBlock()

    def _set_colours(self, theme: Theme) -> None:
        self._theme = theme
        self._mono.setFontFamilies([theme.mono_family])
        self._code_line.setBackground(QColor(theme.code_background))
