"""Notices model files appearing, disappearing or changing, so the catalog stays current.

A light polling thread, not file-system notifications: the stores live in many
places (network drives, other users' folders, links into the Hugging Face cache)
where inotify/FSEvents/ReadDirectoryChangesW are partly blind, and a download in
progress must be told from a finished file by watching its size settle, which
notifications do not say. Polling a few hundred `stat` calls every half second costs
well under a millisecond of a core and behaves the same on every system. A very large
tree (a Hugging Face cache of thousands of files) is polled less often, so that
watching never takes more than a small share of a core.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

INTERVAL_S = 0.5  # a change is reported about two polls after it ends: within ~1 s
MAX_SHARE = 0.02  # of one core's time spent polling: the wait grows with a poll's cost

Snapshot = dict[str, tuple[int, int]]


def snapshot(files: Iterable[tuple[str, Path]]) -> Snapshot:
    """Size and modification time of each existing file (links followed), by key.

    The key says how the file was reached (e.g. its Ollama name as well as its path),
    so a second name for the same file is a change too.
    """
    state: Snapshot = {}
    for key, path in files:
        try:
            info = os.stat(path)
        except (OSError, ValueError):
            continue
        state[key] = (info.st_size, info.st_mtime_ns)
    return state


class Watcher:
    """Calls `changed()` (on its own thread) once the listed files differ from the last
    time it did and have stayed the same for one whole interval: a file still being
    written keeps changing, so it is reported only once it has settled.

    The first settled state is reported too, so nothing that changed between the
    caller's first scan and the watcher's start is missed.
    """

    def __init__(self, listing: Callable[[], Iterable[tuple[str, Path]]],
                 changed: Callable[[], None], interval: float = INTERVAL_S) -> None:
        self._listing = listing
        self._changed = changed
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.polls = 0  # how many times the files were looked at (for tests, logs)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fireside-watch",
                                            daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop polling; waits (bounded) for a poll in progress."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        reported: Snapshot | None = None
        previous: Snapshot | None = None
        while not self._stop.is_set():
            started = time.thread_time()  # this thread's own work, not time waiting for a core
            try:
                current = snapshot(self._listing())
            except Exception:  # a listing that fails must not end the watching
                logger.exception("model folders could not be listed")
                current = previous or {}
            self.polls += 1
            if current == previous and current != reported:
                reported = current
                try:
                    self._changed()
                except Exception:
                    logger.exception("a model folder change could not be handled")
            previous = current
            cost = time.thread_time() - started
            self._stop.wait(max(self._interval, cost / MAX_SHARE))
