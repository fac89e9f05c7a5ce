"""packaging/llama_build.py as a module, for the tests and benchmarks that build or
check llama.cpp (packaging/ is not a package, and its name is taken by PyPI's)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "packaging" / "llama_build.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("llama_build", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
