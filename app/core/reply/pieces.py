"""A reply's text as it streams: written by the thread that writes the reply, taken by a
face on a thread of its own.

The writer never waits for a face and never calls into one: it appends to the buffer
and, only when the face has said it is waiting (its last take found nothing), calls
the wake-up the face set (a Qt signal, ``call_soon_threadsafe``, a condition). A face
that comes back on its own (each frame) is not woken for each piece, and a slow face
(a terminal piped into a slow reader) never slows the model: what arrived meanwhile is
taken in one go.

The whole text stays in the buffer, so the turn's thread saves the growing reply from
it (``text_since``) while the face takes only what is new.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Taken:
    """What arrived since the last take: a reply thinks first, so its thought comes
    before its answer's text."""

    thought: str = ""
    answer: str = ""
    ended: bool = False  # nothing more will come (and this is the last of it)

    def __bool__(self) -> bool:
        return bool(self.thought or self.answer)


@dataclass(frozen=True)
class Mark:
    """A place in the buffer: where a reply of a turn begins."""

    answer: int = 0
    thought: int = 0


class Pieces:
    """The streamed text of one reply, or of a turn's replies one after another."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._answer: list[str] = []
        self._thought: list[str] = []
        self._taken = Mark()
        self._ended = False
        self._waiting = True  # the face waits to be woken (its last take found nothing)
        self._wake: Callable[[], object] | None = None

    # The writer's side ----------------------------------------------------------------

    def put(self, text: str, thought: bool = False) -> None:
        """A piece of the answer, or of the thought."""
        if not text:
            return
        with self._changed:
            (self._thought if thought else self._answer).append(text)
            wake, self._waiting = self._waiting and self._wake, False
            self._changed.notify_all()
        if wake:
            wake()

    def end(self) -> None:
        """Nothing more comes; a face waiting is woken to take the rest."""
        with self._changed:
            if self._ended:
                return
            self._ended = True
            wake = self._wake
            self._changed.notify_all()
        if wake is not None:
            wake()

    # The face's side ------------------------------------------------------------------

    def on_arrival(self, wake: Callable[[], object]) -> None:
        """Call ``wake`` (on the writer's thread) when text arrives while the face waits,
        and once at the end. Called at once if something is already waiting."""
        with self._changed:
            self._wake = wake
            ready = self._ended or self._unread()
            if ready:
                self._waiting = False
        if ready:
            wake()

    def take(self) -> Taken:
        """Everything that arrived since the last take. Taking nothing means waiting:
        the next piece calls the wake-up."""
        with self._changed:
            taken = Taken("".join(self._thought[self._taken.thought:]),
                          "".join(self._answer[self._taken.answer:]), self._ended)
            self._taken = Mark(len(self._answer), len(self._thought))
            self._waiting = not taken
            return taken

    def wait(self, timeout: float | None = None) -> bool:
        """Block until there is something to take or the end has come (for a face on a
        thread of its own); False if ``timeout`` passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: self._ended or self._unread(), timeout)

    def __iter__(self) -> Iterator[Taken]:
        """For a face on a thread of its own: what arrived, batch by batch, until the
        end (a slow reader gets larger batches; the writer never waits for it)."""
        while True:
            self.wait()
            taken = self.take()
            if taken:
                yield taken
            if taken.ended:
                return

    @property
    def ended(self) -> bool:
        return self._ended

    # The turn's side ------------------------------------------------------------------

    def mark(self) -> Mark:
        """Where the next reply written into this buffer begins."""
        with self._changed:
            return Mark(len(self._answer), len(self._thought))

    def text_since(self, mark: Mark) -> tuple[str, str]:
        """The (answer, thought) written since ``mark``, whether taken or not."""
        with self._changed:
            return ("".join(self._answer[mark.answer:]),
                    "".join(self._thought[mark.thought:]))

    def _unread(self) -> bool:
        return (len(self._answer) > self._taken.answer
                or len(self._thought) > self._taken.thought)
