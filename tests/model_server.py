"""A real OpenAI-compatible server on loopback: llama-cpp-python's own, on a free port."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Served:
    url: str  # the API's base, …/v1
    process: subprocess.Popen[str]


@contextlib.contextmanager
def llama_server(model: Path | Sequence[Path], api_key: str | None = None,
                 n_ctx: int = 2048, port: int | None = None,
                 cpus: set[int] | None = None) -> Iterator[Served]:
    """Serve ``model`` until the block ends (or the test kills it). Several models go
    through the server's config file, as its users serve them: each by its path, one
    loaded at a time, swapped when a request names another. ``port``: to start it again
    where it was; ``cpus``: the only ones it may use (Linux)."""
    port = port or free_port()
    models = [model] if isinstance(model, Path) else list(model)
    with tempfile.TemporaryDirectory(prefix="fireside-served-") as folder:
        config = Path(folder) / "config.json"
        config.write_text(json.dumps({
            "host": "127.0.0.1", "port": port, "api_key": api_key,
            "models": [{"model": str(m), "n_ctx": n_ctx, "n_threads": 1, "verbose": False}
                       for m in models]}), encoding="utf-8")
        pinned = ["taskset", "-c", ",".join(map(str, sorted(cpus)))] if cpus else []
        process = subprocess.Popen(
            [*pinned, sys.executable, "-m", "llama_cpp.server", "--config_file", str(config)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = f"http://127.0.0.1:{port}/v1"
        try:
            _wait_until_serving(process, url, api_key)
            yield Served(url, process)
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_serving(process: subprocess.Popen[str], url: str, api_key: str | None) -> None:
    request = urllib.request.Request(f"{url}/models", headers={
        "Authorization": f"Bearer {api_key or 'none'}"})
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = process.stderr.read() if process.stderr else ""
            raise RuntimeError(f"the server exited: {said}")
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                json.load(answer)
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    raise RuntimeError("the server did not start in time")
