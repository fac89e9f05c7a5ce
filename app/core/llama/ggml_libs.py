"""ggml's own libraries in a folder of llama.cpp's, opened with ctypes: the libggml that
libllama links to (so what is registered there is what llama.cpp sees) and its log.
"""

from __future__ import annotations

import ctypes
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

logger = logging.getLogger(__name__)

_GGML = {"win32": ("ggml.dll",), "darwin": ("libggml.0.dylib", "libggml.dylib")}
_LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


def libggml(lib_dir: Path) -> ctypes.CDLL | None:
    """The libggml in ``lib_dir`` (the one libllama links to, so that llama.cpp sees
    the backends registered here), if it can load backends."""
    for name in _GGML.get(sys.platform, ("libggml.so.0", "libggml.so")):
        if (lib_dir / name).is_file():
            try:
                ggml = ctypes.CDLL(str(lib_dir / name))
            except OSError:
                logger.warning("could not load %s", lib_dir / name, exc_info=True)
                return None
            return ggml if hasattr(ggml, "ggml_backend_load") else None
    return None


@contextmanager
def captured_log(ggml: ctypes.CDLL, lib_dir: Path) -> Iterator[list[str]]:
    """ggml's messages meanwhile, kept for the log instead of printed on stderr; the
    logger set before (ggml's own, or llama-cpp-python's) is put back after."""
    said: list[str] = []
    base = _log_functions(ggml, lib_dir)
    if base is None:
        yield said
        return
    previous, data = ctypes.c_void_p(), ctypes.c_void_p()
    base.ggml_log_get(ctypes.byref(previous), ctypes.byref(data))
    keep = _LOG_CALLBACK(lambda _level, text, _data: said.append(
        (text or b"").decode("utf-8", "replace")))
    base.ggml_log_set(ctypes.cast(keep, ctypes.c_void_p), None)
    try:
        yield said
    finally:
        base.ggml_log_set(previous, data)


def _log_functions(ggml: ctypes.CDLL, lib_dir: Path) -> ctypes.CDLL | None:
    """The library whose ggml_log_get/ggml_log_set to call: libggml finds them in
    ggml-base on Linux and macOS; on Windows only ggml-base.dll itself exports them."""
    candidates = [ggml]
    for path in sorted(lib_dir.glob("*ggml-base.dll")):
        with suppress(OSError):  # then ggml prints what it has to say itself
            candidates.append(ctypes.CDLL(str(path)))
    for library in candidates:
        if hasattr(library, "ggml_log_get") and hasattr(library, "ggml_log_set"):
            library.ggml_log_get.argtypes = [ctypes.POINTER(ctypes.c_void_p)] * 2
            library.ggml_log_get.restype = None
            library.ggml_log_set.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            library.ggml_log_set.restype = None
            return library
    return None
