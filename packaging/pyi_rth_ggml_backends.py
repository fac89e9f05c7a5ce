"""PyInstaller runtime hook: show llama.cpp the backends inside the bundle.

The portable build ships one ggml CPU backend per x86-64 feature level in
llama_cpp/lib, and may ship a GPU backend (Vulkan) beside them. They are registered
from the bundle before llama.cpp starts: when llama_cpp is first imported, so the
window's start does not pay for it. Which CPU level is registered is checked first,
once per CPU, by decoding a batch in a child process, so a level whose kernels crash
here is passed over (app/core/llama/cpu_backends.py); a GPU backend whose driver is missing
is passed over too (app/core/llama/gpu_backends.py).
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from pathlib import Path

from app.core.llama import cpu_backends, gpu_backends
from app.core.models import bundled


class _BeforeLlamaCpp(importlib.abc.MetaPathFinder):
    """Finds nothing itself: the usual finders import llama_cpp right after."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "llama_cpp":
            sys.meta_path.remove(self)
            lib_dir = Path(getattr(sys, "_MEIPASS", "")) / "llama_cpp" / "lib"
            cpu_backends.install(lib_dir, bundled.default_model_path())
            # The CPU check's child tests a CPU level alone: a GPU driver's trouble there
            # would be taken for that level's.
            if not os.environ.get(cpu_backends.VARIANT_ENV):
                gpu_backends.install(lib_dir)


sys.meta_path.insert(0, _BeforeLlamaCpp())
