"""What a face on a thread of its own takes from a reply's pieces, batch by batch: the
tests read a streaming reply the way the terminal does."""

from __future__ import annotations

import threading

from app.core.reply.pieces import Pieces, Taken


class Taker:
    """Takes ``pieces`` on a thread of its own until the reply ends."""

    def __init__(self, pieces: Pieces) -> None:
        self.batches: list[Taken] = []
        self._thread = threading.Thread(target=lambda: self.batches.extend(pieces),
                                        name="test-taker", daemon=True)
        self._thread.start()

    def wait(self, timeout: float = 120) -> Taker:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the reply's pieces never ended"
        return self

    @property
    def answer(self) -> str:
        return "".join(batch.answer for batch in self.batches)

    @property
    def thought(self) -> str:
        return "".join(batch.thought for batch in self.batches)
