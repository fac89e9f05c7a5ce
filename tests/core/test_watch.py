"""The watcher: model files that come, go or are still being written."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from app.core.models import catalog
from app.core.models.watch import Watcher
from tests.gguf_files import write_gguf
from tests.stores import link, ollama_model

WAIT_S = 60  # generous: the machine may be busy; the waits end as soon as the event comes


class Changes:
    """Counts the watcher's reports; waits for the next one."""

    def __init__(self) -> None:
        self.count = 0
        self._event = threading.Event()

    def __call__(self) -> None:
        self.count += 1
        self._event.set()

    def wait(self) -> None:
        assert self._event.wait(WAIT_S), "the watcher reported no change"
        self._event.clear()


@pytest.fixture
def watching() -> Iterator[tuple[Watcher, Changes]]:
    changes = Changes()
    watcher = Watcher(lambda: catalog.watch_list([]), changes, interval=0.05)
    watcher.start()
    changes.wait()  # the first settled state
    yield watcher, changes
    watcher.stop()
    assert not watcher.running


def names() -> list[str]:
    return [e.name for e in catalog.scan([], catalog.app_stores()) if e.usable]


def wait_polls(watcher: Watcher, count: int) -> None:
    """Until the watcher has looked at the files `count` more times."""
    target, deadline = watcher.polls + count, time.monotonic() + WAIT_S
    while watcher.polls < target:
        assert time.monotonic() < deadline, "the watcher stopped polling"
        time.sleep(0.01)


def test_models_added_and_removed_are_reported(
        watching: tuple[Watcher, Changes], smollm2_path: Path, gemma_path: Path) -> None:
    _, changes = watching
    home = Path.home()
    smol = link(smollm2_path, home / ".lmstudio/models/pub/smol/smol.gguf")
    changes.wait()
    assert names() == ["smol"]
    manifest = ollama_model(home / ".ollama/models", "gemma3:270m", gemma_path)
    changes.wait()
    assert names() == ["gemma3:270m", "smol"]
    smol.unlink()
    changes.wait()
    manifest.unlink()  # `ollama rm` removes the manifest first
    changes.wait()
    assert names() == []


def test_a_download_in_progress_is_not_offered(
        watching: tuple[Watcher, Changes], tmp_path: Path) -> None:
    watcher, changes = watching
    weights = {"token_embd.weight": np.ones((256, 1024), dtype=np.float32)}  # 1 MB
    whole = write_gguf(tmp_path / "whole.gguf", metadata={"general.name": "Fresh"},
                       tensors=weights).read_bytes()
    target = Path.home() / ".local/share/nomic.ai/GPT4All/fresh.gguf"
    target.parent.mkdir(parents=True)
    chunk = len(whole) // 4
    with target.open("wb") as out:
        for start in range(0, len(whole) - chunk, chunk):
            out.write(whole[start:start + chunk])
            out.flush()
            wait_polls(watcher, 3)
            assert names() == []  # listed, at most, as unusable: its weights are not all there
        out.write(whole[out.tell():])
    changes.wait()
    assert names() == ["Fresh"]
    [entry] = catalog.scan([], catalog.app_stores())
    assert entry.size_bytes == len(whole)


def test_partial_names_are_not_watched_or_offered(
        watching: tuple[Watcher, Changes], smollm2_path: Path) -> None:
    watcher, changes = watching
    folder = Path.home() / "jan/models/smol"
    link(smollm2_path, folder / "model.gguf.part")
    link(smollm2_path, folder / "incomplete-model.gguf")
    wait_polls(watcher, 3)
    assert changes.count == 1 and names() == []
    (folder / "model.gguf.part").rename(folder / "model.gguf")
    changes.wait()
    assert names() == ["model"]
