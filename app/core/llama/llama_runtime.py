"""Process-wide adjustments to llama-cpp-python, applied once on import.

- llama.cpp's log goes to Python ``logging`` (logger ``fireside.llama``), never to the
  process's stdout/stderr, so the terminal's JSON output stays clean.
- ``verbose=False`` would redirect file descriptors 1 and 2 with ``dup2`` while a model
  loads, which is not thread-safe; we neutralise that redirection instead, so loads
  are quiet without touching the process's descriptors.
- The ``Llama`` constructor has no load-progress parameter; :func:`load_progress`
  injects llama.cpp's progress callback (returning False cancels the load), and at its
  first report asks for the model's buffers in 2 MB pages (``huge_pages``).
- A llama.cpp built with AMX kernels (not by Fireside: see packaging/llama_build.py)
  crashes on Intel CPUs with AMX. Loads then keep weights out of its AMX buffer type
  (``use_extra_bufts=False``), the only way into those kernels.
- :func:`release_freed_memory` hands a closed model's memory back to the system.
- The ``Llama`` constructor compiles each chat template in the model file for chat
  handlers Fireside never uses (it renders prompts itself, in a sandbox): a template
  that does not compile there no longer makes the model impossible to load.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator

import jinja2
import llama_cpp
import llama_cpp._internals as llama_internals
import llama_cpp.llama as llama_module
import llama_cpp.llama_cpp as llama_c
from llama_cpp import llama_chat_format

from app.core.llama import huge_pages

logger = logging.getLogger("fireside.llama")

# ggml_log_level (NONE, DEBUG, INFO, WARN, ERROR) -> logging level; 5 (CONT) continues the
# previous line. llama-cpp-python's own table predates ggml's current numbering.
_LEVELS = {0: logging.INFO, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING,
           4: logging.ERROR}


class _LogRouter:
    """Reassembles llama.cpp's partial log chunks into lines for ``logging``."""

    def __init__(self) -> None:
        self._level = logging.INFO
        self._partial = ""
        self._lock = threading.Lock()
        # The last error lines, so a failed load can say *why* llama.cpp refused it.
        self.recent_errors: deque[str] = deque(maxlen=8)

    def __call__(self, level: int, text: bytes | None, _user_data: object) -> None:
        chunk = (text or b"").decode("utf-8", "replace")
        with self._lock:
            if level != 5:
                self._level = _LEVELS.get(level, logging.DEBUG)
            self._partial += chunk
            if "\n" not in self._partial:
                return
            *lines, self._partial = self._partial.split("\n")
            for line in lines:
                if line.strip():
                    if self._level >= logging.ERROR:
                        self.recent_errors.append(line.strip())
                    logger.log(self._level, "%s", line.rstrip())


router = _LogRouter()
# ctypes must keep the callback object alive for as long as llama.cpp may call it.
_log_callback = llama_cpp.llama_log_callback(router)
llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


@contextlib.contextmanager
def _no_redirect(disable: bool = True) -> Iterator[None]:
    yield


llama_module.suppress_stdout_stderr = _no_redirect  # type: ignore[attr-defined,assignment]
llama_internals.suppress_stdout_stderr = _no_redirect  # type: ignore[attr-defined,assignment]

# llama.py calls the function through the llama_cpp.llama_cpp module: patch it there.
_default_model_params = llama_c.llama_model_default_params
_params_lock = threading.Lock()

# Compile-time features of the CPU backend llama.cpp uses (the variant picked for this
# CPU, in a portable build).
HAS_AMX_KERNELS = b"AMX_INT8 = 1" in llama_cpp.llama_print_system_info()


@contextlib.contextmanager
def load_progress(on_progress: Callable[[float], bool]) -> Iterator[None]:
    """While active, models loaded on this thread report progress to ``on_progress``.

    ``on_progress(fraction)`` returns False to cancel the load.
    """

    before = huge_pages.anonymous_regions()
    reported = False

    def report(progress: float, _user_data: object) -> bool:
        nonlocal reported
        try:
            if not reported:  # every buffer allocated, no weight read yet
                reported = True
                huge_pages.advise(huge_pages.anonymous_regions() - before)
            return bool(on_progress(max(0.0, min(1.0, progress))))
        except Exception:  # an exception must not cross into C
            logger.exception("load progress callback failed")
            return False

    callback = llama_cpp.llama_progress_callback(report)

    def params_with_progress() -> llama_cpp.llama_model_params:
        params: llama_cpp.llama_model_params = _default_model_params()
        params.progress_callback = callback
        if HAS_AMX_KERNELS:
            params.use_extra_bufts = False
        return params

    with _params_lock:
        llama_c.llama_model_default_params = params_with_progress
        try:
            yield
        finally:
            llama_c.llama_model_default_params = _default_model_params


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None)
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


_libc = _glibc()
if _libc is not None:
    # glibc raises the size from which blocks get mappings of their own each time such a
    # block is freed, so after a few loads a model's buffers land in the heap and stay
    # resident once it is closed. Fixed, every block over 4 MB is returned when freed.
    _libc.mallopt(-3, 1 << 22)  # M_MMAP_THRESHOLD


def release_freed_memory() -> None:
    """Return the heap's free pages to the system after a model is closed.

    A vocabulary is hundreds of thousands of small blocks (Gemma 3: 262k tokens); glibc
    keeps their freed pages in the heap, so without this the process stays about as
    large as the largest model it ever loaded. Measured by switching between the two
    bundled models eight times: 87 MB more than after the first load without this and
    the fixed threshold above, at most 2 MB with them (and the same decode speed).
    """
    if _libc is not None:
        _libc.malloc_trim(0)


class _UnusedChatFormatter(llama_chat_format.Jinja2ChatFormatter):
    def __init__(self, template: str, *args: object, **kwargs: object) -> None:
        try:
            super().__init__(template, *args, **kwargs)  # type: ignore[arg-type]
        except jinja2.TemplateError:  # the engine says what is wrong with it
            super().__init__("", *args, **kwargs)  # type: ignore[arg-type]


llama_chat_format.Jinja2ChatFormatter = _UnusedChatFormatter  # type: ignore[misc]
