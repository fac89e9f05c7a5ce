"""Loading with and without memory-mapped weights: load time, first token, memory, speed.

    python tests/benchmarks/bench_mmap.py            # the two bundled models
    python tests/benchmarks/bench_mmap.py --large    # and a synthetic ~2 GB model

Each load runs in a fresh process (so the page cache state is the same: warm, after a
first untimed load) and reports the median of three: the load; the time to the first
token of the first reply after it (where a mapped file's page faults land); greedy
decode speed over 64 tokens; the process's resident memory after the load and after
the reply, and how much of it is file-backed. The synthetic model (llama architecture,
random F16 weights, SmolLM2's tokenizer: n_embd 2048, 20 layers, ff 5632, about 2 GB)
is written once to ~/.cache/fireside-bench/ and reused.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core.models import bundled

MODELS = [bundled.bundled_dir() / bundled.DEFAULT_MODEL_FILE,
          bundled.bundled_dir() / bundled.GEMMA_FILE]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fireside-bench"
LARGE = CACHE / "synthetic-llama-2gb-f16.gguf"
DECODE_TOKENS = 64

PROBE = r'''
import json, sys, time, psutil, llama_cpp
path, use_mmap, n_decode = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
threads = psutil.cpu_count(logical=False) or 1  # as the engine (default_threads)
started = time.perf_counter()
llm = llama_cpp.Llama(model_path=path, n_ctx=2048, n_batch=512, n_threads=threads,
                      n_threads_batch=threads, use_mmap=use_mmap, verbose=False)
loaded = time.perf_counter() - started
after_load = psutil.Process().memory_full_info()
prompt = llm.tokenize(b"<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n"
                      b"<|im_start|>assistant\n", special=True)
count, first, last = 0, 0.0, 0.0
started = time.perf_counter()
for _ in llm.generate(prompt, temp=0.0):  # greedy; end-of-generation tokens not special
    last = time.perf_counter()
    if count == 0:
        first = last
    count += 1
    if count >= n_decode:
        break
after_reply = psutil.Process().memory_full_info()
llm.close()
print(json.dumps({"load_s": loaded, "ttft_s": first - started,
                  "tok_s": (count - 1) / (last - first),
                  "rss_mb": after_load.rss / 1e6,
                  "uss_mb": after_load.uss / 1e6,
                  "rss_reply_mb": after_reply.rss / 1e6,
                  "shared_mb": after_load.shared / 1e6,
                  "shared_reply_mb": after_reply.shared / 1e6}))
'''


def probe(path: Path, use_mmap: bool) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", PROBE, str(path), "1" if use_mmap else "0",
                          str(DECODE_TOKENS)],
                         capture_output=True, text=True, check=True).stdout
    figures: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return figures


def measure(path: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Medians with and without mmap; the two alternate, so that whatever else the
    computer does meanwhile weighs on both alike."""
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    probe(path, True)  # warms the page cache
    for _ in range(3):
        for use_mmap in (True, False):
            runs[use_mmap].append(probe(path, use_mmap))
    with_mmap, without = ({key: statistics.median(r[key] for r in runs[mode])
                           for key in runs[mode][0]} for mode in (True, False))
    return with_mmap, without


def synthetic_model(path: Path = LARGE) -> Path:
    """A llama-architecture model of about 2 GB with random F16 weights and SmolLM2's
    tokenizer, written once (its text is gibberish: it is for timing only)."""
    if path.is_file():
        return path
    import gguf
    import numpy as np

    n_embd, n_layer, n_ff, n_head, n_head_kv = 2048, 20, 5632, 32, 8
    source = gguf.GGUFReader(MODELS[0])
    vocab = len(source.fields["tokenizer.ggml.tokens"].contents())
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    writer = gguf.GGUFWriter(partial, "llama")
    writer.add_name("Synthetic 1B (random weights)")
    writer.add_context_length(4096)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for key, field in source.fields.items():
        if key.startswith("tokenizer."):
            sub = field.types[1] if len(field.types) > 1 else None
            writer.add_key_value(key, field.contents(), field.types[0], sub)
    rng = np.random.default_rng(0)

    def weights(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    n_kv = n_embd // n_head * n_head_kv
    writer.add_tensor("token_embd.weight", weights(vocab, n_embd))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    for i in range(n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", weights(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weights(n_kv, n_embd))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weights(n_kv, n_embd))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weights(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weights(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weights(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weights(n_embd, n_ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(path)
    return path


def main(large: bool = False) -> None:
    print(f"{psutil_cpu()}; median of 3 warm-cache loads, each in a fresh process")
    for path in MODELS + ([synthetic_model()] if large else []):
        with_mmap, without = measure(path)
        for figures in (with_mmap, without):
            figures["ready_s"] = figures["load_s"] + figures["ttft_s"]
        print(f"{path.name} ({path.stat().st_size / 1e6:.0f} MB):")
        for label, figures in (("mmap", with_mmap), ("no mmap", without)):
            print(f"  {label:8} load {figures['load_s']:.3f} s  first token "
                  f"{figures['ttft_s']:.3f} s  load+first {figures['ready_s']:.3f}"
                  f" s  decode {figures['tok_s']:.1f} tok/s  RSS {figures['rss_mb']:.0f} MB"
                  f" (after a reply {figures['rss_reply_mb']:.0f} MB, file-backed "
                  f"{figures['shared_mb']:.0f} MB then {figures['shared_reply_mb']:.0f} MB, "
                  f"private {figures['uss_mb']:.0f} MB)")
        print(f"  no-mmap / mmap: load {without['load_s'] / with_mmap['load_s']:.2f}x, "
              f"first token {without['ttft_s'] / with_mmap['ttft_s']:.2f}x, load+first token "
              f"{without['ready_s'] / with_mmap['ready_s']:.2f}x, "
              f"decode {without['tok_s'] / with_mmap['tok_s']:.2f}x", flush=True)


def psutil_cpu() -> str:
    import platform

    import psutil

    name = next((line.split(":", 1)[1].strip() for line in
                 Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")), platform.processor()) \
        if Path("/proc/cpuinfo").exists() else platform.processor()
    return f"{name}, {psutil.cpu_count(logical=False)} cores"


if __name__ == "__main__":
    main(large="--large" in sys.argv[1:])
