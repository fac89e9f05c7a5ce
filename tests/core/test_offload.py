"""GPU offload: the layers fitted to a device's memory before loading, on the real model
files with device lists given as data; the sizes checked against what llama.cpp itself
allocates; and the CPU path a machine without a GPU runs, whatever llama.cpp was built
with: offload shown as unavailable, with why. A real GPU's are tests/gpu's."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import llama_cpp
import pytest

import app.core.llama.engine as engine_module
from app.core import settings
from app.core.backend import ModelLoadError, NotEnoughMemory
from app.core.fireside import Fireside
from app.core.llama import devices, gpu_backends, llama_runtime, offload
from app.core.llama.devices import Device
from app.core.llama.engine import Engine, llama_arguments
from app.core.models.gguf import read_header
from app.core.options import LoadOptions, checked_gpu_layers
from tests.cli.test_commands import events, fireside

GIB = 1 << 30
MIB = 1 << 20


def gpu(free: float, total: float = 24, kind: str = "gpu", name: str = "CUDA0") -> Device:
    return Device(name, f"Test card {name}", name.rstrip("0123456789"), kind,
                  int(free * GIB), int(total * GIB))


CPU = Device("CPU", "The CPU", "CPU", "cpu", 16 * GIB, 16 * GIB)


@pytest.fixture(params=["smollm2", "gemma"])
def model(request: pytest.FixtureRequest, smollm2_path: Path, gemma_path: Path) -> Path:
    return smollm2_path if request.param == "smollm2" else gemma_path


def test_a_model_that_fits_goes_to_the_gpu_whole_output_layer_included(model: Path) -> None:
    header = read_header(model)
    plan = offload.plan(header, LoadOptions(), [CPU, gpu(free=20)])
    assert plan.gpu_layers == plan.n_layers == (header.block_count or 0) + 1
    assert plan.where == f"GPU {plan.n_layers}/{plan.n_layers}"
    assert plan.summary().startswith(f"all {plan.n_layers} layers on GPU · ")
    assert "GB GPU + " in plan.summary() or "MB GPU + " in plan.summary()
    # The weights leave RAM, except the input layer's (token embedding), which stays.
    tensors = {t.name: t.nbytes or 0 for t in header.tensors}
    assert plan.host_bytes >= tensors["token_embd.weight"]
    assert plan.host_bytes < sum(tensors.values())
    assert plan.device == "Test card CUDA0"


def test_auto_fits_as_many_layers_as_the_free_memory_allows_less_the_margin(
        model: Path) -> None:
    header = read_header(model)
    parts = offload.layers(header, LoadOptions())
    first, whole = parts.on_device(1), parts.on_device(parts.count)
    margin = 512 * MIB  # the floor, on a small card
    for share in (0.3, 0.6, 0.9):
        free = margin + first + int((whole - first) * share)
        plan = offload.plan(header, LoadOptions(), [CPU, gpu(free / GIB, total=2)])
        assert 0 < plan.gpu_layers < plan.n_layers
        # As many as fit: one more would not.
        assert plan.device_bytes <= free - margin < parts.on_device(plan.gpu_layers + 1)
        assert plan.where == f"GPU {plan.gpu_layers}/{plan.n_layers}"
    nothing = offload.plan(header, LoadOptions(), [CPU, gpu(free=0.5, total=2)])
    assert (nothing.gpu_layers, nothing.where) == (0, "CPU")
    assert nothing.summary() == "CPU only: the GPU has too little free memory for any layer"


def test_the_margin_is_the_larger_of_512_mib_and_8_percent_or_the_users(model: Path) -> None:
    assert offload.margin(gpu(free=1, total=2)) == 512 * MIB
    assert offload.margin(gpu(free=70, total=80)) == int(80 * GIB * 0.08)
    assert offload.margin(gpu(free=70, total=80), margin_mib=1000) == 1000 * MIB
    assert offload.margin(gpu(free=70, total=80), margin_mib=0) == 256 * MIB  # at least
    header = read_header(model)
    parts = offload.layers(header, LoadOptions())
    # A margin that leaves room for about half the layers gives a partial offload.
    half = parts.on_device(parts.count // 2)
    card = gpu(free=(half + 300 * MIB) / GIB, total=8)
    default = offload.plan(header, LoadOptions(), [card])
    assert default.gpu_layers < parts.count // 2  # 8 % of 8 GiB is more than 300 MiB
    chosen = offload.plan(header, LoadOptions(gpu_margin_mib=300), [card])
    assert chosen.gpu_layers == parts.count // 2


def test_all_off_and_a_count_are_taken_as_given(model: Path) -> None:
    header = read_header(model)
    small = [CPU, gpu(free=0.1, total=1)]
    assert offload.plan(header, LoadOptions(gpu_layers="all"), small).gpu_layers == \
        (header.block_count or 0) + 1
    off = offload.plan(header, LoadOptions(gpu_layers="off"), [CPU, gpu(free=20)])
    assert (off.gpu_layers, off.device_bytes, off.summary()) == (0, 0, "CPU only")
    assert offload.plan(header, LoadOptions(gpu_layers="5"), small).gpu_layers == 5
    assert offload.plan(header, LoadOptions(gpu_layers="999"), small).gpu_layers == \
        (header.block_count or 0) + 1
    assert [checked_gpu_layers(v) for v in ("Auto", " all", "off", "07", "-3", "lots", "")] \
        == ["auto", "all", "off", "7", None, None, None]


def test_layers_go_to_the_discrete_gpu_and_to_an_integrated_one_only_without_it(
        smollm2_path: Path) -> None:
    header = read_header(smollm2_path)
    integrated = gpu(free=8, total=8, kind="igpu", name="Vulkan1")
    discrete = gpu(free=0.4, total=4, name="Vulkan0")  # too little for any layer
    # llama.cpp spreads layers over discrete GPUs: the big integrated one is not used.
    assert devices.offload_targets([CPU, integrated, discrete]) == [discrete]
    assert offload.plan(header, LoadOptions(), [CPU, integrated, discrete]).gpu_layers == 0
    alone = offload.plan(header, LoadOptions(), [CPU, integrated])
    assert alone.gpu_layers == alone.n_layers and alone.device == "Test card Vulkan1"
    # Two cards: their free memory together.
    pair = [gpu(free=0.65, total=2, name="CUDA0"), gpu(free=0.65, total=2, name="CUDA1")]
    one = offload.plan(header, LoadOptions(), pair[:1]).gpu_layers
    assert offload.plan(header, LoadOptions(), pair).gpu_layers > one


def test_a_smaller_kv_cache_and_context_leave_more_room(gemma_path: Path) -> None:
    header = read_header(gemma_path)
    f16 = offload.layers(header, LoadOptions(n_ctx=32768))
    q8 = offload.layers(header, LoadOptions(n_ctx=32768, kv_cache="q8_0"))
    short = offload.layers(header, LoadOptions(n_ctx=2048))
    assert sum(q8.kv) < 0.6 * sum(f16.kv) and sum(short.kv) < sum(f16.kv) / 8
    assert q8.weights == f16.weights


def test_the_sizes_are_those_llama_cpp_allocates(model: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """Weights, KV cache and compute buffer, as llama.cpp reports them loading on the
    CPU (a device's compute graph is the same), within 10 %. On the CPU whatever the
    build: no layer on a GPU keeps every buffer off it (llama_arguments), which a GPU
    build's log would otherwise add to the totals."""
    header = read_header(model)
    for options in (LoadOptions(n_ctx=2048), LoadOptions(n_ctx=8192, flash_attention="off"),
                    LoadOptions(n_ctx=4096, kv_cache="q8_0", batch_size=256)):
        parts = offload.layers(header, options)
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="fireside.llama"):
            llm = llama_cpp.Llama(model_path=str(model), n_ctx=options.n_ctx or 0,
                                  **llama_arguments(options.checked(), gpu_layers=0),
                                  verbose=False)
            llm.close()
        reported: dict[str, float] = {}
        for line in caplog.messages:
            found = re.search(r"(\w+) (model|KV|compute) buffer size =\s*([\d.]+) MiB", line)
            if found:
                # CPU, CPU_Mapped, CPU_REPACK; a GPU backend's pinned RAM (CUDA_Host)
                # holds what the CPU's buffer would. Never a device's own (CUDA0).
                assert found.group(1).startswith("CPU") or found.group(1).endswith("_Host"), \
                    line
                kind = found.group(2)
                reported[kind] = reported.get(kind, 0) + float(found.group(3)) * MIB
        weights = sum(parts.weights) + parts.output * (not parts.tied)
        token_embd = next(t.nbytes or 0 for t in header.tensors
                          if t.name == "token_embd.weight")
        assert reported["model"] == pytest.approx(weights + token_embd, rel=0.1)
        assert reported["KV"] == pytest.approx(sum(parts.kv), rel=0.1)
        assert reported["compute"] == pytest.approx(parts.compute, rel=0.1)


