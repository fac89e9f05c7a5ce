"""Choosing the bundle's CPU backend: the best level that does not crash here, once.

A level whose kernels crash cannot be made on this CPU, so the check's answers are
given as data here; the real child check is in tests/core/test_native_check.py, and the
real bundle's choice in tests/packaging.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.llama import cpu_backends, native_check

SCORES = {"x64": 1, "haswell": 40, "zen4": 90, "sapphirerapids": 100, "armv9.2_2": 0}


@pytest.fixture
def lib_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "lib"
    folder.mkdir()
    for name in SCORES:
        (folder / f"libggml-cpu-{name}.so").write_bytes(name.encode())
    (folder / "libggml-base.so").write_bytes(b"not a variant")
    return folder


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_backends, "_checked_now", None)


def ranked(lib_dir: Path) -> list[cpu_backends.Variant]:
    return cpu_backends.ranked(lib_dir, lambda path: SCORES[cpu_backends.Variant(path, 0).name])


class Checks:
    """Answers the check as a CPU would on which ``crashing`` levels crash."""

    def __init__(self, *crashing: str) -> None:
        self.crashing = set(crashing)
        self.asked: list[str] = []

    def __call__(self, model: Path, env: dict[str, str]) -> native_check.NativeCheck:
        name = cpu_backends.Variant(Path(env[cpu_backends.VARIANT_ENV]), 0).name
        self.asked.append(name)
        return native_check.NativeCheck(model, -11 if name in self.crashing else 0, "")


def test_levels_are_ranked_best_first_and_unusable_ones_left_out(lib_dir: Path) -> None:
    assert [v.name for v in ranked(lib_dir)] == ["sapphirerapids", "zen4", "haswell", "x64"]


def test_the_best_level_is_kept_when_it_works(lib_dir: Path, tmp_path: Path) -> None:
    checks = Checks()
    choice = cpu_backends.choose(ranked(lib_dir), tmp_path / "m.gguf", checks)
    assert choice is not None and choice.variant == "sapphirerapids"
    assert checks.asked == ["sapphirerapids"]
    assert choice.notice() is None and cpu_backends.notice() is None


def test_a_crashing_level_is_passed_over_and_the_user_told(lib_dir: Path,
                                                           tmp_path: Path) -> None:
    checks = Checks("sapphirerapids")
    choice = cpu_backends.choose(ranked(lib_dir), tmp_path / "m.gguf", checks)
    assert choice is not None and choice.variant == "zen4"
    assert checks.asked == ["sapphirerapids", "zen4"]
    notice = cpu_backends.notice()
    assert notice is not None
    assert "sapphirerapids (SIGSEGV)" in notice and "uses its zen4 code" in notice


def test_the_choice_is_checked_once_and_remembered(lib_dir: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cpu_backends.choose(ranked(lib_dir), tmp_path / "m.gguf", Checks("sapphirerapids"))
    monkeypatch.setattr(cpu_backends, "_checked_now", None)  # the next start
    later = Checks("sapphirerapids")
    choice = cpu_backends.choose(ranked(lib_dir), tmp_path / "m.gguf", later)
    assert choice is not None and choice.variant == "zen4" and later.asked == []
    assert cpu_backends.notice() is None  # told once, at the start that checked


def test_new_backend_files_are_checked_again(lib_dir: Path, tmp_path: Path) -> None:
    cpu_backends.choose(ranked(lib_dir), tmp_path / "m.gguf", Checks("sapphirerapids"))
    (lib_dir / "libggml-cpu-sapphirerapids.so").write_bytes(b"a fixed llama.cpp")
    fixed = Checks()
    choice = cpu_backends.choose(ranked(lib_dir), tmp_path / "m.gguf", fixed)
    assert choice is not None and choice.variant == "sapphirerapids"
    assert fixed.asked == ["sapphirerapids"]


def test_a_damaged_record_means_checking_again(lib_dir: Path, tmp_path: Path) -> None:
    cpu_backends.choose(ranked(lib_dir), tmp_path / "m.gguf", Checks())
    record = cpu_backends._record_path()
    record.write_text("{not json")
    again = Checks()
    choice = cpu_backends.choose(ranked(lib_dir), tmp_path / "m.gguf", again)
    assert choice is not None and again.asked == ["sapphirerapids"]


def test_nothing_is_recorded_when_every_level_crashes(lib_dir: Path, tmp_path: Path) -> None:
    everything = Checks(*SCORES)
    assert cpu_backends.choose(ranked(lib_dir), tmp_path / "m.gguf", everything) is None
    assert everything.asked == ["sapphirerapids", "zen4", "haswell", "x64"]
    assert not cpu_backends._record_path().exists()
