"""Settings: saved atomically, restored, and never lost to a broken file."""

from __future__ import annotations

import json
from pathlib import Path

from app.core import paths, settings
from app.core.llama.engine import LoadOptions, Sampling


def test_settings_round_trip_through_the_config_folder() -> None:
    prefs = settings.Settings(model_folders=["/models/a", "/models/b"], system_prompt="Be brief.",
                              temperature=0.2, top_k=5, seed=42, context_size=4096, theme="dark")
    settings.save(prefs)
    assert paths.settings_path().parent == paths.config_dir()
    assert settings.load().settings == prefs
    # Only the settings file is left behind: no temporary files from the atomic write.
    assert [p.name for p in paths.config_dir().iterdir()] == ["settings.json"]


def test_settings_feed_the_engine() -> None:
    prefs = settings.Settings(temperature=0.0, top_p=0.5, max_tokens=99, seed=3,
                              context_size=2048, threads=1)
    assert prefs.sampling() == Sampling(temperature=0.0, top_p=0.5, top_k=40, min_p=0.05,
                                        repeat_penalty=1.1, max_tokens=99, seed=3,
                                        speculation=True)  # on for the app's replies
    assert prefs.load_options() == LoadOptions(n_ctx=2048, n_threads=1)


def test_a_missing_file_gives_defaults_without_a_message() -> None:
    loaded = settings.load()
    assert loaded.settings == settings.Settings() and loaded.problem is None


def test_values_of_the_wrong_type_fall_back_to_their_defaults() -> None:
    paths.settings_path().write_text(json.dumps({
        "temperature": "hot", "top_k": 2.5, "seed": True, "model_folders": "oops",
        "system_prompt": "kept", "max_tokens": 64, "unknown": 1}))
    loaded = settings.load()
    defaults = settings.Settings()
    assert loaded.problem is None
    assert loaded.settings.system_prompt == "kept" and loaded.settings.max_tokens == 64
    assert loaded.settings.temperature == defaults.temperature
    assert loaded.settings.top_k == defaults.top_k
    assert loaded.settings.seed is None and loaded.settings.model_folders == []


def test_a_corrupt_file_is_kept_aside_and_defaults_are_used() -> None:
    path = paths.settings_path()
    path.write_bytes(b"\x00{not json")
    loaded = settings.load()
    assert loaded.settings == settings.Settings()
    assert loaded.problem is not None and "could not be read" in loaded.problem
    kept = [p for p in path.parent.iterdir() if p.name.startswith("settings.broken-")]
    assert len(kept) == 1 and kept[0].read_bytes() == b"\x00{not json"
    assert str(kept[0]) in loaded.problem
    # The next save writes a fresh file; the kept one stays.
    settings.save(loaded.settings)
    assert settings.load().problem is None and kept[0].exists()


def test_explicit_paths_are_honoured(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "prefs.json"
    settings.save(settings.Settings(theme="light"), target)
    assert settings.load(target).settings.theme == "light"
