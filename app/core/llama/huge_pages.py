"""A model's weights in 2 MB pages on Linux, where the system leaves that to each program.

Decoding reads every weight once per token: with 4 KB pages that is one page-table walk
per 4 KB and the CPU's prefetchers stop at each page's end. Many systems (Ubuntu,
Fedora; ``/sys/kernel/mm/transparent_hugepage/enabled`` = ``madvise``) give 2 MB pages
only to memory a program asks for them with ``madvise(MADV_HUGEPAGE)``, before the
memory is first written. llama.cpp allocates all of a model's buffers before it reads
the first weight (glibc maps each block over 4 MB on its own: ``llama_runtime``), so
the first load-progress report is the moment: the anonymous mappings that appeared since
the load began are the model's buffers. Measured by tests/benchmarks/bench_llama_cpp.py
(decoding) and tests/benchmarks/bench_mmap.py (load time). Elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

Region = tuple[int, int]

_HUGE = 2 << 20
_MADV_HUGEPAGE = 14
_MAPS = Path("/proc/self/maps")


def _madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    if not sys.platform.startswith("linux"):
        return None
    function = ctypes.CDLL(None, use_errno=True).madvise
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_advise = _madvise()


def anonymous_regions() -> set[Region]:
    """This process's private writable mappings without a file, of at least 2 MB."""
    if _advise is None:
        return set()
    try:
        lines = _MAPS.read_text().splitlines()
    except OSError:
        return set()
    regions = set()
    for line in lines:
        fields = line.split()
        if len(fields) == 5 and fields[1] == "rw-p":  # no sixth field: no file, no [heap]
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if end - start >= _HUGE:
                regions.add((start, end))
    return regions


def advise(regions: set[Region]) -> int:
    """Ask for 2 MB pages in ``regions`` (their whole 2 MB-aligned extents); the bytes
    asked for. A refusal (a kernel without them) changes nothing."""
    if _advise is None:
        return 0
    advised = 0
    for start, end in regions:
        first = -(-start // _HUGE) * _HUGE
        last = end // _HUGE * _HUGE
        if last > first and _advise(first, last - first, _MADV_HUGEPAGE) == 0:
            advised += last - first
    return advised
