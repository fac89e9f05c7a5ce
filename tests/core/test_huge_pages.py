"""A model's weights in 2 MB pages (app/core/llama/huge_pages.py), on the real models."""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.llama import huge_pages

_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _SETTING.is_file()
    or "[never]" in _SETTING.read_text(),
    reason="2 MB pages for programs that ask: Linux with transparent huge pages on")

# Loads the model in a process of its own (the resident huge pages are the process's)
# and prints how much of its anonymous memory sits in 2 MB pages, before and after. On
# the CPU: on a GPU the weights would not be in RAM.
_LOAD = """
import sys
from pathlib import Path
from app.core.llama.engine import Engine
from app.core.options import LoadOptions

def huge_kb():
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0

before = huge_kb()
engine = Engine()
engine.load(Path(sys.argv[1]), LoadOptions(gpu_layers="off")).result()
print(before, huge_kb())
engine.close()
"""


@pytest.mark.parametrize("model", ["smollm2_path", "gemma_path"])
def test_a_loaded_models_weights_sit_in_2_mb_pages(model: str,
                                                   request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(model)
    done = subprocess.run([sys.executable, "-c", _LOAD, str(path)], capture_output=True,
                          text=True, timeout=120, check=True, env=dict(os.environ))
    before, after = (int(x) for x in done.stdout.split())
    # The file is the weights (and a little metadata): most of it is in 2 MB pages.
    assert (after - before) * 1024 >= 0.8 * path.stat().st_size, done.stdout


def test_only_anonymous_writable_mappings_are_candidates() -> None:
    # what a large malloc is: private, writable, no file
    block = mmap.mmap(-1, 8 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    with open(sys.executable, "rb") as file:  # private and writable too, but a file's
        copied = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
    try:
        regions = huge_pages.anonymous_regions()
        holding = {(start, end) for start, end in regions
                   if start <= _address(block) < end}
        assert holding
        assert not any(start <= _address(copied) < end for start, end in regions)
        assert huge_pages.advise(holding) >= 6 << 20  # whole 2 MB-aligned extents
    finally:
        block.close()
        copied.close()


def _address(block: mmap.mmap) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(block))
