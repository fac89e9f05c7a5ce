"""Engine benchmarks: each figure is a ratio against a reference measured in the same run.

    python tests/benchmarks/bench_engine.py

Targets: streaming decode >= 0.97x a plain Llama.generate() loop; 10th-turn time to
first token <= 1.2x the 1st turn's; model switch <= 1.2x constructing the Llama
directly; the chosen thread count against llama-cpp-python's default. Also reports
how quickly a stop takes effect during prompt processing and during generation.
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import llama_cpp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core.conversations.chat import ChatService
from app.core.conversations.store import Store
from app.core.llama.engine import (
    Engine,
    PromptPlan,
    Sampling,
    Session,
    default_threads,
    llama_arguments,
)
from app.core.models import bundled
from app.core.options import LoadOptions
from app.core.reply import templates

SMOL = bundled.bundled_dir() / bundled.DEFAULT_MODEL_FILE
GEMMA = bundled.bundled_dir() / bundled.GEMMA_FILE
STORY = "Write a very long, detailed story about a lighthouse keeper and a storm."
ROUNDS = 3


def report(name: str, ratio: float, target: str, detail: str) -> None:
    print(f"{name:<34} {ratio:6.3f}  (target {target})  {detail}", flush=True)


def prompt_for(session: Session, text: str) -> PromptPlan:
    return PromptPlan(session.encode(templates.render(session.template,
                                                      [{"role": "user", "content": text}])))


def plain_generate_rate(llm: llama_cpp.Llama, tokens: list[int], sampling: Sampling) -> tuple[
        float, int]:
    """The reference: llama-cpp-python's own generate() loop, stopping where we stop."""
    llm.reset()
    llm.set_seed(sampling.seed or 0)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    count = 0
    first = last = 0.0
    for token in llm.generate(tokens, top_k=sampling.top_k, top_p=sampling.top_p,
                              min_p=sampling.min_p, temp=sampling.temperature,
                              repeat_penalty=sampling.repeat_penalty):
        last = time.perf_counter()
        if count == 0:
            first = last
        if llama_cpp.llama_vocab_is_eog(vocab, token):
            break
        count += 1
        if count >= sampling.max_tokens:
            break
    return (count - 1) / (last - first), count


def bench_decode(engine: Engine) -> None:
    sampling = Sampling(temperature=0.8, max_tokens=1000, seed=11)
    engine.load(SMOL).result()
    reference = llama_cpp.Llama(str(SMOL), n_ctx=engine.loaded.n_ctx,  # type: ignore[union-attr]
                                **llama_arguments(LoadOptions()), verbose=False)
    tokens: list[int] = []

    def build(session: Session) -> PromptPlan:
        plan = prompt_for(session, STORY)
        tokens[:] = plan.tokens
        return plan

    ours, theirs = [], []
    for _ in range(ROUNDS):
        engine.clear().result()
        reply = engine.generate(build, sampling).future.result()
        ours.append(reply.stats.tokens_per_s)
        rate, count = plain_generate_rate(reference, tokens, sampling)
        theirs.append(rate)
    reference.close()
    report("decode: fireside / plain generate", statistics.median(ours) /
           statistics.median(theirs), ">= 0.97",
           f"{statistics.median(ours):.1f} vs {statistics.median(theirs):.1f} tok/s over "
           f"{reply.stats.tokens} / {count} tokens")


def bench_turns(engine: Engine) -> None:
    engine.load(SMOL).result()
    store = Store()
    chat = ChatService(engine, store)
    sampling = Sampling(temperature=0.0, max_tokens=60, seed=1)
    ttft = []
    for turn in range(10):
        result = chat.send(f"Tell me one interesting fact about the number {turn + 1}.",
                           sampling).future.result()
        ttft.append(result.reply.stats.ttft_s)
    store.close()
    report("10th-turn ttft / 1st-turn ttft", ttft[9] / ttft[0], "<= 1.2",
           f"{ttft[0] * 1000:.0f} ms vs {ttft[9] * 1000:.0f} ms "
           f"(prompt of turn 10: {result.reply.stats.prompt_tokens} tokens, "
           f"{result.reply.stats.cached_tokens} reused)")


