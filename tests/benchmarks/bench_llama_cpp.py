"""Fireside against the speed limit: llama.cpp's own ``llama-bench``, same sources, same build.

    python tests/benchmarks/bench_llama_cpp.py [--rounds N] [--quick] [--wait-idle S] [--wheel-libs]
                                                [--gpu-layers N] [--jobs N] [--build-only]
                                                [MODEL ...]

``llama-bench`` is built once from the llama.cpp that the installed llama-cpp-python was
built from (``vendor/llama.cpp`` in the llama-cpp-python sdist, fetched as
packaging/llama_build.py fetches it), the way that script builds the native wheel
(``-DGGML_NATIVE=ON``, no AMX, Release, shared libraries), only the ``llama-bench``
target, ``nice -n 10`` with at most 2 jobs (``--jobs``), with the running venv's
``cmake`` and ``ninja`` (PyPI's wheels) before the system's. It is kept in
``~/.cache/fireside-build/llama-bench/<version>-native-<tag>``, the tag a hash of the
version, CMake and compiler flags and the CPU, as the wheels are, so a second run
reuses it.

For each model (default: the bundled ones) it then measures, alternating Fireside's
engine and llama-bench run by run (Fireside, llama-bench, Fireside, ...):

- prompt reading of 512 and 3,000 tokens: the engine's time to first token on a
  cleared sequence (random tokens, as llama-bench uses) against
  ``llama-bench -p N -n 0``;
- decoding 256 tokens: the engine's tokens/s after its chat prompt (Fireside's default
  sampling, one token streamed at a time) against ``llama-bench -d D -p 0 -n 256``, D
  that prompt's length: each new token attends to every one before it, so decoding
  after a 40-token prompt is slower than from an empty context (about 10 % for SmolLM2,
  measured with llama-bench alone), and both sides decode at the same depth;

with llama-bench given Fireside's own settings (threads, batch and micro-batch, flash
attention, KV cache type, weights read in rather than mapped). One difference stays:
Fireside asks for its weights in 2 MB pages (app/core/llama/huge_pages.py), which a system
set to ``madvise`` gives llama-bench only where it asks, and it does not. So Fireside runs
twice in each round, on two engines: as it is, and with that request left out (its
weights in the pages the system gives unasked, as llama-bench's are); the table has a
ratio for each. The engines load the model again for each round, as each llama-bench
run loads it. Prints the medians, the ratios Fireside / llama-bench (the median of the
per-round ratios, and their range) and every way in which the two configurations still
differ. ``--quick``: one round, no 3,000-token prompt, 64 decoded tokens.

``--gpu-layers N``: both sides on the GPU. Fireside's engine loads with N layers offloaded
(``LoadOptions.gpu_layers``, capped at the model's count) and llama-bench gets ``-ngl``
with the count the engine used. llama-bench then runs on the installed wheel's
libllama/libggml (as with ``--wheel-libs``), which hold the GPU backend built for this
machine (``make test-gpu`` builds it with CUDA): the same kernels on both sides, and the
GPU code compiled once, not again for llama-bench (ggml's CUDA code takes as long to
compile as the rest of the wheel). Without it, both sides run on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import llama_cpp  # noqa: E402

import tests.llama_build  # noqa: E402
from app.core.llama import huge_pages, llama_runtime  # noqa: E402, F401 - routes the log
from app.core.llama.engine import (  # noqa: E402
    Engine,
    PromptPlan,
    Sampling,
    Session,
    default_threads,
    llama_arguments,
)
from app.core.models import bundled  # noqa: E402 - routes the log
from app.core.options import LoadOptions  # noqa: E402
from app.core.reply import templates  # noqa: E402 - routes the log

STORY = "Write a very long, detailed story about a lighthouse keeper and a storm."
PROMPTS = (512, 3000)
DECODE = 256
JOBS = 2  # the most compile jobs by default: this machine is shared




llama_build = tests.llama_build.load()
BENCH_BUILDS = Path(llama_build.WHEELS).parent / "llama-bench"


# Building llama-bench -----------------------------------------------------------------

def cmake_args() -> list[str]:
    """The native wheel's CMake flags, for llama.cpp built on its own (not through
    llama-cpp-python's CMakeLists, which sets BUILD_SHARED_LIBS, LLAMA_BUILD_COMMON and
    turns curl off), with its tools, so that llama-bench is a target."""
    # The CPU build's: a GPU run takes its GPU backend from the wheel (--gpu-layers).
    wheel = [a for a in llama_build.native_cmake_args("cpu")
             if not a.startswith("-DLLAVA_BUILD")]
    return [*wheel, "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON",
            "-DLLAMA_BUILD_COMMON=ON", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_CURL=OFF",
            "-DLLAMA_OPENSSL=OFF",
            # The binary finds its libraries beside it once copied into the cache.
            "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DCMAKE_INSTALL_RPATH=$ORIGIN"]


def bench_folder() -> Path:
    """Where this version's llama-bench, built with these flags for this CPU, lives:
    named as packaging/llama_build.py names the native wheels."""
    flags = llama_build.compiler_flags("native")
    parts = [llama_build.LLAMA_VERSION, "native", *cmake_args(), flags,
             llama_build.cpu_fingerprint()]
    tag = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]
    return BENCH_BUILDS / f"{llama_build.LLAMA_VERSION}-native-{tag}"


def build_tool(name: str) -> str | None:
    """``cmake`` or ``ninja``: the running venv's own (its PyPI wheel) before the system's.
    A GPU machine may have neither on PATH: CUDA toolkits ship no CMake."""
    for folder in (Path(sys.executable).parent, Path(sys.prefix) / "bin"):
        if (folder / name).is_file() and os.access(folder / name, os.X_OK):
            return str(folder / name)
    return shutil.which(name)


def build_llama_bench(jobs: int = JOBS) -> tuple[Path, dict[str, Any]]:
    """The cached llama-bench, built now if it is not there; and how it was built."""
    folder = bench_folder()
    binary = folder / "llama-bench"
    info_file = folder / "build.json"
    if binary.is_file() and info_file.is_file():
        info = json.loads(info_file.read_text(encoding="utf-8"))
        info["reused"] = True
        return binary, info
    flags = llama_build.compiler_flags("native")
    env = {**os.environ}
    for name in ("CFLAGS", "CXXFLAGS"):
        env[name] = " ".join(filter(None, [os.environ.get(name, ""), flags]))
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []
    cmake, ninja = build_tool("cmake"), build_tool("ninja")
    if cmake is None:
        raise SystemExit("building llama-bench needs CMake: pip install cmake ninja")
    generator = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"] if ninja else []
    started = time.monotonic()
    BENCH_BUILDS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fireside-llama-bench-") as tmp:
        llama_build._log(f"fetching the llama-cpp-python {llama_build.LLAMA_VERSION} sdist")
        source = llama_build._sdist(Path(tmp)) / "vendor" / "llama.cpp"
        fetched = time.monotonic()
        build = Path(tmp) / "build"
        llama_build._log(f"building llama-bench with {cmake} ({ninja or 'make'}): "
                         f"{cmake_args()} CFLAGS/CXXFLAGS={flags!r}, {jobs} jobs (minutes)")
        subprocess.run([*nice, cmake, "-S", str(source), "-B", str(build), *generator,
                        *cmake_args()], check=True, env=env, stdout=subprocess.DEVNULL)
        subprocess.run([*nice, cmake, "--build", str(build), "--target", "llama-bench",
                        "-j", str(jobs)], check=True, env=env, stdout=subprocess.DEVNULL)
        compiled = time.monotonic()
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=BENCH_BUILDS))
        for item in (build / "bin").iterdir():
            if item.name == "llama-bench" or ".so" in item.name or item.suffix == ".dylib":
                shutil.copy2(item, staging / item.name, follow_symlinks=False)
        info = {"version": llama_build.LLAMA_VERSION, "cmake_args": cmake_args(),
                "cflags": flags, "cpu": lscpu_model(), "jobs": jobs,
                "fetch_s": round(fetched - started, 1),
                "build_s": round(compiled - fetched, 1),
                "built_at": time.strftime("%Y-%m-%d %H:%M:%S")}
        (staging / "build.json").write_text(json.dumps(info, indent=1), encoding="utf-8")
        if folder.exists():  # a half-written folder of an interrupted run
            shutil.rmtree(folder)
        staging.rename(folder)
    llama_build._log(f"llama-bench built in {time.monotonic() - started:.0f} s: {binary}")
    info["reused"] = False
    return binary, info


# The machine --------------------------------------------------------------------------

def lscpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown CPU"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


# The two sides ------------------------------------------------------------------------

_TYPE_NAMES = {llama_cpp.GGML_TYPE_F16: "f16", llama_cpp.GGML_TYPE_Q8_0: "q8_0",
               llama_cpp.GGML_TYPE_Q4_0: "q4_0"}


@dataclass
class Vocab:
    n_vocab: int
    bos: int
    add_bos: bool

    def random_prompt(self, n: int, rng: random.Random) -> list[int]:
        """What llama-bench reads: BOS (where the model adds one), then random tokens."""
        tokens = [rng.randrange(self.n_vocab) for _ in range(n)]
        if self.add_bos:
            tokens[0] = self.bos
        return tokens


def read_vocab(path: Path) -> Vocab:
    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    try:
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        return Vocab(llm.n_vocab(), llm.token_bos(),
                     bool(llama_cpp.llama_vocab_get_add_bos(vocab)))
    finally:
        llm.close()


def fireside_settings(engine: Engine) -> dict[str, Any]:
    """What the loaded model's context really runs with (read back from llama.cpp)."""
    llm = engine._llm  # the benchmark reads it while the engine is idle
    loaded = engine.loaded
    assert llm is not None and loaded is not None
    arguments = llama_arguments(LoadOptions())
    return {"n_batch": llama_cpp.llama_n_batch(llm.ctx),
            "n_ubatch": llama_cpp.llama_n_ubatch(llm.ctx),
            "n_threads": llama_cpp.llama_n_threads(llm.ctx),
            "n_threads_batch": llama_cpp.llama_n_threads_batch(llm.ctx),
            "flash_attn": "on" if arguments["flash_attn"] else "off",
            "type_k": _TYPE_NAMES[arguments["type_k"]],
            "type_v": _TYPE_NAMES[arguments["type_v"]],
            "load_mode": "none" if not arguments["use_mmap"] else "mmap",
            "repack": bool(llm.model_params.use_extra_bufts),
            "n_gpu_layers": loaded.placement.gpu_layers if loaded.placement else 0,
            "n_ctx": llama_cpp.llama_n_ctx(llm.ctx)}


