"""The .deb, installed for real: the window starts, the terminal chat answers offline
from the bundled model, nothing is read from the source tree or a Python environment,
and removing the package removes every file it installed.

It builds the bundle (``make package``) unless a build newer than the sources is in
dist/, installs it with dpkg (root) and removes it again at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.loopback_hub import LoopbackHub
from tests.native_code import amx_instructions, llama_libraries

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
INSTALL_DIR = Path("/opt/fireside")
MAX_DEB_BYTES = 250 * 1000 * 1000
QUESTION = "What is the capital of France?"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("FIRESIDE_PACKAGE_TESTS") != "1",
                       reason="builds and installs the .deb (minutes, root): "
                              "set FIRESIDE_PACKAGE_TESTS=1 to run"),
    pytest.mark.skipif(shutil.which("dpkg-deb") is None or os.geteuid() != 0,
                       reason="installing a .deb needs dpkg and root"),
]


def _version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def _arch() -> str:
    return subprocess.run(["dpkg", "--print-architecture"], check=True, capture_output=True,
                          text=True).stdout.strip()


def _newest_source() -> float:
    sources = [ROOT / "pyproject.toml"]
    for folder in ("app", "packaging", "resources"):
        sources += [p for p in (ROOT / folder).rglob("*") if p.is_file()]
    return max(p.stat().st_mtime for p in sources)


@pytest.fixture(scope="module")
def deb() -> Path:
    """The .deb from ``make package``; built here when missing or older than the sources."""
    path = DIST / f"fireside_{_version()}_{_arch()}.deb"
    if not path.is_file() or path.stat().st_mtime < _newest_source():
        subprocess.run(["make", "package"], cwd=ROOT, check=True, timeout=2 * 3600)
    return path


@pytest.fixture(scope="module")
def installed(deb: Path) -> Iterator[list[str]]:
    """Installs the package; yields ``dpkg -L`` of it; removes it if a test did not."""
    result = subprocess.run(["dpkg", "-i", str(deb)], check=False, capture_output=True,
                            text=True)
    assert result.returncode == 0, f"dpkg -i failed:\n{result.stdout}{result.stderr}"
    listing = subprocess.run(["dpkg", "-L", "fireside"], check=True, capture_output=True,
                             text=True).stdout.splitlines()
    yield [line for line in listing if line.startswith("/")]
    if subprocess.run(["dpkg", "-s", "fireside"], check=False, capture_output=True).returncode == 0:
        subprocess.run(["dpkg", "-r", "fireside"], check=False, capture_output=True)


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    """What ``env -i`` leaves, plus a home and Fireside folders of the test's own."""
    for name in ("home", "data", "config"):
        (tmp_path / name).mkdir()
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8",
            "FIRESIDE_DATA_DIR": str(tmp_path / "data"),
            "FIRESIDE_CONFIG_DIR": str(tmp_path / "config")}


