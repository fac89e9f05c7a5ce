"""Files read into sections: plain text, Markdown, code, HTML, PDF and Word (.docx).

``kind_of(path)`` says which of these a file is (None: not a document Fireside reads);
``read(path)`` gives its ``Section``s in reading order, each with the page, line and
heading that locate it, or raises ``Unreadable`` with a sentence for the user. Text-like
files may also come gzip-compressed (``.gz``: changelogs, man pages).
"""

from __future__ import annotations

import codecs
import gzip
import re
import stat
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docx.table import Table

MAX_FILE_BYTES = 50 * 1024 * 1024
SNIFF_BYTES = 8192  # the head read to tell text from binary

_SUFFIXES = {
    "text": ".txt .text .rst .org .adoc .asciidoc .log .csv .tsv .tex .srt .vtt .nfo",
    "markdown": ".md .markdown .mdown .mkd .mkdn",
    "html": ".html .htm .xhtml",
    "pdf": ".pdf",
    "docx": ".docx",
    "code": (
        ".py .pyi .pyx .c .h .cc .cpp .cxx .hpp .hh .hxx .rs .go .java .kt .kts .scala .swift"
        " .m .mm .cs .fs .js .mjs .cjs .jsx .ts .tsx .rb .php .pl .pm .lua .r .jl .sh .bash"
        " .zsh .fish .ps1 .bat .cmd .sql .css .scss .sass .less .vue .svelte .dart .ex .exs"
        " .erl .hrl .hs .ml .mli .clj .cljs .el .lisp .scm .zig .nim .cmake .mk .gradle .tf"
        " .proto .graphql .json .jsonc .yaml .yml .toml .ini .cfg .conf .xml .diff .patch"
    ),
}
_KIND_BY_SUFFIX = {suffix: kind for kind, names in _SUFFIXES.items() for suffix in names.split()}
_CODE_NAMES = {"makefile", "gnumakefile", "dockerfile", "containerfile", "justfile",
               "rakefile", "gemfile", "vagrantfile", "cmakelists.txt"}
# Formats people often mean as documents but Fireside does not read: a pointer beats
# "not a text document".
_OTHER_FORMATS = {".doc": "an old Word file", ".odt": "an OpenDocument file",
                  ".rtf": "a Rich Text file", ".pages": "a Pages file",
                  ".epub": "an e-book", ".xlsx": "a spreadsheet", ".xls": "a spreadsheet",
                  ".ods": "a spreadsheet", ".pptx": "a slide show", ".ppt": "a slide show"}
_TEXT_KINDS = ("text", "markdown", "code", "html")

# PDFium may not be entered from two threads at once, not even for different documents.
_PDFIUM_LOCK = threading.Lock()


@dataclass(frozen=True)
class Section:
    """A paragraph-sized piece of a document, in reading order. A heading is a section of
    its own, whose text is its heading."""

    text: str
    page: int | None = None  # 1-based PDF page
    first_line: int | None = None  # 1-based line of the file where the text starts
    heading: str | None = None  # the nearest heading above it


class Unreadable(Exception):
    """A file Fireside cannot take; str() is a full sentence for the user that names the
    file and why."""

    def __init__(self, path: Path, sentence: str) -> None:
        super().__init__(sentence)
        self.path = path


def kind_of(path: Path) -> str | None:
    """The kind of document: "text", "markdown", "code", "html", "pdf" or "docx"; None when
    Fireside does not read it. Decided by the name, else by the first bytes (UTF-8 without
    NUL bytes is text)."""
    name = path.name.lower()
    if name.endswith(".gz"):
        inner = _kind_by_name(name[:-3])
        if inner in ("pdf", "docx"):
            return None
        try:
            with gzip.open(path, "rb") as file:
                head = file.read(SNIFF_BYTES)
        except (OSError, EOFError, zlib.error):
            return None
        return inner or _sniff(head)
    kind = _kind_by_name(name)
    if kind is not None or path.suffix.lower() in _OTHER_FORMATS:
        return kind
    try:
        with path.open("rb") as file:
            return _sniff(file.read(SNIFF_BYTES))
    except OSError:
        return None