def bench_arguments(settings: dict[str, Any], prompt: bool) -> list[str]:
    """llama-bench's switches for Fireside's settings (-t: the threads that test uses)."""
    threads = settings["n_threads_batch"] if prompt else settings["n_threads"]
    return ["-t", str(threads), "-b", str(settings["n_batch"]),
            "-ub", str(settings["n_ubatch"]), "-fa", settings["flash_attn"],
            "-ctk", settings["type_k"], "-ctv", settings["type_v"],
            "-lm", settings["load_mode"], "--repack", str(int(settings["repack"])),
            "-ngl", str(settings["n_gpu_layers"])]


def gpu_names() -> str:
    """The GPUs the installed llama.cpp offloads to; stops the run where it has none."""
    from app.core.llama import devices

    problem = devices.gpu_support()
    if problem:
        raise SystemExit(f"--gpu-layers: {problem}")
    return ", ".join(d.description or d.name
                     for d in devices.offload_targets(devices.list_devices()))


def wheel_libs() -> Path:
    """The installed llama-cpp-python's libllama and libggml*: Fireside's own kernels."""
    return Path(llama_cpp.__file__).parent / "lib"


def run_llama_bench(binary: Path, model: Path, test: list[str],
                    settings: dict[str, Any], *, prompt: bool,
                    libs: Path | None = None) -> dict[str, Any]:
    """One llama-bench run (warm-up, then one repetition); ``libs``: a folder whose
    libllama/libggml* it loads instead of its own (found first on LD_LIBRARY_PATH)."""
    folders = [str(libs)] if libs else []
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(
        filter(None, [*folders, str(binary.parent), os.environ.get("LD_LIBRARY_PATH", "")]))}
    command = [str(binary), "-m", str(model), *test, *bench_arguments(settings, prompt),
               "-r", "1", "-o", "json"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"llama-bench failed ({done.returncode}): {' '.join(command)}\n"
                         f"{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)[0]
    return result


def fireside_prompt(engine: Engine, tokens: list[int]) -> float:
    """Prompt tokens/s: the prompt's length over the reply's time to first token."""
    engine.clear().result()
    engine.clear_states().result()
    reply = engine.generate(lambda _session: PromptPlan(list(tokens)),
                            Sampling(max_tokens=1, seed=1)).future.result()
    return len(tokens) / reply.stats.ttft_s


def fireside_decode(engine: Engine, n: int, seed: int,
                    tries: int = 5) -> tuple[float, int, int]:
    """Decode tokens/s over ``n`` steps after the first token (Fireside's default
    sampling), the tokens it produced and the prompt's length (the depth it decoded
    at): seeds after ``seed`` are tried until a reply runs the full length (the longest
    reply counts if none does)."""

    def build(session: Session) -> PromptPlan:
        return PromptPlan(session.encode(templates.render(
            session.template, [{"role": "user", "content": STORY}])))

    best = (0.0, 0, 0)
    for attempt in range(tries):
        engine.clear().result()
        engine.clear_states().result()
        reply = engine.generate(build, Sampling(max_tokens=n + 1,
                                                seed=seed + 1000 * attempt)).future.result()
        best = max(best, (reply.stats.tokens_per_s, reply.stats.tokens,
                          reply.stats.prompt_tokens), key=lambda r: r[1])
        if reply.stats.tokens > n:
            break
    return best


def wait_for_idle(limit_s: float) -> None:
    """Wait, at most ``limit_s``, until other work leaves the CPUs (under 15 % busy over
    a second, from /proc/stat); nothing where there is no /proc/stat."""
    def busy_idle() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields) - idle, idle

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            busy0, idle0 = busy_idle()
            time.sleep(1.0)
            busy1, idle1 = busy_idle()
        except (OSError, ValueError, IndexError):
            return
        total = (busy1 - busy0) + (idle1 - idle0)
        if total <= 0 or (busy1 - busy0) / total < 0.15:
            return


