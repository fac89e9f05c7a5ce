"""What llama-cpp-python itself answers on this machine: the yardstick for a model's words.

A 135M model's greedy words turn on the last bits of its logits, and those differ
between CPUs' kernels (AVX2 against AVX-512, and between the CPU levels a portable
build picks from): where one machine's SmolLM2 says "The capital of France is Paris.",
an AVX-512 machine's says "L'Étoile, la Cité, le Poulet (The City of Love) is the
capital of". So no test asserts what a model says. A test that needs "the model
answered this prompt" compares Fireside's text with what raw llama-cpp-python answers
here, with the same build, context, threads, sampling and placement:

- the prompt is rendered by llama-cpp-python's own chat formatter from the model's
  own template (Gemma 3 270M has none: llama-cpp-python's "gemma" format) and
  tokenized by llama-cpp-python;
- the reply is ``create_completion`` on a fresh sequence, greedy;
- its layers go where Fireside's default load puts them here (``gpu_layers``): none on
  a machine without a GPU, all of a small model on one with a GPU. A GPU's greedy words
  differ from the CPU's as two CPUs' do.

Equal texts show that Fireside's template, prefix handling, stop handling and
detokenization change nothing. Compare only replies that Fireside also computed from
the whole prompt (a new chat, or a sequence that held none of it): llama.cpp's kernels
are not batch-invariant, so a prompt read partly from cache may differ in the last bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import llama_cpp
from llama_cpp import llama_chat_format

from app.core.llama import (
    devices,
    llama_runtime,  # noqa: F401 - llama_runtime routes llama.cpp's log
    offload,
)
from app.core.llama.engine import llama_arguments
from app.core.models import gguf
from app.core.options import LoadOptions, Sampling, default_context
from app.core.reply.reply_text import ReplyText

Messages = Sequence[dict[str, str]]


class Reference:
    """Replies of raw llama-cpp-python, each computed once per test session."""

    def __init__(self) -> None:
        self._replies: dict[tuple[object, ...], tuple[str, list[int]]] = {}

    def reply(self, model: Path, messages: Messages | str, sampling: Sampling,
              n_ctx: int | None = None, gpu_layers: int | None = None) -> str:
        """The greedy reply to ``messages`` (or one user message) on a fresh sequence;
        ``gpu_layers``: the layers on the GPU (None: as Fireside's default load)."""
        return self._answer(model, messages, sampling, n_ctx, gpu_layers)[0]

    def prompt_tokens(self, model: Path, messages: Messages | str,
                      sampling: Sampling) -> list[int]:
        """The prompt llama-cpp-python's formatter builds for ``messages``."""
        return self._answer(model, messages, sampling, None, None)[1]

    def _answer(self, model: Path, messages: Messages | str, sampling: Sampling,
                n_ctx: int | None, gpu_layers: int | None) -> tuple[str, list[int]]:
        assert sampling.temperature == 0.0, "a reference is only defined for greedy replies"
        turns = [{"role": "user", "content": messages}] if isinstance(messages, str) \
            else [dict(m) for m in messages]
        if gpu_layers is None:
            gpu_layers = default_gpu_layers(model, n_ctx)
        key = (model, tuple(tuple(sorted(t.items())) for t in turns), sampling, n_ctx,
               gpu_layers)
        if key not in self._replies:
            self._replies[key] = _compute(model, turns, sampling, n_ctx, gpu_layers)
        return self._replies[key]


def default_gpu_layers(model: Path, n_ctx: int | None = None) -> int:
    """The layers Fireside's default load ("auto") puts on a GPU here, the model alone."""
    hardware = devices.survey()
    return offload.plan(gguf.read_header(model), LoadOptions(n_ctx=n_ctx), hardware.devices,
                        hardware.unavailable).gpu_layers


def cut_as_a_base_model(raw: str, stops: Sequence[str]) -> str:
    """What Fireside keeps of a base model's raw continuation ``raw``: the text before
    its first stop string or repeated line (the rules are tested on their own)."""
    out = ReplyText(None, stops=stops, stop_on_repeat=True)
    out.add(raw)
    return out.finish()[0]


def _compute(model: Path, messages: list[dict[str, str]], sampling: Sampling,
             n_ctx: int | None, gpu_layers: int) -> tuple[str, list[int]]:
    trained = gguf.read_header(model).context_length
    # The engine's own arguments for a load (threads, batch, flash attention, placement).
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=n_ctx or default_context(trained),
                          **llama_arguments(LoadOptions(), gpu_layers), verbose=False)
    try:
        template = llm.metadata.get("tokenizer.chat_template")
        if template:
            vocab = llm._model
            formatter = llama_chat_format.Jinja2ChatFormatter(
                template=template, eos_token=vocab.token_get_text(llm.token_eos()),
                bos_token=vocab.token_get_text(llm.token_bos()))
            formatted = formatter(messages=messages)
        else:
            formatted = llama_chat_format.format_gemma(messages=messages)
        tokens = llm.tokenize(formatted.prompt.encode("utf-8"),
                              add_bos=not formatted.added_special, special=True)
        out = llm.create_completion(tokens, max_tokens=sampling.max_tokens, temperature=0.0,
                                    top_k=sampling.top_k, top_p=sampling.top_p,
                                    min_p=sampling.min_p,
                                    repeat_penalty=sampling.repeat_penalty, seed=sampling.seed)
        return str(out["choices"][0]["text"]), tokens  # type: ignore[index]
    finally:
        llm.close()
