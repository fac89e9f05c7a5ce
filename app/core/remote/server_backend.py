"""A model on a server the user added, behind the same ``Backend`` as the local engine.

The server applies its own chat template: Fireside sends the conversation as messages
(the chat service still fits it to the model's context, with an estimate of its
length). Sampling goes as the OpenAI API's own fields, a schema as ``response_format``
(the server holds the reply to it); those it lacks (top-k, min-p, repeat penalty) are
not sent. A reader thread takes the stream, so a stop returns at
once even while the server is silent; what came before a break is kept, marked "cut".
"""

from __future__ import annotations

import dataclasses
import json
import queue
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from app.core.backend import (
    EngineError,
    LoadedModel,
    ModelLoadError,
    NoModelLoaded,
    OneThreadBackend,
    PromptBuilder,
    ReplyHandle,
    Session,
    plan_prompt,
)
from app.core.options import LoadOptions, Sampling
from app.core.remote import servers
from app.core.remote.servers import Server
from app.core.reply import json_schema, templates
from app.core.reply.replies import FinishReason, Reply, ReplyStats
from app.core.reply.reply_text import ReplyText

DEFAULT_CONTEXT = 4096  # when neither the server nor the user says
STOP_POLL_S = 0.05  # how often a silent stream looks for a stop
# An estimate on the long side (the server's tokenizer is not here): three characters
# a token, and room for what the server's template adds (a default system prompt).
CHARS_PER_TOKEN = 3
TEMPLATE_TOKENS = 64
_END = object()

# The text a server template could render: only to estimate a prompt's length.
_ESTIMATE = dataclasses.replace(templates.resolve({}, lambda _t: False, override="chatml"),
                                name="The server's own", source="server")


