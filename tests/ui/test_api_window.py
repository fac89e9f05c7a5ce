"""Fireside's local API turned on in the window: another app streams from the loaded
model while the user chats, and follows the model the user picks."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import openai

from app.core import settings
from tests.model_server import free_port
from tests.ui.conftest import (
    REPLY_TIMEOUT_MS,
    Notices,
    WindowFactory,
    greedy_settings,
    send,
    wait_for_model_loaded,
)
from tests.ui.test_window import choose_model


def ask(url: str, text: str, max_tokens: int = 24) -> tuple[str, str]:
    """The model that answered and its streamed text, as any OpenAI client reads them."""
    parts, model = [], ""
    with openai.OpenAI(base_url=url, api_key="none", max_retries=0) as api:
        for chunk in api.chat.completions.create(
                model="whatever", messages=[{"role": "user", "content": text}],
                stream=True, max_tokens=max_tokens, temperature=0):
            model = chunk.model
            parts += [c.delta.content or "" for c in chunk.choices]
    return model, "".join(parts)


def test_the_server_turned_on_in_settings_serves_beside_the_users_chat(
        open_window: WindowFactory, qtbot: Any, notices: Notices, gemma_path: Path) -> None:
    port = free_port()
    greedy_settings(api_port=port)
    window = open_window()
    assert not window.status.serving.isVisible()  # off by default
    window.show_settings()
    page = window._settings_dialog.api_page
    page.serve_box.setChecked(True)
    url = f"http://127.0.0.1:{port}/v1"
    qtbot.waitUntil(lambda: url in window.status.serving.text(), timeout=10_000)
    assert url in page.status.text()
    # On again at the next start (settings reach the disk off the GUI thread).
    qtbot.waitUntil(lambda: settings.load().settings.serve_api, timeout=10_000)

    # Another app's long request holds the model; the user's message waits its turn.
    answered: dict[str, tuple[str, str]] = {}
    other = threading.Thread(target=lambda: answered.update(
        long=ask(url, "Tell a long story.", max_tokens=150)))
    other.start()
    qtbot.waitUntil(lambda: "answering a request" in window.status.serving.text(),
                    timeout=REPLY_TIMEOUT_MS)
    text, stats = send(qtbot, window, "Name a colour.")
    assert any("Waiting for the local server's request" in t for t in notices.texts())
    other.join()
    model, story = answered["long"]
    assert text and story and model == stats.model  # both answered, neither cut
    qtbot.waitUntil(lambda: "answering" not in window.status.serving.text(), timeout=10_000)

    # The user switches model: the next request is answered by it.
    choose_model(window.picker, gemma_path)
    wait_for_model_loaded(qtbot, window)
    model, answer = ask(url, "Hello!")
    assert model == "Gemma 3 270M" and answer

    page.serve_box.setChecked(False)
    qtbot.waitUntil(lambda: not window.status.serving.isVisible(), timeout=10_000)

    def refused() -> bool:
        try:
            ask(url, "Still there?")
        except openai.APIConnectionError:
            return True
        return False

    qtbot.waitUntil(refused, timeout=10_000)
