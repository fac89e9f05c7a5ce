"""How many of a model's layers go to the GPU, decided before loading from its header.

llama.cpp counts the output layer as one of the layers ``n_gpu_layers`` offloads, and
the first: N layers on the GPU are the output layer and the last N - 1 repeating
layers; the input (token embedding) layer always stays in RAM. On a device a layer
takes its weights and its part of the KV cache, and the device also holds one compute
buffer, sized by llama.cpp's worst case for a micro-batch: the logits of every token
in it (n_ubatch x vocabulary x 4 bytes), or without flash attention the attention
scores when those are larger. Measured on the CPU, whose graph is the same: SmolLM2
98 MiB at 2k-32k with flash attention (formula 96 + slack), 166 MiB at 8k without
(formula 166); Gemma 3 270M 514.5 MiB (formula 512 + slack). With some layers left on
the CPU, llama.cpp also copies each of their weights to the device in turn to multiply
a prompt's batch there: the largest of them joins the compute buffer. Each GPU a model
is spread over holds a compute buffer of its own.

"auto" keeps a margin of each device's memory free (the larger of 512 MiB and 8 %,
as other apps found they need: drivers, the desktop, other programs; a margin set by
the user is at least 256 MiB, for what the GPU's libraries allocate as replies run),
puts the whole model on the GPU when it fits, else as many layers as fit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from app.core.backend import Placement
from app.core.llama import memory
from app.core.llama.devices import Device, Hardware, offload_targets
from app.core.models.catalog import ModelEntry
from app.core.models.gguf import GGUFError, GGUFHeader
from app.core.models.header_cache import cached_header
from app.core.options import DEFAULT_BATCH, LoadOptions, checked_gpu_layers, default_context

MIB = 1 << 20
MARGIN_FLOOR = 512 * MIB
MARGIN_SHARE = 0.08
MARGIN_LEAST = 256 * MIB
COMPUTE_SLACK = 4 * MIB
_LAYER = re.compile(r"^blk\.(\d+)\.")


def margin(device: Device, margin_mib: int | None = None) -> int:
    """The memory of ``device`` that auto leaves free."""
    if margin_mib is not None:
        return max(MARGIN_LEAST, margin_mib * MIB)
    return max(MARGIN_FLOOR, int(device.total * MARGIN_SHARE))


@dataclass(frozen=True)
class Layers:
    """A model's parts as llama.cpp places them, in bytes."""

    weights: list[int]  # each repeating layer's weights
    largest: list[int]  # each repeating layer's largest tensor
    kv: list[int]  # each repeating layer's KV cache
    output: int  # the output layer (the token embedding again, where the two are tied)
    compute: int  # the compute buffer of a device that holds any layer
    tied: bool  # the output layer is a copy of the token embedding, which stays in RAM

    @property
    def count(self) -> int:
        return len(self.weights) + 1

    def moved(self, n: int) -> int:
        """The weights and KV cache that leave RAM for the device with ``n`` layers."""
        if n <= 0:
            return 0
        last = slice(self._first_on_device(n), None)
        return (0 if self.tied else self.output) + sum(self.weights[last]) + sum(self.kv[last])

    def on_device(self, n: int, devices: int = 1) -> int:
        """The device memory ``n`` layers take, spread over ``devices`` GPUs: what moved,
        a tied output layer's copy, and each GPU's compute buffer with, while layers stay
        on the CPU, the largest of their tensors copied in to multiply there."""
        if n <= 0:
            return 0
        staged = max(self.largest[:self._first_on_device(n)], default=0)
        return (self.moved(n) + (self.output if self.tied else 0)
                + (self.compute + staged) * devices)

    def _first_on_device(self, n: int) -> int:
        return len(self.weights) - (min(n, self.count) - 1)


def layers(header: GGUFHeader, options: LoadOptions) -> Layers:
    n_ctx = options.n_ctx or default_context(header.context_length)
    blocks = header.block_count or 0
    weights, largest = [0] * blocks, [0] * blocks
    sizes = {t.name: t.nbytes or 0 for t in header.tensors}
    for name, size in sizes.items():
        match = _LAYER.match(name)
        if match and int(match.group(1)) < blocks:
            weights[int(match.group(1))] += size
            largest[int(match.group(1))] = max(largest[int(match.group(1))], size)
    tied = "output.weight" not in sizes
    output = sizes.get("output.weight", sizes.get("token_embd.weight", 0))
    output += sizes.get("output_norm.weight", 0)
    kv = memory.kv_cache_layers(header, n_ctx, kv_cache=options.kv_cache)
    ubatch = options.batch_size or DEFAULT_BATCH
    compute = ubatch * (header.vocab_size or 0) * 4
    if options.flash_attention == "off":
        scores = ubatch * memory.padded(n_ctx) * (header.head_count or 0) * 4
        compute = max(compute, int(scores * 1.15))
    return Layers(weights, largest, kv or [0] * blocks, output, compute + COMPUTE_SLACK,
                  tied)


