"""Functions a model may call: how each model family writes a call, how the tools and
the calls' results go into its prompt, and the grammar that keeps a call's arguments
valid JSON for the function's schema.

A model family's own format is used where its chat template has one (the template
then receives ``tools`` and renders calls and results as transformers'
``apply_chat_template`` does). A template without one gets the generic format: the
tools are described in the system message, and a call is written as JSON between
``<tool_call>`` and ``</tool_call>``, the result coming back between
``<tool_response>`` and ``</tool_response>`` (the format most open models are trained
on, Hermes'). README "Tools" documents it.

From the moment a call begins (the format's opening text), or from the first token
when the request forces a call, generation follows a llama.cpp grammar built from the
functions' JSON schemas, so even a 135M model writes arguments that validate.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.reply import json_schema, templates
from app.core.reply.replies import ToolCall

MAX_PARALLEL = 10  # calls in one reply


class ToolError(ValueError):
    """A tool, a choice or a call that cannot be used; the message is for the user."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}})

    def openai(self) -> dict[str, Any]:
        """As OpenAI's requests carry it, which is also what chat templates receive."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": dict(self.parameters)}}


# How a request lets the model call: "auto", "none", "required", or a function's name.
AUTO, NONE, REQUIRED = "auto", "none", "required"


@dataclass(frozen=True)
class ToolUse:
    """The tools of one request and how they may be called."""

    tools: tuple[Tool, ...]
    choice: str = AUTO
    parallel: bool = False

    def __post_init__(self) -> None:
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ToolError("Two tools have the same name.")
        if self.choice not in (AUTO, NONE, REQUIRED) and self.choice not in names:
            raise ToolError(f"tool_choice names '{self.choice}', which is not among the "
                            "tools.")
        if self.choice == REQUIRED and not self.tools:
            raise ToolError("tool_choice 'required' needs at least one tool.")

    @property
    def forced(self) -> bool:
        return self.choice not in (AUTO, NONE)

    @property
    def callable(self) -> tuple[Tool, ...]:
        """The tools the model may call now."""
        if self.choice == NONE:
            return ()
        if self.forced and self.choice != REQUIRED:
            return tuple(t for t in self.tools if t.name == self.choice)
        return self.tools


# -- the families' formats -------------------------------------------------------------


def _lit(text: str) -> str:
    """``text`` as a GBNF string literal."""
    return json.dumps(text, ensure_ascii=False)


def _json_calls(text: str, name_key: str = "name", args_key: str = "arguments"
                ) -> list[tuple[str, Any]]:
    """Calls written as JSON objects (one, several, or a list), in order."""
    decoder = json.JSONDecoder()
    calls: list[tuple[str, Any]] = []
    pos = 0
    while True:
        start = min((i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0),
                    default=-1)
        if start < 0:
            return calls
        try:
            value, pos = decoder.raw_decode(text, start)
        except ValueError:
            pos = start + 1
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict) and isinstance(item.get(name_key), str):
                args = item.get(args_key, item.get("parameters", item.get("arguments", {})))
                calls.append((item[name_key], args))


def _tagged(pattern: str, *, name_group: bool = False) -> Callable[[str], list[tuple[str, Any]]]:
    """Calls found by ``pattern``: its last group the arguments' JSON, and the first the
    name where ``name_group``; otherwise each match holds whole JSON calls."""
    regex = re.compile(pattern, re.DOTALL)

    def parse(text: str) -> list[tuple[str, Any]]:
        calls: list[tuple[str, Any]] = []
        for match in regex.finditer(text):
            if name_group:
                try:
                    calls.append((match.group(1).strip(), json.loads(match.group(2))))
                except ValueError:
                    calls.append((match.group(1).strip(), match.group(2)))
            else:
                calls += _json_calls(match.group(1))
        return calls

    return parse


@dataclass(frozen=True)
class ToolFormat:
    """How one family writes calls.

    ``opener``: the text that begins the calls (a trigger for the grammar, and what is
    held back from the answer). ``envelope(name, args)``: a GBNF expression for one
    call, given its name's literal and its arguments' rule; ``between``/``closer``:
    GBNF between calls and after the last.
    """

    name: str
    opener: str
    envelope: Callable[[str, str], str]
    parse: Callable[[str], list[tuple[str, Any]]]
    between: str = ""
    closer: str = ""
    first: str = ""  # GBNF before the first call, after the opener
    # The opener is the first text of the call itself (Llama's JSON), so it begins
    # calls only at the start of the answer.
    opens_call: bool = False
    markers: tuple[str, ...] = ()  # control tokens the calls are written with

    @property
    def shown(self) -> tuple[str, ...]:
        """Texts whose control tokens must be decoded, to be read."""
        return (self.opener, *self.markers)


def _object(args_key: str) -> Callable[[str, str], str]:
    return lambda name, args: (
        f'"{{\\"name\\": " {_lit(json.dumps(name))} ", \\"{args_key}\\": " {args} "}}"')


HERMES = ToolFormat(
    "hermes", "<tool_call>", _object("arguments"),
    _tagged(r"<tool_call>(.*?)(?:</tool_call>|$)"),
    first='"\\n"', between='"\\n</tool_call>\\n<tool_call>\\n"', closer='"\\n</tool_call>"')
MISTRAL = ToolFormat(  # Mistral 7B v0.3, Nemo, Small 3.0/3.1: a JSON list
    "mistral", "[TOOL_CALLS]", _object("arguments"), _tagged(r"\[TOOL_CALLS\](.*)"),
    first='"["', between='", "', closer='"]"')
MISTRAL_ARGS = ToolFormat(  # Mistral Small 3.2, Magistral, Ministral 3: NAME[ARGS]{...}
    "mistral-args", "[TOOL_CALLS]", lambda name, args: f"{_lit(name)} \"[ARGS]\" {args}",
    _tagged(r"\[TOOL_CALLS\]([^\[\]{}]+?)\[ARGS\](\{.*?\})(?=\[TOOL_CALLS\]|$)",
            name_group=True),
    between='"[TOOL_CALLS]"')
LLAMA3 = ToolFormat(  # Llama 3.1-3.3: a JSON object, "parameters"
    "llama3", '{"name"', _object("parameters"), _tagged(r"(\{.*)"), between='"; "',
    opens_call=True)
PHI4 = ToolFormat(  # Phi-4-mini: <|tool_call|>[...]<|/tool_call|>
    "phi4", "<|tool_call|>", _object("arguments"),
    _tagged(r"<\|tool_call\|>(.*?)(?:<\|/tool_call\|>|$)"),
    first='"["', between='", "', closer='"]<|/tool_call|>"', markers=("<|/tool_call|>",))
GRANITE = ToolFormat(  # Granite 3: <|tool_call|>[...]
    "granite", "<|tool_call|>", _object("arguments"), _tagged(r"<\|tool_call\|>(.*)"),
    first='"["', between='", "', closer='"]"')
_DS_CALL, _DS_SEP, _DS_END = ("<\uff5ctool\u2581call\u2581begin\uff5c>",
                              "<\uff5ctool\u2581sep\uff5c>",
                              "<\uff5ctool\u2581call\u2581end\uff5c>")
DEEPSEEK = ToolFormat(  # DeepSeek-R1 distills: tool-call tokens, arguments in a json fence
    "deepseek", "<\uff5ctool\u2581calls\u2581begin\uff5c>",
    lambda name, args: (f"{_lit(_DS_CALL + 'function' + _DS_SEP + name)} "
                        f"{_lit(chr(10) + '```json' + chr(10))} {args} "
                        f"{_lit(chr(10) + '```' + _DS_END)}"),
    _tagged(re.escape(_DS_SEP) + r"([^\n]+)\n```json\n(.*?)\n```", name_group=True),
    closer=_lit("<\uff5ctool\u2581calls\u2581end\uff5c>"), markers=(_DS_CALL, _DS_SEP, _DS_END))
HARMONY = ToolFormat(  # gpt-oss: a message to=functions.NAME on the commentary channel
    "harmony", "<|channel|>commentary to=functions.",
    lambda name, args: f"{_lit(name + ' <|constrain|>json<|message|>')} {args} \"<|call|>\"",
    _tagged(r"to=functions\.([\w.-]+)[^<]*(?:<\|constrain\|>\w+)?<\|message\|>(.*?)"
            r"(?:<\|call\|>|$)", name_group=True),
    markers=("<|constrain|>", "<|message|>", "<|call|>"))

# The template text that shows a family's format; the first found is used.
_FAMILIES: tuple[tuple[str, ToolFormat], ...] = (
    ("<|call|>", HARMONY),
    ("tool\u2581calls\u2581begin", DEEPSEEK),
    ("[ARGS]", MISTRAL_ARGS),
    ("[TOOL_CALLS]", MISTRAL),
    ("<|/tool_call|>", PHI4),
    ("<|tool_call|>", GRANITE),
    ("<tool_call>", HERMES),
    ('"parameters": dictionary', LLAMA3),
)


def format_for(template_text: str) -> ToolFormat | None:
    """The family's own format, if the template renders tools; None: the generic one."""
    if "tools" not in template_text:
        return None
    return next((fmt for marker, fmt in _FAMILIES if marker in template_text), None)


