"""`fireside chat --attach`: documents read in the terminal, answers with their sources,
on real documents nobody here wrote (dpkg's specifications on this machine)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.cli.test_commands import events, fireside

DPKG_SPECS = Path("/usr/share/doc/dpkg/spec")
QUESTIONS = {
    "How does a package declare interest in a file trigger?": "triggers.txt",
    "What does Rules-Requires-Root: binary-targets mean?": "rootless-builds.txt",
    "Which lock file must a frontend hold before calling dpkg?": "frontend-api.txt",
}


@pytest.mark.model
@pytest.mark.parametrize("question", list(QUESTIONS))
def test_an_answer_from_a_folder_cites_the_file_that_holds_it(
        question: str, tmp_path: Path, smollm2_path: Path) -> None:
    if not DPKG_SPECS.is_dir():
        pytest.skip("dpkg's specifications are not on this machine")
    folder = tmp_path / "specs"
    shutil.copytree(DPKG_SPECS, folder)
    result = fireside("chat", "--json", "--model", str(smollm2_path), "--temperature", "0",
                      "--max-tokens", "48", "--attach", str(folder), question)
    assert result.returncode == 0, result.stderr
    (reply,) = [e for e in events(result.stdout) if e["event"] == "reply"]
    sources = reply["sources"]
    assert sources and Path(sources[0]["path"]).name == QUESTIONS[question]
    assert all(Path(s["path"]).parent == folder for s in sources)
    assert all(s["location"].startswith("line") for s in sources)


@pytest.mark.model
def test_attach_names_a_path_that_does_not_exist(tmp_path: Path, smollm2_path: Path) -> None:
    result = fireside("chat", "--json", "--model", str(smollm2_path),
                      "--attach", str(tmp_path / "missing.pdf"), "Hello")
    assert result.returncode == 2
    assert "missing.pdf does not exist" in result.stdout + result.stderr
