"""The app as a user starts it, in its own process: start-up, quitting and signals."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from app.core import paths, settings
from tests.ui.conftest import greedy_settings

START_TIMEOUT_S = 120


@pytest.mark.parametrize("locale_env", [{}, {"LC_ALL": "C"}])
def test_the_window_reports_ready_and_quits_cleanly(locale_env: dict[str, str]) -> None:
    env = {**os.environ, "FIRESIDE_EXIT_WHEN_READY": "1", **locale_env}
    result = subprocess.run([sys.executable, "-m", "app"], capture_output=True, text=True,
                            env=env, timeout=START_TIMEOUT_S, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ready ")
    assert "Traceback" not in result.stderr and "Detected locale" not in result.stderr


DRIVER = Path(__file__).with_name("app_driver.py")
STORY = "Write a very long, detailed story about a lighthouse keeper and a storm."


def saved_reply() -> tuple[str, dict[str, object] | None] | None:
    """The newest reply in the database, read as another program would."""
    path = paths.database_path()
    if not path.exists():
        return None
    try:
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
            row = db.execute("SELECT text, stats FROM messages WHERE role = 'assistant'"
                             " ORDER BY id DESC LIMIT 1").fetchone()
    except sqlite3.OperationalError:  # created but not yet set up
        return None
    if row is None:
        return None
    return row[0], json.loads(row[1]) if row[1] else None


@pytest.mark.model  # the bundled model, found as the app finds it
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_closing_signal_mid_reply_saves_it_and_exits_promptly(
        signum: signal.Signals, tmp_path: Path) -> None:
    greedy_settings(max_tokens=4000)
    log = tmp_path / "stderr.txt"
    with log.open("w") as stderr:  # a file, not a pipe: the app never waits on a reader
        process = subprocess.Popen([sys.executable, str(DRIVER), STORY],
                                   stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        partial = None
        while partial is None or not partial[0]:
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no partial reply was ever saved"
            time.sleep(0.1)
            partial = saved_reply()
        sent = time.monotonic()
        process.send_signal(signum)
        status = process.wait(timeout=START_TIMEOUT_S)
        latency = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    print(f"{signum.name}: exited {latency:.2f} s after the signal")
    err = log.read_text()
    assert status == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    final = saved_reply()
    assert final is not None and final[1] is not None, "the reply was not finished"
    text, stats = final
    assert text.startswith(partial[0]) and len(text) >= len(partial[0])
    assert stats["finish_reason"] == "stopped"
    # The model that was loaded is remembered, as after a normal close.
    assert settings.load().settings.last_model
    # How fast (the app aims at 2 s) is measured by tests/benchmarks/bench_signals.py:
    # a timed assert here would fail on a busy machine.


def test_the_window_shows_before_llama_cpp_and_model_headers_are_loaded() -> None:
    # What the first paint waits for: the window's own modules, never the heavy ones.
    probe = ("import sys, app.ui.application; heavy = ['llama_cpp', 'numpy', "
             "'app.core.llama.engine', 'app.core.llama.memory', 'app.core.models.catalog', "
             "'app.core.models.gguf']; "
             "print([m for m in heavy if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert result.stdout.strip() == "[]"
