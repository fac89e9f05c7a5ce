"""A reply as every face sees it: its text, its figures (ReplyStats), and those in words.

The engine makes a ReplyStats, the chat service stores it as JSON with the message,
and the faces get it back as itself (``Message.reply_stats`` for a stored one). It
is turned into words in one place, :func:`describe`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

# "stop": the model ended its turn; "length": the reply length limit; "context": the
# context filled up; "stopped": the user (or leaving) stopped it; "cut": the server
# stopped answering mid-reply (``problem`` says how).
FinishReason = Literal["stop", "length", "context", "stopped", "cut", "tool_calls"]
_FINISHES: tuple[FinishReason, ...] = get_args(FinishReason)


@dataclass(frozen=True)
class ReplyStats:
    prompt_tokens: int
    cached_tokens: int
    tokens: int
    ttft_s: float
    tokens_per_s: float
    finish_reason: FinishReason
    dropped_turns: int = 0
    model: str = ""
    problem: str = ""  # why a reply was cut off, for the user
    # Of cached_tokens, those restored from the conversation's saved state.
    restored_tokens: int = 0
    # Of tokens, those the model spent thinking, and for how long.
    thinking_tokens: int = 0
    thinking_s: float = 0.0
    # Speculative decoding: tokens drafted for the model to check, and of those the ones
    # it kept (each kept token is one forward pass saved).
    draft_proposed: int = 0
    draft_accepted: int = 0

    @property
    def stopped(self) -> bool:
        return self.finish_reason == "stopped"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "stopped": self.stopped}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> ReplyStats | None:
        """A stored reply's figures; what a row lacks (an older or a cut-off reply) is 0."""
        if not data:
            return None

        def number(name: str) -> float:
            value = data.get(name)
            return value if isinstance(value, int | float) and not isinstance(value, bool) \
                else 0

        stored = data.get("finish_reason")
        reason: FinishReason = "stopped" if data.get("stopped") else "stop"
        for known in _FINISHES:
            if stored == known:
                reason = known
        model, problem = data.get("model"), data.get("problem")
        return cls(prompt_tokens=int(number("prompt_tokens")),
                   cached_tokens=int(number("cached_tokens")), tokens=int(number("tokens")),
                   ttft_s=float(number("ttft_s")), tokens_per_s=float(number("tokens_per_s")),
                   finish_reason=reason, dropped_turns=int(number("dropped_turns")),
                   model=model if isinstance(model, str) else "",
                   problem=problem if isinstance(problem, str) else "",
                   restored_tokens=int(number("restored_tokens")),
                   thinking_tokens=int(number("thinking_tokens")),
                   thinking_s=float(number("thinking_s")),
                   draft_proposed=int(number("draft_proposed")),
                   draft_accepted=int(number("draft_accepted")))


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI carries it
    id: str = field(default_factory=lambda: f"call_{secrets.token_hex(12)}")

    def openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}

    def for_template(self) -> dict[str, Any]:
        """As transformers' templates expect it: arguments as an object."""
        try:
            arguments: Any = json.loads(self.arguments)
        except ValueError:
            arguments = self.arguments
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": arguments}}


# What became of a call in a conversation: "asking" the user, "running", "done" (the
# result is the tool's output), "denied", "failed" or "stopped" (the result says why).
RunStatus = Literal["asking", "running", "done", "denied", "failed", "stopped"]


@dataclass(frozen=True)
class ToolRun:
    """A call the model made in a conversation, what became of it and what the model
    was told: stored with the reply that made it, shown under its text."""

    call: ToolCall
    server: str = ""
    status: RunStatus = "asking"
    result: str = ""

    def to_json(self) -> dict[str, str]:
        return {"id": self.call.id, "name": self.call.name, "arguments": self.call.arguments,
                "server": self.server, "status": self.status, "result": self.result}

    @classmethod
    def from_json(cls, data: Any) -> ToolRun | None:
        """A stored call; None if the record is not one (edited by hand)."""
        if not isinstance(data, Mapping) or not all(
                isinstance(data.get(k), str) for k in ("id", "name", "arguments")):
            return None
        status = data.get("status")
        known: RunStatus = next((s for s in get_args(RunStatus) if s == status), "failed")
        if known in ("asking", "running"):  # the app ended before it did: it never will
            known = "stopped"
        return cls(ToolCall(data["name"], data["arguments"], data["id"]),
                   str(data.get("server", "")), known, str(data.get("result", "")))

    @property
    def message(self) -> dict[str, Any]:
        """The tool's message as chat templates take it."""
        return {"role": "tool", "tool_call_id": self.call.id, "name": self.call.name,
                "content": self.result or "No result."}


@dataclass(frozen=True)
class Reply:
    text: str  # the answer
    stats: ReplyStats
    thinking: str = ""  # the model's thinking before it, shown apart
    tool_calls: tuple[ToolCall, ...] = ()  # functions it calls, after the text


class Thinking(str):
    """A streamed piece of the model's thinking rather than of its answer.

    Pieces reach the faces as ``str``; a face that shows thinking apart (all of
    Fireside's do) tells the two by this type.
    """

    __slots__ = ()


def thought_for(stats: ReplyStats) -> str:
    """"Thought for 12 s", as the folded thinking is titled once the answer has begun."""
    seconds = stats.thinking_s
    if seconds >= 60:
        return f"Thought for {int(seconds // 60)} min {int(seconds % 60)} s"
    return f"Thought for {seconds:.0f} s" if seconds >= 1 else "Thought for a moment"


def describe(stats: ReplyStats) -> list[str]:
    """The reply's details as a user reads them, one fact a line."""
    lines: list[str] = []
    if stats.tokens:
        speed = f" at {stats.tokens_per_s:.1f} tokens/s" if stats.tokens_per_s else ""
        lines.append(f"{stats.tokens:,} tokens{speed}")
    if stats.thinking_tokens:
        lines.append(f"{stats.thinking_tokens:,} of them thinking, for {stats.thinking_s:.1f} s")
    if stats.draft_proposed:
        lines.append(f"Draft: {stats.draft_accepted:,} of {stats.draft_proposed:,} accepted")
    if stats.ttft_s:
        lines.append(f"First token after {stats.ttft_s:.2f} s")
    if stats.prompt_tokens:
        restored = (f" ({stats.restored_tokens:,} restored from when this conversation was "
                    "left)" if stats.restored_tokens else "")
        lines.append(f"{stats.cached_tokens:,} of {stats.prompt_tokens:,} prompt tokens "
                     f"reused from cache{restored}")
    if stats.dropped_turns > 0:
        turns = "turn" if stats.dropped_turns == 1 else "turns"
        lines.append(f"{stats.dropped_turns} earlier {turns} left out to fit the context")
    lines += {"length": ["Stopped at the reply length limit"],
              "context": ["Stopped: the context is full"],
              "stopped": ["Stopped"],
              "cut": [f"Cut off: {stats.problem or 'the server stopped answering'}"],
              }.get(stats.finish_reason, [])
    if stats.model:
        lines.append(f"Model: {stats.model}")
    return lines
