"""What a model load and a reply can be asked for: plain values, no llama.cpp.

Apart from the engine so that reading the settings (before the window's first paint,
or for ``fireside models``) does not import llama.cpp and numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

DEFAULT_MAX_CONTEXT = 8192  # longer contexts cost memory most chats never use
DEFAULT_BATCH = 512  # tokens llama.cpp reads at once while reading a prompt

# Flash attention: "auto" is on wherever this llama.cpp build runs it (its CPU code does
# for every model), "off" as llama.cpp's own default. Faster prompt reading (SmolLM2
# +15 %), and it is what lets the V cache be quantized.
FLASH_ATTENTION = ("auto", "on", "off")
# The KV cache's element type, and its bytes per element (llama.cpp's q8_0 and q4_0
# blocks hold 32 values in 34 and 18 bytes).
KV_CACHE_BYTES = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}
# GPU offload: as many layers as fit (offload.plan), every layer, none; or a count.
GPU_LAYERS = ("auto", "all", "off")


def checked_gpu_layers(text: str | None) -> str | None:
    """``text`` as a GPU offload choice (one of GPU_LAYERS or a count of layers), or
    None if it is not one."""
    value = (text or "").strip().lower()
    if value in GPU_LAYERS:
        return value
    if value.isdigit():
        return str(int(value))
    return None


def default_context(trained: int | None) -> int:
    """The context a model loads with when none is chosen: its trained one, capped."""
    return min(trained or DEFAULT_MAX_CONTEXT, DEFAULT_MAX_CONTEXT)


@dataclass(frozen=True)
class LoadOptions:
    n_ctx: int | None = None  # None: the trained length, capped at DEFAULT_MAX_CONTEXT
    n_threads: int | None = None  # for generating; None: default_threads()
    template_override: str | None = None
    flash_attention: str = "auto"  # one of FLASH_ATTENTION
    kv_cache: str = "f16"  # a key of KV_CACHE_BYTES
    batch_size: int | None = None  # None: DEFAULT_BATCH
    prompt_threads: int | None = None  # for reading prompts; None: as n_threads
    gpu_layers: str = "auto"  # checked_gpu_layers
    gpu_margin_mib: int | None = None  # GPU memory auto leaves free; None: offload.margin
    # A small model of the same vocabulary that drafts tokens for this one to check
    # (its path; None: prompt lookup alone). It has its own context.
    draft_model: str | None = None

    def checked(self) -> LoadOptions:
        """These options with an unknown choice (a hand-edited settings file) at its
        default."""
        return replace(
            self,
            flash_attention=self.flash_attention if self.flash_attention in FLASH_ATTENTION
            else "auto",
            kv_cache=self.kv_cache if self.kv_cache in KV_CACHE_BYTES else "f16",
            batch_size=self.batch_size if self.batch_size and self.batch_size >= 32 else None,
            prompt_threads=self.prompt_threads or None,
            gpu_layers=checked_gpu_layers(self.gpu_layers) or "auto",
            gpu_margin_mib=self.gpu_margin_mib if (self.gpu_margin_mib or 0) >= 0 else None)

    def tuning(self) -> LoadOptions:
        """Only what changes how llama.cpp computes (the rest at the defaults)."""
        return LoadOptions(flash_attention=self.flash_attention, kv_cache=self.kv_cache,
                           batch_size=self.batch_size, prompt_threads=self.prompt_threads)

    def untuned(self) -> LoadOptions:
        """These options with what ``tuning`` holds at the defaults."""
        return replace(self, flash_attention="auto", kv_cache="f16", batch_size=None,
                       prompt_threads=None)


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    max_tokens: int = 1024
    seed: int | None = None  # None: a new random seed per reply
    # A thinking model's thinking: thinking.THINKING_CHOICES; and the tokens it may spend
    # on a thought before Fireside ends it (None: no limit).
    thinking: str = "on"
    thinking_budget: int | None = None
    # Text that ends the reply besides the model's own ends (the local API's ``stop``):
    # applied where the model's are, so the reply ends at the same token.
    stop: tuple[str, ...] = ()
    # A JSON schema (its JSON text) the whole reply is held to by a grammar (the local
    # API's ``response_format``, ``fireside chat --schema``); None: free text.
    schema: str | None = None
    # Speculative decoding: drafted tokens checked by the model in one pass
    # (app.core.llama.speculation): the model keeps only what it would have written.
    # Off here, so that a Sampling of its own decodes as llama.cpp does; the app's
    # settings turn it on.
    speculation: bool = False
