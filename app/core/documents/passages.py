"""Sections cut into passages of a few hundred tokens, along the document's structure.

``cut(sections)`` joins a heading's paragraphs into passages of at most ``size`` tokens;
a paragraph too long for one is split at sentence ends, then line ends, then words, and
consecutive passages of one heading overlap by about ``overlap`` tokens. A passage keeps
to one page and one heading; only tiny headed sections share one. Each passage starts
with its heading's line. ``location(p)`` says in words where a passage came from.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from app.core.documents.readers import Section


@dataclass(frozen=True)
class Passage:
    """A piece of a document sized for one search vector, with where it came from."""

    text: str
    page: int | None
    first_line: int | None
    last_line: int | None
    heading: str | None


_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
# Letters in pieces of up to six (long words are several tokens), numbers in threes, each
# CJK character and each mark alone. On English manuals and changelogs this comes within
# a quarter of BERT's, GPT-2's and Qwen2's counts, about even on the median; strings like
# "YYMMDDhhmmss" are where it says fewest.
_TOKENISH = re.compile(rf"[{_CJK}]|[^\W\d_{_CJK}]{{1,6}}|\d{{1,3}}|[^\w\s]|_")


def approx_tokens(text: str) -> int:
    """About how many tokens a subword tokenizer makes of ``text``; for a model's exact
    window, cut with the model's own count."""
    return len(_TOKENISH.findall(text))


def location(p: Passage) -> str:
    """Where the passage is, for the user: "page 3", "line 7", lines 10 to 42 written
    with an en dash, or "" where nothing says."""
    if p.page is not None:
        return f"page {p.page}"
    if p.first_line is None:
        return ""
    if p.last_line is None or p.last_line == p.first_line:
        return f"line {p.first_line}"
    return f"lines {p.first_line}\u2013{p.last_line}"


