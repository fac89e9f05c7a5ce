"""Prompt reading and decoding of the llama.cpp in use, with and without weight repacking.

    python tests/benchmarks/bench_cpu_builds.py [--threads N] [MODEL ...]

For each model (default: the bundled ones), in one process and alternating: reads a
prompt of about 3,000 tokens in batches of 512, then decodes 128 tokens greedily,
loading the model with llama.cpp's extra buffer types (weight repacking, and AMX
where the build has it) and without them (``use_extra_bufts=False``, the run-time
way to keep weights out of the AMX kernels). Each figure is the median of ROUNDS;
the ratio is without / with. Run it once per build to compare builds (the CPU and
its flags are printed first): a native build against ``GGML_NATIVE=OFF``, or against
a portable variant.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core.llama import cpu_backends
from app.core.models import bundled

# A portable build (build/package-venv) registers the CPU level it checks, as the bundle's
# runtime hook does; a native build has its CPU code linked in.
_LIB = Path(str(importlib.util.find_spec("llama_cpp").origin)).parent / "lib"  # type: ignore[union-attr]
if cpu_backends.variant_files(_LIB):
    cpu_backends.install(_LIB, bundled.default_model_path())

import llama_cpp  # noqa: E402

from app.core.llama import llama_runtime, native_check  # noqa: E402, F401 - routes the log

ROUNDS = 2
PROMPT_TOKENS = 3000
DECODE_TOKENS = 128
N_CTX = 4096
BATCH = 512


def load(path: Path, threads: int, extra_bufts: bool) -> llama_cpp.Llama:
    default = llama_cpp.llama_model_default_params

    def params() -> llama_cpp.llama_model_params:
        p = default()
        p.use_extra_bufts = extra_bufts
        return p

    llama_cpp.llama_cpp.llama_model_default_params = params
    try:
        return llama_cpp.Llama(model_path=str(path), n_ctx=N_CTX, n_batch=BATCH,
                               n_ubatch=BATCH, n_threads=threads, n_threads_batch=threads,
                               use_mmap=False, verbose=False)
    finally:
        llama_cpp.llama_cpp.llama_model_default_params = default


def prompt_tokens(llm: llama_cpp.Llama) -> list[int]:
    words = " ".join(f"The keeper wrote line {i} of the log as the storm rose."
                     for i in range(400))
    tokens = llm.tokenize(words.encode())
    if len(tokens) < PROMPT_TOKENS:
        tokens = (tokens * (PROMPT_TOKENS // len(tokens) + 1))
    return tokens[:PROMPT_TOKENS]


def measure(llm: llama_cpp.Llama) -> tuple[float, float]:
    """(prompt tokens/s, decode tokens/s) on a cleared sequence."""
    llm.reset()
    llm._ctx.kv_cache_clear()
    tokens = prompt_tokens(llm)
    started = time.perf_counter()
    llm.eval(tokens)
    prompt_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(DECODE_TOKENS):
        llm.eval([llm.sample(temp=0.0)])
    decode_s = time.perf_counter() - started
    return len(tokens) / prompt_s, DECODE_TOKENS / decode_s


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--extra-buffers", choices=["both", "on", "off"], default="both",
                        help="'off' alone for a build whose extra buffers would crash")
    parser.add_argument("models", nargs="*", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    models = args.models or bundled.bundled_model_paths()
    print(f"CPU: {native_check.cpu_summary()}")
    print(f"llama.cpp: {llama_cpp.llama_print_system_info().decode().strip()}")
    print(f"threads {args.threads}; prompt {PROMPT_TOKENS} tokens; decode {DECODE_TOKENS}; "
          f"median of {args.rounds}")
    configs = {"both": (True, False), "on": (True,), "off": (False,)}[args.extra_buffers]
    for path in models:
        runs: dict[bool, list[tuple[float, float]]] = {extra: [] for extra in configs}
        for _ in range(args.rounds):
            for extra in configs:
                llm = load(path, args.threads, extra)
                try:
                    runs[extra].append(measure(llm))
                finally:
                    llm.close()
        med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v))
               for k, v in runs.items()}
        for extra in configs:
            label = "extra buffers on " if extra else "extra buffers off"
            prompt, decode = med[extra]
            print(f"{path.name:<36} {label}  prompt {prompt:7.1f} tok/s  "
                  f"decode {decode:6.1f} tok/s")
        if len(configs) == 2:
            print(f"{path.name:<36} off/on           prompt {med[False][0] / med[True][0]:7.3f}"
                  f"        decode {med[False][1] / med[True][1]:6.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