@dataclass(frozen=True)
class Plan:
    gpu_layers: int  # what llama.cpp is asked to offload (the output layer counts)
    n_layers: int  # all it could: the repeating layers and the output layer
    device_bytes: int  # memory the plan takes on the GPU
    host_bytes: int  # and in RAM
    unavailable: str | None = None  # why no layer can go to a GPU, when none can
    device: str | None = None  # the GPU's name, when layers go to one
    unified: bool = False  # the GPU's memory is the RAM: device_bytes are in host_bytes

    @property
    def where(self) -> str:
        """Beside the loaded model: "GPU 40/63", "CPU"."""
        if self.gpu_layers <= 0:
            return "CPU"
        return f"GPU {min(self.gpu_layers, self.n_layers)}/{self.n_layers}"

    def summary(self) -> str:
        """For the model picker: where the layers go and the memory on each side."""
        if self.gpu_layers <= 0:
            return "CPU only" + (f": {self.unavailable}" if self.unavailable else "")
        if self.gpu_layers >= self.n_layers:
            placed = f"all {self.n_layers} layers on GPU"
        else:
            placed = f"{self.gpu_layers}/{self.n_layers} layers on GPU"
        if self.unified:
            return f"{placed} · {memory.format_bytes(self.host_bytes)} in shared memory"
        return (f"{placed} · {memory.format_bytes(self.device_bytes)} GPU + "
                f"{memory.format_bytes(self.host_bytes)} RAM")


def plan(header: GGUFHeader, options: LoadOptions, devices: Sequence[Device],
         unavailable: str | None = None) -> Plan:
    """Where ``options.gpu_layers`` puts ``header``'s model given ``devices`` (as
    devices.list_devices() reports them now); ``unavailable``: why this build cannot
    offload at all (devices.gpu_support())."""
    parts = layers(header, options)
    n_ctx = options.n_ctx or default_context(header.context_length)
    total = memory.estimate(header, n_ctx, options.kv_cache).total
    targets = offload_targets(list(devices))
    choice = checked_gpu_layers(options.gpu_layers) or "auto"
    if unavailable is None and not targets:
        unavailable = "llama.cpp found no GPU it can use"
    if unavailable is not None or choice == "off":
        return Plan(0, parts.count, 0, total, unavailable)
    if choice == "all":
        count = parts.count
    elif choice == "auto":
        budget = sum(max(0, d.free - margin(d, options.gpu_margin_mib)) for d in targets)
        count = next((n for n in range(parts.count, 0, -1)
                      if parts.on_device(n, len(targets)) <= budget), 0)
        if count == 0:
            return Plan(0, parts.count, 0, total, "the GPU has too little free memory for "
                        "any layer")
    else:
        count = min(int(choice), parts.count)
    on_device = parts.on_device(count, len(targets))
    # A card takes its layers' weights and KV cache out of RAM; memory shared with the
    # GPU holds everything, the device's own buffers too.
    unified = all(d.unified for d in targets)
    host = (total + on_device - parts.moved(count)) if unified else total - parts.moved(count)
    return Plan(count, parts.count, on_device, host, unified=unified,
                device=", ".join(d.description or d.name for d in targets) if count else None)


def freed(devices: Sequence[Device], placement: Placement | None) -> list[Device]:
    """``devices`` with the memory a loaded model's ``placement`` holds counted as free
    (it is unloaded before another loads), shared among its GPUs."""
    if placement is None or placement.gpu_layers <= 0:
        return list(devices)
    targets = offload_targets(list(devices))
    share = placement.device_bytes // max(1, len(targets))
    return [replace(d, free=min(d.total, d.free + share)) if d in targets else d
            for d in devices]


def for_entry(entry: ModelEntry, options: LoadOptions, devices: Sequence[Device],
              unavailable: str | None = None) -> Plan | None:
    """The plan for a catalog entry, or None for a file that cannot load or a server's
    model (whose placement is the server's)."""
    if entry.error or entry.architecture == "remote":
        return None
    try:
        return plan(cached_header(entry.path), options, devices, unavailable)
    except GGUFError:
        return None


def would_go(entry: ModelEntry, options: LoadOptions, hardware: Hardware,
             loaded: Placement | None = None) -> Plan | None:
    """Where ``entry``'s layers would go if it loaded now with ``options``, the model
    ``loaded`` (its placement) unloaded first; None for a server's model or a file that
    cannot load. The window's list and ``fireside models`` both say this."""
    return for_entry(entry, options, freed(hardware.devices, loaded), hardware.unavailable)
