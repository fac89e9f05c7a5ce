"""The user's answers to a reply's calls, by call id: asked for on the calls' thread,
given by a click on the GUI thread."""

from __future__ import annotations

import threading
from concurrent.futures import Future


class ToolAnswers:
    def __init__(self) -> None:
        self._asked: dict[str, Future[str]] = {}
        self._lock = threading.Lock()

    def answer(self, call_id: str) -> Future[str]:
        """The answer to this call, given or still to come."""
        # The call is shown just before its question is asked on the calls' thread: a
        # quick click may come first, and its answer waits here for the question.
        with self._lock:
            return self._asked.setdefault(call_id, Future())

    def decide(self, call_id: str, decision: str) -> None:
        """The user's answer for a call that waits (ALLOW_ONCE, ALLOW_ALWAYS or DENY)."""
        answer = self.answer(call_id)
        if not answer.done():  # the first answer counts
            answer.set_result(decision)

    def forget(self) -> None:
        """The reply has ended: a call still asked was stopped with it."""
        with self._lock:
            self._asked.clear()
