"""``fireside search`` and ``fireside pull`` against a Hub on loopback serving the bundled
models: the plan and its fit before any weights, a download cut mid-file that resumes,
one killed or stopped with Ctrl-C that the next pull finishes, and clear errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from app.core import paths
from app.core.hub import download
from tests.loopback_hub import LoopbackHub

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
GEMMA = "unsloth/gemma-3-270m-it-GGUF"


def fireside(hub: LoopbackHub, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True,
                          text=True, timeout=300, check=False,
                          env=dict(os.environ, HF_ENDPOINT=hub.endpoint))


def events(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def started(hub: LoopbackHub, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "app", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, HF_ENDPOINT=hub.endpoint))


@pytest.fixture
def served(hub_server: LoopbackHub, smollm2_path: Path, gemma_path: Path) -> LoopbackHub:
    hub_server.add(SMOL, {"smollm2-135m-instruct-q4_1.gguf": smollm2_path}, downloads=200)
    hub_server.add(GEMMA, {"gemma-3-270m-it-Q4_K_M.gguf": gemma_path}, downloads=100)
    return hub_server


def listed() -> list[dict[str, Any]]:
    result = subprocess.run([sys.executable, "-m", "app", "models", "--json"],
                            capture_output=True, text=True, timeout=120, check=True)
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.parametrize(("repo", "source"), [(SMOL, "smollm2_path"), (GEMMA, "gemma_path")])
def test_pull_cut_once_mid_file_ends_in_the_library_with_the_hubs_sha256(
        served: LoopbackHub, repo: str, source: str, request: pytest.FixtureRequest) -> None:
    model: Path = request.getfixturevalue(source)
    (name,) = served.repos[repo].files
    cut = model.stat().st_size // 2 + 12345
    served.cut_at[name] = cut
    result = fireside(served, "pull", repo, "--json")
    assert result.returncode == 0, result.stderr
    found = events(result)
    plan, done = found[0], found[-1]
    assert plan["event"] == "plan" and plan["fit"]["verdict"] == "fits in RAM"
    assert plan["bytes"] == model.stat().st_size
    assert done["event"] == "downloaded" and done["sha256"] == served.sha(model)
    assert any(e["event"] == "progress" for e in found)
    path = Path(done["path"])
    assert path.parent == paths.models_dir() / repo
    assert str(path) in [m["path"] for m in listed()]
    resumed_at = int(served.sent[-1].range.removeprefix("bytes=").rstrip("-"))
    assert cut - resumed_at <= 1 << 20, "at most 1 MB fetched again after the cut"


def test_dry_run_plans_from_the_header_and_downloads_no_weights(
        served: LoopbackHub, gemma_path: Path) -> None:
    result = fireside(served, "pull", f"{GEMMA}:Q4_K_M", "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    (plan,) = events(result)
    assert plan["file"] == "gemma-3-270m-it-Q4_K_M.gguf" and plan["quant"] == "Q4_K_M"
    assert plan["architecture"] == "gemma3" and plan["context_length"] == 32768
    fetched = sum(s.bytes for s in served.sent)
    assert fetched == plan["header_bytes_read"] < gemma_path.stat().st_size // 10
    assert not list(paths.models_dir().rglob("*.gguf*"))
    text = fireside(served, "pull", SMOL, "--dry-run")
    assert "smollm2-135m-instruct-q4_1.gguf (98 MB): fits in RAM" in text.stdout


def test_a_killed_pull_is_finished_by_the_next_one(
        served: LoopbackHub, smollm2_path: Path) -> None:
    go = threading.Event()
    served.stall_at["smollm2-135m-instruct-q4_1.gguf"] = (30_000_000, go)
    process = started(served, "pull", SMOL, "--json")
    part = download.part_of(paths.models_dir() / SMOL / "smollm2-135m-instruct-q4_1.gguf")
    deadline = time.monotonic() + 120
    while not (part.exists() and part.stat().st_size >= 30_000_000):
        assert time.monotonic() < deadline and process.poll() is None, process.stderr
        time.sleep(0.05)
    process.kill()
    process.wait()
    go.set()
    result = fireside(served, "pull", SMOL, "--json")
    assert result.returncode == 0, result.stderr
    assert events(result)[-1]["sha256"] == served.sha(smollm2_path)
    assert served.sent[-1].range == "bytes=30000000-"
    assert not part.exists()


def test_ctrl_c_keeps_the_part_and_the_same_command_goes_on(
        served: LoopbackHub, smollm2_path: Path) -> None:
    go = threading.Event()
    served.stall_at["smollm2-135m-instruct-q4_1.gguf"] = (20_000_000, go)
    process = started(served, "pull", SMOL)
    part = download.part_of(paths.models_dir() / SMOL / "smollm2-135m-instruct-q4_1.gguf")
    deadline = time.monotonic() + 120
    while not (part.exists() and part.stat().st_size >= 20_000_000):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    go.set()
    assert process.returncode == 130
    assert "paused: 20 MB of 98 MB kept; the same command goes on from there" in stderr
    result = fireside(served, "pull", SMOL)
    assert result.returncode == 0, result.stderr
    assert served.sent[-1].range == "bytes=20000000-"
    assert f"sha256 {served.sha(smollm2_path)}" in result.stdout


def test_search_and_the_errors_a_person_can_act_on(served: LoopbackHub) -> None:
    found = events(fireside(served, "search", "gguf", "--json"))
    assert [f["repo"] for f in found] == [SMOL, GEMMA]
    text = fireside(served, "search", "gemma")
    assert text.stdout.startswith(f"{GEMMA}  ·  100 downloads")

    missing = fireside(served, "pull", "nobody/Nothing-GGUF", "--json")
    assert missing.returncode == 1
    assert events(missing) == [{"event": "error", "message":
                                f"nobody/Nothing-GGUF was not found on {served.endpoint} "
                                "(or it is private and needs a token)"}]
    no_quant = fireside(served, "pull", f"{SMOL}:Q8_0")
    assert no_quant.returncode == 1
    assert f"{SMOL} has no Q8_0 file; it has: Q4_1" in no_quant.stderr
    bad = fireside(served, "pull", "not a repo")
    assert bad.returncode == 1 and "is not a model on the Hub: write OWNER/REPO" in bad.stderr
    assert not list(paths.models_dir().rglob("*.gguf*"))
