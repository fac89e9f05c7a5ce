"""Which GPU backend packaging/llama_build.py builds llama.cpp with, from what it finds.

The machine is given as data, so every case runs anywhere. A CPU build must keep the
flags and wheel folder it had before GPUs, so that wheels already built (here, on
developers' machines and in CI's cache) are used again rather than rebuilt.
"""

from __future__ import annotations

import hashlib
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

import tests.llama_build

FULL_CUDA = {"nvcc": "/usr/local/cuda/bin/nvcc", "system_cublas": True, "driver": True}


@pytest.fixture
def lb(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """llama_build, fresh (its choice is looked at once per process), on a machine with
    no CUDA and neither FIRESIDE_GPU nor FIRESIDE_BUNDLE_GPU set."""
    module = tests.llama_build.load()
    monkeypatch.delenv("FIRESIDE_GPU", raising=False)
    monkeypatch.delenv("FIRESIDE_BUNDLE_GPU", raising=False)
    monkeypatch.setattr(module, "_machine_cuda", module.CudaFound)
    return module


def _pre_gpu_folder(lb: ModuleType, kind: str, args: list[str]) -> Path:
    """The wheel folder as named before GPU builds existed."""
    parts = [lb.LLAMA_VERSION, kind, *args, lb.compiler_flags(kind)]
    parts += [lb.cpu_fingerprint()] if kind == "native" else list(lb.PORTABLE_X86_VARIANTS)
    tag = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]
    return lb.WHEELS / f"{lb.LLAMA_VERSION}-{kind}-{tag}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's flags")
def test_a_cpu_build_keeps_its_flags_and_its_wheel_folder(lb: ModuleType) -> None:
    native = ["-DGGML_NATIVE=ON", "-DLLAVA_BUILD=OFF"]
    portable = ["-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON",
                "-DCMAKE_INSTALL_BINDIR=llama_cpp/lib", "-DLLAVA_BUILD=OFF"]
    assert lb.native_gpu().backend == "cpu"
    assert lb.native_cmake_args() == native
    assert lb.portable_cmake_args() == portable
    assert lb.wheel_folder("native") == _pre_gpu_folder(lb, "native", native)
    assert lb.wheel_folder("portable") == _pre_gpu_folder(lb, "portable", portable)


@pytest.mark.parametrize(("override", "where", "cuda", "expected"), [
    ("Vulkan", "linux/x86_64", FULL_CUDA, "vulkan"),  # the override wins, any case
    ("cpu", "darwin/arm64", {}, "cpu"),
    (None, "darwin/arm64", {}, "metal"),
    (None, "darwin/x86_64", {}, "cpu"),
    (None, "linux/x86_64", FULL_CUDA, "cuda"),
    (None, "linux/x86_64", {**FULL_CUDA, "system_cublas": False}, "cpu"),
    (None, "linux/x86_64", {**FULL_CUDA, "driver": False}, "cpu"),
    (None, "linux/x86_64", {**FULL_CUDA, "nvcc": None}, "cpu"),
    (None, "linux/x86_64", {}, "cpu"),
    ("  ", "linux/x86_64", {}, "cpu"),  # set but empty: as unset
])
def test_the_choice(lb: ModuleType, override: str | None, where: str,
                    cuda: dict[str, object], expected: str) -> None:
    system, machine = where.split("/")
    assert lb.choose_gpu(override, system, machine, lb.CudaFound(**cuda)).backend == expected


def test_cublas_from_its_wheel_counts(lb: ModuleType, tmp_path: Path) -> None:
    cuda = lb.CudaFound(**{**FULL_CUDA, "system_cublas": False, "wheel_cublas": tmp_path})
    assert lb.choose_gpu(None, "linux", "x86_64", cuda).backend == "cuda"


def test_the_reason_names_what_cuda_lacks(lb: ModuleType) -> None:
    choice = lb.choose_gpu(None, "linux", "x86_64",
                           lb.CudaFound(nvcc="/usr/bin/nvcc", system_cublas=True))
    assert choice.backend == "cpu" and "NVIDIA driver" in choice.reason
    assert "cuBLAS" not in choice.reason


def test_an_unknown_override_is_refused(lb: ModuleType) -> None:
    with pytest.raises(SystemExit, match="FIRESIDE_GPU=rocm"):
        lb.choose_gpu("rocm", "linux", "x86_64", lb.CudaFound())


