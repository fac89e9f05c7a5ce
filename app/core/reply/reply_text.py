"""The filter chain that turns a streaming reply's decoded text into what the user gets:
the thought split from the answer, the answer ended by a stop string (the model's own
and the request's, at the same token), the calls of functions held back from it (parsed
when the reply ends), and a base model's repeated lines cut. What passes is written
into the reply's :class:`~app.core.reply.pieces.Pieces` as it comes.

Every backend feeds its decoded text here, so the local engine and a server's model
show thinking and stop the same way.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from app.core.reply import tool_calls
from app.core.reply.pieces import Pieces
from app.core.reply.replies import ToolCall
from app.core.reply.stop_text import StopText
from app.core.reply.thinking import UNMARKED, ThinkingFormat, ThoughtSplitter


class ReplyText:
    def __init__(self, out: Pieces | None,
                 fmt: ThinkingFormat = UNMARKED, inside: bool = False,
                 stops: Sequence[str] = (), *, stop_on_repeat: bool = False,
                 calls: tool_calls.ToolFormat | None = None, drop_calls: bool = False) -> None:
        """``out``: where the reply's text goes as it comes (None: only kept);
        ``stops``: text that ends the reply, the model's own and the request's;
        ``calls``: the format of the calls the model may write after its answer;
        ``drop_calls``: none is allowed, and one begun is dropped (and ends the reply)."""
        self._out = out
        self._calls = calls
        self._drop_calls = drop_calls
        self._opener = StopText([calls.opener]) if calls is not None else None
        self._call_text: list[str] = []
        self.tool_calls: tuple[ToolCall, ...] = ()
        self._splitter = ThoughtSplitter(fmt, inside)
        self._stops = StopText(stops) if stops else None
        # A blank line that ends a reply ends it only once the answer has begun.
        self._lead_stripped = any(not stop.strip() for stop in stops)
        self._thinking: list[str] = []
        self._thought_space = ""  # the thought's trailing whitespace, not streamed yet
        self._answer: list[str] = []
        self._sent = False  # some of the answer has come (shown or not yet)
        self.thinking_tokens = 0
        self._thought_from = time.perf_counter() if inside else 0.0
        self._thought_until = 0.0
        self.stopped = False  # a stop string came: the reply is complete
        # A base model that writes a line it already wrote (the user's words, again and
        # again) is looping: the reply ends before that line.
        self._repeats = stop_on_repeat
        # Its text is shown a whole line at a time, so a repeated line is never shown;
        # a sentence it repeats, in a later line or the same one, ends the reply too.
        self._lines: set[str] = set()
        self._sentences: set[str] = set()
        self._line = ""  # the line being written, not shown yet
        self._newline_owed = False  # the last line shown ends with a newline, not shown yet

    @property
    def in_thought(self) -> bool:
        return self._splitter.thinking

    @property
    def calling(self) -> bool:
        """A call of a function has begun: what follows is not the answer."""
        return bool(self._call_text)

    def add(self, piece: str, tokens: int = 1) -> None:
        """Decoded text, and how many generated tokens it took."""
        was_thinking = self._splitter.thinking
        self._deliver(self._splitter.feed(piece))
        if was_thinking or self._splitter.thinking:
            self.thinking_tokens += tokens
            now = time.perf_counter()
            self._thought_from = self._thought_from or now
            self._thought_until = now

    def add_thinking(self, text: str, tokens: int = 0) -> None:
        """Thinking a server sends apart from the answer (``reasoning_content``)."""
        self.thinking_tokens += tokens
        now = time.perf_counter()
        self._thought_from = self._thought_from or now
        self._thought_until = now
        self._deliver([(True, text)])

    def finish(self) -> tuple[str, str]:
        """The whole (answer, thinking), once nothing more comes."""
        self._deliver(self._splitter.flush())
        if self._opener is not None and not self.calling:
            held, self._opener = self._opener.flush(), None
            self._deliver([(False, held)])
        if self._stops is not None and not self.stopped:
            self._send(self._stops.flush())
        # A call that does not parse was cut short (the grammar holds calls begun):
        # it is dropped, never shown as text.
        began = self.calling
        if self._drop_calls:
            self._call_text = []
        if self._calls is not None and self.calling:
            written = "".join(self._call_text)
            unique: dict[tuple[str, str], ToolCall] = {}
            for call in tool_calls.parse_calls(self._calls, written):
                unique.setdefault((call.name, call.arguments), call)
            self.tool_calls = tuple(unique.values())
        if self._repeats and not self.stopped:
            self._show(self._joined(self._line))
        answer = "".join(self._answer)
        if began:
            answer = answer.rstrip()
        return answer, "".join(self._thinking).rstrip()

    @property
    def thinking_s(self) -> float:
        return max(0.0, self._thought_until - self._thought_from) if self._thinking else 0.0

    def _deliver(self, parts: list[tuple[bool, str]]) -> None:
        for is_thought, text in parts:
            if is_thought:
                self._thinking.append(text)
                self._put_thought(text)
            elif self._opener is not None and not (text := self._divert(text)):
                continue
            elif self._stops is None:
                self._send(text)
            elif not self.stopped:
                lead = not self._sent and self._lead_stripped
                self._send(self._stops.feed(text.lstrip() if lead else text))
                self.stopped = self.stopped or self._stops.hit

    def _put_thought(self, text: str) -> None:
        """Streams the thought as it is kept: its whitespace at the end waits for more of
        it, so what a face shows ends as the saved thought does."""
        if self._out is None:
            return
        pending = self._thought_space + text
        shown = pending.rstrip()
        self._thought_space = pending[len(shown):]
        self._out.put(shown, thought=True)

    def _divert(self, text: str) -> str:
        """What of ``text`` is answer; from a call's opener on, the rest is the call's."""
        assert self._opener is not None and self._calls is not None
        if self.calling:
            self._call_text.append(text)
            # The same call again: a small model looping; the reply ends before it.
            written = tool_calls.parse_calls(self._calls, "".join(self._call_text))
            if len({(c.name, c.arguments) for c in written}) < len(written):
                self.stopped = True
            return ""
        if self._calls.opens_call and ("".join(self._answer) + self._line).strip():
            # A format whose calls open the answer: once it has begun, none comes.
            held, self._opener = self._opener.flush(), None
            return held + text
        safe = self._opener.feed(text)
        if self._opener.hit:
            self._call_text.append(self._opener.rest)
            self.stopped = self.stopped or self._drop_calls  # no call allowed: it ends here
        return safe

    def _send(self, text: str) -> None:
        if not text or (self._repeats and self.stopped):
            return
        self._sent = True
        if self._repeats:
            text = self._whole_lines(text)
        self._show(text)

    def _show(self, text: str) -> None:
        if not text:
            return
        self._answer.append(text)
        if self._out is not None:
            self._out.put(text)

    def _whole_lines(self, text: str) -> str:
        """What of the lines ``text`` completes may be shown: up to a line or a sentence
        written before (then the reply is complete, without it)."""
        *done, self._line = (self._line + text).split("\n")
        shown = ""
        for line in done:
            kept = self._unrepeated(line, complete=True)
            if kept != line or (line.strip() and line.strip() in self._lines):
                self.stopped = True
                self._line = ""
                return shown + (self._joined(kept) if kept != line and kept else "")
            self._lines.add(line.strip())
            self._sentences.update(_sentences(line, complete=True).values())
            shown += self._joined(line)
        # A line that loops before it ends (one sentence again and again) ends here.
        kept = self._unrepeated(self._line, complete=False)
        if kept != self._line:
            self.stopped = True
            self._line = ""
            shown += self._joined(kept) if kept else ""
        return shown

    def _joined(self, line: str) -> str:
        """``line`` as shown after those before it."""
        shown = ("\n" if self._newline_owed else "") + line
        self._newline_owed = True
        return shown

    def _unrepeated(self, line: str, complete: bool) -> str:
        """``line`` up to its first sentence written before (all of it if none)."""
        seen = set(self._sentences)
        for start, sentence in _sentences(line, complete).items():
            if sentence in seen:
                return line[:start].rstrip()
            seen.add(sentence)
        return line


# A sentence: up to its full stop, question or exclamation mark and the space after it
# (or the line's end, once the line is complete). Four words or more: a short one
# ("No.", "Thank you.") may well come twice in a reply that is not looping.
_SENTENCE = re.compile(r"\S.*?[.!?]+(?=\s)")
_MIN_WORDS = 4


def _sentences(line: str, complete: bool) -> dict[int, str]:
    """The sentences of ``line`` long enough to count, by where each starts, as compared
    (case and spacing aside)."""
    found: dict[int, str] = {}
    for match in _SENTENCE.finditer(line + (" " if complete else "")):
        words = match.group().lower().split()
        if len(words) >= _MIN_WORDS:
            found[match.start()] = " ".join(words)
    return found
