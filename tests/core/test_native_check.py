"""llama.cpp's compiled code: it runs on this CPU, and it holds no AMX kernels.

These run before every other test (tests/conftest.py), and a failure among them
stops the session: when llama.cpp crashes on this CPU, each later test that runs a
model would kill the suite halfway through, with no word of why.
"""

from __future__ import annotations

import logging
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import llama_cpp
import pytest

from app.core.llama import native_check
from app.core.llama.engine import Engine
from tests import llama_build
from tests.native_code import amx_instructions, llama_libraries

pytestmark = pytest.mark.native

ROOT = Path(__file__).resolve().parents[2]




@pytest.mark.parametrize("model", ["smollm2", "gemma"])
def test_llama_cpp_decodes_a_batch_on_this_cpu(model: str,
                                               request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(f"{model}_path")
    result = native_check.check(path)
    assert result.ok, result.message()
    assert "CPU :" in result.output  # the child got as far as llama.cpp's system info


def test_a_crash_in_native_code_is_named_with_the_cpu() -> None:
    # A real segmentation fault in a real child process, where llama.cpp would crash.
    crash = [sys.executable, "-c", "import ctypes; ctypes.string_at(0)"]
    result = native_check.check(Path("some-model.gguf"), command=crash)
    assert not result.ok and result.ending == "SIGSEGV"
    message = result.message()
    assert message.startswith("llama.cpp crashed on this CPU (SIGSEGV) while loading "
                              "some-model.gguf and decoding a batch.")
    assert native_check.cpu_summary() in message and "flags:" in message


def test_a_child_that_hangs_is_reported_not_waited_for() -> None:
    hang = [sys.executable, "-c", "import time; time.sleep(60)"]
    result = native_check.check(Path("m.gguf"), command=hang, timeout=1)
    assert not result.ok and result.returncode is None
    assert "llama.cpp crashed on this CPU (no answer in" in result.message()


def test_the_llama_cpp_in_use_has_no_amx_kernels() -> None:
    info = llama_cpp.llama_print_system_info().decode()
    assert "AVX" in info or "NEON" in info, info  # the line lists the CPU's features
    assert "AMX_INT8 = 1" not in info, info
    libraries = llama_libraries(Path(llama_cpp.__file__).parent / "lib")
    found = {lib.name: amx_instructions(lib) for lib in libraries}
    assert not any(found.values()), f"AMX instructions in llama.cpp: {found}"


def test_the_amx_detector_finds_amx_code(tmp_path: Path) -> None:
    """The guard above can fail: a library with AMX kernels is caught on any CPU."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("needs a C compiler for x86-64")
    source = tmp_path / "amx.c"
    source.write_text("#include <immintrin.h>\n"
                      "void f(const void *cfg, const void *a, void *c) {\n"
                      "  _tile_loadconfig(cfg); _tile_loadd(1, a, 64); _tile_loadd(2, a, 64);\n"
                      "  _tile_dpbssd(0, 1, 2); _tile_stored(0, c, 64); _tile_release(); }\n")
    library = tmp_path / "libamx.so"
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-mamx-tile", "-mamx-int8",
                    str(source), "-o", str(library)], check=True)
    assert {"ldtilecfg", "tdpbssd"} <= set(amx_instructions(library))


def test_the_native_build_keeps_amx_out_even_for_an_amx_cpu(tmp_path: Path) -> None:
    """The source set-up's flags turn AMX off after any -march, on any build machine."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("needs a C compiler for x86-64")
    flags = llama_build.load().NO_AMX_FLAGS.split()

    def defined(*args: str) -> set[str]:
        out = subprocess.run([compiler, *args, "-dM", "-E", "-x", "c", "/dev/null"],
                             capture_output=True, text=True, check=True).stdout
        return {line.split()[1] for line in out.splitlines() if "AMX" in line}

    assert "__AMX_INT8__" in defined("-march=sapphirerapids")  # what ggml's kernels need
    # CMake puts CFLAGS before ggml's -march=native; the order must not matter.
    assert defined(*flags, "-march=sapphirerapids") == set()
    assert defined("-march=sapphirerapids", *flags) == set()


def test_a_loaded_model_uses_no_amx_buffer(gemma_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    engine = Engine()
    try:
        with caplog.at_level(logging.DEBUG, logger="fireside.llama"):
            engine.load(gemma_path).result(120)
    finally:
        assert engine.close()
    buffers = [r.getMessage() for r in caplog.records
               if r.name == "fireside.llama" and "buffer size" in r.getMessage()]
    assert buffers, "llama.cpp's log did not list the model's buffers"
    assert not [b for b in buffers if "AMX" in b], buffers