def parse_calls(fmt: ToolFormat, text: str) -> tuple[ToolCall, ...]:
    """The calls in ``text`` (what followed the opener, the opener included)."""
    return tuple(ToolCall(name, args if isinstance(args, str) else json.dumps(
        args, ensure_ascii=False)) for name, args in fmt.parse(text))


# -- the grammar -----------------------------------------------------------------------


def grammar(fmt: ToolFormat, use: ToolUse) -> str:
    """GBNF for the calls, from the opener on: what llama.cpp lets the model write once
    a call has begun (and from the first token when the request forces one)."""
    rules: list[str] = []
    calls: list[str] = []
    for i, tool in enumerate(use.callable):
        args = f"args-{i}"
        schema = json_schema.ranges_listed(dict(tool.parameters) or {"type": "object"})
        try:
            gbnf = json_schema.rules(schema)
        except Exception as err:  # the converter raises what it finds wrong
            raise ToolError(f"The parameters of '{tool.name}' are not a JSON schema "
                            f"Fireside can follow: {err}") from err
        rules.append(_renamed(gbnf, f"t{i}-").replace(f"t{i}-root ::=", f"{args} ::=", 1))
        calls.append(f"call-{i}")
        rules.append(f"call-{i} ::= {fmt.envelope(tool.name, args)}")
    if not calls:
        raise ToolError("There is no tool to call.")
    call = " | ".join(calls)
    more = f"({fmt.between} ({call})){{0,{MAX_PARALLEL - 1}}}" \
        if use.parallel and fmt.between else ""
    parts = ["" if fmt.opens_call else _lit(fmt.opener), fmt.first, f"({call})", more, fmt.closer]
    return "\n".join([f"root ::= {' '.join(p for p in parts if p)}", *rules]) + "\n"


