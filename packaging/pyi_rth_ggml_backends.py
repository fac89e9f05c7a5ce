"""PyInstaller runtime hook: show llama.cpp the CPU backends inside the bundle.

The portable build ships one ggml CPU backend per x86-64 feature level in
llama_cpp/lib, and ggml loads the best one the CPU supports. It looks for them only
beside the executable and in the working directory, so register them from the
bundle before llama.cpp starts: when llama_cpp is first imported, so the window's
start does not pay for it. The file loaded is the one libllama links to, so llama.cpp
sees the same registry.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import sys
from pathlib import Path


def _register_ggml_backends() -> None:
    lib_dir = Path(getattr(sys, "_MEIPASS", "")) / "llama_cpp" / "lib"
    names = {"win32": ("ggml.dll",), "darwin": ("libggml.0.dylib", "libggml.dylib")}
    for name in names.get(sys.platform, ("libggml.so.0", "libggml.so")):
        if (lib_dir / name).is_file():
            ggml = ctypes.CDLL(str(lib_dir / name))
            break
    else:
        return  # a build with the CPU backend linked in needs nothing
    load_all = getattr(ggml, "ggml_backend_load_all_from_path", None)
    if load_all is None:
        return
    load_all.argtypes = [ctypes.c_char_p]
    load_all.restype = None
    # ggml would announce the backend it picked on stderr before the app has routed
    # llama.cpp's log to its own: keep it quiet meanwhile.
    callback_type = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
    quiet = callback_type(lambda _level, _text, _data: None)
    ggml.ggml_log_set.argtypes = [callback_type, ctypes.c_void_p]
    ggml.ggml_log_set(quiet, None)
    try:
        load_all(str(lib_dir).encode("utf-8"))
    finally:
        ggml.ggml_log_set(callback_type(), None)  # back to ggml's default logger


class _BeforeLlamaCpp(importlib.abc.MetaPathFinder):
    """Finds nothing itself: the usual finders import llama_cpp right after."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "llama_cpp":
            sys.meta_path.remove(self)
            _register_ggml_backends()


sys.meta_path.insert(0, _BeforeLlamaCpp())
