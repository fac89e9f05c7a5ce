"""Where Fireside keeps its files.

Every location comes from here so that tests and scripts can isolate a run with
FIRESIDE_DATA_DIR / FIRESIDE_CONFIG_DIR / FIRESIDE_CACHE_DIR.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import platformdirs

APP_NAME = "Fireside"
T = TypeVar("T")


def _dir(env_var: str, default: str) -> Path:
    value = os.environ.get(env_var)
    path = Path(value).expanduser() if value else Path(default)
    path.mkdir(parents=True, exist_ok=True)
    return path


def data_dir() -> Path:
    """Conversations, the user's own models folder, caches."""
    return _dir("FIRESIDE_DATA_DIR", platformdirs.user_data_dir(APP_NAME, appauthor=False))


def config_dir() -> Path:
    """settings.json."""
    return _dir("FIRESIDE_CONFIG_DIR", platformdirs.user_config_dir(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    """Things Fireside can rebuild at any time (model metadata read from headers)."""
    return _dir("FIRESIDE_CACHE_DIR", platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def models_dir() -> Path:
    """The folder Fireside tells users to put GGUF files in."""
    path = data_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def database_path() -> Path:
    return data_dir() / "conversations.sqlite3"


def settings_path() -> Path:
    return config_dir() / "settings.json"


def env_models_dirs() -> list[Path]:
    """Extra model folders from FIRESIDE_MODELS_DIR (an os.pathsep-separated list)."""
    value = os.environ.get("FIRESIDE_MODELS_DIR", "")
    return [Path(p).expanduser() for p in value.split(os.pathsep) if p.strip()]


def replace_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a file beside it, renamed over it."""
    temporary = path.with_name(f"{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def set_aside(path: Path, kept_name: Callable[[str], str], companions: Sequence[str] = ()
              ) -> Path:
    """Rename a damaged file to ``kept_name(stamp)`` (a time, made unique so that an
    earlier damaged copy is never overwritten), with its companion files (the same name
    plus each ending). Never deletes. Raises OSError."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    kept = path.with_name(kept_name(stamp))
    n = 1
    while kept.exists():
        n += 1
        kept = path.with_name(kept_name(f"{stamp}-{n}"))
    path.rename(kept)
    for ending in companions:
        companion = path.with_name(path.name + ending)
        if companion.exists():
            companion.rename(kept.with_name(kept.name + ending))
    return kept


def distinct_places(items: Iterable[T], folder: Callable[[T], Path]) -> list[T]:
    """``items`` without those whose folder is the same place as an earlier one's (links
    and letter case resolved as the system does); one that cannot be resolved is left out."""
    seen: set[str] = set()
    kept: list[T] = []
    for item in items:
        try:
            key = os.path.normcase(os.path.realpath(folder(item)))
        except (OSError, ValueError):
            continue
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return kept