def _renamed(gbnf: str, prefix: str) -> str:
    """The converter's rules with ``prefix`` on every name, so tools' rules never clash."""
    names = {line.split(" ::=", 1)[0] for line in gbnf.splitlines() if " ::=" in line}
    pattern = re.compile(r'("(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\])|([A-Za-z][\w-]*)')

    def rename(match: re.Match[str]) -> str:
        word = match.group(2)
        return match.group(0) if word is None or word not in names else prefix + word

    return pattern.sub(rename, gbnf)


def trigger_pattern(fmt: ToolFormat) -> str:
    """The regex (matched against the whole reply so far) after which the grammar holds;
    its group starts where the grammar takes over."""
    before = r"\s*" if fmt.opens_call else r"[\s\S]*?"
    return before + "(" + re.escape(fmt.opener) + r"[\s\S]*)"


@dataclass(frozen=True)
class ToolPlan:
    """What generation needs to know of a request's tools."""

    format: ToolFormat
    grammar: str  # GBNF from the opener on; "" where no call is allowed
    forced: bool  # a call from the first token

    @property
    def allowed(self) -> bool:
        """False with tool_choice "none": a call the model begins ends the reply."""
        return bool(self.grammar)


def plan(fmt: ToolFormat | None, use: ToolUse | None) -> ToolPlan | None:
    """How calls are written (``fmt``; None: the generic format) and constrained; None
    without tools."""
    if use is None or not use.tools:
        return None
    fmt = fmt or HERMES
    return ToolPlan(fmt, grammar(fmt, use) if use.callable else "", use.forced)


# -- prompts ---------------------------------------------------------------------------

GENERIC_INSTRUCTIONS = """\
You can call these tools (functions), described in JSON:
<tools>
{tools}
</tools>
To call one, write only its name and arguments as JSON, like this:
<tool_call>
{{"name": "<tool name>", "arguments": {{<its arguments>}}}}
</tool_call>
Each result comes back between <tool_response> and </tool_response>. When you have \
what you need, answer the user."""


