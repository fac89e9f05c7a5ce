"""Loading with and without memory-mapped weights: load time and resident memory.

    python tests/benchmarks/bench_mmap.py

Each load runs in a fresh process (so the page cache state is the same: warm, after a
first untimed load) and reports the median of three loads, the process's resident
memory after the load and after one short reply, and how much of it is file-backed.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core import bundled

MODELS = [bundled.bundled_dir() / bundled.DEFAULT_MODEL_FILE,
          bundled.bundled_dir() / bundled.GEMMA_FILE]

PROBE = r'''
import json, sys, time, psutil, llama_cpp
path, use_mmap = sys.argv[1], sys.argv[2] == "1"
started = time.perf_counter()
llm = llama_cpp.Llama(model_path=path, n_ctx=2048, use_mmap=use_mmap, verbose=False)
loaded = time.perf_counter() - started
after_load = psutil.Process().memory_full_info()
for _ in llm.generate(llm.tokenize(b"Hello"), temp=0.0):
    break
after_reply = psutil.Process().memory_full_info()
llm.close()
print(json.dumps({"load_s": loaded, "rss_mb": after_load.rss / 1e6,
                  "uss_mb": after_load.uss / 1e6,
                  "rss_reply_mb": after_reply.rss / 1e6,
                  "shared_mb": after_load.shared / 1e6}))
'''


def measure(path: Path, use_mmap: bool) -> dict[str, float]:
    runs = []
    for _ in range(4):
        out = subprocess.run([sys.executable, "-c", PROBE, str(path), "1" if use_mmap else "0"],
                             capture_output=True, text=True, check=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    runs = runs[1:]  # the first run warms the page cache
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def main() -> None:
    for path in MODELS:
        with_mmap = measure(path, True)
        without = measure(path, False)
        print(f"{path.name}:")
        for label, figures in (("mmap", with_mmap), ("no mmap", without)):
            print(f"  {label:8} load {figures['load_s']:.2f} s  RSS {figures['rss_mb']:.0f} MB"
                  f" (after a reply {figures['rss_reply_mb']:.0f} MB, file-backed "
                  f"{figures['shared_mb']:.0f} MB, private {figures['uss_mb']:.0f} MB)")
        print(f"  no-mmap / mmap load time: {without['load_s'] / with_mmap['load_s']:.2f}x")


if __name__ == "__main__":
    main()
