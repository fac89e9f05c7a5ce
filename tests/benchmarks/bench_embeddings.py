"""Passages embedded per second: Fireside's Embedder against llama-cpp-python's own
``Llama(embedding=True).embed`` on the same passages, model, batch and threads.

    python tests/benchmarks/bench_embeddings.py [ROUNDS] [--threads N] [--batches]

The passages are the paragraphs of this machine's /usr/share/doc/*/copyright files (the
first 500 of 30 to 300 words), the model the bundled all-MiniLM-L6-v2. Each round times
both on every passage, 25 at a time, alternating; the figure is the median of the
rounds' ratios. Target: >= 0.95x. The vectors must agree too (cosine >= 0.9999 each).
``--threads`` sets both's threads (default: one per physical core); with 1, the CPU-time
ratio it also prints holds even on a busy machine.
``--batches`` also times llama-cpp-python alone at several batch sizes (the tokens one
decode packs), the measure behind ``embedder.PACK_TOKENS``.
"""

from __future__ import annotations

import argparse
import logging
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core.llama import embedder as embedding
from app.core.llama.embedder import Embedder
from app.core.llama.engine import default_threads
from app.core.models import embedding_model

PASSAGES = 500
CHUNK = 25  # passages timed at a time, alternating between the two
TARGET = 0.95
MIN_COSINE = 0.9999


def passages(limit: int = PASSAGES) -> list[str]:
    """Paragraphs of real prose and legal text, each once, in a stable order."""
    found: list[str] = []
    seen: set[str] = set()
    for file in sorted(Path("/usr/share/doc").glob("*/copyright")):
        try:
            text = file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for paragraph in re.split(r"\n\s*\n", text):
            words = paragraph.split()
            joined = " ".join(words)
            if 30 <= len(words) <= 300 and joined not in seen:
                seen.add(joined)
                found.append(joined)
                if len(found) == limit:
                    return found
    return found


def reference(path: Path, batch: int, threads: int) -> llama_cpp.Llama:
    """What a llama-cpp-python user writes, with the Embedder's batch and threads."""
    return llama_cpp.Llama(str(path), embedding=True, n_ctx=batch, n_batch=batch,
                           n_ubatch=batch, n_threads=threads, n_threads_batch=threads,
                           flash_attn=True, use_mmap=False, verbose=False)


def timed(embed: Callable[[list[str]], Any], texts: list[str]
          ) -> tuple[float, float, np.ndarray]:
    """Wall-clock and CPU seconds (the process's, every thread's), and the vectors."""
    started, cpu = time.perf_counter(), time.process_time()
    vectors = np.asarray(embed(texts), dtype=np.float32)
    return time.perf_counter() - started, time.process_time() - cpu, vectors


def compare(path: Path, texts: list[str], rounds: int, threads: int) -> bool:
    """Each round embeds every passage with both, a chunk at a time, the order swapped
    from chunk to chunk: a machine whose load changes meanwhile slows both alike."""
    ours = Embedder(path, n_threads=threads)
    theirs = reference(path, ours.batch_tokens, threads)
    chunks = [texts[i:i + CHUNK] for i in range(0, len(texts), CHUNK)]
    ratios: list[float] = []
    totals = {"ours": 0.0, "theirs": 0.0}
    cpu = {"ours": 0.0, "theirs": 0.0}
    mine: list[np.ndarray] = []
    raw: list[np.ndarray] = []
    for round_no in range(rounds):
        spent = {"ours": 0.0, "theirs": 0.0}
        for number, chunk in enumerate(chunks):
            order = ("ours", "theirs") if (round_no + number) % 2 == 0 else ("theirs", "ours")
            for who in order:
                if who == "ours":
                    seconds, work, vectors = timed(ours.embed, chunk)
                else:
                    seconds, work, vectors = timed(
                        lambda t: theirs.embed(t, normalize=True), chunk)
                spent[who] += seconds
                cpu[who] += work
                if round_no == 0:
                    (mine if who == "ours" else raw).append(vectors)
        ratios.append(spent["theirs"] / spent["ours"])
        for who in totals:
            totals[who] += spent[who]
    ours.close()
    theirs.close()
    a, b = np.vstack(mine), np.vstack(raw)
    cosines = (a * b).sum(axis=1) / np.linalg.norm(b, axis=1)
    ratio = statistics.median(ratios)
    count = len(texts) * rounds
    print(f"passages/s, Embedder / Llama.embed: {ratio:.3f} (target >= {TARGET}); "
          f"{count / totals['ours']:.1f} vs {count / totals['theirs']:.1f} passages/s; "
          "each round " + ", ".join(f"{r:.3f}" for r in ratios))
    # On a busy machine the wall clock also counts the waits for a core; CPU time not.
    print(f"CPU time per passage, Llama.embed / Embedder: {cpu['theirs'] / cpu['ours']:.3f}")
    print(f"cosine of the two vectors, lowest: {cosines.min():.6f} (target >= {MIN_COSINE})")
    return ratio >= TARGET and float(cosines.min()) >= MIN_COSINE


def batches(path: Path, texts: list[str], rounds: int, threads: int) -> None:
    """llama-cpp-python alone, one context per batch size, rounds alternated."""
    sizes = (512, 1024, 2048, 4096)
    contexts = {size: reference(path, size, threads) for size in sizes}
    rates: dict[int, list[float]] = {size: [] for size in sizes}
    for round_no in range(rounds):
        for size in sizes if round_no % 2 == 0 else tuple(reversed(sizes)):
            seconds, _, _ = timed(contexts[size].embed, texts)
            rates[size].append(len(texts) / seconds)
    for size, llm in contexts.items():
        llm.close()
        print(f"batch {size:5}: {statistics.median(rates[size]):6.1f} passages/s")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("rounds", nargs="?", type=int, default=3)
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--batches", action="store_true")
    args = parser.parse_args(argv)
    rounds, threads = args.rounds, args.threads
    logging.getLogger("fireside.llama").setLevel(logging.ERROR)  # its load notes
    path = embedding_model.default_embedding_model_path()
    if path is None:
        print("the bundled embedding model is missing: run `make setup`")
        return 1
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    name = next((line.split(":", 1)[1].strip() for line in cpu.splitlines()
                 if line.startswith("Model name")), "?")
    probe = Embedder(path)
    # Only passages that fit: llama-cpp-python cuts a longer one to the batch, which
    # may reach past the model's positions (an abort).
    texts = [t for t in passages(2 * PASSAGES) if probe.count(t) <= probe.max_tokens][:PASSAGES]
    tokens = sum(probe.count(t) for t in texts)
    probe.close()
    print(f"CPU: {name}; {threads} threads; {path.name}; {len(texts)} passages, "
          f"{tokens:,} tokens; {embedding.PACK_TOKENS} tokens a decode at most; {rounds} "
          "rounds alternated")
    if args.batches:
        batches(path, texts, rounds, threads)
    ok = compare(path, texts, rounds, threads)
    print(f"target: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