class _Estimate(Session):
    calls_tools = False

    def encode(self, segments: Sequence[templates.Segment]) -> list[int]:
        return [0] * (sum(len(s.text) for s in segments) // CHARS_PER_TOKEN + TEMPLATE_TOKENS)


class RemoteBackend(OneThreadBackend):
    def __init__(self, find_server: Callable[[str], Server | None],
                 read_timeout_s: Callable[[], float] = lambda: servers.READ_TIMEOUT_S,
                 offline: Callable[[], bool] = lambda: False) -> None:
        super().__init__("fireside-remote")
        self._find = find_server
        self._offline = offline  # the Offline switch, read at each load
        self._read_timeout_s = read_timeout_s  # read at each load: a setting
        self._client: Any = None  # an openai.OpenAI for the loaded model's server

    # -- the backend's thread -------------------------------------------------------

    def _switch(self, path: Path, options: LoadOptions,
                on_progress: Callable[[float], None] | None,
                cancel: threading.Event) -> LoadedModel:
        started = time.monotonic()
        server, model_id = self._locate(path)
        listing = servers.ask_models(server)
        if listing.problem:
            raise ModelLoadError(listing.problem)
        served = next((m for m in listing.models if m.id == model_id), None)
        if served is None:
            raise ModelLoadError(f"{server.name} no longer serves {model_id}. Choose another "
                                 "model; the list was updated.")
        if cancel.is_set():
            from app.core.backend import LoadCancelled  # noqa: PLC0415

            raise LoadCancelled(f"Loading {model_id} was cancelled.")
        self._close_client()
        self._client = self._connect(server)
        n_ctx = served.context_length or options.n_ctx or DEFAULT_CONTEXT
        if on_progress is not None:
            on_progress(1.0)
        self._loaded = LoadedModel(path, servers.display_name(served), "remote", n_ctx,
                                   served.context_length or n_ctx, 0, _ESTIMATE,
                                   time.monotonic() - started, options)
        return self._loaded

    def _clear(self) -> None:
        """A server keeps nothing of ours between requests."""

    def _generate(self, handle: ReplyHandle, build: PromptBuilder, sampling: Sampling) -> Reply:
        model = self._loaded
        if model is None:
            raise NoModelLoaded()
        plan = plan_prompt(build, _Estimate(model))
        server, model_id = self._locate(model.path)
        started = time.monotonic()
        stream = self._open_stream(server, model_id, plan.messages, sampling)
        chunks = _start_reader(stream)
        # A thought inline at the start is told apart too; the request's stop strings
        # end the reply here, as they do on the local engine.
        reply = _Streamed(ReplyText(handle.pieces, stops=sampling.stop), started)
        _read_stream(handle, stream, chunks, reply, server)
        ended = time.monotonic()
        answer, thought = reply.text.finish()
        return Reply(answer, reply.stats(ended, plan.dropped_turns, model.name), thought)

    def _open_stream(self, server: Server, model_id: str, messages: Sequence[dict[str, str]],
                     sampling: Sampling) -> Any:
        import openai  # noqa: PLC0415

        try:
            return self._client.chat.completions.create(
                model=model_id, messages=list(messages), stream=True,
                stream_options={"include_usage": True}, **_request_fields(sampling))
        except openai.OpenAIError as err:
            raise EngineError(servers.explain(err, server)) from err

    def _unload(self) -> None:
        self._close_client()
        self._loaded = None

    # -- helpers ----------------------------------------------------------------------

    def _locate(self, path: Path) -> tuple[Server, str]:
        where = servers.on_server(path)
        if where is None:
            raise ModelLoadError(f"{path} is not a server's model.")
        if self._offline():
            raise ModelLoadError(f"Fireside is offline: {where[0]} is not asked. Turn "
                                 "Offline off (Settings → Network) to use its models.")
        server = self._find(where[0])
        if server is None:
            raise ModelLoadError(f"There is no server called “{where[0]}” any more. Add it "
                                 "again, or choose another model.")
        return server, where[1]

    def _connect(self, server: Server) -> Any:
        import openai  # noqa: PLC0415

        # One retry, and only for what fails before a reply begins (the client retries
        # a request it could not send or that was refused as busy, never a stream).
        return openai.OpenAI(base_url=server.url, api_key=server.key() or "none",
                             max_retries=1, timeout=openai.Timeout(
                                 self._read_timeout_s(), connect=servers.CONNECT_TIMEOUT_S))

    def _close_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _request_fields(sampling: Sampling) -> dict[str, Any]:
    """The sampling the OpenAI API has fields for; a seed only when one is set; a
    schema as ``response_format``, which the server holds the reply to itself."""
    fields: dict[str, Any] = {"temperature": sampling.temperature, "top_p": sampling.top_p,
                              "max_tokens": sampling.max_tokens}
    if sampling.seed is not None:
        fields["seed"] = sampling.seed
    if sampling.schema == json_schema.JSON_OBJECT:
        fields["response_format"] = {"type": "json_object"}
    elif sampling.schema is not None:
        fields["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "reply", "schema": json.loads(sampling.schema), "strict": True}}
    return fields


class _Streamed:
    """What a streamed reply has brought so far, and how it ended."""

    def __init__(self, text: ReplyText, started: float) -> None:
        self.text = text
        self.started = started
        self.pieces = 0
        self.first: float | None = None  # when the first piece came
        self.finish: FinishReason = "stop"
        self.usage: Any = None
        self.problem = ""

    def take(self, chunk: Any) -> None:
        """One chunk of the stream: its pieces of thought and text, its usage."""
        self.usage = getattr(chunk, "usage", None) or self.usage
        for choice in getattr(chunk, "choices", None) or ():
            # llama-server, vLLM and DeepSeek send thinking as reasoning_content,
            # Ollama and OpenRouter as reasoning.
            thought = getattr(choice.delta, "reasoning_content", None) \
                or getattr(choice.delta, "reasoning", None)
            self._add(thought, thinking=True)
            self._add(getattr(choice.delta, "content", None), thinking=False)
            if choice.finish_reason == "length":
                self.finish = "length"

    def _add(self, piece: Any, *, thinking: bool) -> None:
        if not isinstance(piece, str) or not piece:
            return
        if self.first is None:
            self.first = time.monotonic()
        self.pieces += 1
        if thinking:
            self.text.add_thinking(piece, tokens=1)
        else:
            self.text.add(piece)

    def broke(self, err: Exception, server: Server) -> None:
        """A stream that broke before its first piece is an error; after it, what came
        is kept, marked cut."""
        if not self.pieces and self.first is None:
            raise EngineError(_explain(err, server)) from err
        self.finish, self.problem = "cut", _explain(err, server)

    def stats(self, ended: float, dropped_turns: int, model_name: str) -> ReplyStats:
        usage = self.usage
        tokens = getattr(usage, "completion_tokens", None) or self.pieces
        details = getattr(usage, "prompt_tokens_details", None)
        first = self.first
        decode_s = ended - first if first is not None else 0.0
        return ReplyStats(
            prompt_tokens=getattr(usage, "prompt_tokens", None) or 0,  # 0: not said
            cached_tokens=getattr(details, "cached_tokens", None) or 0,
            tokens=tokens if self.pieces else 0,
            ttft_s=(first - self.started) if first is not None else 0.0,
            tokens_per_s=(tokens - 1) / decode_s if decode_s > 0 and tokens > 1 else 0.0,
            finish_reason=self.finish, dropped_turns=dropped_turns, model=model_name,
            problem=self.problem, thinking_tokens=self.text.thinking_tokens,
            thinking_s=self.text.thinking_s)


def _read_stream(handle: ReplyHandle, stream: Any, chunks: queue.SimpleQueue[Any],
                 reply: _Streamed, server: Server) -> None:
    """Take the chunks into ``reply`` until the stream ends, breaks, or is stopped."""
    while True:
        if handle.stop_requested:
            reply.finish = "stopped"
            stream.close()  # the server stops generating when its client goes
            return
        try:
            # Waits a little at a time, so that a stop is seen while the server is silent.
            chunk = chunks.get(timeout=STOP_POLL_S)
        except queue.Empty:
            continue
        if chunk is _END:
            return
        if isinstance(chunk, Exception):
            reply.broke(chunk, server)
            return
        reply.take(chunk)
        if reply.text.stopped:
            stream.close()
            return


def _start_reader(stream: Any) -> queue.SimpleQueue[Any]:
    chunks: queue.SimpleQueue[Any] = queue.SimpleQueue()
    threading.Thread(target=_pump, args=(stream, chunks), daemon=True,
                     name="fireside-remote-stream").start()
    return chunks


def _pump(stream: Any, chunks: queue.SimpleQueue[Any]) -> None:
    """The reader thread: every chunk, then the end or what broke the stream."""
    try:
        for chunk in stream:
            chunks.put(chunk)
    except Exception as exc:  # handed to the backend's thread, which says what it was
        chunks.put(exc)
        return
    chunks.put(_END)


def _explain(err: Exception, server: Server) -> str:
    import openai  # noqa: PLC0415

    if isinstance(err, openai.OpenAIError):
        return servers.explain(err, server)
    if isinstance(err, ValueError):  # a piece that is not JSON
        return servers.not_an_api(server)
    return (f"The connection to {server.name} broke ({type(err).__name__}: {err}). Check "
            "that the server is still running.")
