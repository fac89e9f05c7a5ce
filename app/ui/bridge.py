"""What crosses from the inference thread to the GUI thread: streamed text, progress,
and the calls of a reply.

Both are called on the inference thread and emit a signal that Qt queues to the GUI
thread. Streamed pieces are batched: a signal is emitted only when the GUI waits for
one (its last take found nothing), and the GUI takes everything that arrived since, so
a busy GUI thread gets fewer, larger updates instead of a growing backlog of events,
and a GUI that comes back on its own (each frame) is not woken for each piece.
"""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Signal

from app.core.reply.replies import Thinking


class PieceStream(QObject):
    """Streamed text waiting for the GUI thread."""

    arrived = Signal()
    """Text is waiting: call take()."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._lock = threading.Lock()
        self._parts: list[str] = []
        self._waited = True  # the GUI waits for ``arrived`` (its last take found nothing)

    def put(self, text: str) -> None:
        """Inference thread: queue a piece of the reply."""
        with self._lock:
            self._parts.append(text)
            wake, self._waited = self._waited, False
        if wake:
            self.arrived.emit()

    def take(self) -> tuple[str, str]:
        """GUI thread: the (thinking, answer) that arrived since the last take(); a reply
        thinks first, so the thinking comes before the answer's text. Taking nothing
        means waiting: the next piece emits ``arrived``; else the GUI comes back itself."""
        with self._lock:
            parts, self._parts = self._parts, []
            self._waited = not any(parts)
        return ("".join(p for p in parts if isinstance(p, Thinking)),
                "".join(p for p in parts if not isinstance(p, Thinking)))


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
