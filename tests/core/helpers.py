"""Small helpers shared by the core tests (no stand-ins: they drive the real engine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from app.core import templates
from app.core.engine import Engine, PromptPlan, Reply, Sampling, Session

GREEDY = Sampling(temperature=0.0, max_tokens=24, seed=1)
PROBE = "What is the capital of France?"


def ask(engine: Engine, messages: Sequence[dict[str, str]], sampling: Sampling = GREEDY,
        system_prompt: str | None = None, pieces: list[str] | None = None) -> Reply:
    """Render ``messages`` with the loaded model's template and wait for the reply."""

    def build(session: Session) -> PromptPlan:
        segments = templates.render(session.template, messages, system_prompt=system_prompt)
        return PromptPlan(session.encode(segments))

    handle = engine.generate(build, sampling, pieces.append if pieces is not None else None)
    return handle.future.result(timeout=120)


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def fresh_process_reply(model: Path, prompt: str, max_tokens: int = 24,
                        env: dict[str, str] | None = None) -> str:
    """The greedy reply of a brand-new ``fireside chat`` process."""
    result = subprocess.run(
        [sys.executable, "-m", "app", "chat", "--json", "--model", str(model),
         "--temperature", "0", "--seed", "1", "--max-tokens", str(max_tokens), prompt],
        capture_output=True, text=True, timeout=180, env=env or dict(os.environ), check=True)
    events = [json.loads(line) for line in result.stdout.splitlines()]
    replies = [e for e in events if e["event"] == "reply"]
    assert len(replies) == 1, result.stdout + result.stderr
    text: str = replies[0]["text"]
    return text


def rss_bytes() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)
