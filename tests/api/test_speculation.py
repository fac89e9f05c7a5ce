"""Speculative decoding through the local API: the drafted tokens in ``usage`` (under
Fireside's names and OpenAI's Predicted Outputs' ones) and in ``timings`` (llama.cpp's
server's names), and the same greedy answers with the setting on and off."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.api.server import LocalServer
from app.core import settings
from app.core.conversations.completions import timings, usage
from app.core.fireside import Fireside
from app.core.reply.replies import ReplyStats
from tests.api.test_local_server import ask, streamed
from tests.cli.test_speculation import PARAGRAPH, REPEAT
from tests.model_server import free_port


def test_usage_counts_the_drafted_tokens_under_both_names() -> None:
    stats = ReplyStats(prompt_tokens=80, cached_tokens=0, tokens=70, ttft_s=0.1,
                       tokens_per_s=50.0, finish_reason="stop", draft_proposed=60,
                       draft_accepted=45)
    told = usage(stats)
    assert (told["draft_proposed"], told["draft_accepted"]) == (60, 45)
    assert told["completion_tokens_details"] == {
        "reasoning_tokens": 0, "accepted_prediction_tokens": 45,
        "rejected_prediction_tokens": 15}
    assert (told["completion_tokens"], told["total_tokens"]) == (70, 150)
    assert (timings(stats)["draft_n"], timings(stats)["draft_n_accepted"]) == (60, 45)
    nothing = usage(dataclasses.replace(stats, draft_proposed=0, draft_accepted=0))
    assert nothing["completion_tokens_details"]["rejected_prediction_tokens"] == 0


@pytest.fixture
def server(smollm2_path: Path) -> Iterator[LocalServer]:
    prefs = settings.load().settings
    prefs.temperature, prefs.seed, prefs.context_size = 0.0, 1, 4096
    # One thread: llama.cpp computes a token alone and in a batch alike for SmolLM2
    # (tests/core/test_speculation.py), so the answers must match byte for byte.
    prefs.threads = 1
    core = Fireside.open(prefs=prefs)
    core.load(smollm2_path).result()
    serving = LocalServer(core, free_port())
    serving.start()
    yield serving
    serving.stop()
    core.close()


def test_answers_count_their_drafts_and_are_the_same_with_speculation_off(
        server: LocalServer) -> None:
    whole = ask(server, REPEAT, max_tokens=64)
    text, last = streamed(server, REPEAT, max_tokens=64)
    assert whole.choices[0].message.content == text and PARAGRAPH[:40] in text
    for told in (whole.usage, last.usage):
        details = told.completion_tokens_details
        assert told.draft_accepted == details.accepted_prediction_tokens > 0
        assert told.draft_proposed - told.draft_accepted == details.rejected_prediction_tokens
    # The setting off (the API has no field for it): the same words, nothing drafted.
    server.core.settings.speculation = False
    plain = ask(server, REPEAT, max_tokens=64)
    assert plain.choices[0].message.content == text
    assert plain.usage.draft_proposed == plain.usage.draft_accepted == 0
    assert plain.usage.completion_tokens_details.accepted_prediction_tokens == 0