def read(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> list[Section]:
    """The file's sections in reading order; an empty list for an empty file.

    Raises Unreadable for a file that is missing, not allowed, a folder, over
    ``max_bytes``, binary, protected by a password, damaged, or a PDF without text.
    """
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise Unreadable(path, f"{_quoted(path)} is a folder, not a document.")
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable(path, f"{_quoted(path)} is not a document but a device or a "
                                   f"pipe.")
        if info.st_size > max_bytes:
            raise Unreadable(path, f"{_quoted(path)} is {_size(info.st_size)}; Fireside reads "
                                   f"documents of up to {_size(max_bytes)}.")
        if info.st_size == 0:
            return []
        name = path.name.lower()
        packed = name.endswith(".gz")
        kind = _kind_by_name(name[:-3] if packed else name)
        if kind == "pdf" and not packed:
            return _read_pdf(path)
        if kind == "docx" and not packed:
            return _read_docx(path)
        data = _read_bytes(path, max_bytes)
    except OSError as error:
        raise Unreadable(path, _os_sentence(path, error)) from error
    return _text_like_sections(path, kind, data)


def _text_like_sections(path: Path, kind: str | None, data: bytes) -> list[Section]:
    if not data:
        return []
    if kind is None and path.suffix.lower() not in _OTHER_FORMATS:
        kind = _sniff(data[:SNIFF_BYTES])
    elif kind not in _TEXT_KINDS or _is_binary(data):
        kind = None
    if kind is None:
        raise Unreadable(path, _not_text(path))
    if kind == "html":
        return _html_sections(data)
    return _LINE_READERS[kind](_lines(_decode(data)))


# Names, bytes and their text ------------------------------------------------------------


def _kind_by_name(name: str) -> str | None:
    if name in _CODE_NAMES:
        return "code"
    dot = name.rfind(".")
    return _KIND_BY_SUFFIX.get(name[dot:]) if dot > 0 else None


def _sniff(head: bytes) -> str | None:
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "text"
    if not head or b"\x00" in head:
        return None
    try:
        # final=False: the head may end inside a character.
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return None
    return "text"


def _read_bytes(path: Path, max_bytes: int) -> bytes:
    if not path.name.lower().endswith(".gz"):
        return path.read_bytes()
    try:
        with gzip.open(path, "rb") as file:
            data = file.read(max_bytes + 1)
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise Unreadable(path, f"{_quoted(path)} is damaged: it could not be unpacked.") \
            from error
    if len(data) > max_bytes:
        raise Unreadable(path, f"{_quoted(path)} unpacks to more than {_size(max_bytes)}, "
                               f"the most Fireside reads.")
    return data


def _is_binary(data: bytes) -> bool:
    head = data[:SNIFF_BYTES]
    return b"\x00" in head and not head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))


def _decode(data: bytes) -> str:
    """UTF-8 (a few damaged bytes replaced); a file with no valid UTF-8 beyond ASCII is
    taken as Windows-1252, the usual legacy encoding, or Latin-1 where that fails."""
    if data.startswith(codecs.BOM_UTF8):
        return data[3:].decode("utf-8", "replace")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", "replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
    damaged = text.count("\ufffd")
    beyond_ascii = len(text) - len(text.encode("ascii", "ignore")) - damaged
    if beyond_ascii > damaged:
        return text
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _lines(text: str) -> list[str]:
    # Editors count a lone CR as a line end too; form feeds and other separators that
    # str.splitlines() honours are not line ends to them.
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


# Plain text, code and Markdown -----------------------------------------------------------


def _text_sections(lines: list[str]) -> list[Section]:
    """Paragraphs between blank lines."""
    return list(_blocks(lines, lambda _line: True))


def _code_sections(lines: list[str]) -> list[Section]:
    """Top-level blocks: a blank line followed by a line at the left margin; blank lines
    inside an indented body (a class's methods) keep it whole."""
    return list(_blocks(lines, lambda line: not line[:1].isspace()))


def _blocks(lines: list[str], breaks: Callable[[str], bool]) -> Iterator[Section]:
    """Runs of lines between blank lines; ``breaks(line)`` says whether a line after a
    blank one starts a new block."""
    start: int | None = None  # index of the block's first line
    end = 0  # one past its last non-blank line
    for index, raw in enumerate(lines):
        line = raw.rstrip()
        if not line:
            continue
        if start is not None and end < index and breaks(line):
            yield Section(_joined(lines[start:end]), first_line=start + 1)
            start = None
        if start is None:
            start = index
        end = index + 1
    if start is not None:
        yield Section(_joined(lines[start:end]), first_line=start + 1)


def _joined(lines: list[str]) -> str:
    return "\n".join(line.rstrip() for line in lines)


_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")


