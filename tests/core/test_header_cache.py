"""The persistent header cache: same headers as the file, kept across processes, refreshed
when a file changes, and never in the way when its own file is damaged or unwritable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core import paths
from app.core.models import catalog, header_cache
from app.core.models.gguf import GGUFError, clear_cache, read_header
from tests.gguf_files import write_gguf

ROOT = Path(__file__).resolve().parents[2]

LIST = """
import json, sys
from pathlib import Path
from app.core.models import catalog
entries = catalog.scan([(Path(sys.argv[1]), catalog.MODELS_FOLDER)])
print(json.dumps([[e.path.name, e.name, e.error] for e in entries]))
"""


def list_in_new_process(folder: Path) -> list[list[str | None]]:
    out = subprocess.run([sys.executable, "-c", LIST, str(folder)], capture_output=True,
                         text=True, check=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout
    listed: list[list[str | None]] = json.loads(out.strip().splitlines()[-1])
    return listed


def rewrite_keeping_stamp(path: Path, old: bytes, new: bytes) -> None:
    """Change bytes in place, then put size and mtime back: invisible to the cache key."""
    info = path.stat()
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    with path.open("r+b") as file:
        file.write(data.replace(old, new))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def test_cached_headers_equal_the_file_and_the_demo_models(
    smollm2_path: Path, gemma_path: Path, tmp_path: Path
) -> None:
    small = write_gguf(tmp_path / "m.gguf", metadata={"general.name": "Small"}, vocab_size=300)
    for path in (smollm2_path, gemma_path, small):
        first = header_cache.cached_header(path)  # read from the file, then stored
        clear_cache()
        assert first == read_header(path)
        assert header_cache.cached_header(path) == first  # now from the cache


def test_a_new_process_lists_from_the_cache_and_rereads_changed_files(tmp_path: Path) -> None:
    folder = tmp_path / "models"
    for name in ("alpha", "beta"):
        write_gguf(folder / f"{name}.gguf", metadata={"general.name": f"Model {name}"})
    assert [e[1] for e in list_in_new_process(folder)] == ["Model alpha", "Model beta"]

    # Same size, same mtime: a new process trusts the cache and does not read the file.
    rewrite_keeping_stamp(folder / "alpha.gguf", b"Model alpha", b"Model gamma")
    assert [e[1] for e in list_in_new_process(folder)] == ["Model alpha", "Model beta"]

    # Touched: read again.
    os.utime(folder / "alpha.gguf")
    assert [e[1] for e in list_in_new_process(folder)] == ["Model beta", "Model gamma"]

    # Replaced by another file, even of the same size: read again.
    write_gguf(tmp_path / "new.gguf", metadata={"general.name": "Model delta"})
    os.replace(tmp_path / "new.gguf", folder / "beta.gguf")
    assert [e[1] for e in list_in_new_process(folder)] == ["Model delta", "Model gamma"]


@pytest.mark.parametrize("damage", [b"", b"not a database at all" * 100,
                                    b"SQLite format 3\x00" + b"\xff" * 4000])
def test_a_damaged_cache_file_is_rebuilt(tmp_path: Path, damage: bytes) -> None:
    folder = tmp_path / "models"
    write_gguf(folder / "m.gguf", metadata={"general.name": "Kept"})
    assert [e[1] for e in list_in_new_process(folder)] == ["Kept"]
    cache = paths.cache_dir() / header_cache.FILE_NAME
    cache.write_bytes(damage)
    assert list_in_new_process(folder) == [["m.gguf", "Kept", None]]
    # ... and in this process too, whose connection may predate the damage.
    assert catalog.scan([(folder, catalog.MODELS_FOLDER)])[0].name == "Kept"
    cache.write_bytes(damage)
    assert catalog.scan([(folder, catalog.MODELS_FOLDER)])[0].name == "Kept"
    rewrite_keeping_stamp(folder / "m.gguf", b"Kept", b"Gone")
    # The rebuilt cache holds the header again: an invisible change is not seen.
    assert list_in_new_process(folder)[0][1] == "Kept"


def test_no_cache_folder_means_no_cache_not_a_failure(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("the cache folder cannot be created here")
    monkeypatch.setenv("FIRESIDE_CACHE_DIR", str(blocker / "cache"))
    folder = tmp_path / "models"
    write_gguf(folder / "m.gguf", metadata={"general.name": "Uncached"})
    assert catalog.scan([(folder, catalog.MODELS_FOLDER)])[0].name == "Uncached"
    assert list_in_new_process(folder)[0][1] == "Uncached"


def test_unusable_files_still_say_why(tmp_path: Path) -> None:
    (tmp_path / "empty.gguf").touch()
    with pytest.raises(GGUFError, match="empty file"):
        header_cache.cached_header(tmp_path / "empty.gguf")
    with pytest.raises(GGUFError, match="file not found"):
        header_cache.cached_header(tmp_path / "missing.gguf")
