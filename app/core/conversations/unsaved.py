"""Messages the disk refused (it was full): kept in memory, in order, and written at the
next chance, so that a full disk never loses a word and never stops a reply.

While a conversation itself could not be created, it goes by a negative id, and its
messages too: ids that stand in for rows until they exist. They stay inside the core:
:meth:`UnsavedMessages.saved_id` says what a stand-in became, and the chat service hands
faces the saved id as soon as there is one.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from app.core.conversations.store import Message, NotFoundError, Role, Store, StoreError
from app.core.reply.replies import ToolRun


@dataclass
class _Held:
    """One message the disk refused."""

    id: int  # negative, unique: stands in for the row id until it is saved
    role: Role
    text: str
    stats: dict[str, Any] | None = None
    row_id: int | None = None  # a reply begun on disk whose final save failed
    thinking: str = ""
    calls: tuple[ToolRun, ...] = ()
    attached: str = ""  # a user message's documents (Message.attached, .sources)
    sources: tuple[dict[str, Any], ...] = ()


@dataclass
class _Conversation:
    """A conversation's messages that are not saved yet, oldest first."""

    id: int  # negative while the conversation itself is not saved
    title: str
    model: str
    settings: dict[str, object]
    messages: list[_Held] = field(default_factory=list)


class UnsavedMessages:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._conversations: list[_Conversation] = []
        self._saved_as: dict[int, int] = {}  # stand-in conversation id -> its saved id
        self._last_id = 0
        self.lock = threading.RLock()  # replies finish on the inference thread

    @property
    def count(self) -> int:
        """How many messages wait in memory."""
        with self.lock:
            return sum(len(c.messages) for c in self._conversations)

    def saved_id(self, conversation_id: int) -> int:
        """The id a conversation has now (its saved id once a stand-in was written)."""
        with self.lock:
            return self._saved_as.get(conversation_id, conversation_id)

    def holds(self, conversation_id: int) -> bool:
        """Messages of this conversation wait: nothing may be written after them yet."""
        return self._find(conversation_id) is not None

    def write(self) -> str | None:
        """Write what the disk refused before, oldest first; why not, if it still cannot."""
        with self.lock:
            while self._conversations:
                try:
                    self._write(self._conversations[0])
                except NotFoundError:
                    pass  # its conversation was deleted meanwhile
                except StoreError as err:
                    return str(err)
                self._conversations.pop(0)
        return None

    def hold_conversation(self, title: str, model: str, settings: dict[str, object],
                          first: str, *, attached: str = "",
                          sources: tuple[dict[str, Any], ...] = ()) -> int:
        """A conversation the disk would not create, with its first message; its stand-in
        id."""
        with self.lock:
            self._last_id -= 1
            self._conversations.append(_Conversation(self._last_id, title, model, settings))
            conversation_id = self._last_id
            self.hold(conversation_id, "user", first, attached=attached, sources=sources)
            return conversation_id

    def hold(self, conversation_id: int, role: Role, text: str,
             stats: dict[str, Any] | None = None, row_id: int | None = None, *,
             thinking: str = "", calls: tuple[ToolRun, ...] = (), attached: str = "",
             sources: tuple[dict[str, Any], ...] = ()) -> int:
        """Keep a message the disk refused; returns the id standing in for its row."""
        with self.lock:
            held = self._find(conversation_id)
            if held is None:
                held = _Conversation(self.saved_id(conversation_id), "", "", {})
                self._conversations.append(held)
            self._last_id -= 1
            held.messages.append(_Held(self._last_id, role, text, stats, row_id, thinking,
                                       calls, attached, sources))
            return self._last_id

    def merged(self, conversation_id: int) -> list[Message]:
        """The stored messages of a conversation with the held ones in their place."""
        with self.lock:
            conversation_id = self.saved_id(conversation_id)
            stored = self.store.messages(conversation_id) if conversation_id > 0 else []
            held = self._find(conversation_id)
            if held is None:
                return stored
            finished = {m.row_id: m for m in held.messages if m.row_id is not None}
            merged = [replace(m, text=finished[m.id].text, stats=finished[m.id].stats,
                              thinking=finished[m.id].thinking, complete=True,
                              calls=finished[m.id].calls)
                      if m.id in finished else m for m in stored]
            return merged + [Message(m.id, conversation_id, m.role, m.text, time.time(),
                                     m.stats, True, m.thinking, m.calls, m.attached,
                                     m.sources)
                             for m in held.messages if m.row_id is None]

    def set_calls(self, conversation_id: int, message_id: int,
                  calls: tuple[ToolRun, ...]) -> None:
        """What became of a reply's calls, for a reply held here (by its stand-in id or
        its row's); held here too when the disk refused to save them on its row."""
        with self.lock:
            held = self._find(conversation_id)
            found = next((m for m in held.messages if message_id in (m.id, m.row_id)),
                         None) if held is not None else None
            if found is not None:
                found.calls = calls
                return
            stored = next((m for m in self.store.messages(self.saved_id(conversation_id))
                           if m.id == message_id), None)
            if stored is None:
                return  # deleted meanwhile
            self.hold(conversation_id, "assistant", stored.text, stored.stats, message_id,
                      thinking=stored.thinking, calls=calls)

    def forget_from(self, conversation_id: int, message: Message) -> None:
        """Remove ``message`` and every later one, saved or not."""
        with self.lock:
            held = self._find(conversation_id)
            if message.id > 0:
                self.store.delete_messages_from(message.id)
                if held is not None:
                    held.messages = [m for m in held.messages
                                     if m.row_id is not None and m.row_id < message.id]
            elif held is not None:
                ids = [m.id for m in held.messages]
                held.messages = held.messages[:ids.index(message.id)]

    def _find(self, conversation_id: int) -> _Conversation | None:
        with self.lock:
            conversation_id = self.saved_id(conversation_id)
            return next((c for c in self._conversations if c.id == conversation_id), None)

    def _write(self, held: _Conversation) -> None:
        if held.id < 0:
            created = self.store.create_conversation(held.title, held.model, held.settings)
            self._saved_as[held.id] = created.id
            held.id = created.id
        while held.messages:
            message = held.messages[0]
            if message.row_id is not None:
                try:
                    self.store.finish_reply(message.row_id, message.text, message.stats,
                                            message.thinking, message.calls)
                except NotFoundError:  # finished already (only its calls wait), or deleted
                    with contextlib.suppress(NotFoundError):
                        self.store.set_calls(message.row_id, message.calls)
            else:
                self.store.add_message(held.id, message.role, message.text, message.stats,
                                       thinking=message.thinking, calls=message.calls,
                                       attached=message.attached, sources=message.sources)
            held.messages.pop(0)
