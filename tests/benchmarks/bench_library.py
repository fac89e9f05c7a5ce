"""How fast Fireside lists a large model library: 500 GGUF files with real-sized vocabularies.

Run: python tests/benchmarks/bench_library.py [--files N]

The files are small (a handful of tiny tensors) but their headers are as large as real
ones: Llama 2/Mistral-style 32000-token SentencePiece vocabularies with scores and types,
SmolLM2's real 49152 tokens and 48900 merges, Llama 3-sized 128256 tokens with 280k
merges, Qwen 2.5-sized 151936 tokens with 151k merges, and Gemma 3's real 262144
tokens. They are written once under /tmp and reused by later runs.

Figures, each `catalog.scan` in a fresh process with the files in the OS page cache:
cold (empty metadata cache), warm (the cache left by the cold run), and the exact
header reader over the same files for comparison. Targets: cold < 2 s, warm < 0.3 s.

Also: the share of a core the folder watcher takes over a Hugging Face cache of 300
repositories and 9,000 files (links into blobs/, as huggingface_hub lays them out).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gguf import GGUFWriter  # noqa: E402

from app.core.models import bundled, catalog, watch  # noqa: E402
from app.core.models.gguf import clear_cache, read_header  # noqa: E402
from tests.gguf_files import copy_with_metadata  # noqa: E402

LIBRARY = Path(tempfile.gettempdir()) / "fireside-bench-library-v1"
COLD_TARGET_S = 2.0
WARM_TARGET_S = 0.3

SCAN = """
import json, sys, time
from pathlib import Path
from app.core.models import catalog
start = time.perf_counter()
entries = catalog.scan([(Path(sys.argv[1]), catalog.MODELS_FOLDER)])
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "entries": len(entries),
                  "errors": sum(1 for e in entries if e.error)}))
