"""Cutting documents into passages: sizes a model can take, overlap between neighbours,
exact places in the file, pages and headings kept apart, and no word lost."""

from __future__ import annotations

import itertools
import random
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.documents.passages import Passage, approx_tokens, cut, location
from app.core.documents.readers import Section, read

REAL_PDF = Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf")
VOCABULARY = ["the", "a", "of", "library", "function", "returns", "value", "tree", "node",
              "element", "structure", "encoding", "decoding", "certificate", "parser",
              "string", "integer", "boolean"]


@pytest.fixture(scope="module")
def bpe() -> Callable[[str], int]:
    """A real byte-level BPE tokenizer with a small vocabulary (so more tokens per word
    than the estimate expects), trained here on English prose."""
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    byte_level = tokenizers.pre_tokenizers.ByteLevel
    tokenizer.pre_tokenizer = byte_level(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=600, show_progress=False,
                                             initial_alphabet=byte_level.alphabet())
    tokenizer.train_from_iterator([prose(random.Random(seed), 40) for seed in range(50)],
                                  trainer)
    return lambda text: len(tokenizer.encode(text).ids)


def prose(rng: random.Random, sentences: int) -> str:
    return " ".join(
        " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(4, 28))).capitalize() + "."
        for _ in range(sentences))


def shared(before: Passage, after: Passage) -> str:
    """The text that ends ``before`` and starts ``after``."""
    for start in range(len(before.text)):
        if after.text.startswith(before.text[start:]):
            return before.text[start:]
    return ""


# Sizes and overlap -----------------------------------------------------------------------


