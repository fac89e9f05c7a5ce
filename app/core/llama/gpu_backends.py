"""GPU backends that a portable build carries as libraries of their own, loaded by hand.

A bundle's llama.cpp, built with ``GGML_BACKEND_DL``, keeps its GPU backends beside the
CPU variants in llama_cpp/lib (``libggml-vulkan.so``, ``ggml-cuda.dll``...), and
llama-cpp-python loads none of them itself (its issue #2069). Each is registered here
with ggml's own loader before llama.cpp starts. One that cannot start here (no driver,
no Vulkan loader, no device) is logged and passed over, and the models run on the CPU.
"""

from __future__ import annotations

import ctypes
import logging
import re
import sys
from pathlib import Path

from app.core.llama import ggml_libs

logger = logging.getLogger(__name__)
PASSED_OVER: list[str] = []  # backends this process found and could not start, by name
_NAMES = {"cuda": "CUDA", "vulkan": "Vulkan", "metal": "Metal", "hip": "HIP", "sycl": "SYCL",
          "opencl": "OpenCL", "musa": "MUSA", "cann": "CANN"}  # as ggml names them

_BACKEND_FILE = re.compile(r"^(?:lib)?ggml-([a-z0-9]+)\.(?:so|dll|dylib)$")
# ggml's own libraries that hold no GPU backend: its core, the CPU backend (whose
# per-level variants, ggml-cpu-haswell..., app/core/llama/cpu_backends.py loads), and the
# backends that compute on the CPU or over the network.
_NOT_GPU = {"base", "cpu", "blas", "zendnn", "rpc"}


def backend_files(lib_dir: Path) -> list[tuple[str, Path]]:
    """The GPU backend libraries in ``lib_dir``, by backend name ("vulkan", "cuda")."""
    found = []
    for path in sorted(lib_dir.glob("*ggml-*")):
        match = _BACKEND_FILE.match(path.name)
        if match and match.group(1) not in _NOT_GPU and path.is_file():
            found.append((match.group(1), path))
    return found


def install(lib_dir: Path) -> list[str]:
    """Register every GPU backend library in ``lib_dir`` with the libggml beside it; the
    names of those that loaded. Never raises: a backend that fails is logged."""
    backends = backend_files(lib_dir)
    if not backends:
        return []
    ggml = ggml_libs.libggml(lib_dir)
    if ggml is None:
        logger.warning("no libggml to load %s with in %s", [n for n, _ in backends], lib_dir)
        return []
    load = ggml.ggml_backend_load
    load.argtypes = [ctypes.c_char_p]
    load.restype = ctypes.c_void_p
    loaded = []
    for name, path in backends:
        with ggml_libs.captured_log(ggml, lib_dir) as said:
            registered = load(str(path).encode(sys.getfilesystemencoding()))
        if registered:
            logger.info("GPU backend %s loaded from %s", name, path)
            loaded.append(name)
        else:
            reason = " ".join(line.strip() for line in said if line.strip())
            logger.info("GPU backend %s not loaded: %s", path.name,
                        reason or "its driver or device is missing")
            PASSED_OVER.append(_NAMES.get(name, name))
    return loaded
