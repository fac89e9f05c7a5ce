"""How long `fireside chat` takes to exit after a signal arrives during a reply.

    python tests/benchmarks/bench_signals.py

Target: under 2 s from the signal to the process's exit, the partial reply saved.
Reports the median and the worst of five runs per case (Gemma 3 270M streaming).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core import bundled

GEMMA = bundled.bundled_dir() / bundled.GEMMA_FILE
STORY = "Write a very long story about the sea."


def _sigint_not_ignored() -> None:
    # A shell starts background jobs with SIGINT ignored and children inherit that,
    # while a handled signal is reset to the default at exec: handle it here, so the
    # chat meets the disposition a terminal user's Ctrl-C meets.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def exit_latency(sig: signal.Signals, one_shot: bool) -> float:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "FIRESIDE_DATA_DIR": f"{home}/data",
               "FIRESIDE_CONFIG_DIR": f"{home}/config"}
        _sigint_not_ignored()
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "chat", "--json", "--model", str(GEMMA),
             "--max-tokens", "400", *([STORY] if one_shot else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env=env)
        assert process.stdin is not None and process.stdout is not None
        if not one_shot:
            process.stdin.write(STORY + "\n")
            process.stdin.flush()
        deltas = 0
        while deltas < 5:
            deltas += json.loads(process.stdout.readline())["event"] == "delta"
        sent = time.monotonic()
        process.send_signal(sig)
        process.stdout.read()
        process.wait()
        return time.monotonic() - sent


def main() -> None:
    cases = [(signal.SIGINT, True), (signal.SIGTERM, True), (signal.SIGHUP, True),
             (signal.SIGTERM, False), (signal.SIGHUP, False)]
    for sig, one_shot in cases:
        runs = [exit_latency(sig, one_shot) for _ in range(5)]
        label = f"{'one-shot' if one_shot else 'session'} {sig.name}"
        print(f"{label:18} exit after {statistics.median(runs):.2f} s median, "
              f"{max(runs):.2f} s worst (target < 2 s)")


if __name__ == "__main__":
    main()