def _run(args: list[str], env: dict[str, str], cwd: Path, *, offline: bool = False,
         trace: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Runs the installed ``fireside`` from ``cwd``, under strace when ``trace`` is set."""
    command = ["/usr/bin/fireside", *args]
    if trace is not None:
        command = ["strace", "-f", "-qq", "-e", "trace=openat,open,execve,stat,newfstatat",
                   "-o", str(trace), *command]
    if offline:
        command = ["unshare", "--net", *command]
    return subprocess.run(command, check=False, env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def _foreign_paths(trace: Path) -> list[str]:
    """Paths the traced process touched in the source tree or any Python environment."""
    forbidden = {str(ROOT), sys.prefix, sys.base_prefix, str(ROOT / "build")}
    touched = set(re.findall(r'"(/[^"]*)"', trace.read_text(errors="replace")))
    return sorted(p for p in touched if any(p == f or p.startswith(f + "/") for f in forbidden))


def test_package_declares_what_qt_needs_and_stays_small(deb: Path) -> None:
    depends = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], check=True,
                             capture_output=True, text=True).stdout
    for package in ("libxcb-cursor0", "libxkbcommon-x11-0", "libegl1", "libfontconfig1"):
        assert re.search(rf"\b{re.escape(package)}\b", depends), f"{package} not in {depends}"
    assert deb.stat().st_size < MAX_DEB_BYTES
    tarball = DIST / f"fireside-{_version()}-linux-{os.uname().machine}.tar.gz"
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
    assert f"fireside-{_version()}-linux-{os.uname().machine}/fireside" in names


def test_menu_entry_and_command_are_installed(installed: list[str]) -> None:
    assert "/usr/bin/fireside" in installed
    assert "/usr/share/applications/fireside.desktop" in installed
    icons = [p for p in installed if p.startswith("/usr/share/icons/hicolor/")
             and p.endswith(("/fireside.png", "/fireside.svg"))]
    assert len(icons) >= 2
    entry = Path("/usr/share/applications/fireside.desktop").read_text()
    assert "Exec=fireside %f" in entry
    assert "Icon=fireside" in entry


def test_gguf_files_open_with_fireside(installed: list[str]) -> None:
    """The package's MIME type is installed, and the dpkg triggers of shared-mime-info
    and desktop-file-utils (where installed) gave it to the desktop's databases."""
    assert "/usr/share/mime/packages/fireside.xml" in installed
    entry = Path("/usr/share/applications/fireside.desktop").read_text()
    assert "MimeType=application/x-gguf;" in entry
    if shutil.which("update-mime-database"):
        assert Path("/usr/share/mime/application/x-gguf.xml").is_file()
        assert "application/x-gguf" in Path("/usr/share/mime/globs2").read_text()
    if shutil.which("update-desktop-database"):
        cache = Path("/usr/share/applications/mimeinfo.cache").read_text()
        assert "application/x-gguf=fireside.desktop;" in cache


def test_window_starts_without_locale_or_import_trouble(
        installed: list[str], clean_env: dict[str, str], tmp_path: Path) -> None:
    env = {**clean_env, "QT_QPA_PLATFORM": "offscreen", "FIRESIDE_EXIT_WHEN_READY": "1"}
    del env["LANG"]  # the bare C locale: the launcher must give Qt UTF-8 itself
    trace = tmp_path / "window.trace"
    result = _run([], env, cwd=tmp_path, trace=trace)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ready"), result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "locale" not in result.stderr.lower(), result.stderr
    assert _foreign_paths(trace) == []


def test_bundled_model_answers_offline(
        installed: list[str], clean_env: dict[str, str], tmp_path: Path) -> None:
    listed = _run(["models", "--json"], clean_env, cwd=tmp_path)
    models = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(Path(m["path"]).name, m["embedding"]) for m in models] == [
        ("all-MiniLM-L6-v2.f16.gguf", True), ("SmolLM2-135M-Instruct.Q4_1.gguf", False)]
    assert all(Path(m["path"]).is_relative_to(INSTALL_DIR) for m in models)
    # The embedding model travels with its license notice.
    assert (Path(models[0]["path"]).parent / "all-MiniLM-L6-v2.NOTICE.txt").is_file()

    trace = tmp_path / "chat.trace"
    ask = ["chat", "--json", "--temperature", "0", "--max-tokens", "24", QUESTION]
    result = _run(ask, clean_env, cwd=tmp_path, offline=True, trace=trace)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert _foreign_paths(trace) == []
    events = [json.loads(line) for line in result.stdout.splitlines()]
    reply = events[-1]
    assert reply["event"] == "reply" and reply["text"].strip(), result.stdout
    assert reply["finish_reason"] in {"stop", "length"} and reply["tokens"] > 0
    # The first start chose llama.cpp's CPU level by a real check, and kept the choice.
    record = json.loads((Path(clean_env["HOME"]) / ".cache" / "Fireside" /
                         "cpu-backend.json").read_text())
    assert record["passed_over"] == [], record
    assert (INSTALL_DIR / "_internal" / "llama_cpp" / "lib" /
            f"libggml-cpu-{record['variant']}.so").is_file()
    # The same question in a new process: the same words, without checking again. (Which
    # words a 135M model picks depends on the CPU's arithmetic, so they are not asserted.)
    again = _run(ask, clean_env, cwd=tmp_path, offline=True)
    assert json.loads(again.stdout.splitlines()[-1])["text"] == reply["text"]
    assert not any(e["event"] == "notice" for e in events), events