# Measuring ----------------------------------------------------------------------------

@dataclass
class Row:
    model: str
    test: str
    fireside: list[float] = field(default_factory=list)
    bench: list[float] = field(default_factory=list)
    # Fireside without its 2 MB page request: empty where that changes nothing here.
    plain: list[float] = field(default_factory=list)
    note: str = ""

    def ratios(self) -> list[float]:
        return [f / b for f, b in zip(self.fireside, self.bench, strict=True)]

    def plain_ratios(self) -> list[float]:
        return [f / b for f, b in zip(self.plain, self.bench, strict=True)]


def spread(values: list[float]) -> str:
    return f"{min(values):.0f}-{max(values):.0f}" if len(values) > 1 else "-"


def differences(ours: dict[str, Any], theirs: dict[str, Any], prompt: bool) -> list[str]:
    """Where llama-bench's reported configuration differs from Fireside's context."""
    threads = ours["n_threads_batch"] if prompt else ours["n_threads"]
    flash = {0: "off", 1: "on", -1: "auto"}.get(int(theirs["flash_attn"]), "?")
    pairs = [("n_batch", ours["n_batch"], int(theirs["n_batch"])),
             ("n_ubatch", ours["n_ubatch"], int(theirs["n_ubatch"])),
             ("threads", threads, int(theirs["n_threads"])),
             ("flash attention", ours["flash_attn"], flash),
             ("type_k", ours["type_k"], theirs["type_k"]),
             ("type_v", ours["type_v"], theirs["type_v"]),
             ("load mode", ours["load_mode"], theirs["load_mode"]),
             ("repack (extra buffers)", ours["repack"], bool(theirs["repack"])),
             ("GPU layers", ours["n_gpu_layers"], int(theirs["n_gpu_layers"]))]
    return [f"{name}: Fireside {a}, llama-bench {b}" for name, a, b in pairs if a != b]


