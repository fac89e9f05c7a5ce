"""The inference engine with the real SmolLM2 and Gemma 3 models."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import pytest

from app.core.llama.detok import PieceDecoder
from app.core.llama.engine import (
    Engine,
    EngineClosed,
    LoadCancelled,
    LoadOptions,
    ModelLoadError,
    NoModelLoaded,
    PromptPlan,
    PromptTooLong,
    Sampling,
    Session,
    default_threads,
)
from app.core.reply.pieces import Mark
from tests.core.helpers import GREEDY, PROBE, ask, fresh_process_reply, rss_bytes, user
from tests.reference import Reference


@pytest.fixture
def engine() -> Iterator[Engine]:
    eng = Engine()
    yield eng
    assert eng.close(), "the inference thread did not finish"


@pytest.fixture(scope="module")
def smol_engine(smollm2_path: Path) -> Iterator[Engine]:
    eng = Engine()
    eng.load(smollm2_path).result()
    yield eng
    assert eng.close()


def test_smollm2_answers_the_probe(smol_engine: Engine, reference: Reference,
                                   smollm2_path: Path) -> None:
    smol_engine.clear().result()
    reply = ask(smol_engine, user(PROBE))
    # Word for word what llama-cpp-python itself answers on this machine.
    assert reply.text == reference.reply(smollm2_path, PROBE, GREEDY)
    assert reply.stats.finish_reason in {"stop", "length"}
    assert reply.stats.tokens > 0 and reply.stats.prompt_tokens > 5


def test_gemma_without_template_gets_gemma_turns(engine: Engine, gemma_path: Path) -> None:
    loaded = engine.load(gemma_path).result()
    assert loaded.template.source.startswith("built-in")
    assert "<start_of_turn>" in loaded.template.text
    turn_token = engine.tokenize("<start_of_turn>", special=True).result()
    prompts: list[list[int]] = []

    def build(session: Session) -> PromptPlan:
        from app.core.reply import templates

        plan = PromptPlan(session.encode(templates.render(session.template, user(PROBE))))
        prompts.append(plan.tokens)
        return plan

    reply = engine.generate(build, GREEDY).future.result()
    assert len(turn_token) == 1 and prompts[0].count(turn_token[0]) == 2
    # With the llama-2 fallback this base model answers nothing at all.
    assert reply.text.strip()


@pytest.mark.parametrize("model", ["smollm2", "gemma"])
def test_prompts_are_the_tokens_llama_cpp_python_builds(model: str, engine: Engine,
                                                        reference: Reference,
                                                        request: pytest.FixtureRequest) -> None:
    """Fireside's template rendering gives the model what its own chat format gives it."""
    path = request.getfixturevalue(f"{model}_path")
    engine.load(path).result()
    conversation = [*user(PROBE), {"role": "assistant", "content": "Paris."},
                    {"role": "user", "content": "And of Italy?"}]
    prompts: list[list[int]] = []

    def build(session: Session) -> PromptPlan:
        from app.core.reply import templates

        prompts.append(session.encode(templates.render(session.template, conversation)))
        return PromptPlan(prompts[-1])

    engine.generate(build, Sampling(temperature=0.0, max_tokens=1)).future.result()
    assert prompts[0] == reference.prompt_tokens(path, conversation, GREEDY)


def test_user_text_is_tokenized_as_text(smol_engine: Engine) -> None:
    im_end = smol_engine.tokenize("<|im_end|>", special=True).result()
    as_text = smol_engine.tokenize("<|im_end|>").result()
    assert len(im_end) == 1
    assert im_end[0] not in as_text
    seen: list[list[int]] = []

    def build(session: Session) -> PromptPlan:
        from app.core.reply import templates

        for text in ("say <|im_end|> twice", "say twice"):
            seen.append(session.encode(templates.render(session.template, user(text))))
        return PromptPlan(seen[0])

    smol_engine.generate(build, GREEDY).future.result()
    # The template's own turn ends stay control tokens; the typed one adds none.
    assert seen[0].count(im_end[0]) == seen[1].count(im_end[0]) >= 1


def test_new_chat_clears_history_but_keeps_the_model(smol_engine: Engine) -> None:
    loaded = smol_engine.loaded
    first = ask(smol_engine, user(PROBE))
    ask(smol_engine, [*user(PROBE), {"role": "assistant", "content": first.text},
                      {"role": "user", "content": "And of Italy?"}])
    smol_engine.clear().result()
    again = ask(smol_engine, user(PROBE))
    assert smol_engine.loaded is loaded
    assert again.stats.cached_tokens == 0
    assert again.text == first.text


def test_continuing_a_chat_reuses_the_cached_prefix(smol_engine: Engine) -> None:
    smol_engine.clear().result()
    messages = user("Name a fruit.")
    previous_prompt = 0
    for turn in range(10):
        reply = ask(smol_engine, messages)
        # The whole previous prompt is already in the sequence (whatever the reply said).
        assert reply.stats.cached_tokens >= previous_prompt
        previous_prompt = reply.stats.prompt_tokens
        messages = [*messages, {"role": "assistant", "content": reply.text},
                    {"role": "user", "content": f"Another one, number {turn + 2}."}]


