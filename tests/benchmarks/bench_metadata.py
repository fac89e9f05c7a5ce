"""How fast Fireside reads a model's metadata, against gguf.GGUFReader on the same file.

Run: python tests/benchmarks/bench_metadata.py [FILE.gguf ...]
Without arguments it reads the two bundled models. Target: <= 0.1 s per file and at
least 100x faster than GGUFReader (which parses every array of the header). The
exact=False column is the reader the model list uses (it skips large string arrays by
search and verifies the result; see bench_library.py for a whole library).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core.models import bundled
from app.core.models.gguf import clear_cache, read_header

RUNS = 7
TARGET_SECONDS = 0.1
TARGET_RATIO = 100


def best_of(runs: int, path: Path, exact: bool = True) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        clear_cache()  # time the parse, not the cache of unchanged files
        read_header(path, exact=exact)
        best = min(best, time.perf_counter() - start)
    return best


def reference_seconds(path: Path) -> float:
    from gguf import GGUFReader

    start = time.perf_counter()
    GGUFReader(path)
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or [
        bundled.bundled_dir() / bundled.DEFAULT_MODEL_FILE,
        bundled.bundled_dir() / bundled.GEMMA_FILE,
    ]
    ok = True
    print(f"{'file':40} {'read_header':>12} {'exact=False':>12} {'GGUFReader':>11} {'ratio':>8}")
    for path in paths:
        header = read_header(path)  # warm the page cache; both readers then read from memory
        ours = best_of(RUNS, path)
        fast = best_of(RUNS, path, exact=False)
        theirs = reference_seconds(path)
        ratio = theirs / ours
        print(f"{path.name:40} {ours:11.4f}s {fast:11.4f}s {theirs:10.2f}s {ratio:7.0f}x")
        print(f"{'':40} vocabulary {header.vocab_size}, {len(header.tensors)} tensors")
        ok = ok and ours <= TARGET_SECONDS and ratio >= TARGET_RATIO
    print(
        f"target: <= {TARGET_SECONDS} s per file, >= {TARGET_RATIO}x: {'met' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
