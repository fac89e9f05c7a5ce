"""llama.cpp's switches for people who know them (flash attention, the KV cache's type,
batch size, prompt threads): they load as asked, a combination llama.cpp refuses still
loads the model (with the defaults, and says why), and the terminal takes them too."""

from __future__ import annotations

import json
from pathlib import Path

from app.core import settings
from app.core.backend import LoadedModel
from app.core.fireside import Fireside, SessionSettings
from app.core.llama.engine import Engine
from app.core.options import LoadOptions
from tests.cli.test_commands import events, fireside


def kept_bytes(smollm2_path: Path, session: SessionSettings) -> tuple[int, LoadedModel]:
    """The bytes kept of a conversation's sequence state, loaded with ``session``."""
    prefs = settings.load().settings
    prefs.temperature, prefs.max_tokens = 0.0, 60  # over the 64 tokens worth keeping
    core = Fireside.open(prefs=prefs, engine=Engine())
    try:
        core.session = session
        loaded = core.load(smollm2_path).result()
        reply = core.send("Tell me about lighthouses and the people who keep them, in "
                          "detail.").result().future.result().reply
        assert reply.text and reply.stats.tokens > 0  # it answers
        core.new_chat().result()  # keeps the sequence's state: the KV cache, as loaded
        return core.engine.local.states.used, loaded
    finally:
        core.close()


def test_a_quantized_kv_cache_with_flash_attention_loads_answers_and_takes_half_the_memory(
        smollm2_path: Path) -> None:
    exact, _ = kept_bytes(smollm2_path, SessionSettings())
    half, loaded = kept_bytes(smollm2_path, SessionSettings(
        kv_cache="q8_0", flash_attention="on", batch_size=128, prompt_threads=1))
    assert (loaded.options.kv_cache, loaded.options.flash_attention,
            loaded.options.batch_size, loaded.options.prompt_threads) == ("q8_0", "on", 128, 1)
    assert loaded.notice is None
    assert 0.45 < half / exact < 0.6  # 34 bytes per 32 values instead of 64


def test_a_combination_llama_cpp_refuses_loads_the_model_with_the_defaults(
        smollm2_path: Path) -> None:
    prefs = settings.load().settings
    prefs.temperature, prefs.max_tokens = 0.0, 4
    core = Fireside.open(prefs=prefs, engine=Engine())
    try:
        core.session = SessionSettings(kv_cache="q4_0", flash_attention="off")
        loaded = core.load(smollm2_path).result()
        assert loaded.options.tuning() == LoadOptions()
        assert loaded.notice is not None
        assert "refused flash attention off with a q4_0 KV cache" in loaded.notice
        assert "quantized V cache requires flash_attn" in loaded.notice
        reply = core.send("Hello").result().future.result().reply
        assert reply.stats.tokens > 0  # it answers
    finally:
        core.close()


def test_unknown_choices_in_a_hand_edited_settings_file_fall_back_to_the_defaults(
        tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"flash_attention": "sometimes", "kv_cache": "q3_z",
                                "batch_size": 3, "prompt_threads": 0}))
    options = settings.load(path).settings.load_options(None)
    assert options.tuning() == LoadOptions()


def test_the_terminal_takes_the_switches_and_says_when_one_is_refused(
        smollm2_path: Path) -> None:
    greedy = ("chat", "--json", "--temperature", "0", "--max-tokens", "4")
    chosen = fireside(*greedy, "--kv-cache", "q8_0", "--flash-attention", "on",
                      "--batch-size", "256", "--prompt-threads", "1", "Hi")
    assert chosen.returncode == 0, chosen.stderr
    loaded, = [e for e in events(chosen.stdout) if e["event"] == "model_loaded"]
    assert (loaded["kv_cache"], loaded["flash_attention"], loaded["batch_size"],
            loaded["prompt_threads"]) == ("q8_0", "on", 256, 1)
    refused = fireside(*greedy, "--kv-cache", "q4_0", "--flash-attention", "off", "Hi")
    assert refused.returncode == 0, refused.stderr
    stream = events(refused.stdout)
    notice, = [e for e in stream if e["event"] == "notice" and "refused" in e["message"]]
    assert "q4_0" in notice["message"]
    assert [e["kv_cache"] for e in stream if e["event"] == "model_loaded"] == ["f16"]
    assert any(e["event"] == "reply" for e in stream)
    wrong = fireside("chat", "--kv-cache", "q3", "Hi")
    assert wrong.returncode == 2 and "--kv-cache" in wrong.stderr
