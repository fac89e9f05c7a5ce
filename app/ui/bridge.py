"""What crosses from the core's threads to the GUI thread: streamed text, progress, and
the calls of a reply.

A reply's text waits in the core's buffer (``Pieces``); ``PieceStream`` only wakes the
GUI thread, through a signal Qt queues to it, when the GUI waits for text (its last take
found nothing). The GUI takes everything that arrived since, so a busy GUI thread gets
fewer, larger updates instead of a growing backlog of events, and a GUI that comes back
on its own (each frame) is not woken for each piece.
"""

from __future__ import annotations

import contextlib

from PySide6.QtCore import QObject, Signal

from app.core.reply.pieces import Pieces


class PieceStream(QObject):
    """A reply's streamed text, as the GUI thread takes it."""

    arrived = Signal()
    """Text is waiting: call take()."""

    def __init__(self, pieces: Pieces, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.pieces = pieces
        pieces.on_arrival(self._wake)

    def _wake(self) -> None:
        """On the thread that writes the reply."""
        with contextlib.suppress(RuntimeError):  # the window is gone: nothing to wake
            self.arrived.emit()

    def take(self) -> tuple[str, str]:
        """GUI thread: the (thinking, answer) that arrived since the last take(); a reply
        thinks first, so the thinking comes before the answer's text. Taking nothing
        means waiting: the next piece emits ``arrived``; else the GUI comes back itself."""
        taken = self.pieces.take()
        return taken.thought, taken.answer


class ProgressRelay(QObject):
    """Load progress from the inference thread, one signal per whole percent."""

    progressed = Signal(float)
    """The load is this far along, from 0.0 to 1.0."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._last = -1

    def reset(self) -> None:
        self._last = -1

    def report(self, fraction: float) -> None:
        """Inference thread: llama.cpp calls this many times per load."""
        percent = int(fraction * 100)
        if percent != self._last:
            self._last = percent
            self.progressed.emit(fraction)


class ToolRelay(QObject):
    """A reply's calls as they change, from the thread that runs them."""

    changed = Signal(object)
    """A ToolRun: asking the user, running, or done with its result."""