def transparent_huge_pages() -> str | None:
    """The system's setting: "always", "madvise" or "never"; None where there is none."""
    try:
        setting = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    return setting[setting.index("[") + 1:setting.index("]")] if "[" in setting else None


def pages_differ() -> bool:
    """Whether Fireside's 2 MB page request can change anything here."""
    return transparent_huge_pages() in ("always", "madvise")


def load(engine: Engine, path: Path, options: LoadOptions, *, huge: bool) -> None:
    """``huge=False``: the weights stay in the pages the system gives unasked, as
    llama-bench's do (Fireside's request, huge_pages.advise, left out of this load)."""
    unasked = mock.patch.object(huge_pages, "advise", return_value=0)
    with contextlib.nullcontext() if huge else unasked:
        engine.load(path, options).result()


def measure_model(path: Path, binary: Path, engines: dict[bool, Engine], *, rounds: int,
                  prompts: tuple[int, ...], decode: int, libs: Path | None = None,
                  idle_s: float = 0.0, gpu_layers: int = 0) -> tuple[list[Row], list[str]]:
    """``engines``: by whether it asks for 2 MB pages (True: Fireside as it runs)."""
    vocab = read_vocab(path)
    options = LoadOptions(gpu_layers=str(gpu_layers) if gpu_layers else "off")
    rng = random.Random(1234)
    name = path.name.removesuffix(".gguf")
    rows = [Row(name, f"pp{n}") for n in prompts] + [Row(name, f"tg{decode}")]
    config_notes: list[str] = []
    produced: list[int] = []
    depths: set[int] = set()
    plain = engines.get(False)
    for _ in range(rounds):
        # Loaded afresh each round, as each llama-bench run loads the model: where the
        # weights land in memory moves decoding by up to 10 % from one load to the next
        # here (measured), and one load would tie all of Fireside's figures to one draw.
        for huge, engine in engines.items():
            load(engine, path, options, huge=huge)
            # Warm-up, as llama-bench warms up before each test: first contact with the
            # kernels.
            fireside_prompt(engine, vocab.random_prompt(min(prompts), rng))
        settings = fireside_settings(engines[True])
        for row, n in zip(rows, [*prompts, 0], strict=True):
            if idle_s:
                wait_for_idle(idle_s)
            if n:
                tokens = vocab.random_prompt(n, rng)
                row.fireside.append(fireside_prompt(engines[True], tokens))
                if plain is not None:
                    row.plain.append(fireside_prompt(plain, tokens))
                result = run_llama_bench(binary, path, ["-p", str(n), "-n", "0"], settings,
                                         prompt=True, libs=libs)
            else:
                seed = 11 + len(produced)
                rate, count, depth = fireside_decode(engines[True], decode, seed=seed)
                row.fireside.append(rate)
                if plain is not None:
                    row.plain.append(fireside_decode(plain, decode, seed=seed)[0])
                produced.append(count)
                depths.add(depth)
                # The same steps at the same depth: a reply that ended early (a base
                # model's blank line) decoded at a shallower depth on average.
                steps = max(1, min(decode, count - 1))
                result = run_llama_bench(binary, path, ["-d", str(depth), "-p", "0",
                                                        "-n", str(steps)],
                                         settings, prompt=False, libs=libs)
            row.bench.append(float(result["avg_ts"]))
            for diff in differences(settings, result, prompt=bool(n)):
                if f"{row.test}: {diff}" not in config_notes:
                    config_notes.append(f"{row.test}: {diff}")
            without = f", without 2 MB pages {row.plain[-1]:8.1f}" if row.plain else ""
            print(f"  {name} {row.test}: Fireside {row.fireside[-1]:8.1f} tok/s{without}, "
                  f"llama-bench {row.bench[-1]:8.1f} tok/s  (load {load_average()})",
                  flush=True)
    low, high = (min(decode, n - 1) for n in (min(produced), max(produced)))
    rows[-1].note = (f"{low}-{high} steps timed, the same on both sides in each round, "
                     f"after {'/'.join(str(d) for d in sorted(depths))} prompt tokens")
    config_notes.append(f"n_ctx: Fireside {settings['n_ctx']} (its default context), "
                        "llama-bench the test's own length (p + n)")
    return rows, config_notes


