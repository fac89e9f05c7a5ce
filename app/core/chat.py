"""The chat service: conversations, prompt building and streaming, for every face.

One message, end to end: the user message is stored, the prompt is built from the
conversation with the loaded model's template (dropping the oldest turns when the
context is full), the engine streams the reply, and the reply is saved as it grows
and finished with its stats. The window and the terminal both drive this class.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.core import templates
from app.core.backend import (
    Backend,
    LoadedModel,
    PromptPlan,
    PromptTooLong,
    ReplyHandle,
    Session,
)
from app.core.options import LoadOptions, Sampling
from app.core.replies import Reply
from app.core.store import (
    Conversation,
    Message,
    NotFoundError,
    Role,
    Store,
    StoreError,
    default_title,
)

logger = logging.getLogger(__name__)

SAVE_INTERVAL_S = 0.5  # a streaming reply reaches the disk at least this often


@dataclass(frozen=True)
class ChatResult:
    conversation_id: int  # negative while the disk has refused to create the conversation
    message_id: int  # negative while the reply waits in memory to be saved
    reply: Reply
    saved: bool  # False when the disk refused the final save (the text is still shown)
    save_error: str | None = None  # why it was not saved, for the user


@dataclass
class _Unsaved:
    """A message the disk refused: kept in memory and written when space returns."""

    id: int  # negative, unique: stands in for the row id until it is saved
    role: Role
    text: str
    stats: dict[str, Any] | None = None
    row_id: int | None = None  # a reply begun on disk whose final save failed


@dataclass
class _Draft:
    """A conversation's messages that are not saved yet, oldest first."""

    conversation_id: int  # negative while the conversation itself is not saved
    title: str
    model: str
    settings: dict[str, object]
    messages: list[_Unsaved] = field(default_factory=list)


class ChatTurn:
    """A reply in progress: stop it, or wait for its ChatResult."""

    def __init__(self, handle: ReplyHandle, conversation_id: int) -> None:
        self._handle = handle
        self.conversation_id = conversation_id
        self.future: Future[ChatResult] = Future()

    def stop(self) -> None:
        self._handle.stop()


def plan_prompt(session: Session, history: Sequence[Message], system_prompt: str,
                reserve: int, min_dropped: int = 0) -> PromptPlan:
    """Fit the conversation into the context, dropping its oldest turns if needed.

    A turn is a user message and the replies after it. The system prompt and the
    newest user message always stay. Once turns must be dropped, a quarter of the
    context is freed at once, so the next turns reuse the cached prefix instead of
    shifting the window by one turn every time.
    """
    turns = _turns(history)
    budget = session.n_ctx - reserve

    def encode(dropped: int) -> list[int]:
        messages = [{"role": m.role, "content": m.text}
                    for turn in turns[dropped:] for m in turn]
        segments = templates.render(session.template, messages,
                                    system_prompt=system_prompt or None)
        return session.encode(segments)

    dropped = min(min_dropped, len(turns) - 1)
    tokens = encode(dropped)
    if len(tokens) <= budget:
        return PromptPlan(tokens, dropped)
    target = budget - session.n_ctx // 4
    while dropped < len(turns) - 1:
        dropped += 1
        tokens = encode(dropped)
        if len(tokens) <= target:
            return PromptPlan(tokens, dropped)
    if len(tokens) <= budget:
        return PromptPlan(tokens, dropped)
    raise PromptTooLong(
        f"This message is too long for the model's context: it needs {len(tokens):,} tokens "
        f"and {reserve:,} more for the reply, but the context holds {session.n_ctx:,}. "
        f"Shorten it, or raise the context size in settings.")


def _turns(history: Sequence[Message]) -> list[list[Message]]:
    turns: list[list[Message]] = []
    for message in history:
        if message.role == "system":
            continue
        if message.role == "user" or not turns:
            turns.append([message])
        else:
            turns[-1].append(message)
    return turns


