"""The inference engine: one thread owns the loaded model and its one sequence.

Every operation on the model (check, load, clear, tokenize, generate, close) runs on
the inference thread, one at a time, in the order it was submitted; nothing else ever
touches the ``Llama`` object. Nothing frees or replaces the model while work for it is
still queued, and nothing is fire-and-forget. Callers get ``concurrent.futures``
futures: a blocking caller waits on ``.result()``, an asyncio caller on
``asyncio.wrap_future``. Stopping a reply is a flag, not a queued job, because the
queue is busy while a reply streams. The thread and its queue are
``backend.OneThreadBackend``; this module says what each operation does with llama.cpp.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import logging
import os
import random
import struct
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import llama_cpp
import llama_cpp._internals as llama_internals
import psutil

from app.core.backend import (
    EngineClosed,
    EngineError,
    KeptStates,
    LoadCancelled,
    LoadedModel,
    ModelLoadError,
    NoModelLoaded,
    NotEnoughMemory,
    OneThreadBackend,
    PromptBuilder,
    PromptPlan,
    PromptTooLong,
    ReplyHandle,
    Session,
    plan_prompt,
    reusable_prefix,
)
from app.core.llama import (
    devices,
    llama_runtime,
    memory,
    offload,
    sampler_chain,
    saved_state,
    seq_states,
    speculation,
    state_files,
)
from app.core.llama.reply_loop import ReplyLoop
from app.core.models import catalog, gguf, header_cache
from app.core.options import DEFAULT_BATCH, LoadOptions, Sampling, default_context
from app.core.reply import templates
from app.core.reply.replies import Reply, ReplyStats
from app.core.reply.templates import ChatTemplate, Segment

logger = logging.getLogger(__name__)

T = TypeVar("T")

# As the engine closes, how long the state of the conversation left may take to reach
# the disk; past that it is not kept (the window closes within its bound regardless).
LEAVE_WRITE_S = 1.0


def default_threads() -> int:
    # llama-cpp-python's default (half the logical CPUs) leaves decode speed on the
    # table: one thread per physical core is measurably faster.
    return max(1, psutil.cpu_count(logical=False) or os.cpu_count() or 1)


class LlamaSession(Session):
    """The Session a prompt builder gets on the inference thread: llama.cpp's tokenizer."""

    def __init__(self, llm: llama_cpp.Llama, model: LoadedModel) -> None:
        super().__init__(model)
        self._llm = llm

    def encode(self, segments: Sequence[Segment]) -> list[int]:
        """Template text with special tokens parsed; message text always as plain text."""
        tokens: list[int] = []
        for segment in segments:
            if segment.text:
                tokens += self._llm.tokenize(segment.text.encode("utf-8", "surrogatepass"),
                                             add_bos=False, special=not segment.is_content)
        return tokens


