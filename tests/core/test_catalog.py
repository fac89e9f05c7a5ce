"""The model catalog: scanning folders, describing files, naming and finding models."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from app.core import paths
from app.core.models import catalog, embedding_model
from app.core.models.bundled import bundled_dir
from app.core.models.catalog import ModelEntry, default_folders, describe, find, scan
from app.core.models.choice import choose_model, start_model
from app.core.models.gguf import read_header
from app.core.settings import Settings
from tests.gguf_files import copy_with_metadata, write_gguf, write_split

JSON_KEYS = {
    "name",
    "path",
    "architecture",
    "size_bytes",
    "context_length",
    "quantization",
    "error",
}


def model(path: Path, name: str = "Tiny", **metadata: str | int) -> Path:
    return write_gguf(
        path, metadata={"general.name": name, "llama.context_length": 1024, **metadata}
    )


def names(entries: list[ModelEntry]) -> list[str]:
    return [e.name for e in entries]


# --- describing one file -------------------------------------------------------------


def test_describe_real_models(smollm2_path: Path, gemma_path: Path) -> None:
    smol = describe(smollm2_path, catalog.BUNDLED)
    gemma = describe(gemma_path, catalog.BUNDLED)
    for entry, path in ((smol, smollm2_path), (gemma, gemma_path)):
        header = read_header(path)
        assert entry.error is None
        assert entry.path == path and entry.shards == (path,)
        assert entry.source == "bundled"
        assert entry.size_bytes == path.stat().st_size
        assert entry.context_length == header.context_length
        assert entry.parameter_count == header.parameter_count
    assert (smol.architecture, smol.quantization, smol.has_chat_template) == ("llama", "Q4_1", True)
    # Gemma's general.name reads well; SmolLM2's is a training-run label, so its file names it.
    assert (gemma.name, smol.name) == ("Gemma 3 270M", "SmolLM2-135M-Instruct")
    assert (gemma.architecture, gemma.quantization, gemma.has_chat_template) == (
        "gemma3",
        "Q4_K_M",
        False,
    )
    assert smol.size_label == "135M"
    assert gemma.size_label == "270M"
    # Gemma 3 270M as bundled is the pretrained model: no template, no chat tuning named.
    assert (gemma.base_model, smol.base_model) == (True, False)


@pytest.mark.parametrize(("metadata", "file", "base"), [
    ({}, "gemma-3-270m.Q4_K_M.gguf", True),
    ({"general.name": "Llama 3.1 8B"}, "llama.gguf", True),
    ({}, "gemma-3-270m-it.Q4_K_M.gguf", False),
    ({"general.finetune": "Instruct"}, "llama.gguf", False),
    ({"general.name": "Mistral 7B Chat"}, "m.gguf", False),
    ({"tokenizer.chat_template": "{{ messages }}"}, "base.gguf", False),
    ({"general.name": "Qwen3 8B"}, "Qwen3-8B-Q4_K_M.gguf", True),  # no template: base
])
def test_a_base_model_is_one_with_no_template_and_no_chat_tuning_named(
        metadata: dict[str, object], file: str, base: bool) -> None:
    assert catalog.is_base_model(metadata, Path(file)) is base


def test_to_json_is_plain_data(smollm2_path: Path) -> None:
    data = describe(smollm2_path).to_json()
    assert data.keys() >= JSON_KEYS
    assert json.loads(json.dumps(data)) == data
    assert data["path"] == str(smollm2_path)


def test_name_falls_back_to_the_file_name(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "my-model.Q8_0.gguf")
    assert describe(path).name == "my-model"  # without its quantization tag


def test_size_label_derived_when_absent(tmp_path: Path) -> None:
    tensors = {"w": np.zeros((1500, 1000), dtype=np.float16)}
    entry = describe(write_gguf(tmp_path / "m.gguf", tensors=tensors))
    assert entry.parameter_count == 1_500_000
    assert entry.size_label == "1.5M"


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: p.touch(), "empty file"),
        (lambda p: p.write_text("not a model"), "not a GGUF file"),
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: None, "file not found"),
    ],
)
def test_describe_never_raises(tmp_path: Path, make: Callable[[Path], object], reason: str) -> None:
    path = tmp_path / "bad.gguf"
    make(path)
    entry = describe(path)
    assert entry.error == reason
    assert entry.name == "bad"
    assert entry.to_json()["error"] == reason


def test_file_without_architecture_is_not_usable(tmp_path: Path) -> None:
    path = tmp_path / "noarch.gguf"
    copy = tmp_path / "copy.gguf"
    model(path)
    copy_with_metadata(path, copy, {"general.architecture": None})
    assert describe(copy).error == "the file does not name its architecture"


# --- scanning folders ----------------------------------------------------------------


def test_scan_finds_models_recursively_and_sorts_by_name(tmp_path: Path) -> None:
    model(tmp_path / "b" / "deep" / "zeta.gguf", "Zeta")
    model(tmp_path / "alpha.GGUF", "alpha")
    model(tmp_path / "Beta.gguf", "Beta")
    (tmp_path / "notes.txt").write_text("not a model")
    (tmp_path / "weights.bin").write_bytes(b"\0" * 64)
    entries = scan([(tmp_path, catalog.SETTINGS)])
    assert names(entries) == ["alpha", "Beta", "Zeta"]
    assert {e.source for e in entries} == {"settings"}
    assert scan([(tmp_path, catalog.SETTINGS)]) == entries


def test_scan_lists_bad_files_with_their_reason(tmp_path: Path) -> None:
    model(tmp_path / "good.gguf", "Good")
    (tmp_path / "empty.gguf").touch()
    (tmp_path / "folder.gguf").mkdir()
    (tmp_path / "text.gguf").write_text("hello")
    errors = {e.name: e.error for e in scan([(tmp_path, catalog.MODELS_FOLDER)])}
    assert errors == {
        "Good": None,
        "empty": "empty file",
        "folder": "is a directory",
        "text": "not a GGUF file",
    }


def test_split_model_is_one_entry(tmp_path: Path) -> None:
    shards = write_split(tmp_path / "big.gguf", 3, metadata={"general.name": "Big"})
    entries = scan([(tmp_path, catalog.SETTINGS)])
    assert len(entries) == 1
    entry = entries[0]
    assert entry.error is None
    assert entry.path == shards[0]
    assert entry.shards == tuple(shards)
    assert entry.size_bytes == sum(p.stat().st_size for p in shards)
    # Parameters are counted over every shard's tensors, not just the first.
    assert entry.parameter_count == sum(
        t.n_elements for p in shards for t in read_header(p).tensors
    )
    assert describe(shards[2]) == replace(entry, source=catalog.COMMAND_LINE)


def test_split_model_with_a_missing_shard_names_it(tmp_path: Path) -> None:
    shards = write_split(tmp_path / "big.gguf", 3)
    shards[1].unlink()
    entries = scan([(tmp_path, catalog.SETTINGS)])
    assert len(entries) == 1
    assert entries[0].error is not None
    assert "big-00002-of-00003.gguf" in entries[0].error
    assert entries[0].size_bytes == shards[0].stat().st_size + shards[2].stat().st_size


def test_split_model_without_its_first_shard(tmp_path: Path) -> None:
    shards = write_split(tmp_path / "big.gguf", 2)
    shards[0].unlink()
    (entry,) = scan([(tmp_path, catalog.SETTINGS)])
    assert entry.path == shards[0]
    assert entry.error is not None and "big-00001-of-00002.gguf" in entry.error


def test_projectors_and_adapters_are_not_listed(tmp_path: Path) -> None:
    model(tmp_path / "chat.gguf", "Chat")
    model(tmp_path / "mmproj-model-f16.gguf", "Vision tower")
    write_gguf(tmp_path / "vision.gguf", arch="clip")
    model(tmp_path / "projector.gguf", "Projector", **{"general.type": "mmproj"})
    model(tmp_path / "lora.gguf", "Lora", **{"general.type": "adapter"})
    assert names(scan([(tmp_path, catalog.SETTINGS)])) == ["Chat"]
    assert describe(tmp_path / "lora.gguf").error == "a LoRA adapter, not a chat model"
    assert "vision projector" in (describe(tmp_path / "vision.gguf").error or "")


def test_embedding_models_are_listed_as_such(tmp_path: Path) -> None:
    model(tmp_path / "chat.gguf", "Chat")
    write_gguf(tmp_path / "bge.gguf", arch="bert", metadata={"general.name": "BGE"})
    model(tmp_path / "qwen3-embedding.gguf", "Qwen3 Embedding", **{"llama.pooling_type": 3})
    entries = scan([(tmp_path, catalog.SETTINGS)])
    assert {e.name: e.embedding for e in entries} == {
        "BGE": True, "Chat": False, "Qwen3 Embedding": True}
    assert all(e.usable and not (e.embedding and e.base_model) for e in entries)
    assert names(catalog.chat_models(entries)) == ["Chat"]
    assert describe(tmp_path / "bge.gguf").to_json()["embedding"] is True


@pytest.mark.model
def test_the_bundled_embedding_model_is_never_a_chat_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = embedding_model.default_embedding_model_path()
    assert path is not None, "run `make setup`"
    entries = scan(default_folders())
    listed, = [e for e in entries if e.path == path]
    assert (listed.name, listed.architecture, listed.quantization) == (
        "all-MiniLM-L6-v2", "bert", "F16")
    assert listed.embedding and listed.usable and not listed.base_model
    assert path not in {e.path for e in catalog.chat_models(entries)}
    for query in (listed.name, str(path)):
        with pytest.raises(LookupError, match="all-MiniLM-L6-v2 is an embedding model"):
            choose_model(query, entries, Settings())
    # With nothing else installed, it is not the model a chat starts with either.
    alone = tmp_path / "bundled"
    (alone / "embedding").mkdir(parents=True)
    (alone / "embedding" / path.name).symlink_to(path)
    monkeypatch.setenv("FIRESIDE_BUNDLED_DIR", str(alone))
    with pytest.raises(LookupError, match="No model found"):
        start_model(scan(default_folders()), Settings())


def test_the_same_file_is_listed_once(tmp_path: Path) -> None:
    real = model(tmp_path / "store" / "model.gguf", "Model")
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "symlink.gguf").symlink_to(real)
    os.link(real, tmp_path / "links" / "hardlink.gguf")
    (tmp_path / "links" / "loop").symlink_to(tmp_path, target_is_directory=True)
    entries = scan(
        [
            (tmp_path / "store", catalog.MODELS_FOLDER),
            (tmp_path, catalog.SETTINGS),  # overlaps the first folder
            (tmp_path / "links", catalog.ENVIRONMENT),
        ]
    )
    assert len(entries) == 1
    assert entries[0].path == real
    assert entries[0].source == "models folder"  # the first folder to reach it names it


def test_symlinked_folder_is_followed(tmp_path: Path) -> None:
    model(tmp_path / "elsewhere" / "m.gguf", "Linked")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "other-app").symlink_to(tmp_path / "elsewhere")
    assert names(scan([(tmp_path / "models", catalog.MODELS_FOLDER)])) == ["Linked"]


def test_broken_link_is_listed_as_missing(tmp_path: Path) -> None:
    (tmp_path / "gone.gguf").symlink_to(tmp_path / "nowhere.gguf")
    (entry,) = scan([(tmp_path, catalog.SETTINGS)])
    assert entry.error == "file not found"


def test_unreadable_folder_is_passed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model(tmp_path / "ok" / "m.gguf", "Readable")
    locked = tmp_path / "locked"
    model(locked / "hidden.gguf", "Hidden")
    locked.chmod(0)
    if os.access(locked, os.R_OK):  # running as root: refuse the listing by hand instead
        real_scandir = os.scandir

        def refuse(path: str | os.PathLike[str]) -> object:
            if Path(path) == locked:
                raise PermissionError(13, "Permission denied", str(path))
            return real_scandir(path)

        monkeypatch.setattr(os, "scandir", refuse)
    try:
        assert names(scan([(tmp_path, catalog.SETTINGS)])) == ["Readable"]
    finally:
        locked.chmod(0o755)


def test_missing_folders_are_passed_over(tmp_path: Path) -> None:
    model(tmp_path / "m.gguf", "Here")
    assert scan([(tmp_path / "absent", catalog.SETTINGS)]) == []
    assert names(scan([(tmp_path / "absent", catalog.SETTINGS), (tmp_path, catalog.SETTINGS)])) == [
        "Here"
    ]


def test_a_model_file_given_as_a_folder_is_listed(tmp_path: Path) -> None:
    path = model(tmp_path / "m.gguf", "Here")
    assert [e.path for e in scan([(path, catalog.COMMAND_LINE)])] == [path]


def test_same_names_are_told_apart(tmp_path: Path) -> None:
    # Same model name in two quantizations, and the same quantization in two folders.
    model(tmp_path / "a" / "m-q8.gguf", "Llama", **{"general.file_type": 7})
    model(tmp_path / "a" / "m-q4.gguf", "Llama", **{"general.file_type": 15})
    model(tmp_path / "b" / "m-q4.gguf", "Llama", **{"general.file_type": 15})
    model(tmp_path / "c" / "other.gguf", "Other")
    entries = scan(
        [
            (tmp_path / "a", catalog.MODELS_FOLDER),
            (tmp_path / "b", catalog.SETTINGS),
            (tmp_path / "c", catalog.SETTINGS),
        ]
    )
    listed = names(entries)
    assert len(set(listed)) == len(listed) == 4
    assert listed == sorted(listed, key=str.casefold)
    by_path = {e.path: e.name for e in entries}
    assert "Q8_0" in by_path[tmp_path / "a" / "m-q8.gguf"]
    assert "Q4_K_M" in by_path[tmp_path / "a" / "m-q4.gguf"]
    assert by_path[tmp_path / "c" / "other.gguf"] == "Other"


def test_identical_copies_still_get_distinct_names(tmp_path: Path) -> None:
    original = model(tmp_path / "x" / "m.gguf", "Twin")
    for folder in ("y", "z"):
        (tmp_path / folder).mkdir()
        shutil.copyfile(original, tmp_path / folder / "m.gguf")
    listed = names(scan([(tmp_path, catalog.SETTINGS)]))
    assert len(set(listed)) == 3
    assert all(name.startswith("Twin") for name in listed)


# --- folders and finding -------------------------------------------------------------


def test_default_folders_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_a, env_b = tmp_path / "env-a", tmp_path / "env-b"
    monkeypatch.setenv("FIRESIDE_MODELS_DIR", os.pathsep.join([str(env_a), str(env_b)]))
    folders = default_folders(extra=[tmp_path / "extra"], cli=[tmp_path / "cli", env_a])
    assert folders == [
        (bundled_dir(), "bundled"),
        (paths.models_dir(), "models folder"),
        (tmp_path / "extra", "settings"),
        (env_a, "environment"),
        (env_b, "environment"),
        (tmp_path / "cli", "command line"),
    ]


def test_default_folders_find_the_bundled_models(smollm2_path: Path, gemma_path: Path) -> None:
    entries = scan(default_folders())
    assert {smollm2_path, gemma_path} <= {e.path for e in entries}
    assert all(e.source == "bundled" for e in entries if e.path.parent == bundled_dir())


@pytest.fixture
def listed(tmp_path: Path) -> list[ModelEntry]:
    model(tmp_path / "lib" / "qwen-small.gguf", "Qwen Small")
    model(tmp_path / "lib" / "qwen.gguf", "Qwen")
    model(tmp_path / "lib" / "llama-3.gguf", "Llama 3 8B Instruct")
    return scan([(tmp_path / "lib", catalog.SETTINGS)])


def found_name(entries: list[ModelEntry], query: str) -> str | None:
    entry = find(entries, query)
    return entry.name if entry else None


def test_find_by_name(listed: list[ModelEntry]) -> None:
    assert found_name(listed, "QWEN") == "Qwen"  # an exact name beats a longer prefix match
    assert found_name(listed, "qwen s") == "Qwen Small"
    assert found_name(listed, "llama 3") == "Llama 3 8B Instruct"
    assert found_name(listed, "llama-3.gguf") == "Llama 3 8B Instruct"  # its file name
    assert found_name(listed, "mistral") is None
    assert found_name(listed, "  ") is None


def test_find_by_path(listed: list[ModelEntry], tmp_path: Path) -> None:
    inside = tmp_path / "lib" / "qwen.gguf"
    found = find(listed, str(inside))
    assert found is not None and found.name == "Qwen" and found.source == "settings"
    (tmp_path / "alias.gguf").symlink_to(inside)
    assert find(listed, tmp_path / "alias.gguf") == found

    outside = model(tmp_path / "downloads" / "new.gguf", "Fresh Download")
    fresh = find(listed, str(outside))
    assert fresh is not None
    assert (fresh.name, fresh.error, fresh.source) == ("Fresh Download", None, "command line")


def test_find_a_path_that_is_not_a_model(listed: list[ModelEntry], tmp_path: Path) -> None:
    missing = find(listed, str(tmp_path / "nope.gguf"))
    assert missing is not None and missing.error == "file not found"
    (tmp_path / "junk.gguf").write_text("junk")
    junk = find(listed, str(tmp_path / "junk.gguf"))
    assert junk is not None and junk.error == "not a GGUF file"


def test_find_shard_path_gives_the_whole_set(tmp_path: Path) -> None:
    shards = write_split(tmp_path / "big.gguf", 2, metadata={"general.name": "Big"})
    found = find([], str(shards[1]))
    assert found is not None
    assert found.path == shards[0] and found.shards == tuple(shards)
