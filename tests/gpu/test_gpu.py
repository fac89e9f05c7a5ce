"""On a real GPU (``make test-gpu``): both bundled models offloaded, fitted, switched and
stopped there. Skipped wherever llama.cpp has no GPU to use."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.backend import PromptPlan, Session
from app.core.llama import devices, offload
from app.core.llama.engine import Engine
from app.core.models.gguf import read_header
from app.core.options import LoadOptions, Sampling
from tests.core.helpers import ask, fresh_process_reply, user
from tests.gpu.prompts import exact_prompt
from tests.reference import Reference

HARDWARE = devices.survey()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    HARDWARE.unavailable is not None, reason=f"no GPU: {HARDWARE.unavailable}")]

MIB = 1 << 20
FIRST_32 = Sampling(temperature=0.0, max_tokens=32, seed=1)
STORY = "Write a long story about a lighthouse keeper and the sea."


def device_free() -> int:
    return sum(d.free for d in devices.offload_targets(devices.list_devices()))


@pytest.fixture
def engine() -> Iterator[Engine]:
    engine = Engine()
    yield engine
    engine.close()


@pytest.fixture(params=["smollm2", "gemma"])
def model(request: pytest.FixtureRequest, smollm2_path: Path, gemma_path: Path) -> Path:
    return smollm2_path if request.param == "smollm2" else gemma_path


def test_fully_offloaded_models_write_what_llama_cpp_writes_on_the_gpu(
        model: Path, engine: Engine, reference: Reference) -> None:
    """Against raw llama-cpp-python with the same layers on the same GPU (tests/reference.py),
    not against the CPU: a GPU's greedy words differ from a CPU's as two CPUs' do."""
    loaded = engine.load(model, LoadOptions(gpu_layers="all")).result()
    assert loaded.placement is not None
    assert loaded.placement.gpu_layers == loaded.placement.n_layers
    text = ask(engine, user(STORY), FIRST_32).text
    assert text and text == reference.reply(model, STORY, FIRST_32,
                                            gpu_layers=loaded.placement.gpu_layers)


def test_the_fit_predicts_the_device_memory_a_load_takes(
        model: Path, engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    """The buffers llama.cpp puts on the GPU (weights, KV cache, compute) against the
    plan, within 10 %; the card's free memory before and after is printed beside them
    (it also holds the GPU libraries' own, which the margin is for)."""
    before = device_free()
    with caplog.at_level(logging.DEBUG, logger="fireside.llama"):
        loaded = engine.load(model, LoadOptions(gpu_layers="all")).result()
    ask(engine, user("Hello"), FIRST_32)  # the compute buffers are in use
    taken = before - device_free()
    on_card = 0.0
    for line in caplog.messages:
        found = re.search(r"(\w+) (?:model|KV|compute) buffer size =\s*([\d.]+) MiB", line)
        if found and found.group(1) not in ("CPU", "CPU_Mapped", "CPU_REPACK") and \
                "Host" not in found.group(1):
            on_card += float(found.group(2)) * MIB
    assert loaded.placement is not None
    predicted = loaded.placement.device_bytes
    print(f"{model.name}: predicted {predicted / MIB:.0f} MiB, llama.cpp's buffers on the "
          f"GPU {on_card / MIB:.0f} MiB, free memory taken {taken / MIB:.0f} MiB")
    assert predicted == pytest.approx(on_card, rel=0.10)


def test_a_margin_leaving_room_for_half_the_layers_loads_a_partial_offload(
        model: Path, engine: Engine) -> None:
    options = LoadOptions()
    parts = offload.layers(read_header(model), options)
    half = parts.on_device(parts.count // 2)
    margin_mib = (device_free() - half) // MIB - 1
    loaded = engine.load(model, LoadOptions(gpu_margin_mib=margin_mib)).result()
    assert loaded.placement is not None
    assert 0 < loaded.placement.gpu_layers < loaded.placement.n_layers
    assert abs(loaded.placement.gpu_layers - parts.count // 2) <= 1
    assert ask(engine, user("What is the capital of France?"), FIRST_32).text.strip()


def test_30_switches_give_the_device_memory_back(engine: Engine, smollm2_path: Path,
                                                 gemma_path: Path) -> None:
    """Each model's device memory loaded for the last time against its first load:
    Gemma after switch 29 against switch 1, SmolLM2 after 30 against 2."""
    first: dict[Path, int] = {}
    last: dict[Path, int] = {}
    for i in range(30):
        path = gemma_path if i % 2 == 0 else smollm2_path
        engine.load(path, LoadOptions(gpu_layers="all")).result()
        assert ask(engine, user("Hello"), FIRST_32).text.strip(), f"switch {i + 1}"
        first.setdefault(path, device_free())
        last[path] = device_free()
    for path in (gemma_path, smollm2_path):
        drift = first[path] - last[path]
        print(f"device memory taken after 30 switches, {path.name} loaded: "
              f"{drift / MIB:+.1f} MiB against its first load")
        assert abs(drift) <= 64 * MIB


def test_stop_during_prompt_reading_on_the_gpu(engine: Engine, gemma_path: Path) -> None:
    # A prompt long enough to take a while even on a fast card, counted in Gemma's tokens.
    engine.load(gemma_path, LoadOptions(gpu_layers="all", n_ctx=32768)).result()
    sent: list[int] = []

    def build(session: Session) -> PromptPlan:
        plan = exact_prompt(session, 31_000)
        sent.append(len(plan.tokens))
        return plan

    handle = engine.generate(build, Sampling(temperature=0.0, max_tokens=8))
    deadline = time.monotonic() + 30
    while engine._active is not handle and not handle.future.done():
        assert time.monotonic() < deadline, "the reply never started"
        time.sleep(0.0005)
    asked = time.monotonic()
    handle.stop()
    reply = handle.future.result(timeout=10)
    took = time.monotonic() - asked
    # A figure for the log (make test-gpu runs with -s), not a timed assert.
    print(f"stop during prompt reading on the GPU: {took * 1000:.0f} ms")
    assert sent == [31_000]
    assert reply.stats.stopped and reply.stats.tokens == 0


def test_100_chats_on_one_gemma_sequence_on_the_gpu(engine: Engine, gemma_path: Path) -> None:
    engine.load(gemma_path).result()  # auto: all of it fits
    probe = "What is the secret word? Answer with the word only."
    fresh = fresh_process_reply(gemma_path, probe)
    for i in range(100):
        engine.clear().result()
        ask(engine, user(f"The secret word is zebra{i:03d}quartz. Remember it."),
            Sampling(temperature=0.0, max_tokens=4, seed=1))
        engine.clear().result()
        reply = ask(engine, user(probe))
        assert reply.text == fresh, f"chat {i} differs from a fresh process"
        assert reply.stats.cached_tokens == 0