INHERENT = (
    "prompt: Fireside's figure is the prompt over the time to its first token, so it also "
    "holds sampling that token and the Python around llama_decode (batches of n_batch "
    "filled in Python); llama-bench times llama_decode alone.",
    "decode: Fireside samples every token with llama-cpp-python's sampler chain "
    "(penalties, top-k, typical, top-p, min-p, temperature, dist over the whole "
    "vocabulary) and turns it into text; llama-bench feeds random tokens, samples nothing.",
    "decode: both decode after Fireside's chat prompt (llama-bench's -d); llama-bench's "
    "depth is filled with random tokens, Fireside's with the prompt.",
    "threads: llama-bench attaches its own ggml threadpool (poll 50); llama-cpp-python "
    "leaves ggml a threadpool per graph computation (OpenMP in both).",
    "sliding-window layers (Gemma 3): llama-bench keeps only the window in their KV cache "
    "(swa_full false), Fireside the whole context (llama.cpp's default, which lets a "
    "sequence roll back for prefix reuse and restored states); +3.5 % prompt reading "
    "at 2,700 tokens without it, measured.",
)


def huge_pages_note() -> str | None:
    """How the weights' pages differ: Fireside asks for 2 MB pages (app/core/llama/huge_pages.py),
    which a system set to ``madvise`` gives only to programs that ask."""
    mode = transparent_huge_pages()
    if mode is None:
        return None
    if mode == "madvise":
        return ("weights: in 2 MB pages in Fireside, which asks for them; in 4 KB pages in "
                "llama-bench (this system's transparent huge pages: madvise). 'w/o 2MB': "
                "Fireside with its weights in 4 KB pages too")
    if mode == "always":
        return ("weights: in 2 MB pages on both sides (transparent huge pages: always); "
                "'w/o 2MB': Fireside without its own request, which then changes only how "
                "hard the kernel tries to find them")
    return f"weights: the same pages on both sides (transparent huge pages: {mode})"


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    prompts = PROMPTS[:1] if args.quick else PROMPTS
    decode = 64 if args.quick else DECODE
    logging.getLogger("fireside.llama").setLevel(logging.ERROR)
    # Conversations and states written by the benchmark stay out of the user's data.
    data_dir = tempfile.mkdtemp(prefix="fireside-bench-")
    os.environ["FIRESIDE_DATA_DIR"] = data_dir

    cpu = lscpu_model()
    if args.gpu_layers and not args.build_only:
        gpus = gpu_names()  # before anything is built: fail fast where there is no GPU
    binary, info = build_llama_bench(args.jobs)
    how = (f"reused, built {info['built_at']} in {info['build_s']:.0f} s" if info["reused"]
           else f"built now in {info['build_s']:.0f} s (+{info['fetch_s']:.0f} s fetching "
           "the sdist)")
    print(f"llama-bench: {binary} ({how}; nice 10, {info['jobs']} jobs)")
    if args.build_only:
        return 0
    models = args.models or bundled.bundled_model_paths()
    if not models:
        raise SystemExit("no models: run `make setup` (it installs the bundled ones)")
    print(f"CPU (lscpu): {cpu}; {os.cpu_count()} logical CPUs; Fireside's threads: "
          f"{default_threads()}; load average at start: {load_average()}")
    print(f"llama-cpp-python {llama_cpp.__version__}; {rounds} round(s), alternated "
          f"Fireside / llama-bench; figures are medians, tok/s", flush=True)
    libs = wheel_libs() if args.wheel_libs or args.gpu_layers else None
    print(f"llama-bench's libllama/libggml: {libs or binary.parent}")
    if args.gpu_layers:
        print(f"GPU: {gpus}; up to {args.gpu_layers} layers offloaded on both sides")
    if os.getloadavg()[0] > 0.5:
        print("note: the machine was busy before this run started: other work shares the "
              "CPU, so expect noise (compare the ratios, and their ranges)")
    try:
        rows, notes = measure_models(models, binary, rounds=rounds, prompts=prompts,
                                     decode=decode, libs=libs, idle_s=args.wait_idle,
                                     gpu_layers=args.gpu_layers)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)

    print()
    print_table(rows, cpu)
    print()
    print_differences(notes)
    return 0


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=None,
                        help="alternated runs per test (default 3; 1 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="one round, no 3,000-token prompt, 64 decoded tokens")
    parser.add_argument("--build-only", action="store_true", help="build llama-bench, stop")
    parser.add_argument("--wait-idle", type=float, default=0.0, metavar="S",
                        help="before each Fireside / llama-bench pair, wait up to S seconds "
                             "for other work to leave the CPUs")
    parser.add_argument("--wheel-libs", action="store_true",
                        help="run llama-bench on the installed wheel's libllama/libggml "
                             "(Fireside's very kernels) instead of the ones built with it")
    parser.add_argument("--gpu-layers", type=int, default=0, metavar="N",
                        help="offload N layers on both sides (99: all), llama-bench on the "
                             "wheel's libraries and so on its GPU backend")
    parser.add_argument("--jobs", type=int, default=JOBS, metavar="N",
                        help=f"compile jobs for building llama-bench (default {JOBS})")
    parser.add_argument("models", nargs="*", type=Path)
    return parser.parse_args(argv)


