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
from dataclasses import asdict, dataclass
from pathlib import Path

from app.core import templates
from app.core.engine import (
    Engine,
    LoadedModel,
    LoadOptions,
    PromptPlan,
    PromptTooLong,
    Reply,
    ReplyHandle,
    Sampling,
    Session,
)
from app.core.store import Conversation, Message, Store, StoreError, default_title

logger = logging.getLogger(__name__)

SAVE_INTERVAL_S = 0.5  # a streaming reply reaches the disk at least this often


@dataclass(frozen=True)
class ChatResult:
    conversation_id: int
    message_id: int
    reply: Reply
    saved: bool  # False when the disk refused the final save (the text is still shown)


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
    def __init__(self, engine: Engine, store: Store) -> None:
        self.engine = engine
        self.store = store
        self.conversation_id: int | None = None

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
        self.conversation_id = None
        return self.engine.clear()

    def open(self, conversation_id: int) -> list[Message]:
        self.conversation_id = conversation_id
        return self.store.messages(conversation_id)

    def _ensure_conversation(self, first_text: str, settings: dict[str, object]) -> int:
        if self.conversation_id is None:
            model = self.model.name if self.model else ""
            conversation = self.store.create_conversation(default_title(first_text), model,
                                                          settings)
            self.conversation_id = conversation.id
        return self.conversation_id

    def conversation(self) -> Conversation | None:
        if self.conversation_id is None:
            return None
        return self.store.get_conversation(self.conversation_id)

    # Replies ----------------------------------------------------------------------

    def send(self, text: str, sampling: Sampling, system_prompt: str = "",
             on_piece: Callable[[str], None] | None = None) -> ChatTurn:
        """Store ``text`` as the user's message and stream the model's reply."""
        conversation_id = self._ensure_conversation(text, {"system_prompt": system_prompt})
        self.store.add_message(conversation_id, "user", text)
        return self._reply(conversation_id, sampling, system_prompt, on_piece)

    def regenerate(self, sampling: Sampling, system_prompt: str = "",
                   on_piece: Callable[[str], None] | None = None) -> ChatTurn:
        """Replace the last reply with a new one."""
        conversation_id = self._require_conversation()
        history = self.store.messages(conversation_id)
        if history and history[-1].role == "assistant":
            self.store.delete_messages_from(history[-1].id)
        return self._reply(conversation_id, sampling, system_prompt, on_piece)

    def edit_last(self, text: str, sampling: Sampling, system_prompt: str = "",
                  on_piece: Callable[[str], None] | None = None) -> ChatTurn:
        """Replace the last user message (and its reply) and send it again."""
        conversation_id = self._require_conversation()
        users = [m for m in self.store.messages(conversation_id) if m.role == "user"]
        if users:
            self.store.delete_messages_from(users[-1].id)
        return self.send(text, sampling, system_prompt, on_piece)

    def _require_conversation(self) -> int:
        if self.conversation_id is None:
            raise PromptTooLong("There is no conversation to continue.")
        return self.conversation_id

    def _reply(self, conversation_id: int, sampling: Sampling, system_prompt: str,
               on_piece: Callable[[str], None] | None) -> ChatTurn:
        history = self.store.messages(conversation_id)
        min_dropped = _last_dropped(history, self.model)
        reply_row = self.store.begin_reply(conversation_id)
        saver = _ReplySaver(self.store, reply_row.id)

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
            turn.future.set_result(ChatResult(conversation_id, reply_row.id, reply, saved))

        handle.future.add_done_callback(finished)
        return turn


def _last_dropped(history: Sequence[Message], model: LoadedModel | None) -> int:
    """Keep dropping as many turns as last time, so the cached prefix stays valid."""
    for message in reversed(history):
        if message.role == "assistant" and message.stats:
            if model is not None and message.stats.get("model") != model.name:
                return 0
            value = message.stats.get("dropped_turns", 0)
            return value if isinstance(value, int) else 0
    return 0


class _ReplySaver:
    """Saves a streaming reply as it grows; a full disk never interrupts the reply."""

    def __init__(self, store: Store, message_id: int) -> None:
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
        self._try(lambda: self._store.update_reply(self._message_id, current))

    def finish(self, reply: Reply) -> bool:
        stats = asdict(reply.stats)
        return self._try(lambda: self._store.finish_reply(self._message_id, reply.text, stats))

    def abandon(self) -> None:
        """The reply failed before any text: remove its empty row."""
        with self._lock:
            text = "".join(self._parts)
        if text:
            self._try(lambda: self._store.finish_reply(self._message_id, text,
                                                       {"stopped": True}))
        else:
            self._try(lambda: self._store.delete_messages_from(self._message_id))

    def _try(self, write: Callable[[], object]) -> bool:
        try:
            write()
        except StoreError as err:
            self.error = str(err)
            logger.warning("reply not saved: %s", err)
            return False
        return True
