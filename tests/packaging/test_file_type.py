"""The Linux package's file type: the MIME type it installs tells GGUF files by name and
by their first bytes, and the menu entry opens files of that type. Checked on the source
files, as the desktop reads them once installed (test_deb.py installs the package)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from configparser import ConfigParser
from pathlib import Path
from xml.etree import ElementTree

import pytest

ROOT = Path(__file__).resolve().parents[2]
MIME_XML = ROOT / "packaging" / "linux" / "fireside-gguf.xml"
DESKTOP = ROOT / "resources" / "fireside.desktop"
NAMESPACE = "{http://www.freedesktop.org/standards/shared-mime-info}"

# Qt reads the type from the XML as a desktop would; a process of its own, since Qt reads
# the folders named by XDG_DATA_DIRS once per process.
IDENTIFY = """
import sys
from PySide6.QtCore import QMimeDatabase
db = QMimeDatabase()
for path, mode in ((sys.argv[1], "MatchExtension"), (sys.argv[2], "MatchContent")):
    print(db.mimeTypeForFile(path, getattr(QMimeDatabase.MatchMode, mode)).name())
"""


def declared_type() -> str:
    types = ElementTree.parse(MIME_XML).getroot().findall(f"{NAMESPACE}mime-type")
    assert len(types) == 1
    return types[0].attrib["type"]


def test_gguf_files_are_known_by_name_and_by_content(tmp_path: Path) -> None:
    packages = tmp_path / "share" / "mime" / "packages"
    packages.mkdir(parents=True)
    shutil.copy(MIME_XML, packages / "fireside.xml")
    if shutil.which("update-mime-database"):  # also what the package's trigger runs
        subprocess.run(["update-mime-database", str(packages.parent)], check=True,
                       capture_output=True)
    named = tmp_path / "Qwen3-4B.Q4_K_M.gguf"
    named.write_bytes(b"\0" * 64)
    unnamed = tmp_path / "blob-sha256-5e3a"  # how Ollama keeps models: no ending
    unnamed.write_bytes(b"GGUF\x03\0\0\0" + b"\0" * 56)
    env = {**os.environ, "XDG_DATA_DIRS": str(tmp_path / "share"),
           "XDG_DATA_HOME": str(tmp_path / "home")}
    result = subprocess.run([sys.executable, "-c", IDENTIFY, str(named), str(unnamed)],
                            env=env, capture_output=True, text=True, check=True)
    assert result.stdout.split() == [declared_type()] * 2


def test_the_menu_entry_opens_gguf_files() -> None:
    entry = ConfigParser(interpolation=None)
    entry.optionxform = str  # type: ignore[assignment,method-assign] # keys are case-sensitive
    entry.read(DESKTOP, encoding="utf-8")
    section = entry["Desktop Entry"]
    assert section["Exec"] == "fireside %f"  # one file, as a local path
    assert declared_type() in section["MimeType"].split(";")
    if shutil.which("desktop-file-validate") is None:
        pytest.skip("desktop-file-validate is not installed")
    result = subprocess.run(["desktop-file-validate", str(DESKTOP)], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout
