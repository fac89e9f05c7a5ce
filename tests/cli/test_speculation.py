"""Speculative decoding in the terminal, on the real models: the same greedy replies with
it on and off, the drafting counted in ``--json``'s reply events, and ``--draft``: a model
that can draft is used, one that cannot is refused (exit 2) with the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_commands import events, fireside
from tests.core.helpers import PROBE
from tests.core.test_drafts import small_model

PARAGRAPH = ("The lighthouse stood on the rocks at the edge of the bay. Every night the keeper "
             "climbed the stairs, lit the lamp and watched the ships pass by until morning "
             "came.")
REPEAT = f"Repeat this text exactly: {PARAGRAPH}"
PROMPTS = (PROBE, REPEAT, "Write a short poem about the sea.")
GREEDY = ("--json", "--temperature", "0", "--max-tokens", "48")


def replies(*args: str, prompts: tuple[str, ...] = PROMPTS) -> list[dict[str, Any]]:
    """The reply events of one terminal session asked each prompt in a new chat."""
    script = "\n/new\n".join(prompts) + "\n"
    result = fireside("chat", *GREEDY, *args, stdin=script)
    assert result.returncode == 0, result.stderr
    found = [e for e in events(result.stdout) if e["event"] == "reply"]
    assert len(found) == len(prompts)
    return found


def test_speculation_changes_no_greedy_reply_and_drafts_what_the_reply_repeats(
        smollm2_path: Path) -> None:
    # One thread: llama.cpp computes a token alone and in a batch alike for SmolLM2
    # (tests/core/test_speculation.py), so the replies must match byte for byte.
    path = str(smollm2_path)
    on = replies("--model", path, "--threads", "1")
    off = replies("--model", path, "--threads", "1", "--no-speculation")
    assert [r["text"] for r in on] == [r["text"] for r in off]
    assert all(r["draft_proposed"] == r["draft_accepted"] == 0 for r in off)
    for reply in on:
        assert 0 <= reply["draft_accepted"] <= reply["draft_proposed"]
    # Prompt lookup drafts what follows an n-gram seen before: a paragraph repeated
    # from the prompt is drafted, and kept.
    repeated = on[PROMPTS.index(REPEAT)]
    assert PARAGRAPH[:40] in repeated["text"]
    assert repeated["draft_accepted"] > 0


def test_gemma_drafts_the_paragraph_it_repeats(gemma_path: Path) -> None:
    repeated, = replies("--model", str(gemma_path), prompts=(REPEAT,))
    assert PARAGRAPH[:40] in repeated["text"]
    assert repeated["draft_accepted"] > 0


def test_a_model_drafting_for_itself_gives_the_same_replies_drafting_more(
        smollm2_path: Path) -> None:
    prompts = (REPEAT, PROBE)
    alone = replies("--model", str(smollm2_path), "--threads", "1", prompts=prompts)
    result = fireside("chat", *GREEDY, "--model", str(smollm2_path), "--threads", "1",
                      "--draft", str(smollm2_path), stdin="\n/new\n".join(prompts) + "\n")
    assert result.returncode == 0, result.stderr
    stream = events(result.stdout)
    loaded, = [e for e in stream if e["event"] == "model_loaded"]
    assert loaded["draft"] == "SmolLM2-135M-Instruct"
    drafted = [e for e in stream if e["event"] == "reply"]
    assert [r["text"] for r in drafted] == [r["text"] for r in alone]
    # The conversation is looked up first; the model drafts where it finds nothing, and
    # its own greedy guesses are kept: more drafted and more kept than by lookup alone.
    for key in ("draft_proposed", "draft_accepted"):
        assert sum(r[key] for r in drafted) > sum(r[key] for r in alone), key


def test_a_draft_model_of_another_vocabulary_is_refused_before_anything_loads(
        smollm2_path: Path, gemma_path: Path) -> None:
    plain = fireside("chat", "--model", str(smollm2_path), "--draft", "Gemma 3 270M", "Hi")
    assert plain.returncode == 2 and plain.stdout == ""
    assert "Gemma 3 270M cannot draft for SmolLM2-135M-Instruct: their vocabularies differ " \
        "(llama tokenizer against gpt2)" in plain.stderr
    scripted = fireside("chat", "--json", "--model", str(gemma_path),
                        "--draft", str(smollm2_path), "Hi")
    assert scripted.returncode == 2
    error, = events(scripted.stdout)  # nothing loaded, nothing asked
    assert error["event"] == "error" and "vocabularies differ" in error["message"]
    served = fireside("serve", "--model", str(smollm2_path), "--draft", str(gemma_path),
                      timeout=60)
    assert served.returncode == 2 and "vocabularies differ" in served.stderr


@pytest.mark.model  # finds the bundled model as the app does
def test_a_draft_that_is_not_a_model_is_refused(tmp_path: Path) -> None:
    notes = tmp_path / "notes.gguf"
    notes.write_text("not a model", encoding="utf-8")
    for draft, said in ((tmp_path / "missing.gguf", "missing.gguf cannot draft: file not found"),
                        (notes, "notes.gguf cannot draft: not a GGUF file")):
        result = fireside("chat", "--draft", str(draft), "Hi")
        assert result.returncode == 2 and said in result.stderr, result.stderr


def test_a_draft_model_the_engine_refuses_ends_the_session_with_the_reason(
        smollm2_path: Path, tmp_path: Path) -> None:
    # Its header has SmolLM2's vocabulary, but it has no weights llama.cpp can run.
    hollow = small_model(tmp_path)
    result = fireside("chat", "--model", str(smollm2_path), "--draft", str(hollow), "Hi")
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""  # no question asked of a model without the draft it was given
    assert "SmolLM2-Draft" in result.stderr
