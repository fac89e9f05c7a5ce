"""Shared fixtures: isolated data folders and the two real bundled models."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.core import bundled


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path_factory: pytest.TempPathFactory,
                  monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own data and config folders and no stray model folders."""
    root = tmp_path_factory.mktemp("fireside-home")
    monkeypatch.setenv("FIRESIDE_DATA_DIR", str(root / "data"))
    monkeypatch.setenv("FIRESIDE_CONFIG_DIR", str(root / "config"))
    monkeypatch.delenv("FIRESIDE_MODELS_DIR", raising=False)
    return root


def _bundled(name: str) -> Path:
    path = bundled.bundled_dir() / name
    if not path.is_file():
        pytest.fail(f"bundled model {name} is missing; run `make setup`")
    return path


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct: Llama architecture, ChatML template."""
    return _bundled(bundled.DEFAULT_MODEL_FILE)


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    """Gemma 3 270M: sliding-window attention, no chat template in the file."""
    return _bundled(bundled.GEMMA_FILE)