def cut(sections: Sequence[Section], *, count: Callable[[str], int] = approx_tokens,
        size: int = 200, overlap: int = 40) -> list[Passage]:
    """Passages of at most ``size`` tokens by ``count``, in the order of ``sections``.

    Pages never share a passage. Sections under different headings share one only while
    the joined passage stays within half of ``size``: a run of one-line sections makes one
    passage rather than many scraps.
    """
    if size < 1:
        raise ValueError("size must be at least one token")
    cutter = _Cutter(count, size, max(0, min(overlap, size // 2)))
    return _join_tiny([cutter.passages(run) for run in _runs(sections)], count, size // 2)


# Runs: the sections of one page under one heading ----------------------------------------


def _runs(sections: Sequence[Section]) -> Iterator[list[Section]]:
    run: list[Section] = []
    for section in sections:
        if not section.text.strip():
            continue
        own_heading = section.heading is not None and section.text == section.heading
        if run and (own_heading or section.page != run[0].page
                    or section.heading != run[0].heading):
            yield run
            run = []
        run.append(section)
    if run:
        yield run


def _join_tiny(runs: list[list[tuple[Passage, int]]], count: Callable[[str], int],
               most: int) -> list[Passage]:
    joined: list[Passage] = []
    pending: tuple[Passage, int] | None = None  # one-passage runs joined so far
    for run in runs:
        if len(run) == 1 and pending is not None and pending[0].page == run[0][0].page \
                and pending[1] + run[0][1] <= most:
            first, (second, _) = pending[0], run[0]
            text = f"{first.text}\n\n{second.text}"
            pending = (Passage(text, first.page, first.first_line,
                               first.last_line if second.last_line is None
                               else second.last_line, first.heading), count(text))
            continue
        if pending is not None:
            joined.append(pending[0])
            pending = None
        if len(run) == 1:
            pending = run[0]
        else:
            joined.extend(passage for passage, _ in run)
    if pending is not None:
        joined.append(pending[0])
    return joined


# Cutting one run --------------------------------------------------------------------------


@dataclass(slots=True)
class _Unit:
    """A stretch of one section's text (offsets into it) that is never cut further."""

    section: int
    start: int
    end: int
    tokens: int


_BLANK_LINES = re.compile(r"\n[ \t]*\n\s*")
# Closing quotes and brackets stay with their sentence; CJK full stops need no space.
_SENTENCE_ENDS = re.compile(r"[.!?\u2026]+[\"'\u201d\u2019)\]]*\s+|[\u3002\uff01\uff1f]+")
_LINE_ENDS = re.compile(r"\n\s*")
_SPLITS = (_BLANK_LINES, _SENTENCE_ENDS, _LINE_ENDS)
# Tokenizers give ordinary text a token per 3 to 6 characters: a stretch this many times
# longer than a budget is over it without counting (a 1 MB paragraph is not counted whole).
_MOST_CHARS_PER_TOKEN = 16
_SAMPLE_CHARS = 4096  # enough text to learn a stretch's characters per token


class _Cutter:
    """Each run's sections cut into units that fit a passage, then packed into passages."""

    def __init__(self, count: Callable[[str], int], size: int, overlap: int) -> None:
        self.count = count
        self.size = size
        self.overlap = overlap

    def passages(self, run: list[Section]) -> list[tuple[Passage, int]]:
        """The run's passages, each with its tokens."""
        heading = self._heading_line(run[0].heading)
        head_tokens = self.count(heading + "\n") if heading else 0
        budget = max(1, self.size - head_tokens)
        # Pieces of a long paragraph leave room for the overlap that precedes them.
        limit = max(1, budget - self.overlap)
        units: list[_Unit] = []
        for index, section in enumerate(run):
            units.extend(self._units(index, section.text, budget, limit))
        return list(_Packer(self, run, heading, budget).passages(units))

    def _heading_line(self, heading: str | None) -> str:
        """The heading, cut to a quarter of the size at a word if it is longer."""
        if not heading:
            return ""
        most = max(1, self.size // 4)
        while (tokens := self.count(heading)) > most and len(heading) > 1:
            keep = max(1, int(len(heading) * most / tokens * 0.9))
            space = heading.rfind(" ", 0, keep + 1)
            heading = heading[:space if space > 0 else keep].rstrip()
        return heading

    def _units(self, index: int, text: str, budget: int, limit: int) -> Iterator[_Unit]:
        start, end = _trimmed(text, 0, len(text))
        if start == end:
            return
        tokens = self._count_up_to(text, start, end, budget)
        if tokens is not None and tokens <= budget:
            yield _Unit(index, start, end, tokens)
        else:
            yield from self._split(index, text, start, end, limit=limit, level=0)

    def _count_up_to(self, text: str, start: int, end: int, most: int) -> int | None:
        """The tokens of ``text[start:end]``; None, without counting, where it is far too
        long to be within ``most``."""
        if end - start > most * _MOST_CHARS_PER_TOKEN:
            return None
        return self.count(text[start:end])

    def _split(self, index: int, text: str, start: int, end: int, *, limit: int,
               level: int) -> Iterator[_Unit]:
        """``text[start:end]`` (over ``limit``) in units of at most ``limit`` tokens: at the
        coarsest kind of break that gives more than one piece."""
        for depth in range(level, len(_SPLITS)):
            pieces = _pieces(text, start, end, _SPLITS[depth])
            if len(pieces) < 2:
                continue
            for a, b in pieces:
                tokens = self._count_up_to(text, a, b, limit)
                if tokens is not None and tokens <= limit:
                    yield _Unit(index, a, b, tokens)
                else:
                    yield from self._split(index, text, a, b, limit=limit, level=depth + 1)
            return
        yield from self._windows(index, text, start, end, limit=limit)

    def _windows(self, index: int, text: str, start: int, end: int, *,
                 limit: int) -> Iterator[_Unit]:
        """Cut at spaces (inside a word only where there is none), windows sized by the
        characters per token of the stretch's start so ``count`` runs about once each."""
        sample = min(end, start + _SAMPLE_CHARS)
        per_token = (sample - start) / max(1, self.count(text[start:sample]))
        pos = start
        while pos < end:
            reach = max(1, int(limit * per_token * 0.95))
            while True:
                stop = _word_end(text, pos, min(end, pos + reach), end)
                window_tokens = self.count(text[pos:stop])
                if window_tokens <= limit or stop - pos <= 1:
                    break
                reach = max(1, min(reach - 1, int(reach * limit / window_tokens * 0.9)))
            a, b = _trimmed(text, pos, stop)
            if a < b:
                yield _Unit(index, a, b, window_tokens)
            pos = _trimmed(text, stop, end)[0]


class _Packer:
    """Units of one run joined greedily into passages, each after an overlap drawn from
    the end of the one before."""

    def __init__(self, cutter: _Cutter, run: list[Section], heading: str,
                 budget: int) -> None:
        self.count = cutter.count
        self.size = cutter.size
        self.overlap = cutter.overlap
        self.run = run
        self.heading = heading
        self.budget = budget
        self._newlines: dict[int, list[int]] = {}

    def passages(self, units: list[_Unit]) -> Iterator[tuple[Passage, int]]:
        carry: list[_Unit] = []
        i = 0
        while i < len(units):
            taken = list(carry)
            total = sum(unit.tokens for unit in taken)
            j = i
            while j < len(units) and (j == i or total + units[j].tokens <= self.budget):
                taken.append(units[j])
                total += units[j].tokens
                j += 1
            text = self._text(taken)
            tokens = self.count(text)
            # The sum of the parts is an estimate: the whole is counted once and trimmed.
            while tokens > self.size and (j - i > 1 or carry):
                if j - i > 1:
                    j -= 1
                    taken.pop()
                else:
                    taken = taken[len(carry):]
                    carry = []
                text = self._text(taken)
                tokens = self.count(text)
            yield self._passage(taken, text), tokens
            i = j
            carry = self._tail(taken, units[i].tokens) if i < len(units) else []

    def _tail(self, taken: list[_Unit], next_tokens: int) -> list[_Unit]:
        """About ``overlap`` tokens from the end of ``taken``: whole units, then the end of
        the one before them, from a sentence start or else a word."""
        want = min(self.overlap, self.budget - next_tokens)
        if want < max(1, self.overlap // 4):
            return []
        tail: list[_Unit] = []
        total = 0
        for unit in reversed(taken):
            if total + unit.tokens <= want:
                tail.insert(0, unit)
                total += unit.tokens
                continue
            if total < want // 2:
                part = self._end_of(unit, want - total)
                if part is not None:
                    tail.insert(0, part)
            break
        return tail

    def _end_of(self, unit: _Unit, want: int) -> _Unit | None:
        text = self.run[unit.section].text
        reach = int((unit.end - unit.start) * want / max(1, unit.tokens))
        begin = max(unit.start, unit.end - reach)
        sentence = None
        lowest = max(unit.start, begin - reach // 2)
        for found in _SENTENCE_ENDS.finditer(text, lowest, unit.end - reach // 3):
            sentence = found
        if sentence is not None and sentence.end() < unit.end:
            begin = sentence.end()
        else:
            space = text.find(" ", begin, unit.end)
            if space < 0:
                return None
            begin = space
        begin = _trimmed(text, begin, unit.end)[0]
        if begin >= unit.end:
            return None
        tokens = self.count(text[begin:unit.end])
        return _Unit(unit.section, begin, unit.end, tokens) if tokens <= want * 3 // 2 else None

    def _text(self, taken: list[_Unit]) -> str:
        blocks: list[str] = []
        first = 0
        for k in range(1, len(taken) + 1):
            if k == len(taken) or taken[k].section != taken[first].section:
                text = self.run[taken[first].section].text
                blocks.append(text[taken[first].start:taken[k - 1].end])
                first = k
        body = "\n\n".join(blocks)
        if not self.heading or self._opens_with_heading(taken[0]):
            return body
        return f"{self.heading}\n{body}"

    def _opens_with_heading(self, unit: _Unit) -> bool:
        section = self.run[unit.section]
        return section.text == section.heading and unit.start == _trimmed(
            section.text, 0, len(section.text))[0]

    def _passage(self, taken: list[_Unit], text: str) -> Passage:
        first, last = taken[0], taken[-1]
        return Passage(text, self.run[0].page, self._line(first.section, first.start),
                       self._line(last.section, last.end - 1), self.run[0].heading)

    def _line(self, index: int, offset: int) -> int | None:
        """The file's line of the character at ``offset`` in the run's section ``index``."""
        section = self.run[index]
        if section.first_line is None:
            return None
        newlines = self._newlines.get(index)
        if newlines is None:
            newlines = [found.start() for found in re.finditer("\n", section.text)]
            self._newlines[index] = newlines
        return section.first_line + bisect.bisect_left(newlines, offset)


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """``start:end`` without the whitespace at either end."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _pieces(text: str, start: int, end: int, breaks: re.Pattern[str]) -> list[tuple[int, int]]:
    """``text[start:end]`` cut after each match of ``breaks``, trimmed, empty ones left out."""
    pieces: list[tuple[int, int]] = []
    pos = start
    for found in breaks.finditer(text, start, end):
        a, b = _trimmed(text, pos, found.end())
        if a < b:
            pieces.append((a, b))
        pos = found.end()
    a, b = _trimmed(text, pos, end)
    if a < b:
        pieces.append((a, b))
    return pieces


def _word_end(text: str, start: int, stop: int, end: int) -> int:
    """The last space in ``start:stop``, or ``stop`` where there is none (a word longer
    than a passage) or where ``stop`` already ends a word or the stretch (at ``end``)."""
    if stop >= end or text[stop].isspace():
        return stop
    space = max(text.rfind(" ", start + 1, stop), text.rfind("\n", start + 1, stop))
    return space if space > start else stop