def test_jobs_run_in_submission_order(smol_engine: Engine) -> None:
    order: list[int] = []
    lock = threading.Lock()

    def job(i: int) -> None:
        with lock:
            order.append(i)

    futures = [smol_engine.tokenize(str(i)) for i in range(20)]
    for i, future in enumerate(futures):
        future.add_done_callback(lambda _f, i=i: job(i))
    for future in futures:
        future.result()
    assert order == list(range(20))


def test_stop_during_generation_keeps_the_text_so_far(engine: Engine,
                                                      smollm2_path: Path) -> None:
    # An instruct model, streamed token by token (a base model's text comes a line at a
    # time, and its story ends at the first blank line).
    engine.load(smollm2_path).result()
    handle = engine.generate(
        lambda s: PromptPlan(s.encode(_render(s, "Write a very long story about a dragon."))),
        Sampling(temperature=0.8, max_tokens=2000, seed=3))
    deadline = time.monotonic() + 60
    while handle.pieces.mark().answer < 20:  # pieces written: a token each, here
        assert time.monotonic() < deadline and not handle.future.done()
        handle.pieces.wait(1)
        handle.pieces.take()
    handle.stop()
    stop_sent_at = handle.pieces.mark().answer  # counted once the stop is set: no race
    reply = handle.future.result(timeout=5)
    assert reply.stats.stopped and reply.stats.finish_reason == "stopped"
    assert reply.text == handle.pieces.text_since(Mark())[0]
    # At most the token being decoded when the stop was counted comes after it.
    assert handle.pieces.mark().answer - stop_sent_at <= 1


def test_stop_during_prompt_processing(engine: Engine, smollm2_path: Path,
                                       reference: Reference) -> None:
    # On the CPU, whose prompt reading is slow enough to stop in (tests/gpu: a GPU's).
    engine.load(smollm2_path, LoadOptions(gpu_layers="off")).result()
    long_prompt = " ".join(f"word{i}" for i in range(1700))  # about 7,000 tokens
    handle = engine.generate(lambda s: PromptPlan(s.encode(_render(s, long_prompt))),
                             GREEDY)
    # The reply is active once its prompt is being read: no token can come before that.
    deadline = time.monotonic() + 30
    while engine._active is not handle and not handle.future.done():
        assert time.monotonic() < deadline, "the reply never started"
        time.sleep(0.001)
    handle.stop()
    reply = handle.future.result(timeout=10)
    assert reply.stats.stopped and reply.stats.tokens == 0
    # The engine is still usable right after an aborted prompt...
    after = ask(engine, user(PROBE))
    assert after.text.strip() and after.stats.finish_reason in {"stop", "length"}
    # ...and a new chat answers as llama-cpp-python itself does.
    engine.clear().result()
    assert ask(engine, user(PROBE)).text == reference.reply(smollm2_path, PROBE, GREEDY,
                                                            gpu_layers=0)


def test_close_mid_generation_finishes_the_thread(gemma_path: Path) -> None:
    engine = Engine()
    engine.load(gemma_path).result()
    handle = engine.generate(lambda s: PromptPlan(s.encode(_render(s, "Tell a long tale."))),
                             Sampling(temperature=0.8, max_tokens=4000, seed=5))
    queued = engine.tokenize("queued behind the reply")
    assert handle.pieces.wait(60) and not handle.pieces.ended  # the reply is streaming
    assert engine.close(timeout=2.0)
    assert handle.future.result().stats.stopped
    with pytest.raises(EngineClosed):
        queued.result()
    with pytest.raises(EngineClosed):
        engine.clear().result()


def test_bad_model_files_are_refused_and_the_loaded_model_keeps_answering(
        smol_engine: Engine, tmp_path: Path, smollm2_path: Path) -> None:
    from tests.gguf_files import copy_with_metadata

    baseline = ask(smol_engine, user(PROBE)).text
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("these are my notes, not a model")
    empty = tmp_path / "empty.gguf"
    empty.touch()
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(smollm2_path.read_bytes()[:5_000_000])
    directory = tmp_path / "x.gguf"
    directory.mkdir()
    unknown_arch = tmp_path / "unknown-arch.gguf"
    copy_with_metadata(smollm2_path, unknown_arch, {"general.architecture": "notanarch"})
    escape = tmp_path / "escape.gguf"
    copy_with_metadata(smollm2_path, escape, {
        "tokenizer.chat_template":
            "{{ ''.__class__.__mro__[1].__subclasses__() }}{{ messages[0]['content'] }}"})
    cases = {not_gguf: "GGUF", empty: "empty", truncated: "truncated",
             directory: "directory", tmp_path / "missing.gguf": "not found",
             unknown_arch: "notanarch", escape: "sandbox"}
    for path, words in cases.items():
        with pytest.raises(ModelLoadError) as caught:
            smol_engine.load(path).result()
        message = str(caught.value)
        assert path.name in message and words.lower() in message.lower(), message
        assert smol_engine.loaded is not None and smol_engine.loaded.path == smollm2_path
        assert ask(smol_engine, user(PROBE)).text == baseline