def _markdown_sections(lines: list[str]) -> list[Section]:
    """Headings (# and underlined) as their own sections, the paragraphs below them
    carrying the heading; a fenced block stays one paragraph, and a # in it is no heading."""
    sections: list[Section] = []
    heading: str | None = None
    para: list[str] = []
    para_start = 0
    fence = ""

    def flush() -> None:
        if para:
            sections.append(Section(_joined(para), first_line=para_start + 1, heading=heading))
            para.clear()

    for index, raw in enumerate(lines):
        line = raw.rstrip()
        opened = _FENCE.match(line)
        if fence:
            para.append(line)
            if opened and opened.group(1).startswith(fence):
                fence = ""
            continue
        if opened:
            fence = opened.group(1)
        atx = None if opened else _ATX.match(line)
        if atx is not None and atx.group(2):
            flush()
            heading = atx.group(2).strip()
            sections.append(Section(heading, first_line=index + 1, heading=heading))
        elif len(para) == 1 and _SETEXT.match(line) and not _FENCE.match(para[0]):
            heading = para[0].strip()
            sections.append(Section(heading, first_line=para_start + 1, heading=heading))
            para.clear()
        elif not line:
            flush()
        else:
            if not para:
                para_start = index
            para.append(line)
    flush()
    return sections


_LINE_READERS: dict[str, Callable[[list[str]], list[Section]]] = {
    "text": _text_sections,
    "code": _code_sections,
    "markdown": _markdown_sections,
}


# HTML -------------------------------------------------------------------------------------

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
# As browsers do (WHATWG): these labels mean Windows-1252.
_AS_CP1252 = {"iso-8859-1", "iso8859-1", "latin-1", "latin1", "ascii", "us-ascii"}


def _html_sections(data: bytes) -> list[Section]:
    parser = _HTMLText()
    parser.feed(_html_decode(data))
    parser.close()
    return parser.sections


