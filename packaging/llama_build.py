"""Build llama-cpp-python for Fireside: ``python packaging/llama_build.py native|portable``.

Prints the path of the wheel. Each wheel is built once, from the sdist, into a folder
of ``~/.cache/fireside-build/wheels`` named after everything that changes what it
holds: the version, the CMake flags, the compiler flags and, for a native build, the
CPU it was built on. pip caches built wheels by sdist only, never by those flags, so
it is never asked to build one (``--no-cache-dir``): a wheel built elsewhere, or
before these rules, can never stand in for one of these.

No AMX. llama.cpp's AMX kernels crash on their first multi-token batch on Intel
CPUs that have AMX (Sapphire Rapids and newer): ``ldtilecfg`` faults in
``ggml_backend_amx_mul_mat`` (llama.cpp #20824, fix pending in PR #26954).

- native (``make setup``): ``-march=native`` minus AMX. ggml ignores its
  ``GGML_AMX_*`` options while ``GGML_NATIVE`` is on, so the compiler is told
  directly: an explicit ``-mno-amx-*`` outranks ``-march=native`` wherever either
  comes on the command line, in GCC and in Clang. Everything else the CPU has
  (AVX-512, VNNI, BF16) stays, and so does the weight repacking that makes Q4_0 and
  Q4_K fast on AVX2 and AVX-512.
- portable (``make package``): ggml's CPU backend once per CPU level, the best one
  picked at run time. Its ``sapphirerapids`` variant is the AMX one and is not built:
  those CPUs get ``zen4`` (the same AVX-512 set, without AMX).
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app/, before it is installed

from app.core import native_check  # the standard library only: usable before set-up

LLAMA_VERSION = "0.3.36"
WHEELS = Path.home() / ".cache" / "fireside-build" / "wheels"

# The compiler flags that keep AMX out of a native x86-64 build (GCC and Clang). The
# three are separate switches in GCC 12: -mno-amx-tile leaves __AMX_INT8__ defined.
NO_AMX_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

# ggml's x86-64 CPU variants the portable build keeps: every level a user's CPU is
# likely to be at, from the x86-64 baseline to AVX-512 with VNNI/BF16. Left out: the
# AMX one (sapphirerapids, which then loads zen4), and levels that differ from the
# next one down by little (sandybridge, ivybridge, piledriver: AVX1-era CPUs, which
# load sse42; cannonlake and cooperlake, which load skylakex and cascadelake).
PORTABLE_X86_VARIANTS = ("x64", "sse42", "haswell", "alderlake", "skylakex", "cascadelake",
                         "icelake", "zen4")
AMX_VARIANTS = ("sapphirerapids",)


def _is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")


def native_cmake_args() -> list[str]:
    # LLAVA_BUILD=OFF: Fireside takes no images, and mtmd is only imported for them.
    return ["-DGGML_NATIVE=ON", "-DLLAVA_BUILD=OFF"]


def portable_cmake_args() -> list[str]:
    if sys.platform == "darwin":  # the arm64 baseline plus Metal, which does the work
        return ["-DGGML_NATIVE=OFF", "-DLLAVA_BUILD=OFF"]
    # Runtime CPU-variant selection: ggml loads the best libggml-cpu-*.so it finds. The
    # variants go beside libllama so the bundle keeps them in llama_cpp/lib.
    return ["-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON",
            "-DCMAKE_INSTALL_BINDIR=llama_cpp/lib", "-DLLAVA_BUILD=OFF"]


def compiler_flags(kind: str) -> str:
    """Extra C and C++ flags: the no-AMX switches for a native x86-64 build."""
    if kind == "native" and _is_x86() and sys.platform != "win32":
        return NO_AMX_FLAGS
    return ""


def cpu_fingerprint() -> str:
    """What a native build depends on: the CPU's name and all its feature flags."""
    name, flags = native_check.cpu_identity()
    return " ".join([name, platform.machine(), *sorted(flags)])


def wheel_folder(kind: str) -> Path:
    """Where the wheel of this kind, version and set of flags lives."""
    args = native_cmake_args() if kind == "native" else portable_cmake_args()
    parts = [LLAMA_VERSION, kind, *args, compiler_flags(kind)]
    if kind == "native":
        parts.append(cpu_fingerprint())
    else:
        parts += PORTABLE_X86_VARIANTS
    tag = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]
    return WHEELS / f"{LLAMA_VERSION}-{kind}-{tag}"