def measure_models(models: list[Path], binary: Path, *, rounds: int, prompts: tuple[int, ...],
                   decode: int, libs: Path | None, idle_s: float,
                   gpu_layers: int) -> tuple[list[Row], dict[str, list[str]]]:
    """Every model's rows, and where its configurations differ, on one engine."""
    rows: list[Row] = []
    notes: dict[str, list[str]] = {}
    # Both stay loaded through a round (twice the model's memory), so that each test
    # runs its three sides back to back.
    engines = {huge: Engine() for huge in ((True, False) if pages_differ() else (True,))}
    try:
        for path in models:
            model_rows, model_notes = measure_model(path, binary, engines, rounds=rounds,
                                                    prompts=prompts, decode=decode, libs=libs,
                                                    idle_s=idle_s, gpu_layers=gpu_layers)
            rows += model_rows
            notes[path.name] = model_notes
    finally:
        for engine in engines.values():
            engine.close()
    return rows, notes


def ratio_columns(ratios: list[float]) -> str:
    if not ratios:
        return f"{'-':>6} {'-':>11}"
    spread_of = f"{min(ratios):.2f}-{max(ratios):.2f}" if len(ratios) > 1 else "-"
    return f"{statistics.median(ratios):6.3f} {spread_of:>11}"


def print_table(rows: list[Row], cpu: str) -> None:
    print(f"CPU: {cpu}, threads {default_threads()}, load average at end: {load_average()}")
    header = (f"{'model':<30} {'test':<7} {'Fireside':>9} {'(range)':>11} "
              f"{'w/o 2MB':>9} {'llama-bench':>11} {'(range)':>11} {'ratio':>6} "
              f"{'(range)':>11} {'w/o 2MB':>6} {'(range)':>11} {'best/best':>9}")
    print(header)
    print("-" * len(header))
    for row in rows:
        plain = f"{statistics.median(row.plain):9.1f}" if row.plain else f"{'-':>9}"
        print(f"{row.model[:30]:<30} {row.test:<7} {statistics.median(row.fireside):9.1f} "
              f"{spread(row.fireside):>11} {plain} {statistics.median(row.bench):11.1f} "
              f"{spread(row.bench):>11} {ratio_columns(row.ratios())} "
              f"{ratio_columns(row.plain_ratios())} "
              f"{max(row.fireside) / max(row.bench):9.3f}"
              + (f"  {row.note}" if row.note else ""))
    print("ratio: Fireside / llama-bench, the median of the per-round ratios (1.0 is the "
          "speed limit); w/o 2MB: the same for Fireside without its request for 2 MB pages "
          "(llama-bench makes none; '-': it changes nothing on this system); best/best: the "
          "fastest run of each, the figure least touched by other work on the machine.")


def print_differences(notes: dict[str, list[str]]) -> None:
    print("Where the configurations differ:")
    for model, model_notes in notes.items():
        settings_diffs = [n for n in model_notes if not n.startswith("n_ctx")]
        print(f"  {model}: " + ("; ".join(settings_diffs) if settings_diffs else
                                "threads, batch, micro-batch, flash attention, KV types, "
                                "load mode, repacking and GPU layers all the same"))
        for note in model_notes:
            if note.startswith("n_ctx"):
                print(f"    {note}")
    for line in filter(None, [huge_pages_note(), *INHERENT]):
        print(f"  - {line}")


if __name__ == "__main__":
    sys.exit(main())
