"""One window per user and data folder: a second launch hands its model file to the
window already open and exits; a model file opened from the file manager joins the
models and loads, and one that cannot be used is reported and changes nothing."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.cli.main import parse
from app.core import paths, settings
from app.ui.notices import Level
from app.ui.window import MainWindow
from tests.gguf_files import copy_with_metadata, write_gguf
from tests.ui.conftest import Notices, close_window, greedy_settings, wait_for_model_loaded

START_TIMEOUT_S = 120
REACHED = re.compile(r"later launches reach this window at (\S+)")


class Launch:
    """``fireside`` started as the desktop starts it, its log in a file (never a pipe: the
    app must not wait on a reader)."""

    def __init__(self, tmp_path: Path, name: str, *args: str) -> None:
        self.log = tmp_path / f"{name}.log"
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "app", "--log-level", "INFO", *args],
                stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, done: Callable[[], object], what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not done():
            assert self.process.poll() is None, f"it ended before {what}:\n{self.text()[-3000:]}"
            assert time.monotonic() < deadline, f"never {what}:\n{self.text()[-3000:]}"
            time.sleep(0.1)

    def address(self) -> str:
        """Where it listens for later launches, as it says once it does."""
        found: list[str] = []

        def said() -> bool:
            found[:] = REACHED.findall(self.text())
            return bool(found)

        self.wait_for(said, "listened for later launches")
        return found[0]

    def close(self) -> int:
        """Close it as a session manager would; its exit status."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=START_TIMEOUT_S)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def launches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Launch]]:
    """Start ``fireside`` in processes of its own, in this test's home; all are ended."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    started: list[Launch] = []

    def launch(name: str, *args: str) -> Launch:
        started.append(Launch(tmp_path, name, *args))
        return started[-1]

    yield launch
    for one in started:
        one.kill()


def launch_again(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A later launch: it should hand over and exit at once, on its own."""
    return subprocess.run([sys.executable, "-m", "app", "--log-level", "INFO", *args],
                          cwd=tmp_path, capture_output=True, text=True,
                          timeout=START_TIMEOUT_S, check=False)


def last_model() -> str | None:
    return settings.load().settings.last_model


def outside_copy(model: Path, folder: Path) -> Path:
    """A model of its own name in a folder Fireside does not look in (a download)."""
    folder.mkdir(exist_ok=True)
    return copy_with_metadata(model, folder / "Opened Model.gguf",
                              {"general.name": "Opened Model"})


def test_a_second_launch_hands_its_model_to_the_open_window_and_exits(
        smollm2_path: Path, launches: Callable[..., Launch], tmp_path: Path) -> None:
    greedy_settings()
    first = launches("first")
    first.wait_for(lambda: last_model() == str(smollm2_path), "loaded the bundled model")
    opened = outside_copy(smollm2_path, tmp_path / "downloads")

    # Named as a terminal user would: from where they are.
    second = launch_again(tmp_path, "downloads/Opened Model.gguf")

    assert second.returncode == 0, second.stderr
    assert "handed over" in second.stderr and "ready" not in second.stdout
    first.wait_for(lambda: last_model() == str(opened), "loaded the model handed over")
    assert first.close() == 0
    assert "Traceback" not in first.text(), first.text()[-3000:]


def test_a_socket_left_by_a_killed_window_does_not_block_the_next(
        launches: Callable[..., Launch], tmp_path: Path) -> None:
    crashed = launches("crashed")
    address = crashed.address()
    crashed.kill()  # SIGKILL: nothing of it runs to clean up
    assert Path(address).exists() and (paths.data_dir() / "window.lock").exists()

    window = launches("window")
    assert window.address() == address
    again = launch_again(tmp_path)
    assert again.returncode == 0 and "handed over" in again.stderr, again.stderr
    # The terminal's commands take no part: they run beside the window.
    listed = subprocess.run([sys.executable, "-m", "app", "models"], capture_output=True,
                            text=True, timeout=START_TIMEOUT_S, check=False)
    assert listed.returncode == 0, listed.stderr
    assert window.process.poll() is None
    assert window.close() == 0
    assert not Path(address).exists()


def test_a_model_file_alone_on_the_command_line_is_for_the_window() -> None:
    assert parse(["/home/me/Downloads/Qwen3-4B.Q4_K_M.gguf"]).open == \
        Path("/home/me/Downloads/Qwen3-4B.Q4_K_M.gguf")
    assert parse(["--models-dir", "/models", "m.gguf"]).open == Path("m.gguf")
    chat = parse(["chat", "hello"])
    assert chat.command == "chat" and chat.open is None
    with pytest.raises(SystemExit):
        parse(["chta"])  # a mistyped command is still named as one, not opened
    with pytest.raises(SystemExit):
        parse(["m.gguf", "chat"])


