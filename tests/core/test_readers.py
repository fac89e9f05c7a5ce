"""Reading documents into sections: every kind of file Fireside takes, and the files it
refuses with a sentence that names them."""

from __future__ import annotations

import gzip
import io
import os
import time
import zipfile
from pathlib import Path

import pytest

from app.core.documents.readers import Section, Unreadable, kind_of, read

REAL_PDFS = [Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf"),
             Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf")]
TEXT_PAGE = "text"
IMAGE_PAGE = "image"


def make_pdf(path: Path, pages: list[list[str] | str | None], *,
             user_password: str | None = None, owner_password: str | None = None) -> Path:
    """A PDF written by pypdf: a page per item, with these lines of text in Helvetica, an
    image only ("image") or nothing (None); encrypted when a password is given."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(_pdf_source(pages))))
    if user_password is not None:
        writer.encrypt(user_password, owner_password, algorithm="AES-256")
    with path.open("wb") as file:
        writer.write(file)
    return path


def _pdf_source(pages: list[list[str] | str | None]) -> bytes:
    """The smallest PDF that holds the pages, for pypdf to parse and write out again."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
               b"<< /Type /XObject /Subtype /Image /Width 2 /Height 2 /ColorSpace /DeviceGray"
               b" /BitsPerComponent 8 /Length 4 >>\nstream\n\x00\xff\xff\x00\nendstream"]
    kids = []
    for page in pages:
        if page == IMAGE_PAGE:
            content = b"q 300 0 0 300 100 300 cm /Im1 Do Q"
        elif page:
            shown = b" T* ".join(b"(" + line.encode("latin-1").replace(b"\\", b"\\\\")
                                 .replace(b"(", b"\\(").replace(b")", b"\\)") + b") Tj"
                                 for line in page)
            content = b"BT /F1 12 Tf 14 TL 72 720 Td " + shown + b" ET"
        else:
            content = b""
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R"
                       b" /Resources << /Font << /F1 3 0 R >> /XObject << /Im1 4 0 R >> >> >>"
                       % len(objects))
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(kids))
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    return bytes(out)


def words_of(sections: list[Section]) -> str:
    return " ".join(section.text for section in sections)


def refusal(path: Path, **kwargs: int) -> str:
    with pytest.raises(Unreadable) as caught:
        read(path, **kwargs)
    assert caught.value.path == path
    message = str(caught.value)
    assert path.name in message, "the user is told which file"
    assert message.endswith("."), "a whole sentence"
    return message


# Plain text, code, Markdown --------------------------------------------------------------


def test_text_paragraphs_keep_the_line_they_start_on(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"First paragraph,\r\nstill the first.\r\n\r\n\r\n"
                     b"Second one.\r\n   \r\nThird\fwith a form feed.\r\n")
    assert read(path) == [
        Section("First paragraph,\nstill the first.", first_line=1),
        Section("Second one.", first_line=5),
        Section("Third\fwith a form feed.", first_line=7),
    ]


def test_code_is_cut_between_top_level_blocks_only(tmp_path: Path) -> None:
    path = tmp_path / "tool.py"
    path.write_text("import os\n\n\nclass Tool:\n    def a(self):\n        return 1\n\n"
                    "    def b(self):\n        return 2\n\n# the end\nprint(Tool())\n")
    sections = read(path)
    assert [(s.first_line, s.text.splitlines()[0]) for s in sections] == [
        (1, "import os"), (4, "class Tool:"), (11, "# the end")]
    assert "def b(self):" in sections[1].text, "a class stays whole across its blank lines"


def test_markdown_headings_carry_over_their_paragraphs(tmp_path: Path) -> None:
    path = tmp_path / "README.md"
    path.write_text("Intro before any heading.\n\n# Fireside\n\nA private chat.\n\n"
                    "Install\n-------\n\n```sh\n# not a heading\n\npip install .\n```\n\n"
                    "## Usage ##\nRun it.\n")
    assert read(path) == [
        Section("Intro before any heading.", first_line=1),
        Section("Fireside", first_line=3, heading="Fireside"),
        Section("A private chat.", first_line=5, heading="Fireside"),
        Section("Install", first_line=7, heading="Install"),
        Section("```sh\n# not a heading\n\npip install .\n```", first_line=10,
                heading="Install"),
        Section("Usage", first_line=16, heading="Usage"),
        Section("Run it.", first_line=17, heading="Usage"),
    ]