class ChatService:
    def __init__(self, engine: Backend, store: Store) -> None:
        self.engine = engine
        self.store = store
        self.conversation_id: int | None = None
        # What a full disk refused, per conversation; written again at the next save.
        self._drafts: list[_Draft] = []
        self._saved_as: dict[int, int] = {}  # draft conversation id -> its saved id
        self._last_unsaved_id = 0
        self._lock = threading.RLock()  # replies finish on the inference thread

    # Models -----------------------------------------------------------------------

    @property
    def model(self) -> LoadedModel | None:
        return self.engine.loaded

    def load_model(self, path: Path | str, options: LoadOptions | None = None,
                   on_progress: Callable[[float], None] | None = None) -> Future[LoadedModel]:
        """Switch model; the open conversation stays and continues with the new one."""
        return self.engine.load(path, options, on_progress)

    # Conversations ----------------------------------------------------------------

    def new_chat(self) -> Future[None]:
        """Start over: the sequence's history is cleared, the model stays loaded."""
        self.save_unsaved()
        self.conversation_id = None
        return self.engine.clear()

    def open(self, conversation_id: int) -> list[Message]:
        """Open a conversation; its messages, including any not saved yet."""
        self.save_unsaved()
        history = self._history(conversation_id)
        self.conversation_id = conversation_id
        return history

    def history(self) -> list[Message]:
        """The open conversation's messages, including any not saved yet."""
        if self.conversation_id is None:
            return []
        return self._history(self.conversation_id)

    @property
    def unsaved(self) -> int:
        """How many messages wait in memory because the disk refused them."""
        with self._lock:
            return sum(len(draft.messages) for draft in self._drafts)

    def save_unsaved(self) -> str | None:
        """Write what the disk refused before; returns why not if it still cannot."""
        with self._lock:
            while self._drafts:
                draft = self._drafts[0]
                try:
                    self._write_draft(draft)
                except NotFoundError:
                    pass  # its conversation was deleted meanwhile
                except StoreError as err:
                    return str(err)
                self._drafts.pop(0)
        return None

    def _write_draft(self, draft: _Draft) -> None:
        if draft.conversation_id < 0:
            created = self.store.create_conversation(draft.title, draft.model, draft.settings)
            self._saved_as[draft.conversation_id] = created.id
            if self.conversation_id == draft.conversation_id:
                self.conversation_id = created.id
            draft.conversation_id = created.id
        while draft.messages:
            message = draft.messages[0]
            if message.row_id is not None:
                with contextlib.suppress(NotFoundError):  # deleted: nothing left to finish
                    self.store.finish_reply(message.row_id, message.text, message.stats)
            else:
                self.store.add_message(draft.conversation_id, message.role, message.text,
                                       message.stats)
            draft.messages.pop(0)

    def _draft(self, conversation_id: int) -> _Draft | None:
        conversation_id = self._saved_as.get(conversation_id, conversation_id)
        return next((d for d in self._drafts if d.conversation_id == conversation_id), None)

    def _keep(self, conversation_id: int, role: Role, text: str,
              stats: dict[str, Any] | None = None, row_id: int | None = None) -> int:
        """Hold a message the disk refused; returns the id standing in for its row."""
        with self._lock:
            draft = self._draft(conversation_id)
            if draft is None:
                draft = _Draft(self._saved_as.get(conversation_id, conversation_id), "", "", {})
                self._drafts.append(draft)
            self._last_unsaved_id -= 1
            draft.messages.append(_Unsaved(self._last_unsaved_id, role, text, stats, row_id))
            return self._last_unsaved_id

    def _history(self, conversation_id: int) -> list[Message]:
        """The stored messages with the unsaved ones in their place."""
        with self._lock:
            conversation_id = self._saved_as.get(conversation_id, conversation_id)
            stored = self.store.messages(conversation_id) if conversation_id > 0 else []
            draft = self._draft(conversation_id)
            if draft is None:
                return stored
            finished = {m.row_id: m for m in draft.messages if m.row_id is not None}
            history = [replace(m, text=finished[m.id].text, stats=finished[m.id].stats,
                               complete=True) if m.id in finished else m for m in stored]
            return history + [Message(m.id, conversation_id, m.role, m.text, time.time(),
                                      m.stats, True)
                              for m in draft.messages if m.row_id is None]

    def _forget_from(self, conversation_id: int, message: Message) -> None:
        """Remove ``message`` and every later one, saved or not."""
        with self._lock:
            draft = self._draft(conversation_id)
            if message.id > 0:
                self.store.delete_messages_from(message.id)
                if draft is not None:
                    draft.messages = [m for m in draft.messages
                                      if m.row_id is not None and m.row_id < message.id]
            elif draft is not None:
                ids = [m.id for m in draft.messages]
                draft.messages = draft.messages[:ids.index(message.id)]

    def _save_question(self, text: str, settings: dict[str, object]) -> tuple[int, str | None]:
        """Store the user's message, or hold it in memory if the disk refuses it."""
        with self._lock:
            model = self.model.name if self.model else ""
            if self.conversation_id is None:
                try:
                    created = self.store.create_conversation(default_title(text), model,
                                                             settings)
                except NotFoundError:
                    raise
                except StoreError as err:
                    self._last_unsaved_id -= 1
                    self.conversation_id = self._last_unsaved_id
                    self._drafts.append(_Draft(self.conversation_id, default_title(text),
                                               model, settings))
                    self._keep(self.conversation_id, "user", text)
                    return self.conversation_id, str(err)
                self.conversation_id = created.id
            conversation_id = self.conversation_id
            if self._draft(conversation_id) is None:  # never write past unsaved messages
                try:
                    self.store.add_message(conversation_id, "user", text)
                except NotFoundError:
                    raise
                except StoreError as err:
                    self._keep(conversation_id, "user", text)
                    return conversation_id, str(err)
                return conversation_id, None
            self._keep(conversation_id, "user", text)
            error = self.save_unsaved()
            return self._saved_as.get(conversation_id, conversation_id), error

    def conversation(self) -> Conversation | None:
        """The open conversation, if it is saved."""
        if self.conversation_id is None or self.conversation_id < 0:
            return None
        return self.store.get_conversation(self.conversation_id)

    # Replies ----------------------------------------------------------------------

    def send(self, text: str, sampling: Sampling, system_prompt: str = "",
             on_piece: Callable[[str], None] | None = None) -> ChatTurn:
        """Store ``text`` as the user's message and stream the model's reply.

        A disk that refuses to save never stops the reply: what it refused is held in
        memory (``unsaved``), the result says why, and the next save writes it.
        """
        self.save_unsaved()
        conversation_id, error = self._save_question(text, {"system_prompt": system_prompt})
        return self._reply(conversation_id, sampling, system_prompt, on_piece, error)

    def regenerate(self, sampling: Sampling, system_prompt: str = "",
                   on_piece: Callable[[str], None] | None = None) -> ChatTurn:
        """Replace the last reply with a new one."""
        conversation_id = self._require_conversation()
        self.save_unsaved()
        history = self._history(conversation_id)
        if history and history[-1].role == "assistant":
            self._forget_from(conversation_id, history[-1])
        return self._reply(conversation_id, sampling, system_prompt, on_piece,
                           self._draft_error(conversation_id))

    def edit_last(self, text: str, sampling: Sampling, system_prompt: str = "",
                  on_piece: Callable[[str], None] | None = None) -> ChatTurn:
        """Replace the last user message (and its reply) and send it again."""
        conversation_id = self._require_conversation()
        self.save_unsaved()
        users = [m for m in self._history(conversation_id) if m.role == "user"]
        if users:
            self._forget_from(conversation_id, users[-1])
        return self.send(text, sampling, system_prompt, on_piece)

    def _draft_error(self, conversation_id: int) -> str | None:
        if self._draft(conversation_id) is None:
            return None
        return self.save_unsaved()

    def _require_conversation(self) -> int:
        if self.conversation_id is None:
            raise PromptTooLong("There is no conversation to continue.")
        return self.conversation_id

    def _reply(self, conversation_id: int, sampling: Sampling, system_prompt: str,
               on_piece: Callable[[str], None] | None, save_error: str | None) -> ChatTurn:
        history = self._history(conversation_id)
        min_dropped = _last_dropped(history, self.model)
        row_id: int | None = None
        if self._draft(conversation_id) is None:  # never write past unsaved messages
            try:
                row_id = self.store.begin_reply(conversation_id).id
            except NotFoundError:
                raise
            except StoreError as err:
                save_error = str(err)
        saver = _ReplySaver(self.store, row_id)

        def build(session: Session) -> PromptPlan:
            reserve = min(sampling.max_tokens, session.n_ctx // 4)
            return plan_prompt(session, history, system_prompt, reserve, min_dropped)

        def piece(text: str) -> None:
            saver.add(text)
            if on_piece is not None:
                on_piece(text)

        handle = self.engine.generate(build, sampling, piece)
        turn = ChatTurn(handle, conversation_id)

        def finished(done: Future[Reply]) -> None:
            try:
                reply = done.result()
            except BaseException as exc:
                saver.abandon()
                turn.future.set_exception(exc)
                return
            saved = saver.finish(reply)
            message_id = row_id
            if not saved:
                message_id = self._keep(conversation_id, "assistant", reply.text,
                                        reply.stats.to_json(), row_id)
            error = None if saved else saver.error or save_error or "The reply was not saved."
            with self._lock:
                saved_id = self._saved_as.get(conversation_id, conversation_id)
            assert message_id is not None
            turn.future.set_result(ChatResult(saved_id, message_id, reply, saved, error))

        handle.future.add_done_callback(finished)
        return turn


def _last_dropped(history: Sequence[Message], model: LoadedModel | None) -> int:
    """Keep dropping as many turns as last time, so the cached prefix stays valid."""
    for message in reversed(history):
        stats = message.reply_stats if message.role == "assistant" else None
        if stats is not None:
            return 0 if model is not None and stats.model != model.name else stats.dropped_turns
    return 0


class _ReplySaver:
    """Saves a streaming reply as it grows; a full disk never interrupts the reply."""

    def __init__(self, store: Store, message_id: int | None) -> None:
        self._store = store
        self._message_id = message_id
        self._parts: list[str] = []
        self._lock = threading.Lock()
        self._last_save = time.monotonic()
        self.error: str | None = None

    def add(self, text: str) -> None:
        with self._lock:
            self._parts.append(text)
            if time.monotonic() - self._last_save < SAVE_INTERVAL_S:
                return
            self._last_save = time.monotonic()
            current = "".join(self._parts)
        self._try(lambda row: self._store.update_reply(row, current))

    def finish(self, reply: Reply) -> bool:
        stats = reply.stats.to_json()
        return self._try(lambda row: self._store.finish_reply(row, reply.text, stats))

    def abandon(self) -> None:
        """The reply failed before any text: remove its empty row."""
        with self._lock:
            text = "".join(self._parts)
        if text:
            self._try(lambda row: self._store.finish_reply(row, text, {"stopped": True}))
        else:
            self._try(self._store.delete_messages_from)

    def _try(self, write: Callable[[int], object]) -> bool:
        """Write to the reply's row; False if it has none (held in memory) or the write failed."""
        if self._message_id is None:
            return False
        try:
            write(self._message_id)
        except StoreError as err:
            self.error = str(err)
            logger.warning("reply not saved: %s", err)
            return False
        return True