# The window's side, in this process ------------------------------------------------


@pytest.fixture
def window(qtbot: Any, qasync_loop: Any, notices: Notices) -> Iterator[Callable[..., MainWindow]]:
    """A real window; ``opened`` is handed to it before it starts, as at a launch."""
    made: list[MainWindow] = []

    def open_(opened: Path | None = None) -> MainWindow:
        greedy_settings()
        made.append(MainWindow(settings.load().settings))
        if opened is not None:
            made[-1].open_model(opened)
        made[-1].show()
        made[-1].start()
        wait_for_model_loaded(qtbot, made[-1])
        return made[-1]

    yield open_
    for one in made:
        close_window(qtbot, one)
    assert not [n.text for n in notices if n.unexpected]


def test_a_file_opened_joins_the_models_and_loads_and_stays_listed(
        window: Callable[..., MainWindow], smollm2_path: Path, tmp_path: Path,
        qtbot: Any) -> None:
    shown = window()
    opened = outside_copy(smollm2_path, tmp_path / "downloads")

    shown.open_model(opened)

    def loaded() -> bool:
        model = shown.chat.models.model
        return model is not None and model.path == opened and not shown.chat.models.loading
    qtbot.waitUntil(loaded, timeout=START_TIMEOUT_S * 1000)
    assert shown.picker.currentText() == "Opened Model"
    listed = [e.path for e in shown.picker.list_model.entries]
    assert opened in listed and smollm2_path in listed
    # The folders looked at again (a file came or went): the opened file stays listed.
    with qtbot.waitSignal(shown.chat.models.catalog_changed, timeout=30_000):
        write_gguf(paths.models_dir() / "tiny.gguf", metadata={"general.name": "Tiny"})
        shown.chat.models.rescan()
    assert opened in [e.path for e in shown.picker.list_model.entries]


def test_a_file_listed_already_under_another_path_loads_as_listed(
        window: Callable[..., MainWindow], gemma_path: Path, tmp_path: Path,
        qtbot: Any) -> None:
    shown = window()
    listed = shown.picker.list_model.entries
    alias = tmp_path / "gemma-link.gguf"
    alias.symlink_to(gemma_path)

    shown.open_model(alias)

    def loaded() -> bool:
        model = shown.chat.models.model
        return model is not None and model.path == gemma_path and not shown.chat.models.loading
    qtbot.waitUntil(loaded, timeout=START_TIMEOUT_S * 1000)
    assert shown.picker.list_model.entries == listed  # not listed twice
    assert shown.picker.currentText() == "Gemma 3 270M"


@pytest.mark.model  # the window loads the bundled model, found as the app finds it
@pytest.mark.parametrize("case", [
    (None, "file not found"), (b"just some text, not a model", "not a GGUF file")])
def test_a_file_that_cannot_be_used_is_reported_and_the_model_stays(
        window: Callable[..., MainWindow], tmp_path: Path, notices: Notices, qtbot: Any,
        case: tuple[bytes | None, str]) -> None:
    content, reason = case
    shown = window()
    before = shown.chat.models.model
    listed = shown.picker.list_model.entries
    broken = tmp_path / "broken.gguf"
    if content is not None:
        broken.write_bytes(content)

    shown.open_model(broken)

    def told() -> list[str]:
        return [t for t in notices.texts(Level.ERROR) if str(broken) in t]
    qtbot.waitUntil(lambda: bool(told()), timeout=30_000)
    assert told() == [f"{broken} cannot be opened: {reason}."]
    assert shown.chat.models.model is before and not shown.chat.models.loading
    assert before is not None and shown.picker.current_path() == before.path
    assert shown.picker.list_model.entries == listed
    assert shown.composer_bar.send_button.toolTip() == "Send (Enter)"  # it can still send


def test_a_window_started_on_a_file_loads_it_instead_of_the_last_model(
        window: Callable[..., MainWindow], smollm2_path: Path, gemma_path: Path,
        tmp_path: Path) -> None:
    prefs = greedy_settings()
    prefs.last_model = str(gemma_path)
    settings.save(prefs)
    opened = outside_copy(smollm2_path, tmp_path / "downloads")

    shown = window(opened)

    assert shown.chat.models.model is not None
    assert shown.chat.models.model.path == opened
    assert shown.prefs.last_model == str(opened)  # and so at the next start too


def test_a_window_started_on_a_missing_file_says_so_and_loads_the_usual_model(
        window: Callable[..., MainWindow], smollm2_path: Path, tmp_path: Path,
        notices: Notices) -> None:
    missing = tmp_path / "gone.gguf"

    shown = window(missing)

    assert shown.chat.models.model is not None
    assert shown.chat.models.model.path == smollm2_path
    assert f"{missing} cannot be opened: file not found." in notices.texts(Level.ERROR)
