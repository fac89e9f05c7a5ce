"""Decode speed of the bundle's portable llama.cpp against the native development build.

    python3 packaging/bench_portable.py [ROUNDS]

Both generate greedily from SmolLM2 on 2 threads with the same prompt, in alternating
child processes (build/package-venv: the portable wheel the bundle ships, its CPU
backend registered by the bundle's own runtime hook; .venv: the -march=native build).
Prints tokens/s from llama.cpp's own decode counters and the ratio portable/native.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHONS = {
    "native": ROOT / ".venv" / "bin" / "python",
    "portable": ROOT / "build" / "package-venv" / "bin" / "python",
}
MODEL = ROOT / ".venv" / "share" / "fireside" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
HOOK = ROOT / "packaging" / "pyi_rth_ggml_backends.py"
TOKENS = 128
REPEATS = 3

CHILD = r"""
import importlib.util, json, runpy, sys
from pathlib import Path
hook, model, tokens, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
# The runtime hook finds llama_cpp/lib under sys._MEIPASS, as in the bundle.
package = Path(next(iter(importlib.util.find_spec("llama_cpp").submodule_search_locations)))
sys._MEIPASS = str(package.parent)
runpy.run_path(hook)
import llama_cpp
llm = llama_cpp.Llama(model_path=model, n_ctx=512, n_threads=2, n_threads_batch=2,
                      seed=0, verbose=False)
rates = []
for run in range(repeats + 1):  # the first run warms caches up and is not counted
    llm.reset()
    llama_cpp.llama_perf_context_reset(llm.ctx)
    llm.create_completion("Once upon a time, in a village by the sea,", max_tokens=tokens,
                          temperature=0.0, top_k=1)
    perf = llama_cpp.llama_perf_context(llm.ctx)
    if run:
        rates.append(perf.n_eval / (perf.t_eval_ms / 1000))
system = llama_cpp.llama_print_system_info().decode()
llm.close()
print(json.dumps({"rates": rates, "n_eval": perf.n_eval, "system": system}))
"""


def measure(python: Path) -> tuple[list[float], str]:
    """Tokens/s of each measured run, and llama.cpp's description of the CPU backend."""
    out = subprocess.run([str(python), "-c", CHILD, str(HOOK), str(MODEL), str(TOKENS),
                          str(REPEATS)], check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return [float(r) for r in result["rates"]], str(result["system"])


def main(rounds: int) -> int:
    for python in PYTHONS.values():
        if not python.exists():
            raise SystemExit(f"{python} is missing: run `make setup` and `make package` first")
    rates: dict[str, list[float]] = {name: [] for name in PYTHONS}
    systems: dict[str, str] = {}
    for _ in range(rounds):
        for name, python in PYTHONS.items():  # alternating, so load drifts hit both
            measured, systems[name] = measure(python)
            rates[name] += measured
    for name, system in systems.items():
        print(f"{name:9s} {system}")
    for name, values in rates.items():
        print(f"{name:9s} median {statistics.median(values):6.1f} tok/s  best {max(values):6.1f}"
              f"  ({', '.join(f'{v:.0f}' for v in values)})")
    # On a shared machine other work stalls the 2 threads now and then: the best run is
    # the closest to the CPU's own speed, the median shows the spread.
    for label, pick in (("best", max), ("median", statistics.median)):
        ratio = pick(rates["portable"]) / pick(rates["native"])
        print(f"portable/native decode speed ({label}): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
