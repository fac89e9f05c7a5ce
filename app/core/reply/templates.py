"""Chat templates: which one a model uses, and turning a conversation into a prompt.

A template is Jinja text in the Hugging Face style. It comes from the user's override,
the model file, or a built-in picked from the architecture and vocabulary (a file
without a template must not fall back to a format the model never saw). Templates
from files are untrusted: they run in an immutable sandbox that refuses, rather than
quietly ignores, any reach for Python internals.

Rendering returns segments, not one string: the template's own text (tokenized with
special-token parsing) alternates with message texts (tokenized as plain text), so a
user who types ``<|im_end|>`` gets those characters, never a control token.

BOS contract: the engine tokenizes the segments with ``add_bos=False``. The prompt
starts with the BOS token's text exactly when the template emits ``{{ bos_token }}``,
as in Hugging Face and llama-cpp-python. Built-in templates emit it when the model's
vocabulary asks for a BOS, and always for Gemma, Llama 3 and Mistral.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, NamedTuple

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

SOURCE_MODEL_FILE = "model file"
SOURCE_OVERRIDE = "override"

_ADVICE = "A template override for this model can replace it."
_SANDBOX_MESSAGE = (
    f"This model's chat template tries to reach outside its sandbox and was refused. {_ADVICE}"
)
_REWRITE_MESSAGE = (
    "This chat template changes the text of the messages, so typed text cannot be kept "
    f"apart from the model's control tokens. {_ADVICE}"
)
# The largest string, list or number a template may build with `*` or `**`.
_MAX_SIZE = 1_000_000


class TemplateError(Exception):
    """A chat template that cannot be used; the text is meant for the user."""


class _SandboxError(TemplateError):
    """A template that reached for something outside the sandbox: never retried."""


class Segment(NamedTuple):
    """A piece of the prompt: template text, or the text of a message."""

    text: str
    is_content: bool


@dataclass(frozen=True)
class ChatTemplate:
    """A validated template and what the probe renders learned about it."""

    name: str
    source: str  # SOURCE_MODEL_FILE, SOURCE_OVERRIDE or "built-in: <family>"
    text: str
    bos_token: str
    eos_token: str
    supports_system: bool
    requires_alternation: bool
    stop: tuple[str, ...] = ()  # text that ends a reply besides the end-of-generation tokens
    # Why the model file's own template is not the one in use (it failed), for the user.
    problem: str = ""


# --- the sandbox -------------------------------------------------------------------


class _TemplateRaised(Exception):
    """raise_exception() called by the template itself."""


class _Sandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def unsafe_undefined(self, obj: Any, attribute: str) -> Undefined:
        # Jinja hands back an Undefined that prints as nothing; a probing template
        # would then render "fine". Refuse at the first attempt instead.
        raise SecurityError(f"attribute {attribute!r} of a {type(obj).__name__} object")

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        # `'x' * 10**10` would exhaust memory before any Python exception could help.
        if _result_size(operator, left, right) > _MAX_SIZE:
            raise SecurityError("a value too large to build")
        return super().call_binop(context, operator, left, right)


def _result_size(operator: str, left: Any, right: Any) -> int:
    """Roughly how big ``left <operator> right`` would be: characters, items or bits."""
    if operator == "**":
        if isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
            return right * abs(left).bit_length()
        return 0
    for repeated, count in ((left, right), (right, left)):
        if isinstance(repeated, str | list | tuple) and isinstance(count, int):
            return len(repeated) * count
    return 0


class _GenerationTag(jinja2.ext.Extension):
    """Hugging Face's ``{% generation %}`` marks assistant text for training; render it as is."""

    tags = {"generation"}  # noqa: RUF012 - the base class declares a set

    def parse(self, parser: jinja2.parser.Parser) -> list[nodes.Node]:
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson escapes <, > and & for HTML; chat templates expect plain JSON.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


# The same set-up as Hugging Face transformers and llama-cpp-python, so real templates
# render as their authors tested them.
_ENV = _Sandbox(
    trim_blocks=True,
    lstrip_blocks=True,
    extensions=[jinja2.ext.loopcontrols, _GenerationTag],
)
_ENV.filters["tojson"] = _tojson
_ENV.globals["raise_exception"] = _raise_exception
_ENV.globals["strftime_now"] = _strftime_now


def _private_names(ast: nodes.Template) -> Iterator[str]:
    """Names a template asks for that start with "_": Python internals, never data."""
    for node in ast.find_all((nodes.Getattr, nodes.Getitem, nodes.Filter)):
        if isinstance(node, nodes.Getattr):
            yield node.attr
        elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
            yield str(node.arg.value)
        elif isinstance(node, nodes.Filter) and node.name == "attr" and node.args:
            arg = node.args[0]
            if isinstance(arg, nodes.Const):
                yield str(arg.value)


