"""A 10 ms heartbeat on the GUI thread: the longest gap between its ticks is the longest
time the window could not respond."""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, Qt, QTimer, Slot

INTERVAL_S = 0.010


class Heartbeat(QObject):
    """Ticks every 10 ms on the GUI thread and records the longest gap between ticks."""

    def __init__(self) -> None:
        super().__init__()
        self.max_gap = 0.0
        self._last = time.perf_counter()
        self._timer = QTimer(self)
        self._timer.setInterval(int(INTERVAL_S * 1000))
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.timeout.connect(self._on_tick)

    def start(self) -> None:
        self.max_gap = 0.0
        self._last = time.perf_counter()
        self._timer.start()

    def stop(self) -> float:
        """The longest gap, in seconds (INTERVAL_S when nothing held the GUI thread)."""
        self._timer.stop()
        return self.max_gap

    @Slot()
    def _on_tick(self) -> None:
        now = time.perf_counter()
        self.max_gap = max(self.max_gap, now - self._last)
        self._last = now
