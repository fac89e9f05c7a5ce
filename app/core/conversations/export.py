"""Conversations as Markdown (to read) and JSON (to keep or move elsewhere)."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from app.core.conversations.store import Conversation, Message, NotFoundError, Store

EXPORT_FORMAT = "fireside-conversations"
EXPORT_VERSION = 1


def export_json(store: Store, conversation_ids: Iterable[int]) -> str:
    """The conversations with every message and its stats; text round-trips exactly."""
    conversations = [
        {
            "id": conversation.id,
            "title": conversation.title,
            "model": conversation.model,
            "created_at": _iso(conversation.created_at),
            "updated_at": _iso(conversation.updated_at),
            "settings": conversation.settings,
            "messages": [_message_json(message) for message in messages],
        }
        for conversation, messages in _load(store, conversation_ids)
    ]
    document = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION,
                "conversations": conversations}
    # ASCII escapes keep NUL bytes and lone surrogates intact and the file writable
    # in any encoding.
    return json.dumps(document, ensure_ascii=True, indent=2)


def export_markdown(store: Store, conversation_ids: Iterable[int]) -> str:
    """The conversations as one readable document; message text is inserted verbatim."""
    documents = []
    for conversation, messages in _load(store, conversation_ids):
        started = datetime.fromtimestamp(conversation.created_at, UTC)
        lines = [f"# {_one_line(conversation.title) or 'Untitled'}", "",
                 f"- Model: {_model_label(conversation.model)}",
                 f"- Started: {started:%Y-%m-%d %H:%M} UTC", ""]
        for message in messages:
            lines += [f"**{_speaker(message, conversation)}:**", ""]
            if message.thinking:  # folded, as in the window
                lines += ["<details><summary>Thinking</summary>", "",
                          _readable(message.thinking), "", "</details>", ""]
            lines += [_readable(message.text), ""]
            if message.sources:  # what the reply after it was given of the documents
                lines += ["*Sources:*", ""] + [
                    f"{s.get('n')}. {s.get('path')}"
                    + (f", {s['location']}" if s.get("location") else "")
                    for s in message.sources] + [""]
            for run in message.calls:  # each call, and its result folded as in the window
                lines += [f"*Called {run.call.name} `{_one_line(run.call.arguments)}` "
                          f"({run.status})*", "",
                          "<details><summary>Result</summary>", "",
                          _readable(run.result), "", "</details>", ""]
            if not message.complete:
                lines += ["*(unfinished reply)*", ""]
        documents.append("\n".join(lines))
    return "\n---\n\n".join(documents)


def _load(store: Store, conversation_ids: Iterable[int]
          ) -> Iterable[tuple[Conversation, list[Message]]]:
    for conversation_id in conversation_ids:
        conversation = store.get_conversation(conversation_id)
        if conversation is None:
            raise NotFoundError(f"Could not export conversation {conversation_id}:"
                                " it no longer exists")
        yield conversation, store.messages(conversation_id)


def _message_json(message: Message) -> dict[str, Any]:
    thinking = {"thinking": message.thinking} if message.thinking else {}
    calls = {"tool_calls": [r.to_json() for r in message.calls]} if message.calls else {}
    # The documents' text the model was given with the message, and its sources.
    documents = ({"documents": {"text": message.attached, "sources": list(message.sources)}}
                 if message.attached else {})
    return {"role": message.role, "text": message.text, **thinking, **calls, **documents,
            "created_at": _iso(message.created_at), "complete": message.complete,
            "stats": message.stats}


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat()


def _speaker(message: Message, conversation: Conversation) -> str:
    if message.role == "user":
        return "You"
    if message.role == "system":
        return "System"
    stats = message.reply_stats
    model = stats.model if stats and stats.model else conversation.model
    return f"Assistant ({_model_label(model)})"


def _model_label(model: str) -> str:
    """A model file's name without folders or the .gguf ending."""
    name = _readable(re.split(r"[/\\]", model.rstrip("/\\"))[-1])
    return name.removesuffix(".gguf") or "unknown model"


def _one_line(text: str) -> str:
    return " ".join(_readable(text).split())


def _readable(text: str) -> str:
    """Lone surrogates, which no file encoding can hold, become U+FFFD."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


# File names -------------------------------------------------------------------------

_WINDOWS_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"{port}{n}" for port in ("COM", "LPT") for n in "0123456789¹²³"})
_NOT_IN_NAMES = frozenset('<>:"/\\|?*')
# Bytes, not characters: ext4 allows 255 bytes per name, NTFS 255 UTF-16 units. This
# leaves room for a suffix and a " (2)" added by the caller.
_MAX_STEM_BYTES = 120
_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,10}")


def safe_filename(title: str, suffix: str) -> str:
    """A file name for ``title`` that stays inside whatever folder it is joined to."""
    if not _SUFFIX.fullmatch(suffix):
        raise ValueError(f"file suffix must look like '.md', not {suffix!r}")
    # NFKC first, so full-width look-alikes of '/' or '.' are caught as the real ones.
    name = "".join(_filename_char(ch) for ch in unicodedata.normalize("NFKC", title))
    name = " ".join(name.split()).strip(". ")
    name = name.encode("utf-8")[:_MAX_STEM_BYTES].decode("utf-8", "ignore").rstrip(". ")
    if name.split(".")[0].rstrip(" ").upper() in _WINDOWS_RESERVED:
        name = f"_{name}"
    return f"{name or 'conversation'}{suffix}"


def _filename_char(ch: str) -> str:
    category = unicodedata.category(ch)
    # Invisible (bidi overrides can disguise a suffix), or unassigned here and possibly
    # invisible in a newer Unicode.
    if category in ("Cf", "Cs", "Cn", "Co"):
        return ""
    if ch in _NOT_IN_NAMES or category in ("Cc", "Zl", "Zp"):
        return " "
    return ch