def test_cuda_is_built_for_the_card_with_cublas_from_its_wheel(lb: ModuleType,
                                                              tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    for name in ("libcublas.so.13", "libcublasLt.so.13"):
        (tmp_path / "lib" / name).write_bytes(b"")
    cuda = lb.CudaFound(nvcc="nvcc", wheel_cublas=tmp_path, driver=True,
                        libcuda=Path("/usr/lib/libcuda.so.1"), arch="90")
    args = lb.cuda_cmake_args(cuda)
    assert "-DGGML_CUDA=ON" in args and "-DCMAKE_CUDA_ARCHITECTURES=90" in args
    assert f"-DCUDA_cublas_LIBRARY={tmp_path / 'lib' / 'libcublas.so.13'}" in args
    assert f"-DCUDA_cublasLt_LIBRARY={tmp_path / 'lib' / 'libcublasLt.so.13'}" in args
    assert f"-DCMAKE_CUDA_FLAGS=-I{tmp_path / 'include'}" in args
    assert "-DCUDA_cuda_driver_LIBRARY=/usr/lib/libcuda.so.1" in args
    assert "-DGGML_CUDA_NO_VMM=ON" not in args


def test_cuda_without_the_driver_library_links_without_it(lb: ModuleType) -> None:
    args = lb.cuda_cmake_args(lb.CudaFound(nvcc="nvcc", system_cublas=True))
    assert "-DGGML_CUDA_NO_VMM=ON" in args
    assert not any(a.startswith(("-DCUDA_cublas", "-DCMAKE_CUDA_FLAGS")) for a in args)


def test_a_gpu_build_has_a_folder_of_its_own(lb: ModuleType,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = lb.wheel_folder("native")
    monkeypatch.setenv("FIRESIDE_GPU", "vulkan")
    lb.native_gpu.cache_clear()
    assert lb.native_cmake_args()[-1] == "-DGGML_VULKAN=ON"
    vulkan = lb.wheel_folder("native")
    assert vulkan.name.startswith(f"{lb.LLAMA_VERSION}-native-vulkan-") and vulkan != cpu


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS bundles have Metal")
def test_a_bundle_carries_vulkan_only_when_asked(lb: ModuleType,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert "-DGGML_VULKAN=ON" not in lb.portable_cmake_args()
    monkeypatch.setenv("FIRESIDE_BUNDLE_GPU", "vulkan")
    assert lb.portable_cmake_args()[-1] == "-DGGML_VULKAN=ON"
    assert lb.wheel_folder("portable").name.startswith(f"{lb.LLAMA_VERSION}-portable-vulkan-")
    monkeypatch.setenv("FIRESIDE_BUNDLE_GPU", "cuda")
    with pytest.raises(SystemExit, match="FIRESIDE_BUNDLE_GPU=cuda"):
        lb.portable_cmake_args()


def wheels(folder: Path, libraries: list[str], gpu_library: str) -> tuple[Path, Path]:
    """Two wheels holding ``libraries`` in llama_cpp/lib: without ``gpu_library``, with it."""
    without, with_gpu = folder / "without.whl", folder / "with.whl"
    for wheel, names in ((without, libraries), (with_gpu, [*libraries, gpu_library])):
        with zipfile.ZipFile(wheel, "w") as archive:
            for name in names:
                archive.writestr(f"llama_cpp/lib/{name}", b"")
    return without, with_gpu


def test_the_wheel_check_wants_the_gpu_library(lb: ModuleType, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIRESIDE_GPU", "cuda")
    without, with_cuda = wheels(tmp_path, ["libllama.so", "libggml.so"], "libggml-cuda.so.0")
    lb.check(with_cuda, "native")
    with pytest.raises(SystemExit, match="no cuda backend library"):
        lb.check(without, "native")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's library names")
def test_a_vulkan_bundle_wheel_must_hold_the_vulkan_library(
        lb: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lb, "_is_x86", lambda: True)
    monkeypatch.setenv("FIRESIDE_BUNDLE_GPU", "vulkan")
    variants = [f"libggml-cpu-{v}.so" for v in lb.PORTABLE_X86_VARIANTS]
    without, with_vulkan = wheels(tmp_path, variants, "libggml-vulkan.so")
    lb.check(with_vulkan, "portable")
    with pytest.raises(SystemExit, match="no vulkan backend library"):
        lb.check(without, "portable")
