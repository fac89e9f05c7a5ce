"""About Fireside: F1 shows the version from pyproject.toml and every bundled license."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt

from app.ui.about import COMPONENTS, AboutDialog
from tests.ui.conftest import WindowFactory

ROOT = Path(__file__).resolve().parents[2]


def project_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def test_f1_shows_the_version_and_the_license_of_everything_shipped(
        open_window: WindowFactory, qtbot: Any) -> None:
    window = open_window()
    qtbot.keyClick(window.composer, Qt.Key.Key_F1)
    dialog = window.findChild(AboutDialog, "aboutDialog")
    assert dialog is not None
    qtbot.waitUntil(dialog.isVisible)
    assert not dialog.isModal(), "the window stays usable while About is open"
    assert dialog.version_label.text() == f"Version {project_version()}"

    names = [dialog.components.topLevelItem(i).text(0)
             for i in range(dialog.components.topLevelItemCount())]
    assert "SmolLM2-135M-Instruct" in names and "llama.cpp" in names
    for index, component in enumerate(COMPONENTS):
        dialog.show_component(index)
        text = dialog.license_view.toPlainText()
        assert component.license in text
        assert "is missing from this installation" not in text, component.name
        assert len(text) > 500, f"{component.name}: the full license text is shown"

    # Asked again, the same dialog comes to the front instead of a second one.
    qtbot.keyClick(window.composer, Qt.Key.Key_F1)
    assert len(window.findChildren(AboutDialog)) == 1
