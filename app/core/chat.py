"""The chat service: conversations, prompt building and streaming, for every face.

One message, end to end: the user message is stored, the prompt is built from the
conversation with the loaded model's template (dropping the oldest turns when the
context is full), the engine streams the reply, and the reply is saved as it grows
and finished with its stats. The window and the terminal both drive this class.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from app.core import templates, thinking
from app.core.backend import (
    Backend,
    LoadedModel,
    PromptPlan,
    PromptTooLong,
    ReplyHandle,
    Session,
)
from app.core.options import LoadOptions, Sampling
from app.core.replies import Reply, Thinking
from app.core.store import (
    Conversation,
    Message,
    NotFoundError,
    Store,
    StoreError,
    default_title,
)
from app.core.unsaved import UnsavedMessages

logger = logging.getLogger(__name__)

SAVE_INTERVAL_S = 0.5  # a streaming reply reaches the disk at least this often


@dataclass(frozen=True)
class ChatResult:
    conversation_id: int  # negative while the disk has refused to create the conversation
    message_id: int  # negative while the reply waits in memory to be saved
    reply: Reply
    saved: bool  # False when the disk refused the final save (the text is still shown)
    save_error: str | None = None  # why it was not saved, for the user


class ChatTurn:
    """A reply in progress: stop it, or wait for its ChatResult."""

    def __init__(self, handle: ReplyHandle, conversation_id: int) -> None:
        self._handle = handle
        self.conversation_id = conversation_id
        self.future: Future[ChatResult] = Future()
        self.note: str | None = None  # something a face says quietly once it is done

    def stop(self) -> None:
        self._handle.stop()


def plan_prompt(session: Session, history: Sequence[Message], system_prompt: str,
                reserve: int, min_dropped: int = 0, *,
                thinking_choice: str = "on") -> PromptPlan:
    """Fit the conversation into the context, dropping its oldest turns if needed.

    A turn is a user message and the replies after it. The system prompt and the
    newest user message always stay. Once turns must be dropped, a quarter of the
    context is freed at once, so the next turns reuse the cached prefix instead of
    shifting the window by one turn every time.
    """
    turns = _turns(history)
    budget = session.n_ctx - reserve
    # The template's own thinking switch; earlier thoughts go back as it decides.
    variables = thinking.template_variables(session.template.text, thinking_choice)

    def plan(dropped: int) -> PromptPlan:
        messages = [_for_template(m) for turn in turns[dropped:] for m in turn]
        segments = templates.render(session.template, messages,
                                    system_prompt=system_prompt or None, extra=variables)
        system = [{"role": "system", "content": system_prompt}] if system_prompt else []
        # A server applies its own template to plain messages: earlier thoughts stay here.
        plain = ({"role": m["role"], "content": m["content"]} for m in messages)
        return PromptPlan(session.encode(segments), dropped, (*system, *plain))

    dropped = min(min_dropped, len(turns) - 1)
    kept = plan(dropped)
    if len(kept.tokens) <= budget:
        return kept
    target = budget - session.n_ctx // 4
    while dropped < len(turns) - 1:
        dropped += 1
        kept = plan(dropped)
        if len(kept.tokens) <= target:
            return kept
    tokens = kept.tokens
    if len(tokens) <= budget:
        return kept
    raise PromptTooLong(
        f"This message is too long for the model's context: it needs {len(tokens):,} tokens "
        f"and {reserve:,} more for the reply, but the context holds {session.n_ctx:,}. "
        f"Shorten it, or raise the context size in settings.")


def _for_template(message: Message) -> dict[str, str]:
    if message.thinking:
        return {"role": message.role, "content": message.text, "thinking": message.thinking}
    return {"role": message.role, "content": message.text}


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
        self._held = UnsavedMessages(store)
        self._lock = self._held.lock  # replies finish on the inference thread

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
        return self._held.count

    def save_unsaved(self) -> str | None:
        """Write what the disk refused before; returns why not if it still cannot."""
        with self._lock:
            error = self._held.write()
            if self.conversation_id is not None:
                self.conversation_id = self._held.saved_id(self.conversation_id)
            return error

    def _history(self, conversation_id: int) -> list[Message]:
        """The stored messages with the unsaved ones in their place."""
        return self._held.merged(conversation_id)

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
                    self.conversation_id = self._held.hold_conversation(
                        default_title(text), model, settings, text)
                    return self.conversation_id, str(err)
                self.conversation_id = created.id
            conversation_id = self.conversation_id
            if not self._held.holds(conversation_id):  # never write past unsaved messages
                try:
                    self.store.add_message(conversation_id, "user", text)
                except NotFoundError:
                    raise
                except StoreError as err:
                    self._held.hold(conversation_id, "user", text)
                    return conversation_id, str(err)
                return conversation_id, None
            self._held.hold(conversation_id, "user", text)
            error = self.save_unsaved()
            return self._held.saved_id(conversation_id), error

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
            self._held.forget_from(conversation_id, history[-1])
        return self._reply(conversation_id, sampling, system_prompt, on_piece,
                           self._draft_error(conversation_id))

    def edit_last(self, text: str, sampling: Sampling, system_prompt: str = "",
                  on_piece: Callable[[str], None] | None = None) -> ChatTurn:
        """Replace the last user message (and its reply) and send it again."""
        conversation_id = self._require_conversation()
        self.save_unsaved()
        users = [m for m in self._history(conversation_id) if m.role == "user"]
        if users:
            self._held.forget_from(conversation_id, users[-1])
        return self.send(text, sampling, system_prompt, on_piece)

    def _draft_error(self, conversation_id: int) -> str | None:
        if not self._held.holds(conversation_id):
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
        if not self._held.holds(conversation_id):  # never write past unsaved messages
            try:
                row_id = self.store.begin_reply(conversation_id).id
            except NotFoundError:
                raise
            except StoreError as err:
                save_error = str(err)
        saver = _ReplySaver(self.store, row_id)

        def build(session: Session) -> PromptPlan:
            reserve = min(sampling.max_tokens, session.n_ctx // 4)
            return plan_prompt(session, history, system_prompt, reserve, min_dropped,
                               thinking_choice=sampling.thinking)

        def piece(text: str) -> None:
            saver.add(text)
            if on_piece is not None:
                on_piece(text)

        handle = self.engine.generate(build, sampling, piece,
                                      conversation_id if conversation_id > 0 else None)
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
                message_id = self._held.hold(conversation_id, "assistant", reply.text,
                                             reply.stats.to_json(), row_id,
                                             thinking=reply.thinking)
            error = None if saved else saver.error or save_error or "The reply was not saved."
            saved_id = self._held.saved_id(conversation_id)
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
        self._thinking: list[str] = []
        self._lock = threading.Lock()
        self._last_save = time.monotonic()
        self.error: str | None = None

    def add(self, text: str) -> None:
        with self._lock:
            (self._thinking if isinstance(text, Thinking) else self._parts).append(text)
            if time.monotonic() - self._last_save < SAVE_INTERVAL_S:
                return
            self._last_save = time.monotonic()
            current, thought = "".join(self._parts), "".join(self._thinking)
        self._try(lambda row: self._store.update_reply(row, current, thought))

    def finish(self, reply: Reply) -> bool:
        stats = reply.stats.to_json()
        return self._try(lambda row: self._store.finish_reply(row, reply.text, stats,
                                                             reply.thinking))

    def abandon(self) -> None:
        """The reply failed before any text: remove its empty row."""
        with self._lock:
            text, thought = "".join(self._parts), "".join(self._thinking)
        if text or thought:
            self._try(lambda row: self._store.finish_reply(row, text, {"stopped": True},
                                                           thought))
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
