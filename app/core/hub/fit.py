"""Whether a model on the Hub fits this machine, from its header read by ranges and the
same fit code a file on disk goes through (``offload.plan``, ``memory.estimate``), and
which of a repository's quantizations fits best."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.core.llama import memory, offload
from app.core.llama.devices import Hardware
from app.core.models.gguf import GGUFHeader
from app.core.options import LoadOptions

FITS_IN_RAM = "fits in RAM"
ALL_ON_GPU = "all layers on the GPU"
TOO_BIG = "too big for this machine"
_FLOATS = {"F16", "BF16", "F32"}  # full precision: as good as Q8_0 to a reader, twice as slow


@dataclass(frozen=True)
class Fit:
    verdict: str  # FITS_IN_RAM, ALL_ON_GPU, "N of M layers on the GPU" or TOO_BIG
    gpu_layers: int
    n_layers: int
    ram_bytes: int  # what loading takes in RAM
    gpu_bytes: int  # and on the GPU
    n_ctx: int

    @property
    def fits(self) -> bool:
        return self.verdict != TOO_BIG

    @property
    def all_on_gpu(self) -> bool:
        return self.verdict == ALL_ON_GPU

    def to_json(self) -> dict[str, object]:
        return {"verdict": self.verdict, "fits": self.fits, "gpu_layers": self.gpu_layers,
                "n_layers": self.n_layers, "ram_bytes": self.ram_bytes,
                "gpu_bytes": self.gpu_bytes, "n_ctx": self.n_ctx}

    def needs(self) -> str:
        """"462 MB RAM", "2.1 GB GPU + 600 MB RAM"."""
        ram = memory.format_bytes(self.ram_bytes) + " RAM"
        return f"{memory.format_bytes(self.gpu_bytes)} GPU + {ram}" if self.gpu_bytes else ram

    def summary(self) -> str:
        return f"{self.verdict} ({self.needs()} at {self.n_ctx:,} tokens of context)"


def judge(header: GGUFHeader, options: LoadOptions, hardware: Hardware,
          ram_budget: int) -> Fit:
    """The verdict for loading ``header``'s model with ``options`` on ``hardware``, with
    ``ram_budget`` bytes of RAM to spare."""
    plan = offload.plan(header, options, hardware.devices, hardware.unavailable)
    n_ctx = memory.estimate(header, options.n_ctx, options.kv_cache).n_ctx
    if plan.host_bytes > ram_budget:
        verdict = TOO_BIG
    elif plan.gpu_layers >= plan.n_layers:
        verdict = ALL_ON_GPU
    elif plan.gpu_layers > 0:
        verdict = f"{plan.gpu_layers} of {plan.n_layers} layers on the GPU"
    else:
        verdict = FITS_IN_RAM
    gpu = 0 if plan.unified else plan.device_bytes
    return Fit(verdict, max(plan.gpu_layers, 0), plan.n_layers, plan.host_bytes, gpu, n_ctx)


def best(fits: Sequence[tuple[str, int, Fit | None]]) -> int | None:
    """Of (quantization, bytes, fit) the index of the one to mark: every layer on the GPU
    before a part; then the largest file that fits, full precision only when nothing
    quantized does (it reads no better than Q8_0, at twice the memory traffic)."""
    fitting = [(i, quant, size, fit) for i, (quant, size, fit) in enumerate(fits)
               if fit is not None and fit.fits]
    quantized = [f for f in fitting if f[1] not in _FLOATS] or fitting
    on_gpu = [f for f in quantized if f[3].all_on_gpu] or quantized
    return max(on_gpu, key=lambda f: f[2])[0] if on_gpu else None
