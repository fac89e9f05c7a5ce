"""Requests to Fireside's local API in OpenAI's chat-completions shape: read and checked,
turned into a prompt for the loaded model, and the answer written back in that shape.

No HTTP here (:mod:`app.api` serves it); the request is answered by the core's one
inference thread, queued with the user's own chat (:meth:`Fireside.answer`).
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.core.backend import (
    EngineClosed,
    EngineError,
    NoModelLoaded,
    PromptBuilder,
    PromptPlan,
    PromptTooLong,
    Session,
)
from app.core.options import Sampling
from app.core.reply import json_schema, templates, thinking, tool_calls
from app.core.reply.replies import ReplyStats, ToolCall

MAX_STOP_STRINGS = 4  # as OpenAI allows
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
         "tool": "tool"}
# Fields OpenAI clients send that change nothing here while they hold these values.
HARMLESS = {"n": 1, "logprobs": False}
MAX_TOOLS = 128  # as OpenAI allows


class ApiError(Exception):
    """An answer in OpenAI's error shape, with its HTTP status."""

    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.param, self.code = status, kind, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param,
                          "code": self.code}}


def no_model(message: str = "No model is loaded in Fireside. Choose one in its window, "
             "or start `fireside serve --model NAME`.") -> ApiError:
    return ApiError(503, message, kind="server_error", code="model_not_loaded")


@dataclass(frozen=True)
class CompletionRequest:
    model: str
    messages: tuple[dict[str, Any], ...]
    sampling: dict[str, Any]  # Sampling fields the request sets; the rest are the model's
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    thinking: str = "on"  # from reasoning_effort: thinking.THINKING_CHOICES
    tools: tool_calls.ToolUse | None = None
    schema: str | None = None  # response_format's JSON schema (json_schema.check's text)

    def prompt(self) -> PromptBuilder:
        """The messages through the loaded model's own chat template; tools as the
        family writes them, or in the generic format (app.core.reply.tool_calls)."""
        messages = list(self.messages)
        use = self.tools

        def build(session: Session) -> PromptPlan:
            variables: dict[str, Any] = thinking.template_variables(
                session.template.text, self.thinking)
            uses_tools = use is not None or any(
                m["role"] == "tool" or m.get("tool_calls") for m in messages)
            if uses_tools and not session.calls_tools:
                raise ApiError(400, "Tools work with models Fireside runs itself: the "
                               "loaded model is on a server.", param="tools")
            if uses_tools:
                segments, convo, calls = tool_calls.render(
                    session.template, messages, use, variables,
                    check=lambda typed: _refuse_control_tokens(session, typed))
            else:
                convo, calls = messages, None
                segments = templates.render(session.template, convo, extra=variables)
            plain = ({"role": m["role"], "content": m["content"]} for m in convo)
            return PromptPlan(session.encode(segments), 0, tuple(plain), tools=calls)

        return build

    def sampling_for(self, model_settings: Sampling, n_ctx: int) -> Sampling:
        """The model's settings with what the request sets; without ``max_tokens`` the
        reply may run to the end of the context, as OpenAI's does."""
        fields = {"max_tokens": n_ctx, **self.sampling, "stop": self.stop,
                  "schema": self.schema}
        if self.thinking != "on":
            fields["thinking"] = self.thinking
        return dataclasses.replace(model_settings, **fields)


def read_request(body: Any) -> CompletionRequest:
    """The request in ``body`` (parsed JSON), or ApiError(400) saying what is wrong."""
    if not isinstance(body, Mapping):
        raise ApiError(400, "The request body must be a JSON object.")
    # Fields are checked in this order so that a request with several faults is always
    # told of the same one first.
    _refuse_unsupported(body)
    model = body.get("model", "")
    if not isinstance(model, str):
        raise ApiError(400, "'model' must be a string.", param="model")
    stream, include_usage = _streaming(body)
    sampling = _sampling(body)
    use = _tool_use(body)
    schema = _response_format(body)
    # A reply is held either to a call's grammar or to the schema's, from the first
    # token: with a tool the model may call, which would hold is not known before it
    # writes. tool_choice "none" (a structured answer after the tools' results) is fine.
    if schema is not None and use is not None and use.callable:
        raise ApiError(400, "'response_format' cannot be combined with tools the model may "
                       "call: send tool_choice \"none\" for an answer held to the schema, or "
                       "leave 'response_format' out.", param="response_format")
    effort = _thinking(body)
    return CompletionRequest(model, _messages(body.get("messages")), sampling,
                             _stops(body.get("stop")), stream, include_usage, effort, use,
                             schema)


