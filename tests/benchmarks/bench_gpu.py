"""The GPU against the CPU, through Fireside's engine: prompt reading and decoding.

    python tests/benchmarks/bench_gpu.py [ROUNDS]

For each bundled model: a prompt of 3,000 of its tokens (time to first token) and 256
greedy tokens (tokens/s), loaded with every layer on the GPU and then with none, rounds
alternated, medians and the GPU / CPU ratio of each round. Where llama.cpp has no GPU
it says so and stops (make bench runs it everywhere). The comparison with llama.cpp's
own llama-bench on the GPU is bench_llama_cpp.py --gpu-layers 99.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core.backend import PromptPlan, Session
from app.core.llama import devices
from app.core.llama.engine import Engine
from app.core.models import bundled
from app.core.options import LoadOptions, Sampling
from app.core.reply import templates
from app.core.reply.replies import ReplyStats
from tests.gpu.prompts import exact_prompt

LONG = 3000  # prompt tokens, in the model's own vocabulary


def run(engine: Engine, text: str | int, tokens: int) -> ReplyStats:
    """``text``: a user message, or a prompt of that many tokens."""
    def prompt(session: Session) -> PromptPlan:
        if isinstance(text, int):
            return exact_prompt(session, text)
        return PromptPlan(session.encode(templates.render(
            session.template, [{"role": "user", "content": text}])))

    engine.clear().result()  # nothing reused from the last run
    return engine.generate(prompt, Sampling(temperature=0.0, max_tokens=tokens,
                                            repeat_penalty=1.0)).future.result().stats


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    hardware = devices.survey()
    if hardware.unavailable:
        print(f"No GPU to measure: {hardware.unavailable}.")
        return
    cards = ", ".join(d.description for d in devices.offload_targets(hardware.devices))
    print(f"GPU: {cards}; {rounds} rounds alternated, all layers against none")
    for file in (bundled.DEFAULT_MODEL_FILE, bundled.GEMMA_FILE):
        path = bundled.bundled_dir() / file
        figures: dict[str, dict[str, list[float]]] = {
            where: {"prompt": [], "decode": []} for where in ("all", "off")}
        engines = {where: Engine() for where in figures}
        try:
            for where, engine in engines.items():
                engine.load(path, LoadOptions(gpu_layers=where)).result()
                run(engine, "Hello", 8)  # warm: first kernels, buffers
            for _ in range(rounds):
                for where, engine in engines.items():
                    read = run(engine, LONG, 1)
                    figures[where]["prompt"].append(read.prompt_tokens / read.ttft_s)
                    figures[where]["decode"].append(run(engine, "Write a long story.",
                                                        256).tokens_per_s)
        finally:
            for engine in engines.values():
                engine.close()
        for what in ("prompt", "decode"):
            gpu, cpu = figures["all"][what], figures["off"][what]
            ratio = statistics.median(g / c for g, c in zip(gpu, cpu, strict=True))
            print(f"{file} {what:6}: GPU {statistics.median(gpu):8.1f} tok/s, CPU "
                  f"{statistics.median(cpu):7.1f} tok/s, GPU / CPU {ratio:.2f}")


if __name__ == "__main__":
    main()