"""


def read_strings(path: Path, key: str) -> list[str]:
    """A string array of a real model, decoded (once, to build the synthetic files)."""
    header = read_header(path)
    start, end = header.kv_spans[key]
    with path.open("rb") as file:
        file.seek(start)
        raw = file.read(end - start)
    at = 8 + len(key.encode()) + 4 + 4  # key, value type, element type
    (count,) = struct.unpack_from("<Q", raw, at)
    at += 8
    strings = []
    for _ in range(count):
        (n,) = struct.unpack_from("<Q", raw, at)
        strings.append(raw[at + 8 : at + 8 + n].decode("utf-8", "replace"))
        at += 8 + n
    return strings


def grown(base: list[str], size: int) -> list[str]:
    """`base` extended to `size` unique, plausible tokens (pairs of existing ones)."""
    tokens, seen = list(base[:size]), set(base[:size])
    rng = np.random.default_rng(len(base) + size)
    while len(tokens) < size:
        a, b = rng.integers(0, len(base), 2)
        candidate = base[a] + base[b].lstrip("Ġ")
        if candidate not in seen:
            seen.add(candidate)
            tokens.append(candidate)
    return tokens


def merges_for(tokens: list[str], count: int) -> list[str]:
    rng = np.random.default_rng(count)
    picks = rng.integers(0, len(tokens), (count, 2))
    return [f"{tokens[a]} {tokens[b]}" for a, b in picks]


def write_base(path: Path, arch: str, tokens: list[str], merges: list[str] | None, *,
               sentencepiece: bool, context: int) -> None:
    writer = GGUFWriter(path, arch)
    writer.add_name(path.stem)
    writer.add_context_length(context)
    writer.add_block_count(2)
    writer.add_embedding_length(16)
    writer.add_head_count(2)
    writer.add_head_count_kv(1)
    writer.add_file_type(15)
    writer.add_tokenizer_model("llama" if sentencepiece else "gpt2")
    writer.add_token_list(tokens)
    if sentencepiece:
        writer.add_token_scores([-float(i) for i in range(len(tokens))])
        writer.add_token_types([1] * len(tokens))
    if merges is not None:
        writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    for name, shape in (("token_embd.weight", (8, 16)), ("blk.0.attn_q.weight", (16, 16)),
                        ("blk.0.attn_norm.weight", (16,)), ("output_norm.weight", (16,))):
        writer.add_tensor(name, np.ones(shape, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def build_library(count: int) -> Path:
    folder = LIBRARY / str(count)
    if (folder / "complete").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    smol = bundled.bundled_dir() / bundled.DEFAULT_MODEL_FILE
    gemma = bundled.bundled_dir() / bundled.GEMMA_FILE
    print("writing the synthetic library (once)...", flush=True)
    smol_tokens = read_strings(smol, "tokenizer.ggml.tokens")
    smol_merges = read_strings(smol, "tokenizer.ggml.merges")
    gemma_tokens = read_strings(gemma, "tokenizer.ggml.tokens")
    llama3 = grown(smol_tokens, 128256)
    qwen = grown(smol_tokens, 151936)
    kinds = {
        "mistral": ("llama", gemma_tokens[:32000], None, True, 32768),
        "smollm2": ("llama", smol_tokens, smol_merges, False, 8192),
        "llama3": ("llama", llama3, merges_for(llama3, 280_000), False, 131072),
        "qwen2.5": ("qwen2", qwen, merges_for(qwen, 151_387), False, 32768),
        "gemma3": ("gemma3", gemma_tokens, None, True, 32768),
    }
    bases = []
    for kind, (arch, tokens, merges, sentencepiece, context) in kinds.items():
        base = LIBRARY / f"base-{kind}.gguf"
        if not base.exists():
            write_base(base, arch, tokens, merges, sentencepiece=sentencepiece, context=context)
        bases.append(base)
    for i in range(count):
        base = bases[i % len(bases)]
        copy_with_metadata(base, folder / f"{base.stem[5:]}-{i:04d}.Q4_K_M.gguf",
                           {"general.name": f"{base.stem[5:]} model {i}"})
    (folder / "complete").touch()
    return folder


def scan_in_fresh_process(folder: Path, cache: Path) -> dict[str, float]:
    env = dict(os.environ, FIRESIDE_CACHE_DIR=str(cache), FIRESIDE_DATA_DIR=str(cache / "data"),
               FIRESIDE_CONFIG_DIR=str(cache / "config"), PYTHONPATH=str(ROOT))
    env.pop("FIRESIDE_MODELS_DIR", None)
    out = subprocess.run([sys.executable, "-c", SCAN, str(folder)], env=env, check=True,
                         capture_output=True, text=True, cwd=ROOT).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def build_hf_cache(repos: int = 300, files: int = 30) -> Path:
    """A large Hugging Face cache of safetensors models (written once, reused)."""
    hub = Path(tempfile.gettempdir()) / f"fireside-bench-hf-{repos}x{files}" / "hub"
    if hub.exists():
        return hub
    for r in range(repos):
        repo = hub / f"models--org{r % 20}--model{r}"
        revision = f"{r:040x}"
        snapshot = repo / "snapshots" / revision
        snapshot.mkdir(parents=True)
        (repo / "blobs").mkdir()
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(revision)
        for f in range(files):
            name = f"model-{f:05d}-of-{files:05d}.safetensors" if f < files - 5 else f"{f}.json"
            blob = repo / "blobs" / f"{r:032x}{f:032x}"
            blob.write_bytes(b"x")
            (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    return hub


def watcher_share(hub: Path, seconds: float = 10.0) -> tuple[float, int]:
    """The share of one core the watcher takes over ``hub``, and how many polls it made."""
    os.environ["HF_HUB_CACHE"] = str(hub)
    folders = catalog.default_folders()
    watcher = watch.Watcher(lambda: catalog.watch_list(folders), lambda: None)
    before = time.process_time()  # this thread sleeps: what is spent is the watcher's
    watcher.start()
    time.sleep(seconds)
    watcher.stop()
    return (time.process_time() - before) / seconds, watcher.polls


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=500)
    count = parser.parse_args().files
    folder = build_library(count)
    files = sorted(folder.glob("*.gguf"))

    start = time.perf_counter()  # also brings every file into the OS page cache
    for path in files:
        read_header(path)
    clear_cache()
    start = time.perf_counter()
    for path in files:
        read_header(path)
    exact = time.perf_counter() - start
    clear_cache()
    start = time.perf_counter()
    for path in files:
        read_header(path, exact=False)
    fast = time.perf_counter() - start

    with tempfile.TemporaryDirectory() as cache:
        cold = scan_in_fresh_process(folder, Path(cache))
        warm = scan_in_fresh_process(folder, Path(cache))
    n = len(files)
    print(f"{n} files in {folder} (OS page cache warm; metadata cache empty for 'cold')")
    print(f"  exact reader, in process:  {exact:6.3f} s  ({exact / n * 1000:5.2f} ms a file)")
    print(f"  fast reader, in process:   {fast:6.3f} s  ({fast / n * 1000:5.2f} ms a file)"
          f"  {exact / fast:4.1f}x faster")
    for label, figures, target in (("cold", cold, COLD_TARGET_S), ("warm", warm, WARM_TARGET_S)):
        seconds = figures["seconds"]
        verdict = "met" if seconds < target else "MISSED"
        print(f"  catalog.scan {label}, new process: {seconds:6.3f} s  "
              f"({seconds / n * 1000:5.2f} ms a file; target < {target} s: {verdict}); "
              f"{int(figures['entries'])} listed, {int(figures['errors'])} with errors")
    share, polls = watcher_share(build_hf_cache())
    print(f"  watching a 9,000-file Hugging Face cache: {share:.1%} of a core, {polls} polls"
          f" in 10 s (bound {watch.MAX_SHARE:.0%})")
    ok = cold["seconds"] < COLD_TARGET_S and warm["seconds"] < WARM_TARGET_S
    return 0 if ok and cold["entries"] == n and not cold["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
