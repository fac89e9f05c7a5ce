"""The Qt binding the window runs on must survive a long conversation's worth of signals.

PySide6 6.12.0 on Python 3.11 drops a reference to ``True`` on every ``Signal.emit()``
from Python; after a few hundred emits the interpreter aborts (a streamed reply emits
one per piece). Run in a child process, because the failure kills the interpreter.
"""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
from PySide6.QtCore import QObject, Signal

class Source(QObject):
    changed = Signal(int)

source = Source()
received = []
source.changed.connect(received.append)
for n in range(20_000):
    source.changed.emit(n)
import gc; gc.collect()
print(len(received))
"""


def test_twenty_thousand_signals_do_not_crash_the_interpreter() -> None:
    result = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["20000"]