def bench_switch(engine: Engine) -> None:
    """The reference is what a llama-cpp-python user writes to load the model the way the
    engine does: Llama() with the same context, batch, threads, and weights read in
    (use_mmap=False, which the engine needs to survive its file changing: see
    bench_mmap.py for what mapping would save). Against the library's default (mapped)
    load as well, for comparison. The first switch to Gemma is reported apart: it is
    the first time the engine meets Gemma's architecture."""
    switch, same, default = [], [], []
    for _ in range(ROUNDS + 1):
        engine.load(SMOL).result()
        started = time.perf_counter()
        loaded = engine.load(GEMMA).result()
        switch.append(time.perf_counter() - started)
        engine.load(SMOL).result()  # free the memory before the direct load
        for times, use_mmap in ((same, False), (default, True)):
            started = time.perf_counter()
            llm = llama_cpp.Llama(str(GEMMA), n_ctx=loaded.n_ctx,
                                  **{**llama_arguments(loaded.options), "use_mmap": use_mmap},
                                  verbose=False)
            times.append(time.perf_counter() - started)
            llm.close()
    first, switch, same, default = switch[0], switch[1:], same[1:], default[1:]
    report("switch to Gemma / direct Llama()", statistics.median(switch) /
           statistics.median(same), "<= 1.2",
           f"{statistics.median(switch):.3f} s vs {statistics.median(same):.3f} s "
           f"(use_mmap=False as the engine; first switch {first:.3f} s)")
    report("  ... / Llama() with mmap (default)", statistics.median(switch) /
           statistics.median(default), "for comparison",
           f"{statistics.median(switch):.3f} s vs {statistics.median(default):.3f} s")


def bench_threads() -> None:
    sampling = Sampling(temperature=0.0, max_tokens=200, seed=1)
    rates = {}
    import multiprocessing

    for label, threads in (("library default", max(multiprocessing.cpu_count() // 2, 1)),
                           ("fireside", default_threads())):
        llm = llama_cpp.Llama(str(GEMMA), n_ctx=2048, n_threads=threads,
                              n_threads_batch=threads, verbose=False)
        tokens = llm.tokenize(STORY.encode(), add_bos=True)
        rates[label] = statistics.median(plain_generate_rate(llm, tokens, sampling)[0]
                                         for _ in range(ROUNDS))
        llm.close()
    report("decode: our threads / default", rates["fireside"] / rates["library default"],
           "about 1.65 on 2 cores",
           f"{default_threads()} threads {rates['fireside']:.1f} tok/s vs "
           f"{max(multiprocessing.cpu_count() // 2, 1)} threads "
           f"{rates['library default']:.1f} tok/s")


def stop_latency(engine: Engine, text: str, pieces_first: int, max_tokens: int) -> float:
    """Seconds from a stop to the reply's end: 0.7 s into its prompt (``pieces_first``
    0), or once that many pieces were written."""
    handle = engine.generate(lambda s: prompt_for(s, text),
                             Sampling(temperature=0.8, max_tokens=max_tokens, seed=2))
    deadline = time.perf_counter() + (0.7 if not pieces_first else 60)
    while handle.pieces.mark().answer < pieces_first or not pieces_first:
        if time.perf_counter() >= deadline:
            break
        handle.pieces.wait(0.01 if not pieces_first else 1)
        handle.pieces.take()
    started = time.perf_counter()
    handle.stop()
    handle.future.result()
    return time.perf_counter() - started


def bench_stop(engine: Engine) -> None:
    engine.load(SMOL).result()
    engine.clear().result()
    prefill = stop_latency(engine, " ".join(f"w{i}" for i in range(1500)), 0, 10)
    engine.clear().result()
    decode = stop_latency(engine, STORY, 20, 2000)
    print(f"{'stop latency (target < 0.2 s)':<34} prompt processing {prefill * 1000:.1f} ms, "
          f"generation {decode * 1000:.1f} ms", flush=True)


def main(which: list[str]) -> None:
    logging.getLogger("fireside.llama").setLevel(logging.ERROR)
    # Conversations written by the benchmark stay out of the user's data.
    os.environ["FIRESIDE_DATA_DIR"] = tempfile.mkdtemp(prefix="fireside-bench-")
    engine = Engine()
    try:
        for name, bench in (("decode", bench_decode), ("turns", bench_turns),
                            ("switch", bench_switch), ("stop", bench_stop)):
            if not which or name in which:
                bench(engine)
    finally:
        engine.close()
    if not which or "threads" in which:
        bench_threads()


if __name__ == "__main__":
    main(sys.argv[1:])  # optionally: decode turns switch stop threads
