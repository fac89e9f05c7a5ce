"""Settings of a model's own: remembered by file, applied over the defaults, kept readable."""

from __future__ import annotations

import json
from pathlib import Path

from app.core import paths, settings
from app.core.settings import Settings
from tests.stores import link


def test_a_models_own_settings_apply_to_it_alone(tmp_path: Path, smollm2_path: Path,
                                                 gemma_path: Path) -> None:
    prefs = Settings(context_size=2048, temperature=0.7, system_prompt="Be kind.")
    prefs.set_model_value(gemma_path, "context_size", 1024)
    prefs.set_model_value(gemma_path, "template_override", "gemma")
    prefs.set_model_value(gemma_path, "temperature", 0.2)
    prefs.set_model_value(gemma_path, "system_prompt", "Answer in French.")
    assert prefs.load_options(gemma_path).n_ctx == 1024
    assert prefs.load_options(gemma_path).template_override == "gemma"
    assert prefs.sampling(gemma_path).temperature == 0.2
    assert prefs.sampling(gemma_path).top_k == prefs.top_k  # not set: the default
    assert prefs.system_prompt_for(gemma_path) == "Answer in French."
    for other in (smollm2_path, None):
        assert prefs.load_options(other).n_ctx == 2048
        assert prefs.load_options(other).template_override is None
        assert prefs.sampling(other) == prefs.sampling()
        assert prefs.system_prompt_for(other) == "Be kind."


def test_they_survive_a_restart_in_a_readable_file(gemma_path: Path) -> None:
    prefs = Settings()
    prefs.set_model_value(gemma_path, "threads", 2)
    prefs.set_model_value(gemma_path, "seed", None)
    settings.save(prefs)
    stored = json.loads(paths.settings_path().read_text())
    record = stored["model_settings"][str(gemma_path)]
    assert record == {"threads": 2, "seed": None, "file": gemma_path.name,
                      "size": gemma_path.stat().st_size}
    again = settings.load().settings
    assert again.load_options(gemma_path).n_threads == 2
    assert again.model_overrides(gemma_path) == {"threads": 2, "seed": None}


def test_old_and_damaged_records_load(gemma_path: Path) -> None:
    path = paths.settings_path()
    path.write_text(json.dumps({"temperature": 0.5}))  # from before per-model settings
    old = settings.load()
    assert old.problem is None and old.settings.model_settings == {}
    assert old.settings.disabled_sources == []
    path.write_text(json.dumps({"disabled_sources": ["ollama", 3], "model_settings": {
        str(gemma_path): {"temperature": "hot", "top_k": 5, "unknown": 1},
        "/gone.gguf": "not a record", "/empty.gguf": {}}}))
    loaded = settings.load().settings
    assert loaded.disabled_sources == ["ollama", "3"]
    assert loaded.model_overrides(gemma_path) == {"top_k": 5}
    assert list(loaded.model_settings) == [str(gemma_path)]


def test_use_defaults_clears_one_or_all(gemma_path: Path) -> None:
    prefs = Settings()
    prefs.set_model_value(gemma_path, "top_k", 5)
    prefs.set_model_value(gemma_path, "min_p", 0.1)
    prefs.clear_model(gemma_path, "top_k")
    assert prefs.model_overrides(gemma_path) == {"min_p": 0.1}
    prefs.clear_model(gemma_path)
    assert prefs.model_overrides(gemma_path) == {} and prefs.model_settings == {}


def test_a_renamed_file_keeps_its_settings(tmp_path: Path, gemma_path: Path,
                                           smollm2_path: Path) -> None:
    first = link(gemma_path, tmp_path / "gemma.gguf")
    prefs = Settings()
    prefs.set_model_value(first, "max_tokens", 64)
    renamed = first.rename(tmp_path / "gemma-renamed.gguf")
    assert prefs.model_overrides(renamed) == {"max_tokens": 64}
    prefs.set_model_value(renamed, "top_k", 7)  # the record moves to the new name
    assert list(prefs.model_settings) == [str(renamed)]
    assert prefs.model_overrides(renamed) == {"max_tokens": 64, "top_k": 7}
    assert prefs.model_overrides(smollm2_path) == {}  # another size: not the same model
