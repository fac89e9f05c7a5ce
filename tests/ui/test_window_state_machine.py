"""Random sequences of what a user does, in the real window on the real models.

Sending, stopping, new chats, model switches (to files that load, one listed as
damaged and one llama.cpp refuses), regenerating, editing, opening, renaming and
deleting conversations, changing a setting, and bursts of these with no pause in
between. After every step (see tests/ui/actions.py): nothing unexpected was raised
or shown, everything finished within a bound, the picker shows the model that is
loaded, and the window shows exactly what the database holds.
"""

from __future__ import annotations

import asyncio
import traceback
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from app.core.llama import engine
from tests.scripted_engine import ScriptedEngine
from tests.ui.actions import ACTIONS, Problems, WindowUser, model_files, wait_until
from tests.ui.conftest import WindowFactory, close_window, greedy_settings

pytestmark = pytest.mark.slow

CHOICES = st.integers(min_value=0, max_value=50)
STEP = st.tuples(st.sampled_from(ACTIONS), CHOICES)
# Real models are not deterministic in timing: a failing sequence is reported as it
# happened (no shrinking, which would replay it and find it behaving differently). On the
# real models a few sequences (CI time); on the scripted engine, new ones every run.
REAL_MODELS = settings(max_examples=2, stateful_step_count=10, deadline=None,
                       derandomize=True, database=None, phases=[Phase.generate],
                       suppress_health_check=list(HealthCheck))
SCRIPTED = settings(max_examples=15, stateful_step_count=15, deadline=None, database=None,
                    phases=[Phase.generate], suppress_health_check=list(HealthCheck))


@pytest.fixture
def models(tmp_path: Path, smollm2_path: Path, gemma_path: Path) -> list[Path]:
    return model_files(tmp_path / "models", smollm2_path, gemma_path)


def test_any_sequence_of_user_actions_keeps_the_window_consistent(
        open_window: WindowFactory, qasync_loop: asyncio.AbstractEventLoop,
        models: list[Path], qtbot: Any) -> None:
    run_user_sessions(open_window, qasync_loop, models, qtbot, REAL_MODELS)


def test_many_more_sequences_on_the_scripted_engine(
        open_window: WindowFactory, qasync_loop: asyncio.AbstractEventLoop,
        models: list[Path], qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same user, on replies that take no time: the window's ordering, many times."""
    monkeypatch.setattr(engine, "Engine", lambda **_: ScriptedEngine(piece_delay_s=0.01))
    run_user_sessions(open_window, qasync_loop, models, qtbot, SCRIPTED)


def run_user_sessions(open_window: WindowFactory, qasync_loop: asyncio.AbstractEventLoop,
                      models: list[Path], qtbot: Any, budget: settings) -> None:
    greedy_settings(max_tokens=12)
    problems = Problems()
    uninstall = problems.install(qasync_loop)

    class UserSession(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.window = open_window([models[2].parent])
            self.user = WindowUser(self.window, models, problems)

        def teardown(self) -> None:
            close_window(qtbot, self.window)  # one window (and model) at a time

        @rule(action=st.sampled_from(ACTIONS), choice=CHOICES)
        def act(self, action: str, choice: int) -> None:
            self.user.do(action, choice)

        @rule(steps=st.lists(STEP, min_size=2, max_size=4))
        def fast_hands(self, steps: list[tuple[str, int]]) -> None:
            for action, choice in steps:
                self.user.do(action, choice)

        @rule(choice=CHOICES)
        def stop_mid_reply(self, choice: int) -> None:
            self.user.do("send", choice)
            controller = self.user.controller
            wait_until(lambda: controller.streaming or not controller.busy, "a reply to start")
            self.user.do("stop", choice)

        @invariant()
        def consistent(self) -> None:
            try:
                self.user.check()
            except AssertionError:
                failures.append(f"after {self.user.log}:\n{traceback.format_exc()}")
                raise

    failures: list[str] = []
    try:
        run_state_machine_as_test(UserSession, settings=budget)
    except Exception:
        # Replaying a failure on real models may not fail the same way (hypothesis then
        # reports that instead): the first failure, as it happened, is the one to see.
        if failures:
            pytest.fail(failures[0], pytrace=False)
        raise
    finally:
        uninstall()
