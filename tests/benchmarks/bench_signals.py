"""How long Fireside takes to exit after a signal arrives during a reply.

    python tests/benchmarks/bench_signals.py

The terminal (`fireside chat`, one-shot and a stdin session, Gemma 3 270M streaming)
and the window (offscreen, driven by tests/ui/app_driver.py, SmolLM2 streaming).
Target: under 2 s from the signal to the process's exit, the partial reply saved.
Reports the median and the worst of five runs per case, on the machine as it is and
again with every core kept busy by other processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core import settings
from app.core.models import bundled
from tests.core.helpers import sigint_not_ignored

ROOT = Path(__file__).resolve().parents[2]

GEMMA = bundled.bundled_dir() / bundled.GEMMA_FILE
STORY = "Write a very long story about the sea."


def exit_latency(sig: signal.Signals, one_shot: bool) -> float:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "FIRESIDE_DATA_DIR": f"{home}/data",
               "FIRESIDE_CONFIG_DIR": f"{home}/config"}
        sigint_not_ignored()
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


def window_exit_latency(sig: signal.Signals) -> float:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "FIRESIDE_DATA_DIR": f"{home}/data",
               "FIRESIDE_CONFIG_DIR": f"{home}/config", "QT_QPA_PLATFORM": "offscreen"}
        os.environ.update({k: env[k] for k in ("FIRESIDE_DATA_DIR", "FIRESIDE_CONFIG_DIR")})
        prefs = settings.load().settings
        prefs.max_tokens, prefs.temperature = 4000, 0.0
        settings.save(prefs)
        sigint_not_ignored()
        process = subprocess.Popen([sys.executable, str(ROOT / "tests/ui/app_driver.py"),
                                    STORY], env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        database = Path(home) / "data" / "conversations.sqlite3"
        while not _partial_reply_saved(database):
            if process.poll() is not None:
                raise SystemExit("the window exited before replying")
            time.sleep(0.05)
        sent = time.monotonic()
        process.send_signal(sig)
        process.wait()
        return time.monotonic() - sent


def _partial_reply_saved(database: Path) -> bool:
    if not database.exists():
        return False
    try:
        with sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True) as db:
            row = db.execute("SELECT text FROM messages WHERE role = 'assistant'"
                             " ORDER BY id DESC LIMIT 1").fetchone()
    except sqlite3.OperationalError:  # created but not yet set up
        return False
    return bool(row and row[0])


@contextmanager
def busy_cores() -> Iterator[None]:
    """Every core kept busy by another process, as a build or a game would."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def main() -> None:
    cases = [(signal.SIGINT, True), (signal.SIGTERM, True), (signal.SIGHUP, True),
             (signal.SIGTERM, False), (signal.SIGHUP, False)]
    for busy, load in (("", contextlib.nullcontext()), (", cores busy", busy_cores())):
        with load:
            for sig, one_shot in cases:
                runs = [exit_latency(sig, one_shot) for _ in range(5)]
                report(f"{'one-shot' if one_shot else 'session'} {sig.name}{busy}", runs)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                report(f"window {sig.name}{busy}", [window_exit_latency(sig) for _ in range(5)])


def report(label: str, runs: list[float]) -> None:
    print(f"{label:30} exit after {statistics.median(runs):.2f} s median, "
          f"{max(runs):.2f} s worst (target < 2 s)", flush=True)


if __name__ == "__main__":
    main()