def _refuse_unsupported(body: Mapping[str, Any]) -> None:
    """A field OpenAI honours and Fireside cannot is refused, not quietly ignored."""
    for name, harmless in HARMLESS.items():
        if body.get(name, harmless) not in (harmless, None):
            raise ApiError(400, f"'{name}' is not supported by Fireside's server: leave it "
                           "out.", param=name, code="unsupported_parameter")


def _streaming(body: Mapping[str, Any]) -> tuple[bool, bool]:
    """``stream``, and ``stream_options.include_usage``, which only a stream may ask for."""
    stream = _typed(body, "stream", bool, False)
    options = body.get("stream_options")
    if options is not None and not stream:
        raise ApiError(400, "'stream_options' is only allowed when 'stream' is true.",
                       param="stream_options")
    if options is not None and not isinstance(options, Mapping):
        raise ApiError(400, "'stream_options' must be an object.", param="stream_options")
    return stream, _typed(options or {}, "include_usage", bool, False)


def _sampling(body: Mapping[str, Any]) -> dict[str, Any]:
    """The Sampling fields the request sets; those it leaves out stay the model's."""
    sampling: dict[str, Any] = {}
    for name, low, high in (("temperature", 0.0, 2.0), ("top_p", 0.0, 1.0)):
        value = _number(body, name)
        if value is not None:
            if not low <= value <= high:
                raise ApiError(400, f"'{name}' must be between {low:g} and {high:g}.",
                               param=name)
            sampling[name] = float(value)
    for name in ("max_completion_tokens", "max_tokens"):  # the newer name wins
        value = _typed(body, name, int, None)
        if value is not None:
            if value < 1:
                raise ApiError(400, f"'{name}' must be at least 1.", param=name)
            sampling.setdefault("max_tokens", value)
    seed = _typed(body, "seed", int, None)
    if seed is not None:
        sampling["seed"] = seed
    return sampling


def _response_format(body: Mapping[str, Any]) -> str | None:
    """``response_format`` as the schema the reply is held to (None: free text)."""
    value = body.get("response_format")
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, Mapping) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return json_schema.JSON_OBJECT
    if kind != "json_schema":
        given = f" (not {kind!r})" if isinstance(kind, str) else ""
        raise ApiError(400, "'response_format' must be {\"type\": \"text\"}, {\"type\": "
                       "\"json_object\"} or {\"type\": \"json_schema\", \"json_schema\": "
                       f"{{...}}}}{given}.", param="response_format")
    spec = value.get("json_schema")
    if not isinstance(spec, Mapping):
        raise ApiError(400, "'response_format.json_schema' must be an object with a 'name' "
                       "and a 'schema'.", param="response_format")
    name = spec.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
        raise ApiError(400, "'response_format.json_schema.name' must be 1 to 64 letters, "
                       "digits, underscores or dashes.", param="response_format")
    for field, kind_of in (("description", str), ("strict", bool)):
        if spec.get(field) is not None and not isinstance(spec[field], kind_of):
            raise ApiError(400, f"'response_format.json_schema.{field}' must be "
                           f"{_A[kind_of]}.", param="response_format")
    # Held whether "strict" or not: a grammar holds the whole reply either way.
    try:
        return json_schema.check(spec.get("schema", True))
    except json_schema.SchemaError as err:
        raise ApiError(400, f"The schema in 'response_format' cannot be held: {err}",
                       param="response_format") from err


def _thinking(body: Mapping[str, Any]) -> str:
    """``reasoning_effort`` as one of thinking.THINKING_CHOICES."""
    effort: str = _typed(body, "reasoning_effort", str, "on")
    if effort not in ("on", "none", "minimal", "low", "medium", "high"):
        raise ApiError(400, "'reasoning_effort' must be none, minimal, low, medium or high.",
                       param="reasoning_effort")
    return {"none": "off", "minimal": "low"}.get(effort, effort)


def _refuse_control_tokens(session: Session, strings: list[str]) -> None:
    """A native template prints tools and calls as its own text: a control token in
    them would be read as the model's own, so it is refused, never passed on."""
    text = tool_calls.holding_control_tokens(session.encode, strings)
    if text is not None:
        raise ApiError(400, f"A tool or a call holds the model's control tokens "
                       f"({text[:40]!r}); they cannot be passed to it.", param="tools")


def _tool_use(body: Mapping[str, Any]) -> tool_calls.ToolUse | None:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls``, as OpenAI reads them."""
    listed = body.get("tools")
    choice_value = body.get("tool_choice")
    # One call a reply unless asked (as llama.cpp's server): small models asked for
    # one thing call it again and again.
    parallel = _typed(body, "parallel_tool_calls", bool, False)
    if listed is None or listed == []:
        if choice_value not in (None, "none", "auto"):
            raise ApiError(400, "'tool_choice' needs 'tools'.", param="tool_choice")
        return None
    if not isinstance(listed, list) or len(listed) > MAX_TOOLS:
        raise ApiError(400, f"'tools' must be a list of up to {MAX_TOOLS} functions.",
                       param="tools")
    found = []
    for i, item in enumerate(listed):
        where = f"tools[{i}]"
        function = item.get("function") if isinstance(item, Mapping) else None
        if not isinstance(item, Mapping) or item.get("type") != "function" \
                or not isinstance(function, Mapping):
            raise ApiError(400, f"{where} must be {{\"type\": \"function\", \"function\": "
                           "{...}}.", param=where)
        name = function.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise ApiError(400, f"{where}.function.name must be 1 to 64 letters, digits, "
                           "underscores, dots or dashes.", param=f"{where}.function.name")
        description = function.get("description") or ""
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(description, str) or not isinstance(parameters, Mapping):
            raise ApiError(400, f"{where}.function needs a text description and an object "
                           "of parameters (a JSON schema).", param=where)
        found.append(tool_calls.Tool(name, description, parameters))
    if choice_value is None:
        choice = tool_calls.AUTO
    elif isinstance(choice_value, str) and choice_value in (
            tool_calls.AUTO, tool_calls.NONE, tool_calls.REQUIRED):
        choice = choice_value
    elif isinstance(choice_value, Mapping) and isinstance(
            choice_value.get("function"), Mapping) \
            and isinstance(choice_value["function"].get("name"), str):
        choice = choice_value["function"]["name"]
    else:
        raise ApiError(400, "'tool_choice' must be auto, none, required or "
                       "{\"type\": \"function\", \"function\": {\"name\": ...}}.",
                       param="tool_choice")
    try:
        use = tool_calls.ToolUse(tuple(found), choice, parallel)
        tool_calls.plan(None, use)  # every schema is one Fireside can follow
    except tool_calls.ToolError as err:
        raise ApiError(400, str(err), param="tools") from err
    return use


def _typed(body: Mapping[str, Any], name: str, kind: type, default: Any) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ApiError(400, f"'{name}' must be {_A[kind]}.", param=name)
    return value


_A = {bool: "true or false", int: "a whole number", str: "a string"}


def _number(body: Mapping[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ApiError(400, f"'{name}' must be a number.", param=name)
    return float(value)


def _messages(value: Any) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list) or not value:
        raise ApiError(400, "'messages' must be a non-empty list.", param="messages")
    messages: list[dict[str, Any]] = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, Mapping):
            raise ApiError(400, f"{where} must be an object.", param=where)
        role = message.get("role")
        if role not in ROLES:
            raise ApiError(400, f"{where}.role must be system, developer, user, assistant "
                           f"or tool (not {role!r}).", param=f"{where}.role")
        calls = _calls(message.get("tool_calls"), where) if role == "assistant" else ()
        content = message.get("content")
        entry: dict[str, Any] = {"role": ROLES[role], "content": "" if content is None and (
            calls or role == "tool") else _content(content, f"{where}.content")}
        if calls:
            entry["tool_calls"] = calls
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                raise ApiError(400, f"{where}.tool_call_id must name the call it answers.",
                               param=f"{where}.tool_call_id")
            entry["tool_call_id"] = call_id
        # A reply's reasoning, as clients send it back: to the template, which decides.
        reasoning = message.get("reasoning_content")
        if ROLES[role] == "assistant" and isinstance(reasoning, str) and reasoning:
            entry["thinking"] = reasoning
        messages.append(entry)
    return tuple(messages)


def _calls(value: Any, where: str) -> tuple[ToolCall, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ApiError(400, f"{where}.tool_calls must be a list.", param=f"{where}.tool_calls")
    calls = []
    for i, call in enumerate(value):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str) \
                or not isinstance(function.get("arguments", "{}"), str):
            raise ApiError(400, f"{where}.tool_calls[{i}] must hold a function's name and "
                           "its arguments (JSON text).", param=f"{where}.tool_calls")
        calls.append(ToolCall(function["name"], function.get("arguments", "{}"),
                              str(call.get("id") or f"call_{i}")))
    return tuple(calls)


def _content(value: Any, where: str) -> str:
    """Text, or a list of text parts; other parts (images, audio) are refused."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for part in value:
            if not isinstance(part, Mapping) or part.get("type") != "text" \
                    or not isinstance(part.get("text"), str):
                raise ApiError(400, f"{where} may hold only text parts: the loaded model "
                               "reads text.", param=where)
            texts.append(part["text"])
        return "\n".join(texts)
    raise ApiError(400, f"{where} must be a string or a list of text parts.", param=where)


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or len(stops) > MAX_STOP_STRINGS \
            or not all(isinstance(s, str) and s for s in stops):
        raise ApiError(400, f"'stop' must be a string or a list of up to {MAX_STOP_STRINGS} "
                       "non-empty strings.", param="stop")
    return tuple(stops)