def test_passages_fit_a_real_tokenizer(bpe: Callable[[str], int], tmp_path: Path) -> None:
    rng = random.Random(7)
    path = tmp_path / "manual.md"
    path.write_text("\n\n".join(f"## Part {n}\n\n{prose(rng, rng.randint(1, 30))}"
                                for n in range(30)))
    for sections in (read(path), read(REAL_PDF) if REAL_PDF.exists() else []):
        passages = cut(sections, count=bpe, size=128, overlap=24)
        sizes = sorted(bpe(passage.text) for passage in passages)
        assert sizes[-1] <= 128, "every passage fits the model's window"
        assert sizes[len(sizes) // 2] >= 64, "passages are not scraps"


def test_a_long_paragraph_is_cut_at_sentences_with_overlap() -> None:
    text = prose(random.Random(3), 80)
    passages = cut([Section(text, first_line=1)], size=120, overlap=30)
    assert len(passages) > 5
    for before, after in itertools.pairwise(passages):
        assert before.text.endswith("."), "cut after a sentence, not inside one"
        overlap = approx_tokens(shared(before, after))
        assert 30 // 4 <= overlap <= 30 * 3 // 2, "neighbours share about 30 tokens"
        assert approx_tokens(before.text) <= 120


def test_a_word_longer_than_a_passage_is_cut_and_kept_whole() -> None:
    rng = random.Random(1)
    blob = "".join(rng.choice("abcdef0123") for _ in range(5000))
    passages = cut([Section(f"key: {blob} end")], size=50, overlap=10)
    assert all(approx_tokens(passage.text) <= 50 for passage in passages)
    # Overlap starts at a word: there is none inside one.
    joined = "".join(passage.text for passage in passages)
    assert joined.replace(" ", "") == f"key:{blob}end", "not a character lost"


def test_headings_too_long_for_a_passage_are_shortened() -> None:
    heading = "A heading that someone wrote as a whole paragraph " * 10
    passages = cut([Section(heading, heading=heading), Section(prose(random.Random(4), 20),
                                                               heading=heading)],
                   size=100, overlap=20)
    assert all(approx_tokens(passage.text) <= 100 for passage in passages)
    assert passages[-1].text.startswith("A heading that someone wrote")


# Where passages come from ----------------------------------------------------------------


def tagged_lines(rng: random.Random, first: int, count: int) -> list[str]:
    """Lines whose every word says which line of the file it is on."""
    return [" ".join(f"l{line}w{k}" + rng.choice(["", "", ".", ","])
                     for k in range(rng.choice([3, 8, 15, 200])))
            for line in range(first, first + count)]


@pytest.mark.parametrize("name", ["notes.txt", "script.py", "guide.md"])
def test_line_ranges_are_exact(tmp_path: Path, name: str) -> None:
    rng = random.Random(name)
    lines: list[str] = []
    while len(lines) < 400:
        if name.endswith(".md") and rng.random() < 0.1:
            lines += [f"# l{len(lines) + 1}w0 heading", ""]
        block = tagged_lines(rng, len(lines) + 1, rng.choice([1, 2, 5, 40]))
        if name.endswith(".py"):
            block = [block[0]] + ["    " + line for line in block[1:]]
        lines += [*block, ""]
    path = tmp_path / name
    path.write_text("\n".join(lines))
    passages = cut(read(path), size=150, overlap=30)
    for passage in passages:
        tags = [int(tag) for tag in re.findall(r"\bl(\d+)w", passage.text)]
        if passage.heading and f"l{passage.first_line}w0 heading" not in passage.text:
            tags = tags[1:]  # the heading's line put first
        assert (tags[0], tags[-1]) == (passage.first_line, passage.last_line), passage.text
    assert {tag for p in passages for tag in re.findall(r"\bl(\d+)w", p.text)} == {
        str(n) for n, line in enumerate(lines, 1) if line}, "every line in some passage"


def test_passages_never_mix_pages() -> None:
    pages = [Section(f"Page {n} says little.", page=n) for n in (1, 2, 3)]
    assert [(p.page, p.text) for p in cut(pages)] == [(n, f"Page {n} says little.")
                                                      for n in (1, 2, 3)]


def test_passages_of_a_real_pdf_come_from_their_page() -> None:
    if not REAL_PDF.exists():
        pytest.skip(f"{REAL_PDF} is not installed on this machine")
    sections = read(REAL_PDF)
    page_text = {}
    for section in sections:
        page_text[section.page] = page_text.get(section.page, "") + "\n" + section.text
    passages = cut(sections, size=120, overlap=20)
    assert {p.page for p in passages} == set(page_text)
    for passage in passages:
        assert passage.page is not None
        assert set(passage.text.split()) <= set(page_text[passage.page].split())


def test_each_passage_starts_with_its_heading(tmp_path: Path) -> None:
    path = tmp_path / "README.md"
    path.write_text(f"# Fireside\n\nA chat.\n\n## Installation\n\n{prose(random.Random(5), 40)}"
                    f"\n\n## Usage\n\nRun it.\n")
    passages = cut(read(path), size=100, overlap=20)
    install = [p for p in passages if p.heading == "Installation"]
    assert len(install) > 2
    assert install[0].text.startswith("Installation\n\n"), "the heading's own line opens it"
    assert all(p.text.startswith("Installation\n") for p in install)
    assert not any(p.text.startswith("Installation\nInstallation") for p in install)
    assert passages[0].text == "Fireside\n\nA chat.", "a tiny section is not mixed in"
    assert passages[-1].text == "Usage\n\nRun it."


def test_tiny_headed_sections_share_a_passage(tmp_path: Path) -> None:
    path = tmp_path / "faq.md"
    questions = [f"## Question {n}?\n\nAnswer {n}." for n in range(12)]
    path.write_text("\n\n".join(questions) + f"\n\n## Details\n\n{prose(random.Random(6), 30)}")
    passages = cut(read(path), size=100, overlap=20)
    small = [p for p in passages if p.heading != "Details"]
    assert 1 < len(small) < 12, "one-line answers are joined, a few at a time"
    assert all(approx_tokens(p.text) <= 50 for p in small)
    assert "\n\n".join(p.text for p in small) == "\n\n".join(
        q.replace("## ", "") for q in questions)
    assert (small[0].first_line, small[-1].last_line) == (1, 47)
    assert all(p.text.startswith("Details\n") for p in passages if p.heading == "Details")


def test_location_says_page_or_lines() -> None:
    assert location(Passage("x", 3, None, None, None)) == "page 3"
    assert location(Passage("x", None, 10, 42, None)) == "lines 10\u201342"
    assert location(Passage("x", None, 7, 7, None)) == "line 7"
    assert location(Passage("x", None, None, None, "Intro")) == ""


# Every word, in order --------------------------------------------------------------------

_paragraph = st.lists(st.tuples(st.integers(1, 12), st.sampled_from([" ", ". ", "\n", ", "])),
                      min_size=1, max_size=60)
_section = st.tuples(_paragraph, st.sampled_from([None, 1, 2]), st.sampled_from([None, "A", "B"]),
                     st.booleans())


@settings(max_examples=150, deadline=None)
@given(st.lists(_section, max_size=25), st.integers(20, 300), st.integers(0, 120),
       st.sampled_from(["approx", "chars"]))
def test_every_word_lands_in_a_passage_in_order(
        sections: list[tuple[list[tuple[int, str]], int | None, str | None, bool]],
        size: int, overlap: int, counter: str) -> None:
    built: list[Section] = []
    number = 0
    for words, page, heading, is_heading in sections:
        if is_heading and heading is not None:
            built.append(Section(heading, page=page, heading=heading))
        text = ""
        for length, gap in words:
            text += f"w{number}" + "x" * length + gap
            number += 1
        built.append(Section(text, page=page, first_line=1, heading=heading))
    count = approx_tokens if counter == "approx" else (lambda text: len(text) // 3 + 1)
    passages = cut(built, count=count, size=size, overlap=overlap)
    order = [[int(n) for n in re.findall(r"w(\d+)x", p.text)] for p in passages]
    for numbers in order:
        if numbers:
            assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), \
                "a passage is one stretch of the text"
    seen = [n for numbers in order for n in numbers]
    assert list(dict.fromkeys(seen)) == list(range(number)), "every word once, in order"
    assert all(count(p.text) <= size for p in passages)


# Cost ------------------------------------------------------------------------------------


def test_a_megabyte_is_cut_well_within_a_second() -> None:
    rng = random.Random(8)
    text = "\n\n".join(prose(rng, rng.randint(1, 12)) for _ in range(1400))
    assert len(text) > 1_000_000
    sections = [Section(text, first_line=1)]
    counted = [0, 0]

    def count(piece: str) -> int:
        counted[0] += 1
        counted[1] += len(piece)
        return approx_tokens(piece)

    passages = cut(sections, count=count)
    assert counted[0] < len(text) / 40, "count is called per sentence at most, not per word"
    assert counted[1] < 4 * len(text)
    assert len(passages) > 1000
    best = min(_seconds(lambda: cut(sections)) for _ in range(3))
    assert best < 1.0


def _seconds(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start
