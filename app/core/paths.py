"""Where Fireside keeps its files.

Every location comes from here so that tests and scripts can isolate a run with
FIRESIDE_DATA_DIR / FIRESIDE_CONFIG_DIR / FIRESIDE_CACHE_DIR.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "Fireside"


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