@functools.lru_cache(maxsize=32)
def _compile(text: str) -> tuple[jinja2.Template, str]:
    """The compiled template and a marker character that does not occur in its text.

    Kept for the next render: compiling a long template (gpt-oss, Qwen3) costs more
    than rendering a whole conversation with it."""
    try:
        ast = _ENV.parse(text)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(
            f"The chat template has an error on line {exc.lineno} ({exc.message}). {_ADVICE}"
        ) from exc
    # Also catches probes hidden in branches that a test render would not reach.
    if any(name.startswith("_") for name in _private_names(ast)):
        raise _SandboxError(_SANDBOX_MESSAGE)
    marker = next(chr(c) for c in range(0xE000, 0xF900) if chr(c) not in text)
    return _ENV.from_string(ast), marker


# --- rendering ---------------------------------------------------------------------

# role, content and, for a reply with its reasoning, thinking; for tools, the calls of
# a reply and the call a tool's result answers (TOOL_KEYS), passed as given.
_Message = dict[str, Any]
TOOL_KEYS = ("tool_calls", "tool_call_id", "name")

# Template variables that render() sets itself; `extra` cannot replace them.
_RESERVED = frozenset({"messages", "bos_token", "eos_token", "add_generation_prompt"})


def _template_message(m: _Message) -> dict[str, str]:
    """A message as templates read it: a reply's reasoning under both names in use.

    Qwen3, QwQ, DeepSeek and most reasoning templates read ``reasoning_content``;
    gpt-oss reads ``thinking``. Hugging Face transformers passes both, in this order.
    """
    thinking = m.get("thinking")
    tool = {k: m[k] for k in TOOL_KEYS if k in m}
    if thinking is None:
        return {"role": m["role"], "content": m["content"], **tool}
    return {"thinking": thinking, "role": m["role"], "content": m["content"],
            "reasoning_content": thinking, **tool}


def _render_text(
    compiled: jinja2.Template,
    template: ChatTemplate,
    messages: list[_Message],
    add_generation_prompt: bool,
    extra: Mapping[str, Any],
) -> str:
    # `tools` stays undefined, as llama.cpp leaves it: tool-use templates that loop over
    # it unguarded then render a plain chat instead of failing on None.
    try:
        return compiled.render(
            {
                **extra,
                "messages": [_template_message(m) for m in messages],
                "bos_token": template.bos_token,
                "eos_token": template.eos_token,
                "add_generation_prompt": add_generation_prompt,
            }
        )
    except SecurityError as exc:
        raise _SandboxError(_SANDBOX_MESSAGE) from exc
    except _TemplateRaised as exc:
        raise TemplateError(
            f"The chat template refused this conversation ({exc}). {_ADVICE}"
        ) from exc
    except Exception as exc:  # untrusted code can fail in any way
        raise TemplateError(f"The chat template failed ({exc}). {_ADVICE}") from exc


def _segments(
    template: ChatTemplate,
    messages: list[_Message],
    add_generation_prompt: bool,
    extra: Mapping[str, Any] | None = None,
) -> list[Segment]:
    """Render twice: with a marker in place of each typed text, and for real.

    The marker render gives the template's own text, which cannot contain anything
    typed; the real render is the exact prompt. What lies between two pieces of the
    template's text must come from the text placed there. Each message's content must
    appear once; a reply's thinking at most once (templates drop old reasoning).
    """
    extra = extra or {}
    compiled, marker = _compile(template.text)
    placeholders, typed, required = _with_markers(messages, marker)
    skeleton = _render_text(compiled, template, placeholders, add_generation_prompt, extra)
    real = _render_text(compiled, template, messages, add_generation_prompt, extra)
    parts = skeleton.split(marker)  # template text, index, template text, index, ...
    _check_markers(parts, typed, required)
    return _merged(_split_real(real, parts, typed))


def _with_markers(
    messages: list[_Message], marker: str
) -> tuple[list[_Message], list[str], set[str]]:
    """The messages with a numbered marker for each typed text; the texts, in the
    markers' order; the numbers of those that are a message's content."""
    typed: list[str] = []
    required: set[str] = set()
    placeholders: list[_Message] = []
    for m in messages:
        placeholder = {"role": m["role"], **{k: m[k] for k in TOOL_KEYS if k in m}}
        for key in ("content", "thinking"):
            text = m.get(key)
            if text is None:
                continue
            if not text and key == "content":  # a reply that only calls functions
                placeholder[key] = ""
                continue
            placeholder[key] = f"{marker}{len(typed)}{marker}"
            if key == "content":
                required.add(str(len(typed)))
            typed.append(text)
        placeholders.append(placeholder)
    return placeholders, typed, required