def generic_messages(messages: Sequence[Mapping[str, Any]], use: ToolUse | None
                     ) -> list[dict[str, Any]]:
    """A conversation with tools for a template that has no tool format: the tools in
    the system message, calls and results as text in the Hermes format."""
    out: list[dict[str, Any]] = []
    tools = use.callable if use is not None else ()
    if tools:
        described = GENERIC_INSTRUCTIONS.format(tools="\n".join(
            json.dumps(t.openai(), ensure_ascii=False) for t in tools))
        if messages and messages[0]["role"] == "system":
            first, *rest = messages
            out.append({**first, "content": f"{first['content']}\n\n{described}"})
            messages = rest
        else:
            out.append({"role": "system", "content": described})
    for m in messages:
        entry = {k: v for k, v in m.items() if k not in ("tool_calls", "tool_call_id")}
        if m["role"] == "tool":
            entry = {"role": "user",
                     "content": f"<tool_response>\n{m['content']}\n</tool_response>"}
        elif m.get("tool_calls"):
            written = "\n".join(
                "<tool_call>\n" + json.dumps({"name": c.name, "arguments": json.loads(
                    c.arguments) if _is_json(c.arguments) else c.arguments},
                    ensure_ascii=False) + "\n</tool_call>" for c in m["tool_calls"])
            entry["content"] = f"{m['content']}\n{written}".strip()
        out.append(entry)
    return out


def render(template: templates.ChatTemplate, messages: Sequence[Mapping[str, Any]],
           use: ToolUse | None, variables: Mapping[str, Any],
           check: Callable[[list[str]], None] | None = None
           ) -> tuple[list[templates.Segment], list[dict[str, Any]], ToolPlan | None]:
    """A conversation with tools (or with calls and results in it) through the model's
    template: as the family writes them, or in the generic format. ``check`` sees the
    typed text of a native rendering first: it may refuse it (a request refuses control
    tokens in it), or raise TemplateError to have the generic format instead.
    The segments, the messages as rendered, and how the reply may call."""
    extra = dict(variables)
    native = format_for(template.text)
    if native is not None:
        convo = native_messages(messages, native)
        if use is not None:
            extra["tools"] = [t.openai() for t in use.tools]
        try:
            if check is not None:
                check(typed_strings(use, messages))
            return templates.render(template, convo, extra=extra), convo, plan(native, use)
        except templates.TemplateError:
            # The family's template cannot show this conversation with its typed text
            # kept apart (or ``check`` asks for the typed text to stay typed): the
            # generic format can.
            extra.pop("tools", None)
    convo = generic_messages(messages, use)
    return templates.render(template, convo, extra=extra), convo, plan(None, use)


def native_messages(messages: Sequence[Mapping[str, Any]],
                    fmt: ToolFormat | None = None) -> list[dict[str, Any]]:
    """A conversation with tools for a template that renders them itself. Mistral's
    templates take only call ids of 9 letters and digits: others are renamed so."""
    rename = _nine if fmt in (MISTRAL, MISTRAL_ARGS) else (lambda i: i)
    out: list[dict[str, Any]] = []
    for m in messages:
        entry = dict(m)
        if m.get("tool_calls"):
            entry["tool_calls"] = [
                {**c.for_template(), "id": rename(c.id)} for c in m["tool_calls"]]
        if "tool_call_id" in m:
            entry["tool_call_id"] = rename(m["tool_call_id"])
        out.append(entry)
    return out


def _nine(call_id: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9]{9}", call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode()).digest()
    return "".join("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[b % 62]
                   for b in digest[:9])


def typed_strings(use: ToolUse | None, messages: Sequence[Mapping[str, Any]]
                  ) -> list[str]:
    """Every string of the tools and calls that a native template prints as its own
    text: none of them may hold the model's control tokens."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, Mapping):
            for k, v in value.items():
                walk(k)
                walk(v)
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v)

    if use is not None:
        walk([t.openai() for t in use.tools])
    for m in messages:
        for call in m.get("tool_calls") or ():
            walk(call.for_template())
        walk(m.get("tool_call_id"))
        walk(m.get("name"))
    return found


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def holding_control_tokens(encode: Callable[[list[templates.Segment]], list[int]],
                           strings: Sequence[str]) -> str | None:
    """The first of ``strings`` that holds the model's control tokens (it encodes
    otherwise as typed text than as the template's own), or None. A native template
    prints tools, calls and results as its own text, where such a token would be read
    as the model's."""
    return next((text for text in strings if text and encode(
        [templates.Segment(text, False)]) != encode([templates.Segment(text, True)])), None)