# -- answers, in OpenAI's shapes -----------------------------------------------------


def finish_reason(stats: ReplyStats) -> str:
    if stats.finish_reason in ("length", "context"):
        return "length"
    if stats.finish_reason == "tool_calls":
        return "tool_calls"
    return "stop"  # the model ended, a stop string came, or Fireside is closing


def usage(stats: ReplyStats) -> dict[str, Any]:
    """OpenAI's usage; the drafted tokens (speculative decoding) also under the names of
    its Predicted Outputs, which count the same thing."""
    accepted = stats.draft_accepted
    return {"prompt_tokens": stats.prompt_tokens, "completion_tokens": stats.tokens,
            "total_tokens": stats.prompt_tokens + stats.tokens,
            "prompt_tokens_details": {"cached_tokens": stats.cached_tokens},
            "completion_tokens_details": {
                "reasoning_tokens": stats.thinking_tokens,
                "accepted_prediction_tokens": accepted,
                "rejected_prediction_tokens": max(0, stats.draft_proposed - accepted)},
            "draft_proposed": stats.draft_proposed, "draft_accepted": accepted}


def timings(stats: ReplyStats) -> dict[str, Any]:
    """The reply's speed as the model made it, under llama.cpp's server's names (clients
    that know them show them; the others ignore an extra field)."""
    return {"prompt_n": stats.prompt_tokens - stats.cached_tokens,
            "cache_n": stats.cached_tokens, "prompt_ms": round(stats.ttft_s * 1000, 2),
            "predicted_n": stats.tokens,
            "predicted_per_second": round(stats.tokens_per_s, 2),
            "draft_n": stats.draft_proposed, "draft_n_accepted": stats.draft_accepted}


@dataclass(frozen=True)
class Answer:
    """The names one answer carries in all its parts."""

    model: str
    id: str = dataclasses.field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex[:24]}")
    created: int = dataclasses.field(default_factory=lambda: int(time.time()))

    def whole(self, text: str, finish: str, stats: ReplyStats,
              thought: str = "", calls: tuple[ToolCall, ...] = ()) -> dict[str, Any]:
        # Thinking under llama.cpp's server's and vLLM's name, never in the content.
        reasoning: dict[str, Any] = {"reasoning_content": thought} if thought else {}
        if calls:
            reasoning["tool_calls"] = [c.openai() for c in calls]
        return {**self._head("chat.completion"), "choices": [{
            "index": 0, "message": {"role": "assistant",
                                    "content": text if text or not calls else None,
                                    **reasoning},
            "logprobs": None, "finish_reason": finish}], "usage": usage(stats),
            "timings": timings(stats)}

    def call_chunks(self, calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
        """Calls as OpenAI streams them: index, id and name first, then the arguments."""
        chunks = []
        for index, call in enumerate(calls):
            chunks.append(self.chunk({"tool_calls": [{
                "index": index, "id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": ""}}]}))
            for at in range(0, len(call.arguments), 64):
                chunks.append(self.chunk({"tool_calls": [{
                    "index": index, "function": {"arguments": call.arguments[at:at + 64]}}]}))
        return chunks

    def chunk(self, delta: dict[str, Any]) -> dict[str, Any]:
        return {**self._head("chat.completion.chunk"), "choices": [{
            "index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}

    def last_chunk(self, finish: str, stats: ReplyStats) -> dict[str, Any]:
        return {**self._head("chat.completion.chunk"), "choices": [{
            "index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}],
            "timings": timings(stats)}

    def usage_chunk(self, stats: ReplyStats) -> dict[str, Any]:
        return {**self._head("chat.completion.chunk"), "choices": [], "usage": usage(stats)}

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}


def models_list(name: str | None, created: int) -> dict[str, Any]:
    """``/v1/models``: the loaded model, which answers whatever model a request names."""
    data = [] if name is None else [{
        "id": name, "object": "model", "created": created, "owned_by": "fireside",
        "description": "The model loaded in Fireside. It answers every request, whatever "
                       "model the request names."}]
    return {"object": "list", "data": data}


def error_for(err: BaseException) -> ApiError:
    """What a failed reply tells the client."""
    if isinstance(err, ApiError):
        return err
    if isinstance(err, PromptTooLong):
        return ApiError(400, str(err), param="messages", code="context_length_exceeded")
    if isinstance(err, templates.TemplateError):
        return ApiError(400, f"The model's chat template refused these messages: {err}",
                        param="messages")
    if isinstance(err, NoModelLoaded | EngineClosed):
        return no_model(str(err))
    if isinstance(err, EngineError):
        return ApiError(500, str(err), kind="server_error")
    return ApiError(500, f"Fireside could not answer ({type(err).__name__}).",
                    kind="server_error")