def test_the_installed_app_searches_and_pulls_from_the_hub(
        installed: list[str], clean_env: dict[str, str], tmp_path: Path,
        hub_server: LoopbackHub, smollm2_path: Path) -> None:
    """The bundle carries the Hub's client and its lazy imports: a search, then a pull
    cut once mid-file, against a Hub on loopback; the file lands checked."""
    hub_server.add("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF",
                   {"smollm2-135m-instruct-q4_1.gguf": smollm2_path})
    hub_server.cut_at["smollm2-135m-instruct-q4_1.gguf"] = 40_000_000
    env = {**clean_env, "HF_ENDPOINT": hub_server.endpoint}
    found = _run(["search", "smollm2", "--json"], env, cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["repo"] == "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
    trace = tmp_path / "pull.trace"
    pulled = _run(["pull", "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", "--json"], env,
                  cwd=tmp_path, trace=trace)
    assert pulled.returncode == 0, pulled.stderr
    assert "Traceback" not in pulled.stderr
    done = json.loads(pulled.stdout.splitlines()[-1])
    assert done["event"] == "downloaded" and done["sha256"] == hub_server.sha(smollm2_path)
    assert Path(done["path"]).is_relative_to(tmp_path / "data" / "models")
    assert _foreign_paths(trace) == []


def test_the_bundle_carries_no_amx_kernels(installed: list[str]) -> None:
    lib = INSTALL_DIR / "_internal" / "llama_cpp" / "lib"
    variants = sorted(p.name for p in lib.glob("libggml-cpu-*.so"))
    assert "libggml-cpu-haswell.so" in variants and "libggml-cpu-x64.so" in variants
    assert "libggml-cpu-sapphirerapids.so" not in variants
    found = {library.name: amx_instructions(library) for library in llama_libraries(lib)}
    assert not any(found.values()), f"AMX instructions in the bundle's llama.cpp: {found}"


def test_removing_the_package_leaves_no_file(installed: list[str]) -> None:
    result = subprocess.run(["dpkg", "-r", "fireside"], check=False, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    # Shared folders such as /usr/share/applications stay; everything of ours goes.
    left = [p for p in installed if os.path.lexists(p)
            and (not os.path.isdir(p) or Path(p).is_relative_to(INSTALL_DIR))]
    assert left == []
    assert not INSTALL_DIR.exists()
    # The MIME database, rebuilt by the trigger, no longer names the type.
    assert not Path("/usr/share/mime/application/x-gguf.xml").exists()


CRASHING_LEVEL = """
/* A CPU level that ggml ranks above every real one and that crashes as it starts. */
int ggml_backend_score(void) { return 1 << 20; }
void *ggml_backend_init(void) { *(volatile int *)0 = 1; return 0; }
"""


def test_a_cpu_level_that_crashes_is_passed_over(deb: Path, tmp_path: Path) -> None:
    """The first-start check with the bundle's real llama.cpp: a level that dies with
    SIGSEGV in a child process is passed over, the next one is used, the user is told."""
    python = ROOT / "build" / "package-venv" / "bin" / "python"
    where = subprocess.run([str(python), "-c", "import llama_cpp; print(llama_cpp.__file__)"],
                           check=True, capture_output=True, text=True).stdout.strip()
    lib = Path(where).parent / "lib"
    source = tmp_path / "crash.c"
    source.write_text(CRASHING_LEVEL)
    crashing = lib / "libggml-cpu-crashing.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O0", str(source), "-o", str(crashing)],
                   check=True)
    choose = ("import json, sys; from pathlib import Path; "
              "from app.core.models import bundled; from app.core.llama import cpu_backends as c; "
              "lib = Path(sys.argv[1]); "
              "choice = c.choose(c.ranked(lib), bundled.default_model_path()); "
              "print(json.dumps({'variant': choice.variant, 'notice': c.notice(), "
              "'ranked': [v.name for v in c.ranked(lib)]}))")
    try:
        result = subprocess.run([str(python), "-c", choose, str(lib)], check=False,
                                capture_output=True, text=True, timeout=300,
                                env={**os.environ, "FIRESIDE_CACHE_DIR": str(tmp_path)})
    finally:
        crashing.unlink()
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.splitlines()[-1])
    assert outcome["ranked"][0] == "crashing"
    assert outcome["variant"] == outcome["ranked"][1]  # the best real level for this CPU
    assert "crashing (SIGSEGV)" in outcome["notice"]
    assert f"uses its {outcome['variant']} code" in outcome["notice"]
