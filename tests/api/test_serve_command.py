"""`fireside serve` in a terminal: a port that is taken, and a token kept for next time."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from app.core import settings
from tests.cli.test_commands import fireside


def test_a_taken_port_is_said_plainly(smollm2_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = fireside("serve", "--port", str(port), "--model", str(smollm2_path))
    assert result.returncode == 1
    assert f"Port {port} is taken by another program. Choose another port." in result.stderr


def test_token_alone_makes_one_keeps_it_and_requires_it(smollm2_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    served = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port), "--model",
         str(smollm2_path), "--token"], stderr=subprocess.PIPE, text=True)
    try:
        assert served.stderr is not None
        said = ""
        for line in served.stderr:
            said += line
            if "Bearer" in line:
                break
        token = settings.load().settings.api_token
        assert token and f"Authorization: Bearer {token}" in said
        url = f"http://127.0.0.1:{port}/v1"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="guess", max_retries=0).models.list()
        listed = openai.OpenAI(base_url=url, api_key=token).models.list()
        assert [m.id for m in listed.data] == ["SmolLM2-135M-Instruct"]
    finally:
        served.terminate()
        assert served.wait(timeout=30) == 0
