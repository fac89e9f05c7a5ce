"""A reasoning model's thinking, told apart from its answer while the reply streams.

Models mark a thought in one of three ways: ``<think>…</think>`` (Qwen3, QwQ,
DeepSeek-R1 distills, SmolLM3, GLM, Phi-4-reasoning), ``[THINK]…[/THINK]`` (Magistral)
and gpt-oss's channels (``analysis`` is the thought, ``final`` the answer). The chat
template tells which one a model uses. A template may open the thought itself, in
the generation prompt, so that the reply starts mid-thought.

The splitter holds back text that could be the start of a marker until the next
piece says whether it is, so a tag split across tokens (``<th`` + ``ink>``) is never
shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# "on" and "off" for every thinking model; low/medium/high is gpt-oss's reasoning effort
# (elsewhere they mean "on").
THINKING_CHOICES = ("on", "off", "low", "medium", "high")


@dataclass(frozen=True)
class ThinkingFormat:
    name: str
    opens: tuple[str, ...]  # markers that start a thought
    closes: tuple[str, ...]  # markers that end it: the answer follows
    hidden: tuple[str, ...]  # markers dropped wherever they come (gpt-oss's headers)
    closing: str  # what Fireside writes into the sequence to end a thought early
    anywhere: bool = True  # False: a thought only at the very start of a reply

    @property
    def markers(self) -> tuple[str, ...]:
        return (*self.opens, *self.closes, *self.hidden)


THINK = ThinkingFormat("think", ("<think>",), ("</think>",), (), "\n</think>\n\n")
MISTRAL = ThinkingFormat("mistral", ("[THINK]",), ("[/THINK]",), (), "[/THINK]")
HARMONY = ThinkingFormat(
    "harmony",
    ("<|channel|>analysis<|message|>",),
    ("<|channel|>final<|message|>",),
    ("<|end|>", "<|start|>assistant"),
    "<|end|><|start|>assistant<|channel|>final<|message|>")
# A model whose template says nothing of thinking may still start a reply with
# <think> (a fine-tune, an old template): taken as a thought only there.
UNMARKED = ThinkingFormat("none", THINK.opens, THINK.closes, (), THINK.closing,
                          anywhere=False)


def format_for(template_text: str) -> ThinkingFormat:
    """The way a model with this chat template marks its thinking."""
    if "<|channel|>" in template_text:
        return HARMONY
    if "[THINK]" in template_text:
        return MISTRAL
    if "<think>" in template_text or "</think>" in template_text:
        return THINK
    return UNMARKED


def is_thinking_template(template_text: str) -> bool:
    return format_for(template_text) is not UNMARKED


def template_variables(template_text: str, choice: str) -> dict[str, Any]:
    """What a template's own thinking switch is given for ``choice`` (THINKING_CHOICES):
    ``enable_thinking`` for Qwen3-style templates, ``reasoning_effort`` for gpt-oss.
    Where a template has none, "off" is kept by a thinking budget of 0 instead."""
    variables: dict[str, Any] = {}
    if "enable_thinking" in template_text:
        variables["enable_thinking"] = choice != "off"
    if "reasoning_effort" in template_text:
        variables["reasoning_effort"] = {"off": "low", "on": "medium"}.get(choice, choice)
    return variables


def budget(choice: str, tokens: int | None) -> int | None:
    """Thinking tokens allowed before Fireside ends the thought; None: no limit."""
    if choice == "off":
        return 0
    return tokens if tokens is not None and tokens >= 0 else None


def opened(prompt_tail: str, fmt: ThinkingFormat) -> bool:
    """Whether the prompt leaves the reply inside a thought (the template opened it)."""
    tail = prompt_tail.rstrip()
    last_open = max((tail.rfind(m) for m in fmt.opens), default=-1)
    last_close = max((tail.rfind(m) for m in fmt.closes), default=-1)
    return last_open >= 0 and last_open > last_close


class ThoughtSplitter:
    """Splits streamed text into (thinking, text) parts; ``thinking`` says where it goes."""

    def __init__(self, fmt: ThinkingFormat, inside: bool = False) -> None:
        self._fmt = fmt
        self._markers = fmt.markers
        self._held = ""
        self.thinking = inside
        self.thought = inside  # whether any thought was seen
        self.closed = False  # a thought ended (the answer follows)
        self._started = inside  # text has come (a thought then only where allowed)
        self._lead = inside  # strip whitespace at the start of a thought and an answer

    def feed(self, text: str) -> list[tuple[bool, str]]:
        parts: list[tuple[bool, str]] = []
        text = self._held + text
        self._held = ""
        while text:
            found = self._first_marker(text)
            if found is None:
                # Whitespace before anything else may yet precede a thought.
                keep = len(text) if not self._started and not text.strip() \
                    else self._partial(text)
                self._emit(parts, text[:len(text) - keep])
                self._held = text[len(text) - keep:]
                break
            at, marker = found
            if self._started or text[:at].strip():
                self._emit(parts, text[:at])
            self._switch(marker)
            text = text[at + len(marker):]
        return parts

    def flush(self) -> list[tuple[bool, str]]:
        parts: list[tuple[bool, str]] = []
        held, self._held = self._held, ""
        self._emit(parts, held)
        return parts

    def _first_marker(self, text: str) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for marker in self._markers:
            # One thought a reply: once it has ended, an opening tag is the answer's text.
            if marker in self._fmt.opens and (self.closed or (
                    not self._fmt.anywhere and self._started)):
                continue
            if marker in self._fmt.closes and not self._fmt.anywhere and not self.thinking:
                continue  # a model that does not think may write about the tags
            at = text.find(marker)
            if at >= 0 and (best is None or at < best[0]):
                if not self._fmt.anywhere and marker in self._fmt.opens \
                        and text[:at].strip():
                    continue
                best = (at, marker)
        return best

    def _partial(self, text: str) -> int:
        """How much of the end of ``text`` could begin a marker."""
        return max((n for m in self._markers for n in range(1, len(m))
                    if text.endswith(m[:n])), default=0)

    def _switch(self, marker: str) -> None:
        if marker in self._fmt.opens:
            self.thinking = self.thought = True
            self._lead = True
        elif marker in self._fmt.closes:
            self.thinking = False
            self.closed = True
            self._lead = True
        self._started = True

    def _emit(self, parts: list[tuple[bool, str]], text: str) -> None:
        if self._lead:
            text = text.lstrip()
        if not text:
            return
        self._lead = False
        self._started = True
        if parts and parts[-1][0] == self.thinking:
            parts[-1] = (self.thinking, parts[-1][1] + text)
        else:
            parts.append((self.thinking, text))


def split(text: str, fmt: ThinkingFormat, inside: bool = False) -> tuple[str, str]:
    """A whole reply's (thinking, answer)."""
    splitter = ThoughtSplitter(fmt, inside)
    thinking: list[str] = []
    answer: list[str] = []
    for is_thought, part in splitter.feed(text) + splitter.flush():
        (thinking if is_thought else answer).append(part)
    return "".join(thinking).rstrip(), "".join(answer)


def choice_of(settings: Mapping[str, Any]) -> str:
    value = settings.get("thinking")
    return value if isinstance(value, str) and value in THINKING_CHOICES else "on"
