"""Other apps' model stores: found where each app keeps them, read in place, never written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.models import catalog, sources
from app.core.models.catalog import scan
from app.core.models.sources import Place, discover
from tests.gguf_files import write_gguf
from tests.stores import hf_model, link, ollama_model, tree


@pytest.fixture
def home() -> Path:
    return Path.home()  # the test's own home (tests/conftest.py)


def store(key: str) -> sources.Source:
    return next(s for s in discover() if s.key == key)


def entries_of(disabled: tuple[str, ...] = ()) -> list[catalog.ModelEntry]:
    return scan([], catalog.app_stores(disabled))


def by_name(entries: list[catalog.ModelEntry]) -> dict[str, catalog.ModelEntry]:
    return {e.name: e for e in entries}


def test_nothing_is_found_in_an_empty_home() -> None:
    found = discover()
    assert [s.key for s in found] == list(sources.KEYS)
    assert not any(s.found for s in found)
    assert entries_of() == []


def test_every_store_is_found_named_and_read_in_place(
        home: Path, smollm2_path: Path, gemma_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    link(smollm2_path, home / ".lmstudio/models/lmstudio-community/SmolLM2-GGUF"
         / "SmolLM2-135M-Instruct.Q4_1.gguf")
    ollama_model(home / ".ollama/models", "gemma3:270m", gemma_path)
    hub = home / ".cache/huggingface/hub"
    hf_model(hub, "unsloth/gemma-3-270m-it-GGUF", gemma_path, "gemma-3-270m-it-Q4_K_M.gguf")
    link(smollm2_path, home / ".local/share/Jan/data/llamacpp/models/smol/model.gguf")
    gpt4all = home / ".local/share/nomic.ai/GPT4All"
    link(smollm2_path, gpt4all / "smollm2.gguf", hard=True)
    before = tree(home)

    found = {s.key: s for s in discover()}
    assert all(s.found for s in found.values())
    assert found["huggingface"].folders == (hub,)
    entries = entries_of()
    # One file reached by two apps is listed once; other apps' names beat a hash or a stem.
    assert sorted(e.name for e in entries) == ["SmolLM2-135M-Instruct", "gemma3:270m"]
    named = by_name(entries)
    gemma = named["gemma3:270m"]
    assert gemma.source == sources.OLLAMA  # Ollama's short name beats the repository's
    assert gemma.path.parent == home / ".ollama/models/blobs" and gemma.usable
    assert gemma.architecture == "gemma3" and gemma.quantization == "Q4_K_M"
    assert named["SmolLM2-135M-Instruct"].usable
    assert tree(home) == before  # nothing written to any store


def test_hugging_face_names_are_the_repository_and_quantization(
        home: Path, gemma_path: Path, smollm2_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    hub = home / "elsewhere/hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    hf_model(hub, "unsloth/gemma-3-270m-it-GGUF", gemma_path, "gemma-3-270m-it-Q4_K_M.gguf")
    # Repositories with many quantizations keep each in a folder of its own.
    hf_model(hub, "someone/SmolLM2-GGUF", smollm2_path, "Q4_1/SmolLM2-135M-Q4_1.gguf")
    named = by_name(entries_of())
    assert sorted(named) == ["someone/SmolLM2-GGUF:Q4_1", "unsloth/gemma-3-270m-it-GGUF:Q4_K_M"]
    assert named["someone/SmolLM2-GGUF:Q4_1"].usable
    entry = named["unsloth/gemma-3-270m-it-GGUF:Q4_K_M"]
    assert entry.source == sources.HUGGING_FACE
    assert catalog.find([entry], "unsloth/gemma-3-270m-it-GGUF:Q4_K_M") == entry


def test_hf_home_and_ollama_models_move_the_stores(
        home: Path, smollm2_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(home / "hf"))
    monkeypatch.setenv("OLLAMA_MODELS", str(home / "big-disk/ollama"))
    ollama_model(home / "big-disk/ollama", "smollm2:135m", smollm2_path,
                 namespace="someone")
    ollama_model(home / "big-disk/ollama", "smol:q4", smollm2_path, registry="hf.co",
                 namespace="bartowski")
    hf_model(home / "hf/hub", "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", smollm2_path,
             "smollm2-135m-instruct-q4_1.gguf")
    assert store("ollama").folders == (home / "big-disk/ollama",)
    assert store("huggingface").folders == (home / "hf/hub",)
    # One file under three names is listed once, under the shortest Ollama name.
    assert [e.name for e in entries_of()] == ["someone/smollm2:135m"]
    assert [e.name for e in entries_of(("ollama",))] == [
        "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1"]


def test_ollama_projectors_and_adapters_are_not_chat_models(
        home: Path, tmp_path: Path, smollm2_path: Path) -> None:
    models = home / ".ollama/models"
    projector = write_gguf(tmp_path / "p.gguf", arch="clip", metadata={"general.type": "mmproj"})
    adapter = write_gguf(tmp_path / "a.gguf", metadata={"general.type": "adapter"})
    ollama_model(models, "llava:7b", smollm2_path, projector=projector)
    ollama_model(models, "vision-only:latest", projector)  # no name says "mmproj"
    ollama_model(models, "lora:latest", adapter)
    (models / "manifests/registry.ollama.ai/library/broken").mkdir(parents=True)
    (models / "manifests/registry.ollama.ai/library/broken/latest").write_text("{not json")
    assert [e.name for e in entries_of()] == ["llava:7b"]


def test_settings_of_the_apps_move_their_folders(
        home: Path, smollm2_path: Path, gemma_path: Path) -> None:
    lmstudio = home / "disk/lm-models"
    (home / ".lmstudio").mkdir()
    (home / ".lmstudio/settings.json").write_text(json.dumps({"downloadsFolder": str(lmstudio)}))
    link(smollm2_path, lmstudio / "pub/repo/smol.gguf")
    gpt4all = home / "disk/gpt4all"
    ini = home / ".config/nomic.ai/GPT4All.ini"
    ini.parent.mkdir(parents=True)
    ini.write_text(f"[General]\nmodelPath={gpt4all}/\nthreadCount=4\n")
    link(gemma_path, gpt4all / "gemma.gguf")
    (gpt4all / "incomplete-other.gguf").write_bytes(b"GGUF")  # GPT4All's partial download
    jan = home / "disk/jan-data"
    (home / ".local/share/Jan").mkdir(parents=True)
    (home / ".local/share/Jan/settings.json").write_text(json.dumps({"data_folder": str(jan)}))
    link(smollm2_path, jan / "llamacpp/models/smol/model.gguf", hard=True)

    assert store("lmstudio").folders == (lmstudio,)
    assert store("gpt4all").folders == (gpt4all,)
    assert store("jan").folders == (jan / "llamacpp/models",)
    entries = entries_of()
    assert sorted(e.name for e in entries) == ["Gemma 3 270M", "smol"]  # LM Studio names it
    gemma = by_name(entries)["Gemma 3 270M"]
    assert gemma.source == sources.GPT4ALL


def test_a_switched_off_store_is_not_read(home: Path, smollm2_path: Path, gemma_path: Path) -> None:
    link(smollm2_path, home / ".lmstudio/models/a/b/smol.gguf")
    ollama_model(home / ".ollama/models", "gemma3:270m", gemma_path)
    assert len(entries_of()) == 2
    assert [e.source for e in entries_of(("ollama",))] == [sources.LMSTUDIO]
    assert entries_of(("ollama", "lmstudio")) == []


def test_the_users_own_folder_names_the_source_and_ollama_the_model(
        home: Path, tmp_path: Path, gemma_path: Path) -> None:
    manifest = ollama_model(home / ".ollama/models", "gemma3:270m", gemma_path)
    blob = json.loads(manifest.read_text())["layers"][0]["digest"].replace(":", "-")
    mine = tmp_path / "mine"
    link(home / ".ollama/models/blobs" / blob, mine / "gemma.gguf")
    entries = scan([(mine, catalog.SETTINGS)], catalog.app_stores())
    assert [(e.name, e.source) for e in entries] == [("gemma3:270m", catalog.SETTINGS)]
    assert catalog.source_label(entries[0].source) == "Your folder"


@pytest.mark.parametrize("system", ["linux", "darwin", "windows"])
def test_default_places_on_each_system(system: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"LOCALAPPDATA": str(home / "AppData/Local"), "APPDATA": str(home / "AppData/Roaming")}
    support = home / "Library/Application Support"
    expected = {
        "linux": {"jan": home / ".local/share/Jan/data/llamacpp/models",
                  "gpt4all": home / ".local/share/nomic.ai/GPT4All"},
        "darwin": {"jan": support / "Jan/data/llamacpp/models",
                   "gpt4all": support / "nomic.ai/GPT4All"},
        "windows": {"jan": home / "AppData/Roaming/Jan/data/llamacpp/models",
                    "gpt4all": home / "AppData/Local/nomic.ai/GPT4All"},
    }[system]
    expected |= {"lmstudio": home / ".lmstudio/models", "ollama": home / ".ollama/models",
                 "huggingface": home / ".cache/huggingface/hub"}
    for folder in expected.values():
        folder.mkdir(parents=True)
    (expected["ollama"] / "manifests").mkdir()
    place = Place(system, home, env, ollama_service=tmp_path / "none")
    found = {s.key: s.folders for s in discover(place)}
    assert found == {key: (folder,) for key, folder in expected.items()}


def test_older_layouts_and_the_lmstudio_home_pointer(tmp_path: Path) -> None:
    home = tmp_path / "home"
    moved = tmp_path / "lmstudio-home"
    for folder in (home / "jan/models", home / ".cache/lm-studio/models", moved / "models"):
        folder.mkdir(parents=True)
    (home / ".lmstudio-home-pointer").write_text(f"{moved}\n")
    service = tmp_path / "usr/share/ollama/.ollama/models"
    (service / "manifests").mkdir(parents=True)
    found = {s.key: s.folders for s in discover(Place("linux", home, {}, service))}
    assert found["lmstudio"] == (moved / "models", home / ".cache/lm-studio/models")
    assert found["jan"] == (home / "jan/models",)
    assert found["ollama"] == (service,)


def test_partial_download_names() -> None:
    for name in ("m.gguf.part", "x.incomplete", "sha256-ab12-partial", "sha256-ab-partial-3",
                 "m.gguf.download", "incomplete-m.gguf", "m.crdownload"):
        assert sources.is_partial_name(name), name
    for name in ("model.gguf", "partial-fine-tune.gguf", "sha256-ab12"):
        assert not sources.is_partial_name(name), name
