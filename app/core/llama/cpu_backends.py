"""Which of llama.cpp's CPU backends a portable build loads: checked before it is used.

The bundle's llama.cpp carries its CPU backend once per CPU level
(``libggml-cpu-haswell.so``, ``-zen4``, ...), and ggml would load the best one this
CPU supports. If that one crashes here (as llama.cpp's AMX kernels did on Sapphire
Rapids), the app would die at its first reply with no word of why. So, once per set
of backends and CPU, each level is tried from the best down in a child process
(:mod:`app.core.llama.native_check`) and the first that decodes a batch is loaded. The
choice is kept in the cache folder; when a better level was passed over, :func:`notice`
says so and the faces tell the user.

Only a build with CPU variants (``GGML_BACKEND_DL``) has anything to choose; a build
with its CPU backend linked in, like ``make setup``'s, is checked by the test suite.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.core import paths
from app.core.llama import ggml_libs, native_check

logger = logging.getLogger(__name__)

RECORD_FILE = "cpu-backend.json"
VARIANT_ENV = native_check.VARIANT_ENV
_VARIANT_NAME = re.compile(r"^(?:lib)?ggml-cpu-([\w.]+)\.(?:so|dll|dylib)$")

Check = Callable[[Path, dict[str, str]], native_check.NativeCheck]
_checked_now: Choice | None = None  # the choice this process made by checking


@dataclass(frozen=True)
class Variant:
    path: Path
    score: int  # ggml's own ranking for this CPU; 0 means it cannot run here

    @property
    def name(self) -> str:
        match = _VARIANT_NAME.match(self.path.name)
        return match.group(1) if match else self.path.name


@dataclass(frozen=True)
class Choice:
    variant: str  # the variant loaded
    passed_over: list[dict[str, str]] = field(default_factory=list)  # {variant, ending}

    def notice(self) -> str | None:
        if not self.passed_over:
            return None
        skipped = ", ".join(f"{p['variant']} ({p['ending']})" for p in self.passed_over)
        return (f"llama.cpp's code for faster processors crashed on this CPU when Fireside "
                f"tested it: {skipped}. Fireside uses its {self.variant} code instead, "
                f"so replies may be a little slower.")


def variant_files(lib_dir: Path) -> list[Path]:
    return sorted(p for p in lib_dir.glob("*ggml-cpu-*") if _VARIANT_NAME.match(p.name))


def _score(path: Path) -> int:
    # ggml_backend_score is built without the variant's instruction sets, so that any
    # CPU can ask it; ggml itself loads variants the same way to pick one.
    try:
        # The variants find libggml-base only once it is loaded: they carry no RPATH.
        for base in sorted(path.parent.glob("*ggml-base.*")):
            ctypes.CDLL(str(base))
            break
        library = ctypes.CDLL(str(path))
        score = library.ggml_backend_score
    except (OSError, AttributeError):
        return 0
    score.restype = ctypes.c_int
    score.argtypes = []
    return int(score())


def ranked(lib_dir: Path, score: Callable[[Path], int] = _score) -> list[Variant]:
    """The variants this CPU can run, best first."""
    found = [Variant(path, score(path)) for path in variant_files(lib_dir)]
    return sorted((v for v in found if v.score > 0), key=lambda v: -v.score)


def _key(variants: list[Variant]) -> str:
    """What the choice depends on: these exact backend files, and this CPU."""
    parts = [f"{v.path.name}:{v.path.stat().st_size}" for v in variants]
    parts.append(native_check.cpu_summary())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _record_path() -> Path:
    return paths.cache_dir() / RECORD_FILE


def _run_check(model: Path, env: dict[str, str]) -> native_check.NativeCheck:
    # In the bundle its runtime hook registers the variant before llama_cpp starts;
    # outside it, this module's own child does (see the end of this file).
    command = None if getattr(sys, "frozen", False) else [
        sys.executable, "-m", "app.core.llama.cpu_backends", native_check.CHILD_FLAG, str(model)]
    return native_check.check(model, command=command, env=env)


def choose(variants: list[Variant], model: Path, check: Check = _run_check) -> Choice | None:
    """The best variant that decodes a batch here, from the record or by trying each.

    None when no variant passed (nothing is recorded then, so the next start tries again).
    """
    if not variants:
        return None
    key = _key(variants)
    names = {v.name for v in variants}
    try:
        saved = json.loads(_record_path().read_text(encoding="utf-8"))
        if saved.get("key") == key and saved.get("variant") in names:
            return Choice(saved["variant"], list(saved.get("passed_over", [])))
    except (OSError, ValueError, AttributeError):
        pass  # no record yet, or an unreadable one: check again
    passed_over: list[dict[str, str]] = []
    for variant in variants:
        result = check(model, {VARIANT_ENV: str(variant.path)})
        if result.ok:
            global _checked_now  # noqa: PLW0603 - one check per process, told once
            _checked_now = Choice(variant.name, passed_over)
            _save({"key": key, "variant": variant.name, "passed_over": passed_over})
            return _checked_now
        logger.warning("CPU backend %s failed its check: %s", variant.name, result.message())
        passed_over.append({"variant": variant.name, "ending": result.ending})
    return None


def _save(record: dict[str, object]) -> None:
    target = _record_path()
    try:
        paths.replace_text(target, json.dumps(record, indent=1))
    except OSError:
        logger.warning("could not keep the CPU backend choice in %s", target, exc_info=True)


def notice() -> str | None:
    """What the user should be told about the CPU backend, once: in the process that
    checked the backends and passed one over."""
    return _checked_now.notice() if _checked_now is not None else None


def install(lib_dir: Path, model: Path | None) -> None:
    """Register llama.cpp's backends from ``lib_dir`` before llama_cpp is imported.

    ggml looks for its backend libraries only beside the executable and in the working
    directory, and llama-cpp-python loads none itself (its issue #2069): a portable
    build in a bundle needs this. The CPU backend is the one :func:`choose` keeps. The
    library loaded is the one libllama links to, so llama.cpp sees the same registry.
    """
    ggml = ggml_libs.libggml(lib_dir)
    if ggml is None:
        return  # a build with the CPU backend linked in needs nothing
    # ggml would announce the backend it picked on stderr before the app has routed
    # llama.cpp's log to its own: keep it quiet meanwhile.
    with ggml_libs.captured_log(ggml, lib_dir):
        if not _register(ggml, lib_dir, model):
            load_all = ggml.ggml_backend_load_all_from_path
            load_all.argtypes = [ctypes.c_char_p]
            load_all.restype = None
            load_all(str(lib_dir).encode(sys.getfilesystemencoding()))


def _register(ggml: ctypes.CDLL, lib_dir: Path, model: Path | None) -> bool:
    """Load the CPU backend to use; False if there is none to choose between (or nothing
    to check it with), leaving the choice to ggml."""
    forced = os.environ.get(VARIANT_ENV)
    if forced:
        return _load(ggml, Path(forced))
    if model is None or not model.is_file():
        return False
    variants = ranked(lib_dir)
    choice = choose(variants, model)
    if choice is None:
        return False
    return _load(ggml, next(v.path for v in variants if v.name == choice.variant))


def _load(ggml: ctypes.CDLL, path: Path) -> bool:
    load = ggml.ggml_backend_load
    load.argtypes = [ctypes.c_char_p]
    load.restype = ctypes.c_void_p
    loaded = load(str(path).encode(sys.getfilesystemencoding()))
    if not loaded:
        logger.warning("ggml did not load %s", path)
    return bool(loaded)


if __name__ == "__main__":
    # The check's child for a portable llama.cpp outside the bundle: nothing else
    # registers the CPU backend being checked before llama_cpp starts.
    if forced_variant := os.environ.get(VARIANT_ENV):
        install(Path(forced_variant).parent, None)
    sys.exit(native_check.child(Path(sys.argv[-1])))