def no_gpu_here() -> str:
    """Why llama.cpp can put no layer on a GPU here, in the words of a CPU build or of a
    GPU build that finds no device; skips where it has one (tests/gpu)."""
    reason = devices.gpu_support()
    if reason is None:
        pytest.skip("llama.cpp has a GPU here: tests/gpu")
    # llama_supports_gpu_offload() is False for both: it asks for a device, not the code.
    gpu_code = [name for name in devices.backends() if name not in devices.CPU_BACKENDS]
    said = "code found no GPU it can use" if gpu_code else "built for the CPU only"
    assert said in reason
    return reason


def test_without_a_gpu_the_model_runs_on_the_cpu_and_says_why_offload_is_unavailable(
        smollm2_path: Path) -> None:
    reason = no_gpu_here()
    found = devices.list_devices()
    assert [d.kind for d in found if d.backend == "CPU"] == ["cpu"]
    assert found[0].total > 0 and 0 < found[0].free <= found[0].total
    assert devices.gpu_support(found) == reason
    plan = offload.plan(read_header(smollm2_path), LoadOptions(gpu_layers="all"), found,
                        reason)
    assert plan.gpu_layers == 0 and plan.summary() == f"CPU only: {reason}"


REAL_LLAMA = llama_cpp.Llama


class RefusingDevice:
    """llama.cpp's Llama, on a GPU that refuses more than ``fits`` layers as a card out
    of memory does, and every load of ``broken`` (this machine has no GPU, so the
    refusal is the one thing not real: the model below it loads and answers on the
    CPU)."""

    def __init__(self, fits: int, broken: Path | None = None, said: str = "") -> None:
        self.fits, self.broken, self.said = fits, broken, said
        self.asked: list[tuple[str, int]] = []

    def __call__(self, model_path: str, n_gpu_layers: int = 0, **kwargs: object) -> object:
        self.asked.append((Path(model_path).name, n_gpu_layers))
        if n_gpu_layers > self.fits or Path(model_path) == self.broken:
            if self.said:  # what llama.cpp's log would have said
                llama_runtime.router.recent_errors.append(self.said)
            raise ValueError("Failed to load model from file")
        return REAL_LLAMA(model_path=model_path, n_gpu_layers=n_gpu_layers, **kwargs)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:  # the class's own, as llama_cpp.Llama
        return getattr(REAL_LLAMA, name)


