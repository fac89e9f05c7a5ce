"""The devices llama.cpp can run a model on, read through ggml's own device API.

Not by asking vendor tools (nvidia-smi, system_profiler): what counts is what this
llama.cpp build sees, with the free memory its backend reports (on Apple Silicon,
Metal's recommended working set). llama-cpp-python binds none of these functions,
so they are declared here with ctypes on its libggml.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any

from app.core.llama import gpu_backends

# ggml_backend_dev_type, in ggml-backend.h's order.
KINDS = ("cpu", "gpu", "igpu", "accel", "meta")
OFFLOAD_KINDS = ("gpu", "igpu")  # the devices n_gpu_layers puts layers on
CPU_BACKENDS = ("CPU", "BLAS", "RPC", "ZenDNN")  # backends that are no GPU


@dataclass(frozen=True)
class Device:
    name: str  # ggml's name: "CUDA0", "Vulkan0", "MTL0", "CPU"
    description: str  # what the user knows it as: "NVIDIA H200", the CPU's model
    backend: str  # "CUDA", "Vulkan", "MTL" (Metal), "CPU"
    kind: str  # one of KINDS
    free: int  # bytes
    total: int

    @property
    def offloads(self) -> bool:
        return self.kind in OFFLOAD_KINDS

    @property
    def unified(self) -> bool:
        """Its memory is the system's RAM (Apple Silicon, integrated GPUs)."""
        return self.kind == "igpu" or self.backend in ("MTL", "Metal")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "backend": self.backend,
                "kind": self.kind, "free_bytes": self.free, "total_bytes": self.total}


def offload_targets(devices: list[Device]) -> list[Device]:
    """The devices llama.cpp spreads offloaded layers over: its discrete GPUs, or its
    integrated ones only when there is no discrete one (as llama.cpp picks them)."""
    gpus = [d for d in devices if d.kind == "gpu"]
    return gpus or [d for d in devices if d.kind == "igpu"]


@functools.cache
def _ggml() -> ctypes.CDLL:
    from llama_cpp import _ggml as ggml_lib  # noqa: PLC0415 - llama.cpp only when asked

    lib: ctypes.CDLL = ggml_lib.libggml
    void_p, char_p, size_t = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    for name, args, result in (
            ("ggml_backend_dev_count", [], size_t),
            ("ggml_backend_dev_get", [size_t], void_p),
            ("ggml_backend_dev_name", [void_p], char_p),
            ("ggml_backend_dev_description", [void_p], char_p),
            ("ggml_backend_dev_type", [void_p], ctypes.c_int),
            ("ggml_backend_dev_memory", [void_p, ctypes.POINTER(size_t),
                                         ctypes.POINTER(size_t)], None),
            ("ggml_backend_dev_backend_reg", [void_p], void_p),
            ("ggml_backend_reg_count", [], size_t),
            ("ggml_backend_reg_get", [size_t], void_p),
            ("ggml_backend_reg_name", [void_p], char_p)):
        function = getattr(lib, name)
        function.argtypes, function.restype = args, result
    return lib


def _text(raw: bytes | None) -> str:
    return (raw or b"").decode("utf-8", "replace").strip()


def list_devices() -> list[Device]:
    """Every device the loaded llama.cpp has registered, the CPU included."""
    lib = _ggml()
    found = []
    for index in range(lib.ggml_backend_dev_count()):
        device = lib.ggml_backend_dev_get(index)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
        kind = lib.ggml_backend_dev_type(device)
        found.append(Device(
            name=_text(lib.ggml_backend_dev_name(device)),
            description=_text(lib.ggml_backend_dev_description(device)),
            backend=_text(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(device))),
            kind=KINDS[kind] if 0 <= kind < len(KINDS) else "other",
            free=free.value, total=total.value))
    return found


@dataclass(frozen=True)
class Hardware:
    devices: list[Device]
    unavailable: str | None  # why no layer can go to a GPU (gpu_support), or None


def survey() -> Hardware:
    """The devices now, with their free memory, and whether offload works."""
    found = list_devices()
    return Hardware(found, gpu_support(found))


def backends() -> list[str]:
    """The backends registered in the loaded llama.cpp: "CPU", "CUDA", "Vulkan"..."""
    lib = _ggml()
    return [_text(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)))
            for i in range(lib.ggml_backend_reg_count())]


def gpu_support(found: list[Device] | None = None) -> str | None:
    """None when this llama.cpp can put layers on a device (of ``found``, default: those
    it lists now); else why not, in words."""
    if offload_targets(list_devices() if found is None else found):
        return None
    gpu_code = [name for name in backends() if name not in CPU_BACKENDS]
    if gpu_code:
        return (f"llama.cpp's {' and '.join(gpu_code)} code found no GPU it can use "
                "(is the driver installed?)")
    if gpu_backends.PASSED_OVER:
        return (f"llama.cpp's {' and '.join(gpu_backends.PASSED_OVER)} code could not start "
                "here (no driver for it?)")
    return ("this llama.cpp was built for the CPU only (no CUDA, Metal or Vulkan); "
            "README → GPUs says how to build it for one")