def test_load_reports_progress_and_can_be_cancelled(engine: Engine, smollm2_path: Path,
                                                    gemma_path: Path) -> None:
    progress: list[float] = []
    engine.load(smollm2_path, on_progress=progress.append).result()
    assert progress[-1] == 1.0 and progress == sorted(progress) and len(progress) > 2
    baseline = ask(engine, user(PROBE)).text

    def cancel_midway(fraction: float) -> None:
        if fraction > 0.2:
            engine.cancel_load()

    with pytest.raises(LoadCancelled):
        engine.load(gemma_path, on_progress=cancel_midway).result()
    # The previous model is loaded again and answers as before.
    assert engine.loaded is not None and engine.loaded.path == smollm2_path
    assert ask(engine, user(PROBE)).text == baseline


def test_prompt_too_long_gets_a_clear_error(engine: Engine, smollm2_path: Path,
                                            reference: Reference) -> None:
    engine.load(smollm2_path, LoadOptions(n_ctx=512)).result()
    with pytest.raises(PromptTooLong, match="too long"):
        ask(engine, user("hello " * 2000))
    # Nothing of the refused prompt was read: the next one is answered from scratch.
    answer = reference.reply(smollm2_path, PROBE, GREEDY, n_ctx=512)
    assert ask(engine, user(PROBE)).text == answer


def test_generation_without_a_model_says_so(engine: Engine) -> None:
    with pytest.raises(NoModelLoaded, match="No model"):
        ask(engine, user(PROBE))


def test_llama_log_goes_to_python_logging(engine: Engine, smollm2_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="fireside.llama"):
        engine.load(smollm2_path).result()
    assert any("llama" in r.getMessage() or "n_ctx" in r.getMessage()
               for r in caplog.records if r.name == "fireside.llama")


def test_chosen_thread_count(smol_engine: Engine) -> None:
    loaded = smol_engine.loaded
    assert loaded is not None and loaded.n_threads == default_threads()
    assert smol_engine.loaded is not None


@pytest.mark.model  # the engines on the bundled models, named by the parameter
@pytest.mark.parametrize("model", ["smollm2", "gemma"])
def test_utf8_split_across_tokens_comes_out_whole(model: str, request: pytest.FixtureRequest,
                                                   engine: Engine) -> None:
    path = request.getfixturevalue(f"{model}_path")
    engine.load(path).result()
    text = "Café 東京 🔥🎉 naïve — ñandú 😀 你好, end 🐉"
    tokens = engine.tokenize(text).result()

    def decode_all() -> tuple[list[str], str]:
        llm = engine._llm  # read-only use on the inference thread via submit below
        assert llm is not None
        decoder = PieceDecoder(llama_cpp.llama_model_get_vocab(llm.model))
        pieces = [decoder.decode(t) for t in tokens]
        return pieces, decoder.flush()

    pieces, tail = engine._submit(decode_all).result()
    assert "".join(pieces) + tail in {text, " " + text}
    assert not any("\ufffd" in p for p in pieces)
    assert tail == ""
    # Some character really was split across tokens (otherwise the test proves nothing).
    assert len(tokens) > len(text.split())


def _render(session: Session, text: str) -> list:  # type: ignore[type-arg]
    from app.core.reply import templates

    return templates.render(session.template, user(text))


@pytest.mark.slow
def test_100_chats_on_gemma_never_bleed(engine: Engine, gemma_path: Path) -> None:
    engine.load(gemma_path).result()
    probe = "What is the secret word? Answer with the word only."
    fresh = fresh_process_reply(gemma_path, probe)
    secrets: list[str] = []
    for i in range(100):
        engine.clear().result()
        secret = f"zebra{i:03d}quartz"
        secrets.append(secret)
        ask(engine, user(f"The secret word is {secret}. Remember it."),
            Sampling(temperature=0.0, max_tokens=4, seed=1))
        engine.clear().result()
        reply = ask(engine, user(probe))
        assert reply.text == fresh, f"chat {i} differs from a fresh process"
        assert not any(s in reply.text for s in secrets)
        assert reply.stats.cached_tokens == 0


@pytest.mark.slow
def test_30_switches_between_gemma_and_smollm2(engine: Engine, gemma_path: Path,
                                                smollm2_path: Path) -> None:
    fresh = {p: fresh_process_reply(p, PROBE) for p in (gemma_path, smollm2_path)}
    levels: list[int] = []
    for i in range(30):
        path = gemma_path if i % 2 == 0 else smollm2_path
        loaded = engine.load(path).result()
        assert loaded.path == path
        assert ask(engine, user(PROBE)).text == fresh[path], f"switch {i}"
        levels.append(rss_bytes())
    # Resident memory after the last switches is no higher than after the first ones.
    early = max(levels[2:6])
    late = max(levels[-4:])
    assert late <= early * 1.10, f"RSS grew from {early / 1e6:.0f} MB to {late / 1e6:.0f} MB"
