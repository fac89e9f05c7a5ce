"""The KV cache's type: memory for an 8k context and decode speed, q8_0 against f16.

    python tests/benchmarks/bench_kv.py [ROUNDS]

For each bundled model, loaded by Fireside's engine with an 8,192-token context and
flash attention on: the KV cache's size as Fireside estimates it before loading
(app/core/llama/memory.py) and as llama.cpp reports allocating it (its log line
``llama_kv_cache: size = ...``), and greedy decoding of 128 tokens, f16 and q8_0 in
turn (rounds alternated), medians.
"""

from __future__ import annotations

import logging
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core.backend import PromptPlan, Session
from app.core.llama import memory
from app.core.llama.engine import Engine
from app.core.models import bundled, gguf
from app.core.options import LoadOptions, Sampling
from app.core.reply import templates

N_CTX = 8192
SIZE = re.compile(r"llama_kv_cache: size = +([\d.]+) MiB")


class _Sizes(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.mib: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = SIZE.search(record.getMessage())
        if found:
            self.mib.append(float(found.group(1)))


def decode_speed(engine: Engine) -> float:
    def prompt(session: Session) -> PromptPlan:
        segments = templates.render(session.template, [
            {"role": "user", "content": "Write a long story about a lighthouse keeper."}])
        return PromptPlan(session.encode(segments))

    reply = engine.generate(prompt, Sampling(temperature=0.0, max_tokens=128,
                                             repeat_penalty=1.0)).future.result()
    return reply.stats.tokens_per_s


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    sizes = _Sizes()
    llama_log = logging.getLogger("fireside.llama")
    llama_log.addHandler(sizes)
    llama_log.setLevel(logging.DEBUG)
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    name = next((line.split(":", 1)[1].strip() for line in cpu.splitlines()
                 if line.startswith("Model name")), "?")
    print(f"CPU: {name}; context {N_CTX}; flash attention on; {rounds} rounds alternated")
    for file in (bundled.DEFAULT_MODEL_FILE, bundled.GEMMA_FILE):
        path = bundled.bundled_dir() / file
        header = gguf.read_header(path)
        speeds: dict[str, list[float]] = {"f16": [], "q8_0": []}
        measured: dict[str, float] = {}
        engine = Engine()
        try:
            for _ in range(rounds):
                for kv, values in speeds.items():
                    sizes.mib.clear()
                    engine.load(path, LoadOptions(n_ctx=N_CTX, kv_cache=kv,
                                                  flash_attention="on")).result()
                    measured[kv] = sum(sizes.mib)
                    values.append(decode_speed(engine))
        finally:
            engine.close()
        for kv, values in speeds.items():
            estimate = memory.kv_cache_bytes(header, N_CTX, kv_cache=kv) / 2**20
            print(f"{file} {kv:5}: KV estimate {estimate:6.1f} MiB, llama.cpp "
                  f"{measured[kv]:6.1f} MiB; decode {statistics.median(values):6.1f} tok/s "
                  f"({min(values):.1f}-{max(values):.1f})")
        ratio = statistics.median(q / f for q, f in zip(speeds["q8_0"], speeds["f16"],
                                                        strict=True))
        print(f"{file}: q8_0 / f16 decode {ratio:.3f}")


if __name__ == "__main__":
    main()
