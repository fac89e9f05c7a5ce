"""The app as a user starts it: ``python -m app`` in its own process."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from app.core import settings

START_TIMEOUT_S = 120


@contextmanager
def running_app(*args: str, env: dict[str, str] | None = None) -> Iterator[
        tuple[subprocess.Popen[str], queue.Queue[str]]]:
    """The window's process, with its log lines (stderr) arriving in a queue."""
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "--log-level", "INFO", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()
    assert process.stderr is not None
    stderr = process.stderr

    def read() -> None:
        for line in stderr:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        yield process, lines
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def wait_for_line(lines: queue.Queue[str], text: str) -> None:
    seen = []
    while True:
        try:
            line = lines.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            pytest.fail(f"the app never logged {text!r}; it logged:\n{''.join(seen[-30:])}")
        seen.append(line)
        if text in line:
            return


@pytest.mark.parametrize("locale_env", [{}, {"LC_ALL": "C"}])
def test_the_window_reports_ready_and_quits_cleanly(locale_env: dict[str, str]) -> None:
    env = {**os.environ, "FIRESIDE_EXIT_WHEN_READY": "1", **locale_env}
    result = subprocess.run([sys.executable, "-m", "app"], capture_output=True, text=True,
                            env=env, timeout=START_TIMEOUT_S, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ready ")
    assert "Traceback" not in result.stderr and "Detected locale" not in result.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_termination_signal_closes_the_window_like_the_user_would(
        signum: signal.Signals) -> None:
    with running_app() as (process, lines):
        wait_for_line(lines, "is ready")
        process.send_signal(signum)
        assert process.wait(timeout=START_TIMEOUT_S) == 0
    # The model that was loaded is remembered, as after a normal close.
    assert settings.load().settings.last_model
