"""Shared fixtures: isolated data folders and the two real bundled models."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.core.models import bundled, embedding_model, sources
from tests.loopback_hub import LoopbackHub

if TYPE_CHECKING:
    from tests.reference import Reference


# The fixtures that hand a test a bundled model (or llama.cpp's own answers on one, or a
# real window that loads one): whatever needs one of them, directly or through other
# fixtures, needs the model files.
MODEL_FIXTURES = frozenset({"smollm2_path", "gemma_path", "thinking_model_path", "reference",
                            "open_window", "minilm_path"})
# Tests under these markers run llama.cpp on the bundled models by definition.
MODEL_MARKERS = ("native", "gpu")


def needs_model(item: pytest.Item) -> bool:
    """Whether ``item`` reads the bundled models: by its fixtures, by a parameter that
    names one of them for ``request.getfixturevalue``, by its markers, or by hand
    (``@pytest.mark.model``, for a test that finds the models another way)."""
    if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None and any(isinstance(value, str) and value in MODEL_FIXTURES
                                    for value in callspec.params.values()):
        return True
    return any(item.get_closest_marker(name) is not None for name in MODEL_MARKERS)


@pytest.hookimpl(tryfirst=True)  # marked before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks ``model`` on every test that needs the bundled models, so that
    ``-m "not model"`` (make check) runs the rest without them; llama.cpp's own check
    runs first (tests/core/test_native_check.py)."""
    for item in items:
        if item.get_closest_marker("model") is None and needs_model(item):
            item.add_marker(pytest.mark.model)
    items.sort(key=lambda item: item.get_closest_marker("native") is None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and item.get_closest_marker("native") is not None:
        # Every test that runs a model would crash the suite: stop with the reason.
        item.session.shouldstop = ("llama.cpp's compiled code failed its check on this "
                                   f"CPU ({item.name}); see its failure above")
    return report


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path_factory: pytest.TempPathFactory,
                  monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own data and config folders and no stray model folders."""
    root = tmp_path_factory.mktemp("fireside-home")
    monkeypatch.setenv("FIRESIDE_DATA_DIR", str(root / "data"))
    monkeypatch.setenv("FIRESIDE_CONFIG_DIR", str(root / "config"))
    monkeypatch.setenv("FIRESIDE_CACHE_DIR", str(root / "cache"))
    monkeypatch.delenv("FIRESIDE_MODELS_DIR", raising=False)
    # Other apps' model stores (LM Studio, Ollama, Hugging Face, Jan, GPT4All) are
    # found from these: a test sees only the ones it builds under this home.
    home = root / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USERPROFILE", str(home))
    for name, relative in (("XDG_DATA_HOME", ".local/share"), ("XDG_CONFIG_HOME", ".config"),
                           ("XDG_CACHE_HOME", ".cache"), ("LOCALAPPDATA", "AppData/Local"),
                           ("APPDATA", "AppData/Roaming")):
        monkeypatch.setenv(name, str(home / relative))
    for name in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sources, "OLLAMA_SERVICE", home / "usr-share-ollama")
    return root


def _bundled(name: str) -> Path:
    path = bundled.bundled_dir() / name
    if not path.is_file():
        pytest.fail(f"bundled model {name} is missing; run `make setup`")
    return path


@pytest.fixture(scope="session")
def reference() -> Reference:
    """What raw llama-cpp-python answers here: compare a model's words with this."""
    from tests.reference import Reference  # loads llama.cpp: only for tests that ask

    return Reference()


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct: Llama architecture, ChatML template."""
    return _bundled(bundled.DEFAULT_MODEL_FILE)


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """all-MiniLM-L6-v2, the bundled embedding model, converted to GGUF at set-up."""
    path = embedding_model.default_embedding_model_path()
    if path is None:
        pytest.fail("the bundled embedding model is missing; run `make setup`")
    return path


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    """Gemma 3 270M: sliding-window attention, no chat template in the file."""
    return _bundled(bundled.GEMMA_FILE)


THINKING_TEMPLATE = Path(__file__).parent / "fixtures" / "templates" / "qwq.jinja"


@pytest.fixture(scope="session")
def thinking_model_path(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A thinking model: SmolLM2 with QwQ's real chat template in its file, whose
    generation prompt opens a thought (``<think>``), so every reply starts thinking."""
    from tests.gguf_files import copy_with_metadata

    folder = tmp_path_factory.mktemp("thinking-model")
    return copy_with_metadata(smollm2_path, folder / "SmolLM2-Thinking-135M.gguf",
                              {"tokenizer.chat_template": THINKING_TEMPLATE.read_text(),
                               "general.name": "SmolLM2 Thinking 135M"})


@pytest.fixture
def hub_server() -> Iterator[LoopbackHub]:
    """A Hugging Face Hub on loopback (tests/loopback_hub.py), empty: a test adds repos."""
    server = LoopbackHub()
    try:
        yield server
    finally:
        server.close()