def cached(kind: str) -> Path | None:
    found = sorted(wheel_folder(kind).glob("llama_cpp_python-*.whl"))
    return found[-1] if found else None


def _log(message: str) -> None:
    print(f"[llama.cpp {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _sdist(into: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--no-binary", ":all:", "--no-cache-dir", "-d", str(into),
                    f"llama-cpp-python=={LLAMA_VERSION}"], check=True)
    archive = next(into.glob("llama_cpp_python-*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / f"llama_cpp_python-{LLAMA_VERSION}"


def keep_variants(source: Path, keep: tuple[str, ...], drop: tuple[str, ...]) -> None:
    """Cut ggml's list of x86-64 CPU variants down to ``keep`` in an unpacked sdist.

    Fails rather than build something else if the list is not as expected."""
    cmake = source / "vendor" / "llama.cpp" / "ggml" / "src" / "CMakeLists.txt"
    text = cmake.read_text(encoding="utf-8")
    line = re.compile(r"^[ \t]*ggml_add_cpu_backend_variant\((\w+)\b[^)\n]*\)[ \t]*\n", re.M)
    x86 = {"x64", "sse42", "sandybridge", "ivybridge", "piledriver", "haswell", "skylakex",
           "cannonlake", "cascadelake", "icelake", "cooperlake", "zen4", "alderlake",
           "sapphirerapids"}
    found = {m.group(1) for m in line.finditer(text)} & x86
    if not set(keep) | set(drop) <= found:
        raise SystemExit(f"ggml's CPU variants are not as expected: {sorted(found)}")
    cut = line.sub(lambda m: "" if m.group(1) in x86 - set(keep) else m.group(0), text)
    cmake.write_text(cut, encoding="utf-8")


def build(kind: str) -> Path:
    """The wheel of this kind, built now unless it is already in its folder."""
    wheel = cached(kind)
    if wheel is not None:
        return wheel
    folder = wheel_folder(kind)
    args = native_cmake_args() if kind == "native" else portable_cmake_args()
    env = {**os.environ, "CMAKE_ARGS": " ".join(args),
           "CMAKE_BUILD_PARALLEL_LEVEL": os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL",
                                                       str(os.cpu_count() or 2))}
    extra = compiler_flags(kind)
    for name in ("CFLAGS", "CXXFLAGS"):
        env[name] = " ".join(filter(None, [os.environ.get(name, ""), extra]))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fireside-llama-") as tmp:
        source = _sdist(Path(tmp))
        if kind == "portable" and _is_x86() and sys.platform != "darwin":
            keep_variants(source, PORTABLE_X86_VARIANTS, AMX_VARIANTS)
        _log(f"building the {kind} llama-cpp-python {LLAMA_VERSION}: CMAKE_ARGS={args} "
             f"CFLAGS/CXXFLAGS={extra!r} (minutes)")
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-cache-dir",
                        "--no-deps", "-w", str(Path(tmp) / "out"), str(source)],
                       check=True, env=env)
        built = next((Path(tmp) / "out").glob("llama_cpp_python-*.whl"))
        check(built, kind)
        folder.mkdir(parents=True, exist_ok=True)
        wheel = folder / built.name
        shutil.move(built, wheel)
    _log(f"built in {time.monotonic() - started:.0f} s: {wheel}")
    return wheel


def check(wheel: Path, kind: str) -> None:
    """Refuse a wheel that is not what its kind promises."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    variants = {re.sub(r".*ggml-cpu-([\w.]+)\.(so|dll|dylib)$", r"\1", n)
                for n in names if re.search(r"llama_cpp/lib/.*ggml-cpu-[\w.]+\.(so|dll)$", n)}
    if kind == "portable" and _is_x86() and sys.platform != "darwin":
        # MSVC builds no zen4 (ggml needs /arch:AVX10.1 for BF16 there).
        expected = set(PORTABLE_X86_VARIANTS) - ({"zen4"} if sys.platform == "win32" else set())
        if variants != expected:
            raise SystemExit(f"{wheel}: CPU variants {sorted(variants)}, expected "
                             f"{sorted(expected)}")
    if kind == "native" and variants:
        raise SystemExit(f"{wheel} has CPU variants: not a native build")


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "cached" and argv[1] in ("native", "portable"):
        return 0 if cached(argv[1]) else 1
    if len(argv) != 1 or argv[0] not in ("native", "portable"):
        raise SystemExit("usage: llama_build.py native|portable|cached KIND")
    print(build(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
