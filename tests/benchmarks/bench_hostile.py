"""How long the GUI thread stalls while a hostile reply streams in and is finished.

    python tests/benchmarks/bench_hostile.py

Streams each reply of tests/ui/test_hostile_output.py (raw HTML and links, a
5,000-row table, a 1 MB code block) into a real transcript as the chat controller
delivers text, with a 10 ms heartbeat timer on the GUI thread; prints the longest
gap between ticks (target: <= 50 ms).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from app.ui.transcript import TranscriptView
from tests.ui.test_hostile_output import HOSTILE_HTML, HUGE_CODE, HUGE_TABLE, stream

TARGET_S = 0.050
ROUNDS = 3


def main() -> int:
    app = QApplication([sys.argv[0]])
    worst_overall = 0.0
    for name, text in (("raw HTML, links, images", HOSTILE_HTML),
                       ("5,000-row table", HUGE_TABLE), ("1 MB code block", HUGE_CODE)):
        gaps = []
        for _ in range(ROUNDS):
            view = TranscriptView()
            view.resize(900, 700)
            view.show()
            QTest.qWait(50)
            gaps.append(stream(view, text))
            view.deleteLater()
            QTest.qWait(10)
        worst_overall = max(worst_overall, min(gaps))
        print(f"{name:26} longest stall {min(gaps) * 1000:5.0f} ms (best of {ROUNDS}),"
              f" {max(gaps) * 1000:5.0f} ms worst")
    verdict = "met" if worst_overall <= TARGET_S else "NOT met"
    print(f"target <= {TARGET_S * 1000:.0f} ms: {verdict}")
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