def _html_decode(data: bytes) -> str:
    if data.startswith((codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return _decode(data)
    found = _META_CHARSET.search(data[:4096])
    if found:
        label = found.group(1).decode("ascii").lower()
        label = "cp1252" if label in _AS_CP1252 else label
        try:
            return data.decode(codecs.lookup(label).name, "replace")
        except LookupError:
            pass
    return _decode(data)


class _HTMLText(HTMLParser):
    """The visible text of a page in blocks, headings apart. Lines of the file are not
    kept: a paragraph's text is rebuilt from its tags and no longer matches them."""

    SKIPPED = frozenset({"script", "style", "nav", "head", "noscript", "template", "svg"})
    HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
    BLOCKS = frozenset({
        "p", "li", "pre", "tr", "div", "table", "ul", "ol", "dl", "dt", "dd", "blockquote",
        "section", "article", "main", "aside", "header", "footer", "form", "figure",
        "figcaption", "caption", "address", "details", "summary", "hr", "body",
    }) | HEADINGS
    CELLS = frozenset({"td", "th"})
    IN_HEAD = frozenset({"title", "meta", "link", "style", "script", "base", "noscript",
                         "template"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[Section] = []
        self._parts: list[str] = []
        self._skipping: list[str] = []
        self._pre = 0
        self._heading: str | None = None
        self._in_heading = False
        self._row_has_cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skipping == ["head"] and tag not in self.IN_HEAD:
            self._skipping.clear()  # a <head> never closed ends where the body's tags begin
        if tag in self.SKIPPED:
            self._skipping.append(tag)
        elif self._skipping:
            return
        elif tag == "br":
            self._parts.append("\n")
        elif tag in self.CELLS:
            if self._row_has_cell:
                self._parts.append(" | ")
            self._row_has_cell = True
        elif tag in self.BLOCKS:
            self._end_block()
            self._in_heading = tag in self.HEADINGS
            self._pre += tag == "pre"
            self._row_has_cell = False

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIPPED:
            if tag in self._skipping:
                del self._skipping[self._skipping.index(tag):]
        elif not self._skipping and tag in self.BLOCKS:
            self._end_block()
            self._in_heading = False
            if tag == "pre" and self._pre:
                self._pre -= 1

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self._parts.append(data if self._pre else re.sub(r"\s+", " ", data))

    def close(self) -> None:
        super().close()
        self._end_block()

    def _end_block(self) -> None:
        raw = "".join(self._parts)
        self._parts.clear()
        # Whitespace runs (no-break spaces too) are one space, as on screen; <pre> keeps
        # its indents.
        text = "\n".join(line.rstrip() for line in raw.strip("\n").split("\n")) \
            if self._pre else re.sub(r" *\n *", "\n", raw).strip()
        if not text.strip():
            return
        if self._in_heading:
            self._heading = " ".join(text.split())
            self.sections.append(Section(self._heading, heading=self._heading))
        else:
            self.sections.append(Section(text, heading=self._heading))


# PDF and Word -----------------------------------------------------------------------------

# PDFium's marks for a hyphen at a line break (the word is already joined around it).
_PDF_SOFT_HYPHENS = str.maketrans({"\ufffe": None, "\x02": None})
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _read_pdf(path: Path) -> list[Section]:
    import pypdfium2  # noqa: PLC0415 - 50 ms, paid when the first PDF comes

    sections: list[Section] = []
    with _PDFIUM_LOCK:
        try:
            document = pypdfium2.PdfDocument(path)
        except pypdfium2.PdfiumError as error:
            if getattr(error, "err_code", None) in (pypdfium2.raw.FPDF_ERR_PASSWORD,
                                                    pypdfium2.raw.FPDF_ERR_SECURITY):
                raise Unreadable(path, f"{_quoted(path)} is protected by a password, so "
                                       f"Fireside cannot read it.") from error
            raise Unreadable(path, f"{_quoted(path)} is damaged or is not a PDF: it could not "
                                   f"be opened.") from error
        try:
            for index in range(len(document)):
                sections.extend(_pdf_page_sections(_pdf_page_text(document, index), index + 1))
        finally:
            document.close()
    if not sections:
        raise Unreadable(path, f"{_quoted(path)} has no text to read: its pages are probably "
                               f"scanned images, and Fireside does not recognise text in "
                               f"images.")
    return sections


def _pdf_page_text(document: Any, index: int) -> str:
    import pypdfium2  # noqa: PLC0415 - loaded by _read_pdf already

    try:
        page = document[index]
    except pypdfium2.PdfiumError:
        return ""  # one damaged page: the others are still worth reading
    try:
        textpage = page.get_textpage()
        text: str = textpage.get_text_range()
        textpage.close()
    except pypdfium2.PdfiumError:
        return ""
    finally:
        page.close()
    return text


def _pdf_page_sections(raw: str, page: int) -> list[Section]:
    text = _CONTROL.sub(" ", raw.replace("\r\n", "\n").translate(_PDF_SOFT_HYPHENS))
    return [Section(block.strip(), page=page) for block in re.split(r"\n\s*\n", text)
            if block.strip()]


# Word wraps a .docx in an OLE container when it encrypts it with a password.
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def _read_docx(path: Path) -> list[Section]:
    # 75 ms of imports (lxml), paid when the first Word file comes
    import docx  # noqa: PLC0415
    from docx.table import Table  # noqa: PLC0415
    from docx.text.paragraph import Paragraph  # noqa: PLC0415

    try:
        document = docx.Document(str(path))
    except Exception as error:  # a damaged zip or XML shows as any of several errors
        with path.open("rb") as file:
            if file.read(len(_OLE_MAGIC)) == _OLE_MAGIC:
                raise Unreadable(path, f"{_quoted(path)} is protected by a password, so "
                                       f"Fireside cannot read it.") from error
        raise Unreadable(path, f"{_quoted(path)} is damaged or is not a Word document: it "
                               f"could not be opened.") from error
    sections: list[Section] = []
    heading: str | None = None
    for block in document.iter_inner_content():
        if isinstance(block, Paragraph):
            text = block.text.strip()
            if not text:
                continue
            style = block.style.name if block.style is not None else ""
            if style and (style.startswith("Heading") or style == "Title"):
                heading = " ".join(text.split())
                sections.append(Section(heading, heading=heading))
            else:
                sections.append(Section(text, heading=heading))
        elif isinstance(block, Table):
            sections.extend(Section(row, heading=heading) for row in _table_rows(block))
    return sections


def _table_rows(table: Table) -> Iterator[str]:
    """Each row's cells joined by " | "; a merged cell counted once; tables in cells too."""
    for row in table.rows:
        cells: list[str] = []
        seen: set[int] = set()
        for cell in row.cells:
            if id(cell._tc) in seen:
                continue
            seen.add(id(cell._tc))
            text = " ".join(cell.text.split())
            if text:
                cells.append(text)
            for inner in cell.tables:
                cells.extend(_table_rows(inner))
        if cells:
            yield " | ".join(cells)


# Sentences for the user -------------------------------------------------------------------


def _quoted(path: Path) -> str:
    return f"“{path.name or path}”"


def _size(count: int) -> str:
    if count >= 1024 * 1024:
        return f"{count / (1024 * 1024):,.1f} MB"
    if count >= 1024:
        return f"{count / 1024:,.1f} KB"
    return f"{count:,} bytes"


def _not_text(path: Path) -> str:
    other = _OTHER_FORMATS.get(path.suffix.lower())
    if other:
        return (f"{_quoted(path)} is {other}, which Fireside does not read; save it as PDF, "
                f"Word (.docx) or text and add it again.")
    return f"{_quoted(path)} is not a text document."


def _os_sentence(path: Path, error: OSError) -> str:
    if isinstance(error, FileNotFoundError):
        return f"{_quoted(path)} is no longer there: it was moved or deleted."
    if isinstance(error, PermissionError):
        return f"Fireside is not allowed to read {_quoted(path)}."
    if isinstance(error, IsADirectoryError):
        return f"{_quoted(path)} is a folder, not a document."
    return f"{_quoted(path)} could not be read: {error.strerror or error}."