class Engine(OneThreadBackend):
    def __init__(self, states_dir: Path | None = None, memory_budget: int | None = None,
                 disk_budget: int = state_files.DEFAULT_BUDGET) -> None:
        """``states_dir``: where sequence states are kept on disk (None: memory only);
        the budgets are in bytes (memory's default depends on this computer's)."""
        self._llm: llama_cpp.Llama | None = None  # inference thread only
        self._draft: speculation.DraftModel | None = None  # drafting for it, if chosen
        self._known_architectures: set[str] = set()
        self._footprints: dict[Path, int] = {}  # estimated memory of models checked
        self._active: ReplyHandle | None = None
        # Checked by llama.cpp between graph nodes while a prompt is processed, so a
        # stop does not wait for a whole batch. The object must outlive the context.
        self._abort_callback = llama_cpp.ggml_abort_callback(self._should_abort)
        self._model_key: saved_state.ModelKey | None = None
        self._owner: int | None = None  # the conversation whose history the sequence holds
        disk = None if states_dir is None else state_files.StateFolder(
            states_dir, f"llama-cpp-python {llama_cpp.__version__}", disk_budget)
        super().__init__("fireside-inference")
        self.states = seq_states.StateCache(memory_budget, disk)  # on this thread only

    def tokenize(self, text: str, special: bool = False) -> Future[list[int]]:
        def run() -> list[int]:
            return self._require_llm().tokenize(text.encode("utf-8", "surrogatepass"),
                                                add_bos=False, special=special)
        return self._submit(run)

    # -- inference thread ----------------------------------------------------------

    def _require_llm(self) -> llama_cpp.Llama:
        if self._llm is None:
            raise NoModelLoaded()
        return self._llm

    def _should_abort(self, _data: object) -> bool:
        active = self._active
        return self._closing.is_set() or (active is not None and active.stop_requested)

    def _clear(self) -> None:
        llm = self._require_llm()
        self._keep_sequence()
        self._empty(llm)

    def _empty(self, llm: llama_cpp.Llama) -> None:
        llm.reset()
        llm._ctx.kv_cache_clear()
        if self._draft is not None:
            self._draft.clear()
        self._owner = None

    def kept_states(self) -> KeptStates:
        return self.states.usage()

    def _clear_states(self) -> None:
        self.states.clear()

    def _forget(self, owner: int) -> None:
        if self._llm is not None and self._owner == owner:
            self._empty(self._llm)  # its history goes with it, not kept
        self.states.forget(owner)

    def _leave(self) -> None:
        self._keep_sequence()  # the next start finds it on disk
        self._unload()
        self.states.close(timeout=LEAVE_WRITE_S)

    # Loading ---------------------------------------------------------------------

    def _switch(self, path: Path, options: LoadOptions,
                on_progress: Callable[[float], None] | None,
                cancel: threading.Event) -> LoadedModel:
        if cancel.is_set():
            raise LoadCancelled(f"Loading {path.name} was cancelled.")
        header = self._check(path, options)  # refuses before the current model is touched
        previous = self._loaded
        self._keep_sequence()  # switching back restores it
        self._unload()
        try:
            return self._open(path, options, on_progress, header.context_length or 0, cancel)
        except ModelLoadError as err:
            if previous is None or self._closing.is_set():
                raise
            failure = err
        # Out of the except block, so that nothing of the failed load is held while the
        # previous model comes back. The way back cannot be cancelled, only cut short by
        # closing.
        try:
            self._open(previous.path, previous.options, None, previous.n_ctx_train,
                       threading.Event())
        except ModelLoadError:
            raise type(failure)(f"{failure} The previous model could not be loaded "
                                "again.") from failure
        raise type(failure)(f"{failure} {previous.name} is loaded again.") from failure

    def _check(self, path: Path, options: LoadOptions) -> gguf.GGUFHeader:
        """Refuse a file that cannot work, without unloading the current model."""
        try:
            # Usually already read for the library: then a lookup, checked against the
            # file's size, inode and mtime. A miss is read the fast way; damage that only
            # the exact way would find (inside the vocabulary) llama.cpp refuses at load,
            # and the previous model is loaded again.
            header = header_cache.cached_header(path)
        except gguf.GGUFError as err:
            raise ModelLoadError(f"{path.name} cannot be used: {err}") from err
        if catalog.is_embedding_model(header):  # it would fail at the first reply
            raise ModelLoadError(f"{path.name} cannot be used for chat: it is "
                                 f"{catalog.NOT_FOR_CHAT}. Choose it in Settings → Documents.")
        self._check_memory(path, header, options)
        architecture = header.architecture
        if architecture is None:
            self._check_vocab(path)
        elif architecture not in self._known_architectures:
            self._check_architecture(path, architecture)
        # A chosen template that fails is refused; the file's own falls back at load.
        template_text = options.template_override
        if template_text is not None:
            try:
                templates.validate(template_text)
            except templates.TemplateError as err:
                raise ModelLoadError(f"{path.name} cannot be used: {err}") from err
        return header

    def _check_memory(self, path: Path, header: gguf.GGUFHeader, options: LoadOptions) -> None:
        n_ctx = options.n_ctx or default_context(header.context_length)
        # The current model's memory comes back when it is unloaded for this one.
        current = self._loaded
        budget = memory.available() + (self._footprints.get(current.path, 0) if current else 0)
        placement = _placement(header, options, current)
        self._footprints[path] = placement.host_bytes
        if placement.gpu_layers > 0:  # what goes to the GPU is fitted to its memory
            if placement.host_bytes > budget:
                raise NotEnoughMemory(
                    f"{path.name} would need about {memory.format_bytes(placement.host_bytes)}"
                    f" of memory besides {memory.format_bytes(placement.device_bytes)} on the "
                    f"GPU, and only {memory.format_bytes(budget)} is free.")
            return
        reason = memory.refusal(path.name, header, n_ctx, budget, options.kv_cache)
        if reason is not None:
            entry = catalog.describe(path)
            folder = catalog.scan([(path.parent, catalog.COMMAND_LINE)])
            smaller = memory.smaller_variant(entry, folder, budget, options.n_ctx)
            if smaller is not None:
                reason += f" {smaller.path.name} is a smaller version of it that fits."
            raise NotEnoughMemory(reason)

    def _check_architecture(self, path: Path, architecture: str) -> None:
        """Refuse an architecture this llama.cpp does not know, in about a millisecond.

        llama.cpp reads the architecture before anything else, so a vocabulary-only load
        of a file that names it and holds nothing more fails there for an unknown one
        (with the message the model file itself would get) and at the hyperparameters
        for a known one. A vocabulary-only load of the model itself reads its whole
        vocabulary: 0.5 s for Gemma 3's 262k tokens, on the first switch to it.
        """
        name = architecture.encode("utf-8", "surrogatepass")
        key = b"general.architecture"
        probe = (gguf.MAGIC + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
                 + struct.pack("<IQ", gguf.ValueType.STRING, len(name)) + name)
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        try:
            handle, probe_path = tempfile.mkstemp(prefix="fireside-arch-", suffix=".gguf")
        except OSError:  # no writable temporary folder: ask the model file itself
            self._check_vocab(path)
            return
        llama_runtime.router.recent_errors.clear()
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(probe)
            with _quiet(logging.getLogger("fireside.llama")):  # its refusal is expected
                model = llama_internals.LlamaModel(path_model=probe_path, params=params,
                                                   verbose=True)
            model.close()
        except (ValueError, OSError):
            if any("unknown model architecture" in e
                   for e in llama_runtime.router.recent_errors):
                raise ModelLoadError(f"{path.name} cannot be used: {_llama_reason()}") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(probe_path)
        self._known_architectures.add(architecture)

    def _check_vocab(self, path: Path) -> None:
        # A vocabulary-only load tells whether this llama.cpp can read the file's
        # architecture (here: a file that names none); the weights are not read.
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        llama_runtime.router.recent_errors.clear()
        try:
            model = llama_internals.LlamaModel(path_model=str(path), params=params,
                                               verbose=True)
        except (ValueError, OSError) as err:
            raise ModelLoadError(f"{path.name} cannot be used: {_llama_reason()}") from err
        model.close()

    def _open(self, path: Path, options: LoadOptions,
              on_progress: Callable[[float], None] | None, n_ctx_train: int,
              cancel: threading.Event) -> LoadedModel:
        started = time.perf_counter()
        load = _Load(path, options.n_ctx or default_context(n_ctx_train), on_progress,
                     lambda: cancel.is_set() or self._closing.is_set())
        try:
            llm, placement = load.on_device(options)
        except LoadCancelled:
            raise
        except ModelLoadError as err:
            tuned = options.tuning()
            if tuned == LoadOptions():
                raise
            # A switch llama.cpp refuses for this model (a quantized V cache without
            # flash attention): the model still loads, as it does by default.
            options = options.untuned()
            llm, placement = load.on_device(options)
            load.notices.append(f"llama.cpp refused {describe_tuning(tuned)} for "
                                f"{path.name} ({str(err).split(': ', 1)[-1]}); it is loaded "
                                "with the defaults.")
        sampler_chain.install(llm)
        try:
            template = _resolve_template(llm, options.template_override)
        except templates.TemplateError as err:
            llm.close()
            raise ModelLoadError(f"{path.name} cannot be used: {err}") from err
        self._llm = llm
        self._model_key = _model_key(path, llm.n_ctx(), options)
        if options.draft_model:
            self._draft = self._open_draft(llm, path, Path(options.draft_model), placement,
                                           load.notices)
        self._loaded = self._described(
            llm, path, options, template=template, placement=placement,
            notice=" ".join(load.notices) or None, seconds=time.perf_counter() - started)
        if on_progress is not None:
            on_progress(1.0)
        return self._loaded

    def _open_draft(self, llm: llama_cpp.Llama, path: Path, draft: Path,
                    placement: offload.Plan,
                    notices: list[str]) -> speculation.DraftModel | None:
        """The draft model chosen for ``llm``, in a context as long as its own (it follows
        the same conversation); None, with the reason told in ``notices``, if it cannot
        draft for it. The model itself stays loaded either way."""
        def refused(reason: str) -> None:
            notices.append(f"{draft.name} cannot draft for {path.name}: {reason}. Replies are "
                           "drafted from the conversation alone.")

        try:
            header = header_cache.cached_header(draft)
        except (gguf.GGUFError, OSError) as err:
            refused(f"it cannot be read ({err})")
            return None
        if catalog.is_embedding_model(header):
            refused(f"it is {catalog.NOT_FOR_CHAT}")
            return None
        # On the GPU only where the model itself is wholly there: else the CPU's.
        layers = 999 if placement.gpu_layers >= placement.n_layers > 0 else 0
        llama_runtime.router.recent_errors.clear()
        try:
            drafting = llama_cpp.Llama(model_path=str(draft), n_ctx=llm.n_ctx(), **llama_arguments(
                LoadOptions(n_threads=llm.n_threads, prompt_threads=llm.n_threads_batch),
                layers), verbose=False)
        except (ValueError, RuntimeError, OSError):
            gc.collect()
            refused(f"it could not be loaded ({_llama_reason()})")
            return None
        reason = speculation.same_vocabulary(llm, drafting)
        if reason is not None:
            drafting.close()
            refused(reason)
            return None
        return speculation.DraftModel(drafting, catalog.display_name(drafting.metadata, draft))

    def _described(self, llm: llama_cpp.Llama, path: Path, options: LoadOptions, *,
                   template: ChatTemplate, placement: offload.Plan, notice: str | None,
                   seconds: float) -> LoadedModel:
        """The loaded model as the rest of Fireside sees it."""
        metadata: dict[str, str] = llm.metadata
        architecture = metadata.get("general.architecture", "unknown")
        self._known_architectures.add(architecture)
        base_model = catalog.is_base_model(metadata, path)
        if template.problem:
            notice = (f"The chat template in {path.name} cannot be used ({template.problem}); "
                      f"Fireside formats its chats as {template.name} instead. Settings → "
                      "This model → Chat template can choose another.")
        return LoadedModel(
            path=path, name=catalog.display_name(metadata, path),
            architecture=architecture, n_ctx=llm.n_ctx(),
            n_ctx_train=llm._model.n_ctx_train(),
            n_threads=llm.n_threads, template=template,
            seconds=seconds, options=options,
            base_model=base_model, notice=notice, placement=placement,
            stops=("\n\n", *templates.next_turn_markers(template)) if base_model else (),
            draft=self._draft.name if self._draft is not None else None)

    def _unload(self) -> None:
        llm, self._llm, self._loaded = self._llm, None, None
        self._model_key, self._owner = None, None
        if self._draft is not None:
            self._draft.close()
            self._draft = None
        if llm is not None:
            llm.close()
            del llm
            gc.collect()  # a closed Llama sits in reference cycles, holding its arrays
            llama_runtime.release_freed_memory()

    # Generation ------------------------------------------------------------------

    def _generate(self, handle: ReplyHandle, build: PromptBuilder, sampling: Sampling) -> Reply:
        llm = self._require_llm()
        model = self._loaded
        assert model is not None
        plan = plan_prompt(build, LlamaSession(llm, model))
        started = time.perf_counter()  # a state kept or restored counts in the wait
        cached, restored = self._reuse(llm, plan.tokens)
        self._owner = handle.owner
        llm.set_seed(sampling.seed if sampling.seed is not None else random.getrandbits(31))
        # The draft model the user chose first; where it is unsure, the conversation.
        drafters: list[speculation.Drafter] = [speculation.PromptLookup()]
        if self._draft is not None:
            drafters.insert(0, self._draft)
        loop = ReplyLoop(llm, model, plan, sampling, handle.pieces,
                         drafters=speculation.Drafters(drafters))
        self._active = handle
        # The abort check costs a Python call per graph node: worth it while a long
        # prompt is processed, not for each generated token (stop is checked between).
        _set_abort_callback(llm, self._abort_callback)
        try:
            decoded = loop.run(lambda: handle.stop_requested or self._closing.is_set(),
                               lambda: _set_abort_callback(llm, None))
        finally:
            self._active = None
            _set_abort_callback(llm, None)
        return loop.reply(decoded, started, cached, restored)

    def _reuse(self, llm: llama_cpp.Llama, tokens: Sequence[int]) -> tuple[int, int]:
        """How many of the prompt's tokens the sequence holds already, restoring a kept
        state where that gives more; and how many of those were restored."""
        cached = reusable_prefix(llm._input_ids, tokens)  # what generate() will reuse
        if llm.n_tokens - cached >= seq_states.MIN_TOKENS:
            self._keep_sequence()  # about to be overwritten: another conversation's
        saved = self.states.best(self._model_key, tokens, cached) if self._model_key else None
        if saved is not None and self._restore(llm, *saved):
            return saved[1], saved[1]
        return cached, 0

    # Sequence states -------------------------------------------------------------

    def _keep_sequence(self) -> None:
        """Save the sequence as it is, if it holds enough to be worth restoring and is a
        conversation's: a request to the local API sends its whole history each time, and
        its sequences, kept, would fill the budget with states no one comes back to."""
        llm, key = self._llm, self._model_key
        if llm is None or key is None or llm.n_tokens < seq_states.MIN_TOKENS \
                or self._owner is None:
            return
        ctx = llm._ctx.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        if size <= 0:
            return
        # llama.cpp writes into the bytes kept: no copy made while holding the GIL, so
        # the window's thread does not wait on it.
        data = saved_state.new_bytes(size)
        if llama_cpp.llama_state_seq_get_data(ctx, data, size, 0) != size:
            return
        tokens = tuple(int(t) for t in llm._input_ids)
        self.states.put(saved_state.SavedState(key, tokens, data, self._owner))

    def _restore(self, llm: llama_cpp.Llama, saved: saved_state.SavedState, keep: int) -> bool:
        """Put ``saved`` into the one sequence, its first ``keep`` tokens in use (the rest
        is dropped when the prompt is read); False (and the sequence empty) if llama.cpp
        refuses it, and the prompt is then read in full."""
        llm._ctx.kv_cache_clear()
        buffer = saved.data if not isinstance(saved.data, bytes) \
            else (ctypes.c_uint8 * len(saved.data)).from_buffer_copy(saved.data)
        if llama_cpp.llama_state_seq_set_data(llm._ctx.ctx, buffer, len(saved.data), 0) \
                != len(saved.data):
            logger.warning("a saved sequence state was refused; reading the prompt again")
            llm.reset()
            llm._ctx.kv_cache_clear()
            return False
        llm.input_ids[:len(saved.tokens)] = saved.tokens
        llm.n_tokens = keep  # generate() evaluates from here, removing what follows
        return True