def _check_markers(parts: list[str], typed: list[str], required: set[str]) -> None:
    """Each marker at most once, and every content's: a template that repeats, invents
    or drops one has rewritten what was typed."""
    found = parts[1::2]
    known = {str(i) for i in range(len(typed))}
    if (len(parts) % 2 != 1 or len(set(found)) != len(found) or not set(found) <= known
            or not required <= set(found)):
        raise TemplateError(_REWRITE_MESSAGE)


def _split_real(real: str, parts: list[str], typed: list[str]) -> list[str]:
    """The real render cut where the marker render has its markers: template text and
    typed text, alternating."""
    texts = [parts[0]]
    if not real.startswith(parts[0]):
        raise TemplateError(_REWRITE_MESSAGE)
    pos = len(parts[0])
    for k in range(1, len(parts), 2):
        following = parts[k + 1]
        end = _content_end(real, pos, typed[int(parts[k])], following)
        texts += (real[pos:end], following)
        pos = end + len(following)
    if pos != len(real):
        raise TemplateError(_REWRITE_MESSAGE)
    return texts


def _merged(texts: list[str]) -> list[Segment]:
    """The alternating texts as segments, empty ones left out and neighbours of one
    kind joined."""
    segments: list[Segment] = []
    for i, text in enumerate(texts):
        is_content = i % 2 == 1
        if not text:
            continue
        if segments and segments[-1].is_content == is_content:
            segments[-1] = Segment(segments[-1].text + text, is_content)
        else:
            segments.append(Segment(text, is_content))
    return segments


def _content_end(real: str, pos: int, content: str, following: str) -> int:
    """Where a message's text, starting at ``pos`` in the real render, ends.

    Templates show a message as typed, trimmed, as a JSON string's inside (a tool's
    result through ``tojson``: Llama 3, gpt-oss, Granite), or cut down (reasoning models
    drop an old reply's thinking); any such part is still typed text. A cut is accepted
    only where a single reading exists, so typed text that looks like the template's
    own can never pass for it.
    """
    escaped = json.dumps(content, ensure_ascii=False)[1:-1]
    for candidate in (content, content.strip(), escaped):
        end = pos + len(candidate)
        if real.startswith(candidate, pos) and real.startswith(following, end):
            return end
    ends: list[int] = []
    end = real.find(following, pos)
    while end != -1 and end - pos <= len(content) and len(ends) < 2:
        if real[pos:end] in content:
            ends.append(end)
        end = real.find(following, end + 1)
    if len(ends) != 1:
        raise TemplateError(_REWRITE_MESSAGE)
    return ends[0]


def _fold_system(messages: list[_Message]) -> list[_Message]:
    """Put each system text at the top of the next user message."""
    folded: list[_Message] = []
    pending: list[str] = []
    for m in messages:
        if m["role"] == "system":
            pending.append(m["content"])
        elif m["role"] == "user" and pending:
            folded.append({"role": "user", "content": "\n\n".join([*pending, m["content"]])})
            pending = []
        else:
            folded.append(m)
    if pending:
        folded.append({"role": "user", "content": "\n\n".join(pending)})
    return folded


def _merge_same_roles(messages: list[_Message]) -> list[_Message]:
    merged: list[_Message] = []
    for m in messages:
        if merged and merged[-1]["role"] == m["role"] and m["role"] != "tool" \
                and not (m.get("tool_calls") or merged[-1].get("tool_calls")):
            last = merged[-1]
            joined = {"role": m["role"], "content": f"{last['content']}\n\n{m['content']}"}
            thoughts = [t for t in (last.get("thinking"), m.get("thinking")) if t is not None]
            if thoughts:
                joined["thinking"] = "\n\n".join(thoughts)
            merged[-1] = joined
        else:
            merged.append(m)
    return merged