@pytest.fixture
def one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 24 GB card beside the CPU, as ggml would list it."""
    monkeypatch.setattr(devices, "list_devices", lambda: [CPU, gpu(free=20)])
    monkeypatch.setattr(devices, "gpu_support", lambda found=None: None)


def load_with(monkeypatch: pytest.MonkeyPatch, fits: int, broken: Path | None = None,
              first: Path | None = None, said: str = "") -> tuple[RefusingDevice, Fireside]:
    refusing = RefusingDevice(fits, broken, said)
    prefs = settings.load().settings
    prefs.temperature, prefs.max_tokens = 0.0, 4
    core = Fireside.open(prefs=prefs, engine=Engine())
    if first is not None:
        core.load(first).result()
    monkeypatch.setattr(engine_module.llama_cpp, "Llama", refusing)
    return refusing, core


@pytest.mark.usefixtures("one_gpu")
def test_a_load_the_device_refuses_is_retried_with_fewer_layers_then_on_the_cpu(
        monkeypatch: pytest.MonkeyPatch, smollm2_path: Path) -> None:
    refusing, core = load_with(monkeypatch, fits=20)
    try:
        loaded = core.load(smollm2_path).result()
        assert [n for _, n in refusing.asked] == [31, 15]  # all fitted, refused; half
        assert loaded.placement is not None and loaded.placement.where == "GPU 15/31"
        assert loaded.notice is not None
        assert "could not be loaded with 31 layers on the GPU" in loaded.notice
        assert "it runs with GPU 15/31" in loaded.notice
        refusing.fits, refusing.asked = 0, []
        again = core.load(smollm2_path).result()
        assert [n for _, n in refusing.asked] == [31, 15, 0]
        assert again.placement is not None and again.placement.where == "CPU"
        assert again.notice is not None and again.notice.endswith("it runs on the CPU.")
        assert core.send("Hello").result().future.result().reply.stats.tokens > 0
    finally:
        core.close()


@pytest.mark.usefixtures("one_gpu")
def test_when_every_try_fails_the_previous_model_keeps_answering(
        monkeypatch: pytest.MonkeyPatch, smollm2_path: Path, gemma_path: Path) -> None:
    refusing, core = load_with(monkeypatch, fits=99, broken=gemma_path, first=smollm2_path)
    try:
        with pytest.raises(ModelLoadError) as failed:
            core.load(gemma_path).result()
        gemma, smollm2 = gemma_path.name, smollm2_path.name
        assert refusing.asked == [(gemma, 19), (gemma, 9), (gemma, 0), (smollm2, 31)]
        assert "SmolLM2-135M-Instruct is loaded again" in str(failed.value)
        assert core.model is not None and core.model.path == smollm2_path
        assert core.send("Hello").result().future.result().reply.stats.tokens > 0
    finally:
        core.close()


def test_asking_for_gpu_layers_without_a_gpu_loads_on_the_cpu_and_says_why(
        smollm2_path: Path) -> None:
    reason = no_gpu_here()
    result = fireside("chat", "--json", "--temperature", "0", "--max-tokens", "4",
                      "--gpu-layers", "all", "Hi")
    assert result.returncode == 0, result.stderr
    stream = events(result.stdout)
    loaded, = [e for e in stream if e["event"] == "model_loaded"]
    assert (loaded["gpu_layers"], loaded["n_layers"], loaded["device"]) == (0, 31, None)
    notice, = [e for e in stream if e["event"] == "notice"]
    assert "GPU offload (all) was asked for" in notice["message"]
    assert reason in notice["message"]
    reply, = [e for e in stream if e["event"] == "reply"]
    assert reply["tokens"] > 0 and (reply["gpu_layers"], reply["n_layers"]) == (0, 31)


def test_the_terminal_lists_the_devices_and_each_models_layers(smollm2_path: Path) -> None:
    listed = fireside("devices", "--json")
    assert listed.returncode == 0, listed.stderr
    found = [json.loads(line) for line in listed.stdout.splitlines()]
    cpu, = [d for d in found if d["kind"] == "cpu"]
    assert cpu["total_bytes"] >= cpu["free_bytes"] > 0 and cpu["description"]
    text = fireside("devices")
    assert text.returncode == 0 and f"{cpu['name']}  (CPU, cpu)" in text.stdout
    models = [json.loads(line) for line in fireside("models", "--json").stdout.splitlines()]
    smol, = [m for m in models if m["path"] == str(smollm2_path)]
    assert smol["n_layers"] == 31 and 0 <= smol["gpu_layers"] <= 31
    wrong = fireside("chat", "--gpu-layers", "most", "Hi")
    assert wrong.returncode == 2 and "--gpu-layers must be auto, all, off" in wrong.stderr


def test_the_terminal_lists_a_models_layers_where_the_window_places_them(
        smollm2_path: Path) -> None:
    prefs = settings.load().settings
    prefs.set_model_value(smollm2_path, "gpu_layers", "4")  # its own, and no memory read
    settings.save(prefs)
    listed = {m["path"]: m for m in events(fireside("models", "--json").stdout)}
    core = Fireside.open()
    try:
        entry, = [e for e in core.library.entries if e.path == smollm2_path]
        plan = core.placement(entry, core.hardware())  # what the window's list says
    finally:
        core.close()
    assert plan is not None and plan.gpu_layers in (0, 4)  # 0: this build cannot offload
    smol = listed[str(smollm2_path)]
    assert (smol["gpu_layers"], smol["n_layers"]) == (plan.gpu_layers, plan.n_layers)


def test_on_memory_shared_with_the_gpu_the_whole_model_counts_as_ram(
        smollm2_path: Path) -> None:
    header = read_header(smollm2_path)
    metal = Device("MTL0", "Apple M2", "MTL", "gpu", 10 * GIB, 11 * GIB)  # as ggml names it
    shared = offload.plan(header, LoadOptions(), [CPU, metal])
    card = offload.plan(header, LoadOptions(), [CPU, gpu(free=10)])
    assert shared.gpu_layers == card.gpu_layers == 31
    assert shared.unified and not card.unified
    assert shared.host_bytes > card.host_bytes + card.device_bytes // 2
    assert shared.summary().startswith("all 31 layers on GPU · ")
    assert shared.summary().endswith(" in shared memory")


def test_why_no_gpu_is_used_names_the_gpu_code_that_found_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU build on a machine without the driver is not called a CPU-only build."""
    monkeypatch.setattr(devices, "backends", lambda: ["CPU", "CUDA"])
    assert devices.gpu_support([CPU]) == ("llama.cpp's CUDA code found no GPU it can use "
                                          "(is the driver installed?)")
    assert devices.gpu_support([CPU, gpu(free=8)]) is None
    monkeypatch.setattr(devices, "backends", lambda: ["CPU"])
    monkeypatch.setattr(gpu_backends, "PASSED_OVER", ["Vulkan"])
    assert devices.gpu_support([CPU]) == ("llama.cpp's Vulkan code could not start here "
                                          "(no driver for it?)")
    monkeypatch.setattr(gpu_backends, "PASSED_OVER", [])
    assert "built for the CPU only" in (devices.gpu_support([CPU]) or "")