def test_files_without_a_known_suffix_are_read_as_text_when_they_are_text(
        tmp_path: Path) -> None:
    (tmp_path / "README").write_text("Read me first.\n")
    (tmp_path / "LICENSE").write_text("MIT License\n\nPermission is granted.\n")
    (tmp_path / "Makefile").write_text("all:\n\tcc main.c\n")
    (tmp_path / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (tmp_path / "data.bin").write_bytes(bytes(range(256)))
    assert kind_of(tmp_path / "README") == "text"
    assert kind_of(tmp_path / "LICENSE") == "text"
    assert kind_of(tmp_path / "Makefile") == "code"
    assert kind_of(tmp_path / "photo.png") is None
    assert kind_of(tmp_path / "data.bin") is None
    assert kind_of(tmp_path / "report.PDF") == "pdf"
    assert kind_of(tmp_path / "letter.docx") == "docx"
    assert read(tmp_path / "LICENSE")[1] == Section("Permission is granted.", first_line=3)


def test_text_in_other_encodings_reads_its_accents(tmp_path: Path) -> None:
    legacy = tmp_path / "menu.txt"
    legacy.write_bytes("Café crème \u2013 3 € \u201cfresh\u201d\n".encode("cp1252"))
    assert read(legacy)[0].text == "Café crème \u2013 3 € \u201cfresh\u201d"
    damaged = tmp_path / "naive.txt"
    damaged.write_bytes("naïve résumé ".encode() + b"\xff" + " déjà vu".encode())
    assert read(damaged)[0].text == "naïve résumé \ufffd déjà vu"
    wide = tmp_path / "notepad.txt"
    wide.write_bytes("Saved by Notepad: ünïcödé\r\n\r\nSecond.".encode("utf-16"))
    assert read(wide) == [Section("Saved by Notepad: ünïcödé", first_line=1),
                          Section("Second.", first_line=3)]


def test_gzip_compressed_text_reads_like_text(tmp_path: Path) -> None:
    path = tmp_path / "changelog.Debian.gz"
    path.write_bytes(gzip.compress(b"fireside (1.0) unstable\n\n  * First release.\n"))
    assert kind_of(path) == "text"
    assert read(path) == [Section("fireside (1.0) unstable", first_line=1),
                          Section("  * First release.", first_line=3)]
    bomb = tmp_path / "notes.md.gz"
    bomb.write_bytes(gzip.compress(b"a" * 10_000))
    assert "more than" in refusal(bomb, max_bytes=1000)


# HTML ------------------------------------------------------------------------------------


def test_html_gives_visible_text_with_headings_and_entities(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_text(
        "<!doctype html><html><head><title>Tab title</title>"
        "<style>body { color: red }</style><script>var hidden = 1;</script></head>"
        "<body><nav><a href='/'>Home</a> | <a href='/x'>Menu</a></nav>"
        "<h1>Caf&eacute; &amp; Bar</h1><p>Open <b>daily</b>&nbsp;from 9&#8201;am.<br>"
        "Closed on Mondays.</p><ul><li>Tea</li><li>Coffee &lt;hot&gt;</li></ul>"
        "<h2>Prices</h2><table><tr><th>Item</th><th>Price</th></tr>"
        "<tr><td>Tea</td><td>&euro;2</td></tr></table>"
        "<pre>  keep\n    this</pre><script>document.write('no')</script></body></html>",
        encoding="utf-8")
    sections = read(path)
    assert sections == [
        Section("Café & Bar", heading="Café & Bar"),
        Section("Open daily from 9 am.\nClosed on Mondays.", heading="Café & Bar"),
        Section("Tea", heading="Café & Bar"),
        Section("Coffee <hot>", heading="Café & Bar"),
        Section("Prices", heading="Prices"),
        Section("Item | Price", heading="Prices"),
        Section("Tea | €2", heading="Prices"),
        Section("  keep\n    this", heading="Prices"),
    ]
    shown = words_of(sections)
    for hidden in ("Tab title", "color", "hidden", "Menu", "document.write"):
        assert hidden not in shown


def test_a_page_whose_head_is_never_closed_still_shows_its_body(tmp_path: Path) -> None:
    path = tmp_path / "sloppy.html"
    path.write_text("<html><head><title>Old page</title><p>Body text.<p>More text.")
    assert read(path) == [Section("Body text."), Section("More text.")]


def test_html_charset_comes_from_its_meta_tag(tmp_path: Path) -> None:
    path = tmp_path / "old.htm"
    path.write_bytes(b'<html><head><meta http-equiv="Content-Type" '
                     b'content="text/html; charset=iso-8859-1"></head>'
                     b"<body><p>Fa\xe7ade \x93quoted\x94</p></body></html>")
    assert read(path) == [Section("Façade “quoted”")]


# Word ------------------------------------------------------------------------------------


def test_word_documents_give_headings_paragraphs_and_tables(tmp_path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Field guide", 0)
    document.add_paragraph("Birds of the valley.")
    document.add_heading("Owls", level=1)
    document.add_paragraph("Owls hunt at night.")
    document.add_paragraph("")
    table = document.add_table(rows=3, cols=3)
    for row, cells in zip(table.rows, [("Name", "Size", "Call"), ("Barn owl", "34 cm", "shriek"),
                                       ("Notes", "", "")], strict=True):
        for cell, text in zip(row.cells, cells, strict=True):
            cell.text = text
    table.cell(2, 0).merge(table.cell(2, 2)).text = "Both hunt mice"
    document.add_heading("Hawks", level=2)
    document.add_paragraph("Hawks hunt by day.")
    path = tmp_path / "guide.docx"
    document.save(str(path))

    assert read(path) == [
        Section("Field guide", heading="Field guide"),
        Section("Birds of the valley.", heading="Field guide"),
        Section("Owls", heading="Owls"),
        Section("Owls hunt at night.", heading="Owls"),
        Section("Name | Size | Call", heading="Owls"),
        Section("Barn owl | 34 cm | shriek", heading="Owls"),
        Section("Both hunt mice", heading="Owls"),
        Section("Hawks", heading="Hawks"),
        Section("Hawks hunt by day.", heading="Hawks"),
    ]


def test_a_broken_word_file_is_refused_by_name(tmp_path: Path) -> None:
    not_zip = tmp_path / "letter.docx"
    not_zip.write_bytes(b"PK\x03\x04 this was cut off")
    assert "damaged" in refusal(not_zip)
    wrong_zip = tmp_path / "archive.docx"
    with zipfile.ZipFile(wrong_zip, "w") as archive:
        archive.writestr("hello.txt", "not a Word document")
    assert "damaged" in refusal(wrong_zip)
    locked = tmp_path / "salaries.docx"
    locked.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(1024))
    assert "password" in refusal(locked)


# PDF -------------------------------------------------------------------------------------


def test_pdf_pages_are_read_with_their_numbers(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "report.pdf", [["Summary of the year.", "Sales grew (a lot)."],
                                              None, ["Outlook: calm seas."]])
    assert read(path) == [Section("Summary of the year.\nSales grew (a lot).", page=1),
                          Section("Outlook: calm seas.", page=3)]


@pytest.mark.parametrize("pdf", REAL_PDFS, ids=lambda pdf: pdf.name)
def test_a_real_pdf_gives_text_on_most_pages(pdf: Path) -> None:
    if not pdf.exists():
        pytest.skip(f"{pdf} is not installed on this machine")
    import pypdfium2

    with pypdfium2.PdfDocument(pdf) as document:
        page_count = len(document)
    sections = read(pdf)
    pages = [section.page for section in sections]
    assert pages == sorted(pages), "pages in reading order"
    assert set(pages) <= set(range(1, page_count + 1))
    assert len(set(pages)) >= 0.8 * page_count
    words = words_of(sections)
    assert ("ASN.1" if "tasn1" in pdf.name else "MIME") in words
    assert "\r" not in words and "\ufffe" not in words, "no PDF line-break marks"


def test_real_pdf_reading_speed(capsys: pytest.CaptureFixture[str]) -> None:
    pdf = max((pdf for pdf in REAL_PDFS if pdf.exists()), key=lambda pdf: pdf.stat().st_size,
              default=None)
    if pdf is None:
        pytest.skip("no real PDF installed on this machine")
    read(pdf)  # the library loaded
    runs = 5
    start = time.perf_counter()
    for _ in range(runs):
        pages = len({section.page for section in read(pdf)})
    rate = pages * runs / (time.perf_counter() - start)
    with capsys.disabled():
        print(f"\n{pdf.name}: {rate:.0f} pages per second")
    assert rate > 20, "a 100-page manual takes seconds, not minutes"


def test_a_pdf_locked_by_a_password_is_refused(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "payslip.pdf", [["Salary: secret."]], user_password="hunter2")
    assert "password" in refusal(path)


def test_a_pdf_locked_only_against_changes_still_reads(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "form.pdf", [["Fill in your name."]], user_password="",
                    owner_password="owner")
    assert read(path) == [Section("Fill in your name.", page=1)]


def test_a_pdf_without_text_is_refused_as_scanned(tmp_path: Path) -> None:
    blank = make_pdf(tmp_path / "blank.pdf", [None, None])
    assert "no text" in refusal(blank)
    scan = make_pdf(tmp_path / "scan.pdf", [IMAGE_PAGE])
    message = refusal(scan)
    assert "no text" in message and "scanned" in message


def test_a_damaged_pdf_is_refused_by_name(tmp_path: Path) -> None:
    garbage = tmp_path / "broken.pdf"
    garbage.write_bytes(b"%PDF-1.4\nthis is not a PDF at all\n")
    assert "damaged" in refusal(garbage)
    disguised = tmp_path / "photo.pdf"
    disguised.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    assert "damaged" in refusal(disguised)


def test_a_pdf_with_a_broken_index_still_reads(tmp_path: Path) -> None:
    whole = make_pdf(tmp_path / "whole.pdf", [["Page one text."], ["Page two text."]])
    damaged = tmp_path / "damaged.pdf"
    data = whole.read_bytes()
    table = data.rindex(b"xref\n")
    damaged.write_bytes(data[:table] + b"garbage" + data[table + 40:])
    assert read(damaged) == [Section("Page one text.", page=1),
                             Section("Page two text.", page=2)]


# Files Fireside refuses ------------------------------------------------------------------


def test_binary_files_are_not_text_documents(tmp_path: Path) -> None:
    program = tmp_path / "program"
    program.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(300))
    assert "not a text document" in refusal(program)
    posing = tmp_path / "notes.txt"
    posing.write_bytes(b"looks like text\x00\x00\x01 but is not")
    assert "not a text document" in refusal(posing)
    old_word = tmp_path / "letter.doc"
    old_word.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(512))
    assert ".docx" in refusal(old_word), "the user is told what to do instead"
    rich = tmp_path / "memo.rtf"
    rich.write_text(r"{\rtf1\ansi Hello}")
    assert kind_of(rich) is None
    assert "Rich Text" in refusal(rich), "not read as text full of control words"


def test_a_file_over_the_cap_is_refused_with_its_size(tmp_path: Path) -> None:
    path = tmp_path / "huge.txt"
    path.write_text("word " * 60)
    message = refusal(path, max_bytes=100)
    assert "300 bytes" in message and "up to 100 bytes" in message


def test_missing_files_and_folders_are_refused_by_name(tmp_path: Path) -> None:
    gone = tmp_path / "gone.md"
    gone.write_text("# soon gone\n")
    gone.unlink()
    assert "no longer there" in refusal(gone)
    folder = tmp_path / "papers.pdf"
    folder.mkdir()
    assert "folder" in refusal(folder)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root reads files whatever their permissions say")
def test_a_file_not_allowed_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "private.txt"
    path.write_text("secret")
    path.chmod(0)
    assert "not allowed" in refusal(path)


def test_an_empty_file_has_no_sections(tmp_path: Path) -> None:
    for name in ("empty.txt", "empty.md", "empty.pdf", "empty.docx", "empty"):
        (tmp_path / name).touch()
        assert read(tmp_path / name) == []
    blank = tmp_path / "blank.txt"
    blank.write_text("\n   \n\t\n")
    assert read(blank) == []