def render(
    template: ChatTemplate,
    messages: Sequence[Mapping[str, Any]],
    add_generation_prompt: bool = True,
    system_prompt: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> list[Segment]:
    """The prompt for a conversation (roles user, assistant, system), as segments.

    A system prompt goes first, or into the first user message when the template has
    no system role; consecutive messages of one role are joined when the template
    insists on alternating roles. Joining the segments' texts gives exactly what the
    template renders for those messages.

    A message may carry ``thinking``: a reply's reasoning, given to the template as
    both ``reasoning_content`` and ``thinking``, as Hugging Face transformers does
    (templates show it, or drop it from older turns); like the content it is typed
    text, never control tokens. A message without it renders as before.
    ``extra`` are further template variables, as the keyword arguments of
    transformers' ``apply_chat_template``: ``enable_thinking`` (Qwen3, SmolLM3, GLM),
    ``reasoning_effort`` (gpt-oss), ``thinking`` (Granite). They cannot replace
    ``messages``, ``bos_token``, ``eos_token`` or ``add_generation_prompt``.
    """
    if extra and not _RESERVED.isdisjoint(extra):
        raise ValueError(f"render() sets {sorted(_RESERVED & set(extra))} itself")
    convo: list[_Message] = []
    for m in messages:
        message = {"role": m["role"], "content": m["content"],
                   **{k: m[k] for k in TOOL_KEYS if k in m}}
        thinking = m.get("thinking")
        if thinking is not None:
            message["thinking"] = thinking
        convo.append(message)
    if system_prompt and system_prompt.strip():
        convo.insert(0, {"role": "system", "content": system_prompt})
    if not template.supports_system:
        convo = _fold_system(convo)
    if template.requires_alternation:
        convo = _merge_same_roles(convo)
    return _segments(template, convo, add_generation_prompt, extra)


# --- choosing a template -----------------------------------------------------------


@dataclass(frozen=True)
class _Builtin:
    label: str
    body: str
    stop: tuple[str, ...]
    always_bos: bool = False


_ALTERNATE = (
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
)

_BUILTINS: dict[str, _Builtin] = {
    "gemma": _Builtin(
        "Gemma",
        "{% for message in messages %}"
        "{% if message['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}"
        "{% endif %}" + _ALTERNATE + "{{ '<start_of_turn>' + ('model' if message['role'] == "
        "'assistant' else 'user') + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}",
        ("<end_of_turn>",),
        always_bos=True,
    ),
    "llama3": _Builtin(
        "Llama 3",
        "{% for message in messages %}"
        "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' "
        "+ message['content'] | trim + '<|eot_id|>' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}"
        "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
        "{% endif %}",
        ("<|eot_id|>",),
        always_bos=True,
    ),
    "chatml": _Builtin(
        "ChatML",
        "{% for message in messages %}"
        "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
        ("<|im_end|>",),
    ),
    "mistral": _Builtin(
        "Mistral",
        "{% for message in messages %}" + _ALTERNATE + "{% if message['role'] == 'user' %}"
        "{{ '[INST] ' + message['content'] + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}"
        "{{ message['content'] + eos_token }}"
        "{% else %}"
        "{{ raise_exception('Only user and assistant roles are supported') }}"
        "{% endif %}"
        "{% endfor %}",
        (),
        always_bos=True,
    ),
    "phi3": _Builtin(
        "Phi-3",
        "{% for message in messages %}"
        "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}",
        ("<|end|>",),
    ),
    "plain": _Builtin(
        "Plain text",
        "{% for message in messages %}"
        "{% if message['role'] == 'system' %}{{ message['content'] + '\n\n' }}"
        "{% elif message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\n\n' }}"
        "{% else %}{{ 'Assistant: ' + message['content'] + '\n\n' }}"
        "{% endif %}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}",
        ("\nUser:",),
    ),
}

# Names a template override may use instead of Jinja text, with what to show for them.
BUILTIN_TEMPLATES = {key: builtin.label for key, builtin in _BUILTINS.items()}

_GEMMA_ARCHITECTURES = frozenset({"gemma", "gemma2", "gemma3", "gemma3n"})

# A marker that identifies a family, in a vocabulary or in a template's text.
_MARKERS = (
    ("gemma", "<start_of_turn>"),
    ("llama3", "<|start_header_id|>"),
    ("chatml", "<|im_start|>"),
    ("mistral", "[INST]"),
    ("phi3", "<|user|>"),
)


def _builtin_for(architecture: str, has_token: Callable[[str], bool]) -> str:
    if architecture in _GEMMA_ARCHITECTURES:
        return "gemma"
    if architecture.startswith("mistral"):
        return "mistral"
    if architecture == "phi3":
        return "phi3"
    for family, marker in _MARKERS:
        if has_token(marker):
            return family
    return "plain"


def _label_of(text: str) -> str:
    for family, marker in _MARKERS:
        if marker in text:
            return _BUILTINS[family].label
    return "Model's own"


_PROBE: list[_Message] = [
    {"role": "user", "content": "Hello!"},
    {"role": "assistant", "content": "Hi. How can I help?"},
    {"role": "user", "content": "What is 2 + 2?"},
]


def _accepts(template: ChatTemplate, messages: list[_Message]) -> bool:
    try:
        _segments(template, messages, add_generation_prompt=True)
    except _SandboxError:
        raise
    except TemplateError:
        return False
    return True


def _probed(draft: ChatTemplate) -> ChatTemplate:
    """Render probe conversations now, so a bad template is refused when the model is chosen."""
    _segments(draft, _PROBE, add_generation_prompt=True)
    system = [{"role": "system", "content": "Be brief."}, _PROBE[0]]
    doubled = [_PROBE[0], {"role": "user", "content": "Are you there?"}]
    return replace(
        draft,
        supports_system=_accepts(draft, system),
        requires_alternation=not _accepts(draft, doubled),
    )


def validate(text: str) -> None:
    """Refuse a template that cannot be used (TemplateError), before any model is loaded."""
    if text.strip() in _BUILTINS:
        return
    _probed(ChatTemplate("Custom", SOURCE_OVERRIDE, text, "", "", True, False))


def _wants_bos(metadata: Mapping[str, object]) -> bool:
    # llama.cpp's own rule: the file's flag, else yes for SentencePiece vocabularies.
    # Values are bools from a header reader, strings from llama-cpp-python's metadata.
    flag = metadata.get("tokenizer.ggml.add_bos_token")
    if flag is None:
        return metadata.get("tokenizer.ggml.model") == "llama"
    return flag is True or str(flag).lower() == "true"


def resolve(
    metadata: Mapping[str, object],
    has_token: Callable[[str], bool],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_bos: bool | None = None,
    override: str | None = None,
) -> ChatTemplate:
    """The template for a model: the override, else the file's own, else a built-in.

    ``override`` is Jinja text or the name of a built-in (a key of BUILTIN_TEMPLATES).
    ``has_token(s)`` tells whether ``s`` is a single token of the model's vocabulary;
    ``bos_token``/``eos_token`` are those tokens' texts. ``add_bos`` (default: from the
    metadata) says whether the vocabulary wants a BOS; only built-ins use it.
    Raises TemplateError for a template that cannot be used.
    """

    def probed(name: str, source: str, text: str, stop: tuple[str, ...] = ()) -> ChatTemplate:
        return _probed(ChatTemplate(name, source, text, bos_token, eos_token, True, False, stop))

    problem = ""
    if override and override.strip():
        if override.strip() not in _BUILTINS:
            return probed("Custom", SOURCE_OVERRIDE, override)
        family, source = override.strip(), SOURCE_OVERRIDE
    else:
        own = metadata.get("tokenizer.chat_template")
        if isinstance(own, str) and own.strip():
            try:
                return probed(_label_of(own), SOURCE_MODEL_FILE, own)
            except _SandboxError:
                raise  # a file that tries to escape is refused, not worked around
            except TemplateError as err:
                # Never a silent wrong format: the built-in one, with why, for the user.
                problem = str(err).replace(f" {_ADVICE}", "")
        architecture = metadata.get("general.architecture")
        family = _builtin_for(architecture if isinstance(architecture, str) else "", has_token)
        source = f"built-in: {family}"

    builtin = _BUILTINS[family]
    text = builtin.body
    if builtin.always_bos or (_wants_bos(metadata) if add_bos is None else add_bos):
        text = "{{ bos_token }}" + text
    return replace(probed(builtin.label, source, text, builtin.stop), problem=problem)


def next_turn_markers(template: ChatTemplate) -> tuple[str, ...]:
    """What the template writes between a reply and the user's next message: a model
    that writes it has started the user's turn (a base model does)."""
    messages = [{"role": "user", "content": "first question"},
                {"role": "assistant", "content": "a reply"},
                {"role": "user", "content": "next question"}]
    try:
        segments = _segments(template, messages, add_generation_prompt=False)
    except TemplateError:
        return ()
    texts = [segment.text for segment in segments]
    if "a reply" not in texts or "next question" not in texts:
        return ()
    between = "".join(texts[texts.index("a reply") + 1:texts.index("next question")]).strip()
    lines = [line.strip() for line in between.splitlines() if line.strip()]
    return tuple(dict.fromkeys(m for m in (between, lines[-1] if lines else "") if m))


__all__ = [
    "BUILTIN_TEMPLATES",
    "SOURCE_MODEL_FILE",
    "SOURCE_OVERRIDE",
    "ChatTemplate",
    "Segment",
    "TemplateError",
    "next_turn_markers",
    "render",
    "resolve",
    "validate",
]
