"""The embedding model documents are searched with, when none is chosen: the bundled
all-MiniLM-L6-v2, converted to GGUF at set-up (``app.core.models.minilm``).

It lives in ``embedding/`` inside the bundled models' folder, out of the chat models'
way. ``python -m app.core.models.embedding_model`` puts it there and prints its path.
"""

from __future__ import annotations

from pathlib import Path

from app.core.models import minilm
from app.core.models.bundled import EMBEDDING_FOLDER, bundled_dir

EMBEDDING_MODEL_FILE = minilm.FILE_NAME


def default_embedding_model_path() -> Path | None:
    """The bundled embedding model, or None if set-up did not install it."""
    path = bundled_dir() / EMBEDDING_FOLDER / EMBEDDING_MODEL_FILE
    return path if path.is_file() else None


def install(dest: Path | None = None) -> Path | None:
    """Convert the model into ``dest`` (default: the bundled one's folder) unless it is
    there already; its path, or None if its package is not installed."""
    return minilm.convert_into(dest or bundled_dir() / EMBEDDING_FOLDER)


if __name__ == "__main__":
    installed = install()
    print(installed or f"not installed: the {minilm.PACKAGE} package is missing")
