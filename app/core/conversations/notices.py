"""What the user is told once a reply is done, the same for every face: the first
reply of a base model, the tool servers that failed, a reply cut off, a reply the disk
refused. Each face shows these its own way (the window's bar, the terminal's stderr or
JSON events) and adds only what differs between faces: how to go on with another model
after a cut (``about == "cut"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from app.core.conversations.chat import ChatResult, ChatTurn

Level = Literal["info", "warning", "error"]
About = Literal["note", "tools", "cut", "unsaved"]


@dataclass(frozen=True)
class Notice:
    level: Level
    text: str
    about: About


def base_model_note(name: str) -> str:
    """What the first reply of a base model in a chat says, once."""
    return (f"{name} is a base model: it continues the text it is given rather than "
            "answering it. For a conversation, choose a chat (instruct) model.")


def after_reply(turn: ChatTurn, result: ChatResult,
                tool_problems: Sequence[str] = ()) -> list[Notice]:
    """What to tell the user about ``turn``, finished with ``result``; ``tool_problems``:
    what the tool servers have not told yet (``Toolbox.take_problems``)."""
    said = [Notice("info", turn.note, "note")] if turn.note else []
    said += [Notice("warning", problem, "tools") for problem in tool_problems]
    stats = result.reply.stats
    if stats.finish_reason == "cut":
        said.append(Notice("error", f"{stats.problem} The reply so far is kept.", "cut"))
    if not result.saved:
        reason = (result.save_error or "the disk refused it").rstrip(".")
        said.append(Notice("error", f"This reply could not be saved ({reason}). It is kept "
                           "in memory and saved as soon as there is room again.", "unsaved"))
    return said
