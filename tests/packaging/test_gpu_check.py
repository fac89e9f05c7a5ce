"""``make test-gpu``'s script, dry: what it would do on an NVIDIA machine, run anywhere.

The driver and the toolkit are stand-ins on PATH (nvidia-smi, nvcc); the dry run looks
at the machine, prints each step and runs none of them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not shutil.which("bash"),
                                reason="make test-gpu is a bash script for Linux")


def _stand_in(folder: Path, name: str, output: str) -> None:
    script = folder / name
    script.write_text(f"#!/bin/sh\necho '{output}'\n", encoding="utf-8")
    script.chmod(0o755)


def test_the_dry_run_lists_the_steps(tmp_path: Path) -> None:
    _stand_in(tmp_path, "nvidia-smi", "NVIDIA H100 80GB HBM3, 580.65.06, 9.0")
    _stand_in(tmp_path, "nvcc", "Cuda compilation tools, release 13.0, V13.0.88")
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
           "PYTHON": sys.executable}
    had_venv = (ROOT / ".venv-gpu").exists()
    done = subprocess.run(["bash", str(ROOT / "packaging" / "gpu_check.sh"), "--dry-run"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    steps = done.stderr
    assert "nvcc: " in steps and "(13.0)" in steps
    assert "FIRESIDE_GPU=cuda" in steps and "llama_build.py native" in steps
    assert "-m pytest -m gpu tests/gpu" in steps
    assert "bench_llama_cpp.py --gpu-layers 99" in steps
    assert (ROOT / ".venv-gpu").exists() == had_venv  # nothing was run
