"""The terminal commands (app/cli), driven as a user or a script would: real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.core import settings
from app.core.options import Sampling
from tests.core.helpers import PROBE, start_long_reply, stored_reply
from tests.reference import Reference
from tests.stores import ollama_model


def fireside(*args: str, stdin: str | None = None, timeout: float = 240) -> \
        subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], input=stdin, check=False,
                          capture_output=True, text=True, timeout=timeout, env=dict(os.environ))


def events(stdout: str) -> list[dict[str, Any]]:
    # --json promises that stdout carries nothing but JSON lines.
    return [json.loads(line) for line in stdout.splitlines()]


@pytest.mark.model  # the bundled model, found as the app finds it
def test_models_lists_the_bundled_models() -> None:
    result = fireside("models", "--json")
    assert result.returncode == 0, result.stderr
    models = events(result.stdout)
    by_arch = {m["architecture"]: m for m in models}
    assert {"llama", "gemma3"} <= set(by_arch)
    for model in models:
        assert {"name", "path", "architecture", "size_bytes", "context_length",
                "quantization", "error"} <= set(model)
    assert by_arch["gemma3"]["quantization"] == "Q4_K_M"
    assert by_arch["llama"]["error"] is None
    assert (by_arch["gemma3"]["base_model"], by_arch["llama"]["base_model"]) == (True, False)
    listed = fireside("models").stdout
    gemma_line, = [line for line in listed.splitlines() if line.startswith("Gemma 3")]
    assert "base model" in gemma_line
    assert "base model" not in listed.replace(gemma_line, "")


def test_a_base_model_says_once_that_it_continues_text(gemma_path: Path,
                                                       smollm2_path: Path) -> None:
    greedy = ("--temperature", "0", "--max-tokens", "8")
    two_turns = fireside("chat", "--model", str(gemma_path), *greedy, stdin="Hi\nAnd?\n")
    assert two_turns.returncode == 0, two_turns.stderr
    assert two_turns.stderr.count("is a base model: it continues the text") == 1
    loaded, = [e for e in events(fireside("chat", "--json", "--model", str(gemma_path),
                                          *greedy, "Hi").stdout)
               if e["event"] == "model_loaded"]
    assert loaded["base_model"] is True
    chat_model = fireside("chat", "--model", str(smollm2_path), *greedy, "Hi")
    assert "base model" not in chat_model.stderr


def test_the_model_at_start_is_the_users_choice_before_the_last_one_used(
        gemma_path: Path, smollm2_path: Path) -> None:
    prefs = settings.load().settings
    prefs.default_model, prefs.last_model = str(gemma_path), str(smollm2_path)
    settings.save(prefs)

    def loaded(*args: str) -> Path:
        result = fireside("chat", "--json", "--max-tokens", "1", *args, "Hi")
        assert result.returncode == 0, result.stderr
        event, = [e for e in events(result.stdout) if e["event"] == "model_loaded"]
        return Path(event["path"])

    assert loaded() == gemma_path  # "Model at start", as the window starts with
    assert loaded("--model", str(smollm2_path)) == smollm2_path  # named: it wins
    assert settings.load().settings.last_model == str(smollm2_path)
    assert loaded() == gemma_path  # the setting still comes before the last one used


def answer(reference: Reference, model: Path, max_tokens: int = 24) -> str:
    """What llama-cpp-python answers PROBE with here, greedily, as `chat --temperature 0`."""
    return reference.reply(model, PROBE, Sampling(temperature=0.0, max_tokens=max_tokens))


def test_chat_answers_a_prompt_and_streams_json(reference: Reference,
                                                smollm2_path: Path) -> None:
    result = fireside("chat", "--json", "--temperature", "0", "--max-tokens", "24", PROBE)
    assert result.returncode == 0, result.stderr
    stream = events(result.stdout)
    assert stream[0]["event"] == "model_loaded" and stream[0]["seconds"] > 0
    deltas = [e["text"] for e in stream if e["event"] == "delta"]
    reply = stream[-1]
    assert reply["event"] == "reply" and reply["text"] == answer(reference, smollm2_path)
    assert "".join(deltas) == reply["text"]
    for key in ("prompt_tokens", "cached_tokens", "tokens", "ttft_s", "tokens_per_s",
                "stopped", "dropped_turns"):
        assert key in reply
    assert reply["finish_reason"] in {"stop", "length"} and reply["tokens"] > 0


def test_plain_chat_prints_the_answer(reference: Reference, smollm2_path: Path) -> None:
    result = fireside("chat", "--temperature", "0", "--max-tokens", "24", PROBE)
    assert result.returncode == 0
    assert result.stdout.strip() == answer(reference, smollm2_path).strip()


def test_a_stdin_session_with_commands(gemma_path: Path, tmp_path: Path, reference: Reference,
                                       smollm2_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x00" * 10)
    script = "\n".join([PROBE, "/new", f"/model {broken}", "/models", f"/model {gemma_path}",
                        "Hello!", "/quit", "never sent"]) + "\n"
    result = fireside("chat", "--json", "--temperature", "0", "--max-tokens", "16",
                      stdin=script)
    assert result.returncode == 0, result.stderr
    names = [e["event"] for e in events(result.stdout)]
    compact = [n for i, n in enumerate(names) if n != "delta" or names[i - 1] != "delta"]
    assert compact == ["model_loaded", "delta", "reply", "chat_cleared", "error", "models",
                       "model_loaded", "delta", "reply"]
    stream = events(result.stdout)
    assert stream[names.index("reply")]["text"] == answer(reference, smollm2_path, 16)
    error = next(e for e in stream if e["event"] == "error")
    assert "broken.gguf" in error["message"]
    assert stream[-1]["event"] == "reply" and stream[-1]["text"]


def test_conversations_from_the_terminal_are_stored_and_exported(reference: Reference,
                                                                  smollm2_path: Path) -> None:
    fireside("chat", "--temperature", "0", "--max-tokens", "24", PROBE)
    exported = fireside("export", "--format", "json", "--all")
    assert exported.returncode == 0
    conversations = json.loads(exported.stdout)["conversations"]
    assert len(conversations) == 1
    texts = [m["text"] for m in conversations[0]["messages"]]
    assert texts == [PROBE, answer(reference, smollm2_path)]
    markdown = fireside("export").stdout
    assert PROBE in markdown and answer(reference, smollm2_path).strip() in markdown


INTRODUCTION = ("My name is Ada. I keep a lighthouse on a small island, I read old sea "
                "charts in the evening and I write down every ship that passes by.")


def test_a_stored_conversation_goes_on_in_a_later_terminal_chat(smollm2_path: Path) -> None:
    greedy = ("--temperature", "0", "--max-tokens", "8", "--json")
    assert fireside("chat", "--continue", *greedy, "Hi").returncode == 2  # nothing yet
    first = fireside("chat", *greedy, INTRODUCTION)
    later = fireside("chat", "--continue", *greedy, "What is my name?")
    assert first.returncode == later.returncode == 0, later.stderr
    opened, = [e for e in events(later.stdout) if e["event"] == "conversation_opened"]
    assert opened["messages"] == 2 and opened["title"]
    # The first process kept the sequence's state as it quit: it is not read again.
    reply, = [e for e in events(later.stdout) if e["event"] == "reply"]
    assert reply["restored_tokens"] > 50
    by_id = fireside("chat", "--conversation", str(opened["id"]), *greedy, "Thanks.")
    assert by_id.returncode == 0
    conversations = json.loads(fireside("export", "--all", "--format", "json").stdout
                               )["conversations"]
    assert len(conversations) == 1
    users = [m["text"] for m in conversations[0]["messages"] if m["role"] == "user"]
    assert users == [INTRODUCTION, "What is my name?", "Thanks."]
    missing = fireside("chat", "--conversation", "999", *greedy, "Hello?")
    assert missing.returncode == 2 and "no conversation with id 999" in missing.stdout


@pytest.mark.parametrize(("args", "named"), [
    (["chat", "--top-p", "2", "hi"], "--top-p must be in (0, 1]"),
    (["chat", "--max-tokens", "0"], "--max-tokens must be positive"),
    (["chat", "--model", "no-such-model", "hi"], "No model called 'no-such-model'"),
    (["nonsense"], "'nonsense'"),
    (["chat", "--thinking-budget", "-1", "hi"], "--thinking-budget must be 0 or more"),
    (["chat", "--thinking", "sometimes", "hi"], "invalid choice: 'sometimes'")])
def test_bad_arguments_exit_non_zero_naming_what_is_wrong(args: list[str], named: str) -> None:
    result = fireside(*args)
    assert result.returncode == 2
    assert named in result.stderr and not result.stdout, "the error, on stderr alone"


def test_a_model_that_cannot_load_at_start_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_text("not a model")
    result = fireside("chat", "--json", "--model", str(bad), "hi")
    assert result.returncode == 1
    (event,) = events(result.stdout)
    assert event["event"] == "error" and "bad.gguf" in event["message"]


def test_ctrl_c_during_a_reply_stops_it_and_keeps_the_session(smollm2_path: Path) -> None:
    process = start_long_reply(smollm2_path)
    assert process.stdin is not None and process.stdout is not None
    process.send_signal(signal.SIGINT)
    reply = next(e for e in map(json.loads, process.stdout) if e["event"] == "reply")
    assert reply["stopped"] is True and reply["text"]
    process.stdin.write(f"{PROBE}\n/quit\n")
    process.stdin.flush()
    rest = [json.loads(line) for line in process.stdout]
    assert rest[-1]["event"] == "reply" and rest[-1]["stopped"] is False
    assert process.wait(timeout=10) == 0
    assert stored_reply() == reply["text"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_terminating_during_a_reply_saves_it_and_exits(sig: signal.Signals,
                                                        smollm2_path: Path) -> None:
    process = start_long_reply(smollm2_path)
    process.send_signal(sig)
    assert process.wait(timeout=10) == 0
    assert stored_reply()


def test_the_terminal_sees_other_apps_models_and_each_models_own_settings(
        smollm2_path: Path) -> None:
    ollama_model(Path(os.environ["HOME"]) / ".ollama/models", "smollm2:135m", smollm2_path)
    listed = events(fireside("models", "--json").stdout)
    assert "smollm2:135m" in [m["name"] for m in listed], "Ollama's name for the model"

    prefs = settings.load().settings
    prefs.set_model_value(smollm2_path, "max_tokens", 3)
    settings.save(prefs)
    own = events(fireside("chat", "--json", "--model", "smollm2:135m", "--temperature", "0",
                          PROBE).stdout)[-1]
    assert own["event"] == "reply" and own["tokens"] <= 3
    typed = events(fireside("chat", "--json", "--model", "smollm2:135m", "--temperature", "0",
                            "--max-tokens", "6", PROBE).stdout)[-1]
    assert 3 < typed["tokens"] <= 6, "the command line beats the model's own setting"


STORY = "Write a long story about a dragon who loves tea."


def test_thinking_in_the_terminal_is_apart_bounded_and_can_be_hidden(
        thinking_model_path: Path) -> None:
    model = ("--model", str(thinking_model_path), "--temperature", "0", "--seed", "1",
             "--max-tokens", "120")
    ran = fireside("chat", "--json", *model, "--thinking-budget", "25", STORY)
    assert ran.returncode == 0, ran.stderr
    seen = events(ran.stdout)
    thought = "".join(e["text"] for e in seen if e["event"] == "thinking_delta")
    answer = "".join(e["text"] for e in seen if e["event"] == "delta")
    [reply] = [e for e in seen if e["event"] == "reply"]
    assert thought.strip() == reply["thinking"] and answer == reply["text"]
    assert 0 < reply["thinking_tokens"] <= 27 and reply["text"].strip()

    plain = fireside("chat", *model, "--thinking-budget", "25", STORY)
    assert plain.stdout.startswith(reply["thinking"][:20])  # the thought, then the answer
    assert reply["text"].strip()[:20] in plain.stdout
    hidden = fireside("chat", *model, "--thinking-budget", "25", "--hide-thinking", STORY)
    assert reply["thinking"][:20] not in hidden.stdout
    assert hidden.stdout.strip() == reply["text"].strip()

    off = events(fireside("chat", "--json", *model, "--thinking", "off", STORY).stdout)
    [reply] = [e for e in off if e["event"] == "reply"]
    assert reply["thinking"] == "" and reply["thinking_tokens"] == 0 and reply["text"]
    assert not [e for e in off if e["event"] == "thinking_delta"]
