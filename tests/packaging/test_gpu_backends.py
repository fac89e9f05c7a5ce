"""A bundle's GPU backend libraries: loaded where they can be, passed over where not.

No GPU here: a backend that cannot load is what is tested, with a file named like one
beside the real libggml of the installed llama-cpp-python.
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path

import pytest

from app.core.llama import gpu_backends


def test_only_gpu_backends_are_taken(tmp_path: Path) -> None:
    for name in ("libggml.so.0", "libggml-base.so", "libggml-cpu-haswell.so", "libggml-rpc.so",
                 "libggml-blas.so", "libllama.so", "libggml-vulkan.so", "ggml-cuda.dll",
                 "libggml-metal.dylib"):
        (tmp_path / name).write_bytes(b"")
    assert [n for n, _ in gpu_backends.backend_files(tmp_path)] == ["cuda", "metal", "vulkan"]


def test_no_gpu_library_loads_nothing(tmp_path: Path) -> None:
    for name in ("libggml.so", "libggml-base.so", "libggml-cpu-x64.so", "libggml-cpu-zen4.so"):
        (tmp_path / name).write_bytes(b"not loaded: there is no GPU backend to load with it")
    assert gpu_backends.install(tmp_path) == []
    assert gpu_backends.install(tmp_path / "missing") == []


def test_a_backend_without_libggml_is_passed_over(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "libggml-vulkan.so").write_bytes(b"not a library")
    with caplog.at_level(logging.WARNING, logger=gpu_backends.__name__):
        assert gpu_backends.install(tmp_path) == []
    assert "vulkan" in caplog.text


def test_a_backend_that_does_not_load_is_logged_and_passed_over(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_backends, "PASSED_OVER", [])
    llama_cpp = pytest.importorskip("llama_cpp")
    wheel_lib = Path(llama_cpp.__file__).parent / "lib"
    if not (wheel_lib / "libggml.so.0").is_file():
        pytest.skip("the installed llama.cpp's libraries are named as on Linux here")
    # The real libggml and what it links to; not a GPU build's own backend (CUDA, linked
    # into libggml), which cannot load on its own and would be passed over too.
    built_in = {path.name for _, path in gpu_backends.backend_files(wheel_lib)}
    for library in wheel_lib.iterdir():
        if library.name not in built_in:
            (tmp_path / library.name).symlink_to(library)
    (tmp_path / "libggml-vulkan.so").write_bytes(b"not a library")
    ggml = ctypes.CDLL(str(tmp_path / "libggml.so.0"))
    before = _log_callback(ggml)

    with caplog.at_level(logging.INFO, logger=gpu_backends.__name__):
        assert gpu_backends.install(tmp_path) == []
    assert "libggml-vulkan.so not loaded" in caplog.text
    assert gpu_backends.PASSED_OVER == ["Vulkan"]  # why the CPU answers, for the user
    # ggml's own words on why, in the log rather than on stderr.
    assert "failed to load" in caplog.text
    # Whoever routed ggml's log before (llama-cpp-python, once imported) still does.
    assert _log_callback(ggml) == before


def _log_callback(ggml: ctypes.CDLL) -> tuple[int | None, int | None]:
    callback, data = ctypes.c_void_p(), ctypes.c_void_p()
    ggml.ggml_log_get(ctypes.byref(callback), ctypes.byref(data))
    return callback.value, data.value
