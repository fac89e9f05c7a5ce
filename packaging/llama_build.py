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

GPUs. A native build takes the GPU backend :func:`choose_gpu` picks for this machine
(``FIRESIDE_GPU=cpu|cuda|vulkan|metal`` overrides it; ``llama_build.py gpu`` prints the
choice). A portable build carries Vulkan as a library ggml loads at run time only when
``FIRESIDE_BUNDLE_GPU=vulkan`` asks for it: Vulkan's headers must be newer than
Debian 12's. A CPU build's flags, and so its wheel folder, are those of before GPUs.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app/, before it is installed

from app.core.llama import native_check  # the standard library only: usable before set-up

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


# GPUs -------------------------------------------------------------------------------

GPUS = ("cpu", "cuda", "vulkan", "metal")
BUNDLE_GPUS = ("cpu", "vulkan")  # CUDA would add gigabytes of cuBLAS to every installer


@dataclass(frozen=True)
class CudaFound:
    """What a CUDA build needs, as found on this machine."""

    nvcc: str | None = None  # the CUDA compiler
    system_cublas: bool = False  # cuBLAS's header and library with the toolkit or the system
    wheel_cublas: Path | None = None  # else the nvidia-cublas wheel's folder: include/, lib/
    driver: bool = False  # an NVIDIA driver: libcuda loads, or the kernel module answers
    libcuda: Path | None = None  # the driver library (or the toolkit's stub) to link with
    arch: str | None = None  # the cards' CUDA architectures, "90" or "86;90"

    @property
    def cublas(self) -> bool:
        return self.system_cublas or self.wheel_cublas is not None


@dataclass(frozen=True)
class GpuChoice:
    backend: str  # one of GPUS
    reason: str  # why, for the log and .venv/llama-backend


def choose_gpu(override: str | None, system: str, machine: str, cuda: CudaFound) -> GpuChoice:
    """The GPU backend of a native build: ``override`` (FIRESIDE_GPU) when set; else Metal
    on an Apple Silicon Mac; CUDA where its compiler, cuBLAS and an NVIDIA driver all
    are; else the CPU."""
    if override and override.strip():
        backend = override.strip().lower()
        if backend not in GPUS:
            raise SystemExit(f"FIRESIDE_GPU={override}: expected one of {', '.join(GPUS)}")
        return GpuChoice(backend, f"FIRESIDE_GPU={backend}")
    if system == "darwin" and machine == "arm64":
        return GpuChoice("metal", "Apple Silicon")
    needs = {"the CUDA toolkit (nvcc)": cuda.nvcc, "cuBLAS": cuda.cublas,
             "an NVIDIA driver": cuda.driver}
    missing = [name for name, found in needs.items() if not found]
    if not missing:
        return GpuChoice("cuda", "CUDA toolkit, cuBLAS and an NVIDIA driver found")
    if len(missing) < len(needs):
        return GpuChoice("cpu", f"CUDA would need {' and '.join(missing)}, not found here")
    return GpuChoice("cpu", "no CUDA toolkit or NVIDIA driver found")


def cuda_cmake_args(cuda: CudaFound) -> list[str]:
    args = ["-DGGML_CUDA=ON"]
    if cuda.arch:  # the card's code only: minutes of compiling instead of an hour
        args.append(f"-DCMAKE_CUDA_ARCHITECTURES={cuda.arch}")
    if cuda.nvcc and not shutil.which("nvcc"):
        args += [f"-DCMAKE_CUDA_COMPILER={cuda.nvcc}",
                 f"-DCUDAToolkit_ROOT={Path(cuda.nvcc).resolve().parents[1]}"]
    if cuda.wheel_cublas is not None and not cuda.system_cublas:
        # CMake looks for cuBLAS only beside the toolkit; the wheel's has no unversioned .so.
        lib = cuda.wheel_cublas / "lib"
        for name in ("cublas", "cublasLt"):
            found = sorted(lib.glob(f"lib{name}.so*"))
            if found:
                args.append(f"-DCUDA_{name}_LIBRARY={found[0]}")
        args.append(f"-DCMAKE_CUDA_FLAGS=-I{cuda.wheel_cublas / 'include'}")
    if cuda.libcuda is not None:
        args.append(f"-DCUDA_cuda_driver_LIBRARY={cuda.libcuda}")
    else:  # nothing to link the driver API from: ggml then does without its VMM pool
        args.append("-DGGML_CUDA_NO_VMM=ON")
    return args