class _Load:
    """Loading one file: the tries, each with its layers on the device, and what the
    user should be told of them."""

    def __init__(self, path: Path, n_ctx: int, on_progress: Callable[[float], None] | None,
                 cancelled: Callable[[], bool]) -> None:
        self.path, self.n_ctx = path, n_ctx
        self._on_progress, self._cancelled = on_progress, cancelled
        self.header = header_cache.cached_header(path)
        self.notices: list[str] = []

    def on_device(self, chosen: LoadOptions) -> tuple[llama_cpp.Llama, offload.Plan]:
        """Loaded with the layers planned for ``chosen`` on the GPU (planned now that
        the previous model's device memory is free); if the device refuses them (out
        of its memory, a driver error), with half as many, then on the CPU, each only
        if the memory it needs then is free."""
        path = self.path
        planned = _placement(self.header, chosen, None)
        if planned.unavailable and chosen.gpu_layers not in ("auto", "off"):
            self.notices.append(f"GPU offload ({chosen.gpu_layers}) was asked for, but "
                                f"{planned.unavailable}; {path.name} runs on the CPU.")
        failed = ""
        for layers in dict.fromkeys((planned.gpu_layers, planned.gpu_layers // 2, 0)):
            placement = planned if not failed else _placement(
                self.header, dataclasses.replace(chosen, gpu_layers=str(layers)), None)
            if failed and placement.host_bytes > memory.available():
                raise NotEnoughMemory(
                    f"{failed}; {placement.where} would need about "
                    f"{memory.format_bytes(placement.host_bytes)} of memory, and only "
                    f"{memory.format_bytes(memory.available())} is free.")
            try:
                llm = self._construct(chosen, layers)
            except LoadCancelled:
                raise
            except ModelLoadError as err:
                if layers == 0 or not _device_failure():
                    raise
                failed = (f"{path.name} could not be loaded with {layers} layers on the "
                          f"GPU ({str(err).split(': ', 1)[-1]})")
                continue
            if failed:
                self.notices.append(f"{failed}; it runs with {placement.where}." if layers
                                    else f"{failed}; it runs on the CPU.")
            return llm, placement
        raise AssertionError("the last try is on the CPU")

    def _construct(self, chosen: LoadOptions, gpu_layers: int) -> llama_cpp.Llama:
        path = self.path
        llama_runtime.router.recent_errors.clear()
        try:
            with llama_runtime.load_progress(self._progress):
                return llama_cpp.Llama(model_path=str(path), n_ctx=self.n_ctx,
                                       **llama_arguments(chosen, gpu_layers), verbose=False)
        except (ValueError, RuntimeError, OSError) as err:
            failure = err
        # A half-built Llama holds its weights (and device memory) until collected, and
        # the traceback's frames hold it: freed before anything else loads.
        traceback.clear_frames(failure.__traceback__)
        gc.collect()
        if self._cancelled():
            raise LoadCancelled(f"Loading {path.name} was cancelled.") from failure
        raise ModelLoadError(f"{path.name} could not be loaded: {_llama_reason()}") \
            from failure

    def _progress(self, fraction: float) -> bool:
        if self._on_progress is not None:
            self._on_progress(fraction)
        return not self._cancelled()


def _model_key(path: Path, n_ctx: int, options: LoadOptions) -> saved_state.ModelKey:
    """What a sequence state made with this load depends on: the file as it is, the
    context, and the switches that change what the KV cache holds."""
    stat = path.stat()
    arguments = llama_arguments(options)
    return saved_state.ModelKey(str(path), stat.st_size, stat.st_mtime_ns, n_ctx, ",".join(
        f"{name}={arguments[name]}" for name in ("n_batch", "flash_attn", "type_k", "type_v")))


_KV_TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0,
             "q4_0": llama_cpp.GGML_TYPE_Q4_0}


def _placement(header: gguf.GGUFHeader, options: LoadOptions,
               current: LoadedModel | None) -> offload.Plan:
    """Where ``options`` puts the model's layers, with the GPU memory ``current`` holds
    counted as free (it is unloaded first)."""
    now = devices.survey()
    found = offload.freed(now.devices, current.placement if current else None)
    return offload.plan(header, options, found, now.unavailable)


# What llama.cpp says when a device, not the file or the settings, refused a load.
_DEVICE_WORDS = ("alloc", "out of memory", "cuda", "vulkan", "metal", "device", "backend")


def _device_failure() -> bool:
    said = " ".join(llama_runtime.router.recent_errors).lower()
    return not said or any(word in said for word in _DEVICE_WORDS)


def llama_arguments(options: LoadOptions, gpu_layers: int = 0) -> dict[str, Any]:
    """The ``llama_cpp.Llama`` arguments for ``options`` (besides the path and context).

    Weights are read into the process, not memory-mapped: a mapped file that is
    truncated or rewritten while loaded (a download finishing, a sync tool, an editor)
    kills the process with SIGBUS at the next page fault, and mlock does not prevent it.
    Read in, the session never depends on the file again; the cost is measured by
    tests/benchmarks/bench_mmap.py (the same resident memory; +0.1 s to load Gemma 3
    270M, about +1 s per GB for larger models on this class of machine).
    """
    options = options.checked()
    threads = options.n_threads or default_threads()
    batch = options.batch_size or DEFAULT_BATCH
    kv_type = _KV_TYPES[options.kv_cache]
    return {"n_batch": batch, "n_ubatch": batch, "n_threads": threads,
            "n_threads_batch": options.prompt_threads or threads,
            # llama.cpp's CPU code runs flash attention for every model, and a GPU's for
            # the common head sizes (others fall back to the CPU): "auto" is on.
            "flash_attn": options.flash_attention != "off",
            "type_k": kv_type, "type_v": kv_type, "use_mmap": False,
            "n_gpu_layers": gpu_layers,
            # No layer on a GPU: no GPU at all, or llama.cpp would still run a prompt's
            # large products there (and need its memory for them) and keep the weights
            # in its pinned memory rather than the CPU's repacked layout.
            **({"split_mode": llama_cpp.LLAMA_SPLIT_MODE_NONE, "main_gpu": -1}
               if gpu_layers == 0 else {})}


def describe_tuning(options: LoadOptions) -> str:
    """The switches ``options`` sets away from the defaults, in words."""
    parts = []
    if options.flash_attention != "auto":
        parts.append(f"flash attention {options.flash_attention}")
    if options.kv_cache != "f16":
        parts.append(f"a {options.kv_cache} KV cache")
    if options.batch_size:
        parts.append(f"a batch of {options.batch_size}")
    if options.prompt_threads:
        parts.append(f"{options.prompt_threads} prompt threads")
    return " with ".join(parts) if parts else "the default settings"


@contextlib.contextmanager
def _quiet(log: logging.Logger) -> Iterator[None]:
    """Drop what ``log`` is given meanwhile (llama.cpp's errors still reach the router)."""
    def drop(_record: logging.LogRecord) -> bool:
        return False

    log.addFilter(drop)
    try:
        yield
    finally:
        log.removeFilter(drop)


def _set_abort_callback(llm: llama_cpp.Llama, callback: Any) -> None:
    llama_cpp.llama_set_abort_callback(llm.ctx, callback or llama_cpp.ggml_abort_callback(),
                                       None)


def _llama_reason() -> str:
    errors = list(llama_runtime.router.recent_errors)
    detail = next((e for e in reversed(errors) if "unknown model architecture" in e), None)
    detail = detail or (errors[-1] if errors else "")
    detail = detail.removeprefix("llama_model_load: error loading model: ")
    return detail or "llama.cpp could not read it (the file may be damaged or unsupported)."


def _resolve_template(llm: llama_cpp.Llama, override: str | None) -> ChatTemplate:
    model = llm._model

    def has_token(text: str) -> bool:
        tokens = llm.tokenize(text.encode(), add_bos=False, special=True)
        return len(tokens) == 1 and model.token_get_text(tokens[0]) == text

    def token_text(token: int) -> str:
        return model.token_get_text(token) if token >= 0 else ""

    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    return templates.resolve(llm.metadata, has_token, bos_token=token_text(llm.token_bos()),
                             eos_token=token_text(llm.token_eos()),
                             add_bos=bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
                             override=override)


__all__ = ["Engine", "EngineClosed", "EngineError", "LoadCancelled", "LoadOptions",
           "LoadedModel", "ModelLoadError", "NoModelLoaded", "NotEnoughMemory", "PromptBuilder",
           "PromptPlan",
           "PromptTooLong", "Reply", "ReplyHandle", "ReplyStats", "Sampling", "Session",
           "default_threads"]