@pytest.mark.usefixtures("one_gpu")
def test_only_a_device_failure_is_tried_again_with_fewer_layers(
        monkeypatch: pytest.MonkeyPatch, smollm2_path: Path) -> None:
    refusing, core = load_with(monkeypatch, fits=-1, said="llama_model_load: error loading "
                               "model: tensor 'blk.3.ffn_up.weight' data is not within the "
                               "file bounds")
    try:
        with pytest.raises(ModelLoadError, match="not within the file bounds"):
            core.load(smollm2_path).result()
        assert refusing.asked == [(smollm2_path.name, 31)]  # a file problem: once
        refusing.said = "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 300 MiB " \
                        "on device 0: cudaMalloc failed: out of memory"
        refusing.fits, refusing.asked = 0, []
        assert core.load(smollm2_path).result().placement.where == "CPU"
        assert [n for _, n in refusing.asked] == [31, 15, 0]
    finally:
        core.close()


@pytest.mark.usefixtures("one_gpu")
def test_fewer_layers_are_tried_only_where_the_ram_they_then_need_is_free(
        monkeypatch: pytest.MonkeyPatch, smollm2_path: Path) -> None:
    refusing, core = load_with(monkeypatch, fits=0)
    plenty = engine_module.memory.available
    monkeypatch.setattr(engine_module.memory, "available",
                        lambda: plenty() if not refusing.asked else 50_000_000)
    try:
        with pytest.raises(NotEnoughMemory) as refused:
            core.load(smollm2_path).result()
        assert [n for _, n in refusing.asked] == [31]  # the half would not fit in RAM
        assert "could not be loaded with 31 layers on the GPU" in str(refused.value)
        assert "GPU 15/31 would need about" in str(refused.value)
    finally:
        core.close()


