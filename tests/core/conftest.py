"""Fixtures of the core tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.conversations.chat import ChatService
from app.core.conversations.store import Store
from app.core.llama.engine import Engine

LOAD_TIMEOUT = 120  # a load that takes longer than this is stuck


@pytest.fixture
def chat(smollm2_path: Path) -> Iterator[ChatService]:
    """A chat service on SmolLM2 and a conversation store in memory."""
    engine = Engine()
    store = Store()
    engine.load(smollm2_path).result(LOAD_TIMEOUT)
    yield ChatService(engine, store)
    assert engine.close()
    store.close()
