"""What is inside llama.cpp's compiled libraries: read with objdump, on any CPU."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

# Every AMX instruction: tile configuration, loads and stores, and the dot products.
AMX_INSTRUCTION = re.compile(r"\s(ldtilecfg|sttilecfg|tileload\w*|tilestore\w*|tilezero|"
                             r"tilerelease|tdp\w+)\s")


def llama_libraries(folder: Path) -> list[Path]:
    """llama.cpp's shared libraries in ``folder`` (libllama, ggml and its backends)."""
    found = [p for p in folder.iterdir()
             if p.is_file() and not p.is_symlink() and re.search(r"\.(so[.\d]*|dll|dylib)$",
                                                                 p.name)]
    assert found, f"no llama.cpp libraries in {folder}"
    return sorted(found)


def amx_instructions(library: Path) -> list[str]:
    """The AMX instructions in ``library``'s code (first few), found by disassembling it."""
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.fail("objdump (binutils) is needed to look inside llama.cpp's libraries")
    listing = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(library)],
                             capture_output=True, text=True, check=True).stdout
    return [m.group(1) for m in AMX_INSTRUCTION.finditer(listing)][:5]