def test_the_memory_a_loaded_model_holds_on_the_gpu_counts_as_free_for_the_next(
        gemma_path: Path, smollm2_path: Path) -> None:
    card = gpu(free=0.9, total=1.5)
    loaded = offload.plan(read_header(smollm2_path), LoadOptions(), [CPU, card])
    assert loaded.gpu_layers == 31
    squeezed = offload.plan(read_header(gemma_path), LoadOptions(), [CPU, card])
    after = offload.plan(read_header(gemma_path), LoadOptions(),
                         offload.freed([CPU, card], loaded))
    assert after.gpu_layers > squeezed.gpu_layers
    assert offload.freed([CPU, card], None) == [CPU, card]


@pytest.mark.usefixtures("one_gpu")
def test_a_model_whose_ram_part_does_not_fit_is_refused_before_anything_unloads(
        monkeypatch: pytest.MonkeyPatch, smollm2_path: Path, gemma_path: Path) -> None:
    refusing, core = load_with(monkeypatch, fits=99, first=smollm2_path)
    monkeypatch.setattr(engine_module.memory, "available", lambda: 0)
    try:
        with pytest.raises(NotEnoughMemory) as refused:
            core.load(gemma_path).result()
        assert refusing.asked == []  # refused before loading anything
        assert "of memory besides" in str(refused.value) and "on the GPU" in str(refused.value)
        assert core.model is not None and core.model.path == smollm2_path  # still loaded
    finally:
        core.close()