def gpu_cmake_args(backend: str, cuda: CudaFound) -> list[str]:
    if backend == "cuda":
        return cuda_cmake_args(cuda)
    return {"metal": ["-DGGML_METAL=ON"], "vulkan": ["-DGGML_VULKAN=ON"]}.get(backend, [])


def _cuda_roots(nvcc: str | None) -> list[Path]:
    named = [os.environ.get(n) for n in ("CUDAToolkit_ROOT", "CUDA_HOME", "CUDA_PATH")]
    roots = [Path(n) for n in named if n]
    if nvcc:
        roots.append(Path(nvcc).resolve().parents[1])
    roots.append(Path("/usr/local/cuda"))
    return roots


def _find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for root in _cuda_roots(None):
        for name in ("nvcc", "nvcc.exe"):
            if (root / "bin" / name).is_file():
                return str(root / "bin" / name)
    return None


def _has_system_cublas(roots: list[Path]) -> bool:
    include = [r / "include" for r in roots] + [p / "include" for r in roots
                                                 for p in r.glob("targets/*")]
    include.append(Path("/usr/include"))
    libs = [r / d for r in roots for d in ("lib64", "lib", "lib/x64")]
    libs += [p / "lib" for r in roots for p in r.glob("targets/*")]
    libs += [Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib/aarch64-linux-gnu"),
             Path("/usr/lib64")]
    header = any((d / "cublas_v2.h").is_file() for d in include)
    library = any(next(d.glob(pattern), None) for d in libs
                  for pattern in ("libcublas.so*", "cublas.lib"))
    return header and library


def _wheel_cublas() -> Path | None:
    """The nvidia-cublas wheel installed in this Python: nvidia/cu13 (CUDA 13) or
    nvidia/cublas (nvidia-cublas-cu12)."""
    spec = importlib.util.find_spec("nvidia")
    for location in (spec.submodule_search_locations or []) if spec else []:
        for header in sorted(Path(location).glob("*/include/cublas_v2.h")):
            if next((header.parents[1] / "lib").glob("libcublas.so*"), None):
                return header.parents[1]
    return None


def _libcuda(roots: list[Path]) -> Path | None:
    """The driver's libcuda (ldconfig's list, LD_LIBRARY_PATH), else the toolkit's stub."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True,
                                 check=False).stdout
    except OSError:
        listing = ""
    listed = dict(re.findall(r"^\s*(libcuda\.so(?:\.1)?) \(.*\) => (\S+)$", listing, re.M))
    found = [Path(listed[n]) for n in ("libcuda.so", "libcuda.so.1") if n in listed]
    found += [Path(d) / n for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
              if d for n in ("libcuda.so", "libcuda.so.1")]
    found += [r / d / "libcuda.so" for r in roots for d in ("lib64/stubs", "lib/stubs")]
    return next((p for p in found if p.is_file()), None)


def _has_driver() -> bool:
    if Path("/proc/driver/nvidia/version").is_file():
        return True
    try:
        ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
    except OSError:
        return False
    return True


def _cuda_arch() -> str | None:
    """The CUDA architectures to build: CMake's own ``CUDAARCHS`` when set (a machine
    without a card, or one card of several), else the cards' here ("9.0" -> "90"), from
    nvidia-smi."""
    named = os.environ.get("CUDAARCHS", "").strip()
    if named:
        return named
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    caps = sorted({line.strip().replace(".", "") for line in out.splitlines()
                   if re.fullmatch(r"\d+\.\d+", line.strip())}, key=int)
    return ";".join(caps) or None


def find_cuda() -> CudaFound:
    nvcc = _find_nvcc()
    roots = _cuda_roots(nvcc)
    return CudaFound(nvcc=nvcc, system_cublas=_has_system_cublas(roots),
                     wheel_cublas=_wheel_cublas(), driver=_has_driver(),
                     libcuda=_libcuda(roots), arch=_cuda_arch())


@functools.cache
def _machine_cuda() -> CudaFound:
    return find_cuda()


@functools.cache
def native_gpu() -> GpuChoice:
    """This machine's choice (looked at once per process)."""
    override = os.environ.get("FIRESIDE_GPU")
    cuda = CudaFound() if override or sys.platform == "darwin" else _machine_cuda()
    return choose_gpu(override, sys.platform, platform.machine(), cuda)


def bundle_gpu() -> str:
    """The GPU backend a portable build carries: FIRESIDE_BUNDLE_GPU, the CPU alone if unset."""
    backend = os.environ.get("FIRESIDE_BUNDLE_GPU", "").strip().lower() or "cpu"
    if backend not in BUNDLE_GPUS:
        raise SystemExit(f"FIRESIDE_BUNDLE_GPU={backend}: expected one of "
                         f"{', '.join(BUNDLE_GPUS)}")
    if backend != "cpu" and sys.platform == "darwin":
        raise SystemExit("FIRESIDE_BUNDLE_GPU: a macOS bundle always has Metal, and only it")
    return backend


def gpu(kind: str) -> str:
    """The GPU backend a wheel of this kind is built with here ("cpu" for none)."""
    return native_gpu().backend if kind == "native" else bundle_gpu()


# CMake flags ------------------------------------------------------------------------

def native_cmake_args(backend: str | None = None) -> list[str]:
    """``backend``: the GPU backend to build, this machine's choice when None."""
    backend = backend or native_gpu().backend
    cuda = _machine_cuda() if backend == "cuda" else CudaFound()
    # LLAVA_BUILD=OFF: Fireside takes no images, and mtmd is only imported for them.
    # On macOS llama-cpp-python builds Metal whatever the flags say.
    return ["-DGGML_NATIVE=ON", "-DLLAVA_BUILD=OFF", *gpu_cmake_args(backend, cuda)]


def portable_cmake_args() -> list[str]:
    if sys.platform == "darwin":  # the arm64 baseline plus Metal, which does the work
        return ["-DGGML_NATIVE=OFF", "-DLLAVA_BUILD=OFF"]
    # Runtime CPU-variant selection: ggml loads the best libggml-cpu-*.so it finds. The
    # variants go beside libllama so the bundle keeps them in llama_cpp/lib, and so does
    # a GPU backend (loaded by app/core/llama/gpu_backends.py where its driver is).
    return ["-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON",
            "-DCMAKE_INSTALL_BINDIR=llama_cpp/lib", "-DLLAVA_BUILD=OFF",
            *gpu_cmake_args(bundle_gpu(), CudaFound())]


def cmake_args(kind: str) -> list[str]:
    return native_cmake_args() if kind == "native" else portable_cmake_args()


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
    """Where the wheel of this kind, version and set of flags lives (a GPU build's
    folder also names its backend)."""
    parts = [LLAMA_VERSION, kind, *cmake_args(kind), compiler_flags(kind)]
    if kind == "native":
        parts.append(cpu_fingerprint())
    else:
        parts += PORTABLE_X86_VARIANTS
    tag = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]
    backend = gpu(kind)
    return WHEELS / "-".join([LLAMA_VERSION, kind, *([backend] if backend != "cpu" else []),
                              tag])


def cached(kind: str) -> Path | None:
    found = sorted(wheel_folder(kind).glob("llama_cpp_python-*.whl"))
    return found[-1] if found else None


def _log(message: str) -> None:
    print(f"[llama.cpp {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _sdist(into: Path) -> Path:
    # Only llama-cpp-python must be the sdist: its build tools may come as wheels, which
    # a folder of wheels for a machine without network (PIP_FIND_LINKS) can hold.
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--no-binary", "llama-cpp-python", "--no-cache-dir", "-d", str(into),
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
    if kind == "native":
        _log(f"GPU: {native_gpu().backend} ({native_gpu().reason})")
    wheel = cached(kind)
    if wheel is not None:
        return wheel
    folder = wheel_folder(kind)
    args = cmake_args(kind)
    env = {**os.environ, "CMAKE_ARGS": shlex.join(args),
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
    # Metal is in every macOS build (llama-cpp-python turns it on there), so only the
    # backends a build asks for are looked for.
    backend = gpu(kind)
    library = re.compile(rf"llama_cpp/lib/(lib)?ggml-{backend}[.\d]*\.(so|dll|dylib)")
    if backend not in ("cpu", "metal") and not any(library.search(n) for n in names):
        raise SystemExit(f"{wheel} has no {backend} backend library")


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "cached" and argv[1] in ("native", "portable"):
        return 0 if cached(argv[1]) else 1
    if argv == ["gpu"]:  # what `make setup` builds for, and why
        print(f"{native_gpu().backend}: {native_gpu().reason}")
        return 0
    if len(argv) != 1 or argv[0] not in ("native", "portable"):
        raise SystemExit("usage: llama_build.py native|portable|gpu|cached KIND")
    print(build(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
