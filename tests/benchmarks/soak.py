"""Soak: many random user actions in the real window, on both models.

    python tests/benchmarks/soak.py [ACTIONS] [SEED]

Drives one window (offscreen) with the actions of tests/ui/actions.py, some of them
in bursts with no pause in between, and checks the window after each action and
burst exactly as the state-machine test does. Prints actions per minute, failures,
and resident memory after 100 actions and at the end (target: within 10 % of the
level at 100, 0 failures), each sampled with SmolLM2 loaded and a new chat open.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_API", "pyside6")

import psutil
import qasync
from PySide6.QtCore import QMessageLogContext, QtMsgType, qInstallMessageHandler
from PySide6.QtWidgets import QApplication

from app.core import settings
from app.core.models import bundled
from app.ui import application, theme
from app.ui.window import MainWindow
from tests.ui.actions import ACTIONS, Problems, WindowUser, model_files, wait_until

ACTIONS_DEFAULT = 1000
WARM_UP = 100  # memory is compared against its level after this many actions
BURST_CHANCE = 0.2
REPLY_TOKENS = 8


def main() -> int:
    total = int(sys.argv[1]) if len(sys.argv) > 1 else ACTIONS_DEFAULT
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    home = Path(tempfile.mkdtemp(prefix="fireside-soak-"))
    os.environ["FIRESIDE_DATA_DIR"] = str(home / "data")
    os.environ["FIRESIDE_CONFIG_DIR"] = str(home / "config")

    folder = home / "models"
    models = model_files(folder, bundled.bundled_dir() / bundled.DEFAULT_MODEL_FILE,
                         bundled.bundled_dir() / bundled.GEMMA_FILE)
    prefs = settings.Settings(temperature=0.0, seed=1, max_tokens=REPLY_TOKENS,
                              context_size=2048)
    settings.save(prefs)

    app = QApplication([sys.argv[0], *theme.STYLE_ARGS])
    loop = qasync.QEventLoop(app, already_running=True)
    asyncio.set_event_loop(loop)
    window = application.open_window(app, [folder])
    window.start()
    wait_until(lambda: window.controller is not None and window.controller.core.model is not None
               and not window.controller.busy, "the first model")
    problems = Problems()
    uninstall = problems.install(loop)

    def on_qt_message(kind: QtMsgType, _context: QMessageLogContext, text: str) -> None:
        # As in the tests, a Qt warning is a failure (the offscreen platform's own
        # notes about window sizes aside).
        quiet = kind in (QtMsgType.QtDebugMsg, QtMsgType.QtInfoMsg)
        if not quiet and "This plugin does not support" not in text:
            problems.exceptions.append(f"Qt: {text}")

    qInstallMessageHandler(on_qt_message)
    try:
        return _soak(window, WindowUser(window, models, problems), problems, total, seed)
    finally:
        uninstall()


def _settled_rss(user: WindowUser, process: psutil.Process) -> int:
    """Resident memory in one fixed state: SmolLM2 loaded and a new chat open. Each
    model holds a different amount, so only samples taken alike can be compared."""
    user.switch_model(0)
    user.wait_idle()
    user.new_chat(0)
    user.wait_idle()
    gc.collect()
    return int(process.memory_info().rss)


def _soak(window: MainWindow, user: WindowUser, problems: Problems, total: int,
          seed: int) -> int:
    rng = random.Random(seed)
    process = psutil.Process()
    warm_up = min(WARM_UP, total // 10 or 1)

    done = 0
    failures: list[str] = []
    rss_warm = 0
    started = time.perf_counter()
    while done < total:
        steps = rng.randint(2, 4) if rng.random() < BURST_CHANCE else 1
        steps = min(steps, total - done)
        try:
            for _ in range(steps):
                user.do(rng.choice(ACTIONS), rng.randrange(51))
            user.check()
            problems.notices.clear()  # checked: only what comes next matters
        except AssertionError:
            failures.append(f"after {user.log[-8:]}:\n{traceback.format_exc()}")
            print(f"  failure {len(failures)}: {failures[-1].splitlines()[-1][:400]}"
                  f" after {user.log[-4:]}", flush=True)
            problems.notices.clear()
            problems.exceptions.clear()
        before, done = done, done + steps
        if before < warm_up <= done:
            rss_warm = _settled_rss(user, process)
        if done // 100 != before // 100:
            print(f"  {done} actions, {len(failures)} failures, "
                  f"{_settled_rss(user, process) / 2**20:.0f} MB", flush=True)
    elapsed = time.perf_counter() - started
    rss_end = _settled_rss(user, process)

    window.close()
    wait_until(lambda: window.is_shut_down, "closing")
    for failure in failures[:5]:
        print(failure)
    growth = rss_end / rss_warm - 1
    print(f"actions: {done} in {elapsed / 60:.1f} min, {done / elapsed * 60:.0f} per minute")
    print(f"failures: {len(failures)}")
    print(f"RSS after {warm_up}: {rss_warm / 2**20:.0f} MB; after {done}: "
          f"{rss_end / 2**20:.0f} MB ({growth:+.1%}, target within ±10 %)")
    return 0 if not failures and abs(growth) <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
