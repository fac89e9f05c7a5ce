"""``make test-gpu``'s script, dry: what it would do on an NVIDIA machine, run anywhere.

The driver and the toolkit are stand-ins on PATH (nvidia-smi, nvcc); the dry run looks
at the machine, prints each step and runs none of them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tests.llama_build

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not shutil.which("bash"),
                                reason="make test-gpu is a bash script for Linux")


def _stand_in(folder: Path, name: str, answers: dict[str, str]) -> None:
    """A command that prints the answer of the first key found in its arguments."""
    cases = "".join(f"    *{key}*) echo '{answer}' ;;\n" for key, answer in answers.items())
    script = folder / name
    script.write_text(f'#!/bin/sh\ncase "$*" in\n{cases}esac\n', encoding="utf-8")
    script.chmod(0o755)


def _gpu_check(path: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path, "PYTHON": sys.executable}
    for name in ("CUDAARCHS", "BENCH_ARGS"):
        env.pop(name, None)
    return subprocess.run(["bash", str(ROOT / "packaging" / "gpu_check.sh"), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def test_the_dry_run_lists_the_steps(tmp_path: Path) -> None:
    _stand_in(tmp_path, "nvidia-smi", {"name,driver": "NVIDIA H100 80GB HBM3, 580.65.06, 9.0",
                                       "compute_cap": "9.0"})
    _stand_in(tmp_path, "nvcc", {"version": "Cuda compilation tools, release 13.0, V13.0.88"})
    had_venv = (ROOT / ".venv-gpu").exists()
    done = _gpu_check(f"{tmp_path}{os.pathsep}{os.environ['PATH']}", "--dry-run")
    assert done.returncode == 0, done.stderr
    steps = done.stderr
    assert "nvcc: " in steps and "(13.0)" in steps
    # The cuBLAS of that toolkit release, as the offline recipe downloads it.
    assert "cuBLAS wheel: cuda-toolkit[cublas]==13.0.*" in steps
    recipe = (ROOT / "packaging" / "gpu_check.sh").read_text(encoding="utf-8")
    assert '"cuda-toolkit[cublas]==$CUDA.*"' in recipe
    assert "CUDA architectures: 90 (nvidia-smi)" in steps
    assert "FIRESIDE_GPU=cuda" in steps and "llama_build.py native" in steps
    assert "pip install --quiet cmake ninja" in steps  # llama-bench's build tools
    assert "-m pytest -m gpu tests/gpu" in steps
    # One round of the benchmark by default: the whole run fits 10 minutes.
    assert re.search(r"bench_llama_cpp.py --gpu-layers 99 --jobs \d+ --rounds 1\n", steps)
    assert "would stop here" not in steps
    assert (ROOT / ".venv-gpu").exists() == had_venv  # nothing was run


def test_without_a_driver_the_dry_run_says_what_is_missing_and_a_real_run_stops(
        tmp_path: Path) -> None:
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this machine has an NVIDIA driver")
    # Every command of the system's but nvidia-smi (and nvcc, which /usr/local/cuda may
    # still hold).
    for folder in os.environ["PATH"].split(os.pathsep):
        for tool in Path(folder).glob("*") if Path(folder).is_dir() else ():
            if tool.name not in ("nvidia-smi", "nvcc") and not (tmp_path / tool.name).exists():
                (tmp_path / tool.name).symlink_to(tool)
    had_venv = (ROOT / ".venv-gpu").exists()
    dry = _gpu_check(str(tmp_path), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "a real run would stop here: no NVIDIA driver here" in dry.stderr
    assert "bench_llama_cpp.py --gpu-layers 99" in dry.stderr
    real = _gpu_check(str(tmp_path))
    assert real.returncode == 1 and "no NVIDIA driver here" in real.stderr
    assert "pip install" not in real.stderr
    assert (ROOT / ".venv-gpu").exists() == had_venv


def test_cudaarchs_names_the_architecture_where_no_card_answers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CMake's own variable: a wheel for one card built on a machine without it."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    lb = tests.llama_build.load()
    monkeypatch.delenv("CUDAARCHS", raising=False)
    assert lb._cuda_arch() is None
    monkeypatch.setenv("CUDAARCHS", "90")
    assert lb._cuda_arch() == "90"
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in lb.cuda_cmake_args(
        lb.CudaFound(nvcc="nvcc", system_cublas=True, arch=lb._cuda_arch()))
