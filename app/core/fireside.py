"""Fireside's core as one object: what the window, the terminal and any later face use.

``Fireside`` owns:

- the backend that writes replies (the inference engine, or the tests' scripted one),
- the conversation store, and one in memory when the disk refuses it,
- the model library (:class:`ModelLibrary`): the model folders, other apps' stores,
  and the watcher on them,
- the toolbox (:class:`Toolbox`): the MCP servers the user added, started on first use,
- the documents (:class:`Shelf`): files and folders brought into conversations, indexed
  in the background (waiting while a reply is written), and what each reply is given,
- settings as a reply or a load uses them: the saved ones, a model's own, and what a
  face sets for its session (the terminal's flags),
- the turn queue: actions on the model's sequence (send, edit, regenerate, new chat,
  open, delete, load, and the local API's requests) run one at a time in the order
  asked, and a reply holds the queue until it is saved, so a reply can never land in
  another conversation,
- shutdown, in bounded time.

A face adapts it and never assembles it: it calls these methods, waits on the
futures they return (``.result()`` in the terminal, ``asyncio.wrap_future`` in the
window) and turns what comes back into its own events. A whole face, in short::

    core = Fireside.open()
    core.load(core.startup_model()).result()
    turn = core.send("Hello!").result()
    for taken in turn.pieces:  # its text as it streams
        print(taken.answer, end="", flush=True)
    print("\\n", turn.future.result().reply.stats)  # stored, with its figures
    core.close()
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from app.core import paths, settings
from app.core.backend import (
    Backend,
    KeptStates,
    LoadCancelled,
    LoadedModel,
    NoModelLoaded,
    PromptBuilder,
    ReplyHandle,
)
from app.core.conversations.chat import ChatResult, ChatService, ChatTurn, ToolHooks, Tooling
from app.core.conversations.notices import Notice, after_reply, base_model_note
from app.core.conversations.store import Conversation, Message, Store, StoreError, open_store
from app.core.documents.index import Collection, DocumentIndex
from app.core.documents.shelf import Given, Shelf, estimate_tokens, room_for
from app.core.hub.service import ModelHub
from app.core.llama import cpu_backends, devices, offload
from app.core.models import embedding_model
from app.core.models.catalog import ModelEntry
from app.core.models.library import ModelLibrary
from app.core.options import LoadOptions, Sampling
from app.core.remote import servers
from app.core.tools.toolbox import Toolbox

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Leaving (a signal, the window closed): a stopped reply gets EXIT_SAVE_S to be saved,
# then the model what is left of EXIT_SAVE_S + EXIT_CLOSE_S (at least EXIT_CLOSE_S) to
# close and keep the conversation's state. Past that the process exits anyway (the
# system frees the model; the database stays whole), so leaving never takes much over
# 1.5 s.
EXIT_SAVE_S = 1.0
EXIT_CLOSE_S = 0.5


@dataclass(frozen=True)
class SessionSettings:
    """What a face sets for its session over the saved settings (None: keep them)."""

    n_ctx: int | None = None
    n_threads: int | None = None
    # llama.cpp's switches (options.LoadOptions): None keeps the saved ones.
    flash_attention: str | None = None
    kv_cache: str | None = None
    batch_size: int | None = None
    prompt_threads: int | None = None
    gpu_layers: str | None = None
    draft_model: str | None = None  # a path (drafts.choose_draft)
    system_prompt: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)  # Sampling fields
    # Reopen the open conversation at the next start (the window's session does).
    remember_open: bool = False
    # How replies may call tools: "auto", "required", "none" or a tool's name.
    tool_choice: str = "auto"


@dataclass(frozen=True)
class Rewound:
    """A reply that replaces the end of the open conversation (an edit, a regenerate),
    and the messages that stay before it, for a face to show again."""

    turn: ChatTurn
    before: list[Message]
    conversation_id: int | None  # as ``Fireside.conversation_id`` says it


class Fireside:
    def __init__(self, engine: Backend, store: Store, prefs: settings.Settings, *,
                 models_dirs: Sequence[Path] = (),
                 save_settings: Callable[[settings.Settings], None] = settings.save,
                 notices: Sequence[str] = (), store_error: str | None = None) -> None:
        self.engine = engine
        self.store = store
        self.settings = prefs
        self.chat = ChatService(engine, store)
        self.session = SessionSettings()
        self.library = ModelLibrary(prefs, models_dirs)
        # The Hub: search and downloads, contacted only when the user asks.
        self.hub = ModelHub(prefs)
        self.toolbox = Toolbox(prefs, save=self.save_settings)
        self.documents = Shelf(DocumentIndex(store.path), self.embedding_model_path)
        with contextlib.suppress(StoreError):  # conversations deleted for good
            self.documents.forget_conversations_except(
                [c.id for c in store.list_conversations()])
        self._tools_in_new_chat = True  # the switch, for a conversation not created yet
        # Things the user should be told once, at the start: a settings file or database
        # set aside, a CPU level passed over.
        self.notices = [n for n in notices if n]
        # Why conversations are not kept (the database could not be opened at all): the
        # store is then one in memory.
        self.store_error = store_error
        self._save = save_settings
        self._turns = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fireside-turns")
        # The reply holding the queue: the user's, or a local API request's.
        self._reply: ChatTurn | ReplyHandle | None = None
        self._pending: set[Future[Any]] = set()  # actions not yet begun
        self._preempting = 0  # queued actions that stop every reply before them
        self._loads: set[threading.Event] = set()  # a cancel flag per load not finished
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._left_running = False  # closed while the inference thread was still busy

    @classmethod
    def open(cls, models_dirs: Sequence[Path] = (), engine: Backend | None = None,
             prefs: settings.Settings | None = None,
             save_settings: Callable[[settings.Settings], None] = settings.save) -> Fireside:
        """Everything from disk: settings (unless given), conversations, the models found.

        Blocking disk work: a window calls it off its GUI thread.
        """
        notices: list[str] = []
        if prefs is None:
            loaded = settings.load()
            prefs = loaded.settings
            notices.append(loaded.problem or "")
        store_error = None
        try:
            store = open_store()
            notices.append(store.notice or "")
        except StoreError as err:
            store, store_error = Store(":memory:"), str(err)
        if engine is None:
            from app.core.llama.engine import Engine  # noqa: PLC0415 - llama.cpp: only when needed

            engine = Engine(states_dir=paths.cache_dir() / "states")
            # A GPU's first memory query sets up its driver context (a fraction of a
            # second): here, not when the window first lists the models.
            devices.survey()
        from app.core.backends import Backends  # noqa: PLC0415
        from app.core.remote.server_backend import RemoteBackend  # noqa: PLC0415

        known = prefs  # read at each load: servers added later are found too
        engine = Backends(engine, RemoteBackend(
            lambda name: next((s for s in servers.added(known.servers) if s.name == name),
                              None), lambda: known.server_timeout_s, lambda: known.offline))
        notices.append(cpu_backends.notice() or "")  # once llama.cpp has chosen its CPU code
        core = cls(engine, store, prefs, models_dirs=models_dirs, save_settings=save_settings,
                   notices=notices, store_error=store_error)
        core.library.rescan()
        return core

    # State ---------------------------------------------------------------------------

    @property
    def model(self) -> LoadedModel | None:
        return self.engine.loaded

    @property
    def conversation_id(self) -> int | None:
        """The open conversation's id once the disk has taken it; None in a new chat, and
        while a full disk holds the conversation in memory (under an id of its own)."""
        conversation_id = self.chat.conversation_id
        return conversation_id if conversation_id is not None and conversation_id > 0 else None

    @property
    def loading(self) -> bool:
        """A load is under way or queued."""
        return bool(self._loads)

    @property
    def replying(self) -> bool:
        return self._reply is not None

    @property
    def answering(self) -> bool:
        """A request to the local API is using the model. Read from the reply itself: the
        turn lets go of it only after its end is announced, and a face that looks then
        must not see it still answering."""
        reply = self._reply
        return isinstance(reply, ReplyHandle) and not reply.future.done()

    def history(self) -> list[Message]:
        """The open conversation's messages, with any the disk has not taken yet."""
        return self.chat.history()

    def conversation(self) -> Conversation | None:
        """The open conversation, if it is saved."""
        return self.chat.conversation()

    def startup_model(self, named: str | None = None) -> Path:
        """The model to load at the start: the one a face was told to use (a path or a
        name), else the one rule every face follows (``choice.start_model``). LookupError
        with a message for the user if there is none."""
        path = self.library.choose(named)
        if path.is_file():
            self.library.add(path)  # listed even if no folder holds it
        return path

    def reply_notices(self, turn: ChatTurn, result: ChatResult) -> list[Notice]:
        """What to tell the user now that ``turn`` is done with ``result``, the tool
        servers' new problems among it (each told once)."""
        return after_reply(turn, result, self.toolbox.take_problems())

    def last_user_text(self) -> str | None:
        users = [m for m in self.history() if m.role == "user"]
        return users[-1].text if users else None

    # Settings ------------------------------------------------------------------------

    def load_options(self, path: Path | str | None) -> LoadOptions:
        """How ``path`` loads: the defaults, then the model's own, then the session's."""
        session = self.session
        return dataclasses.replace(self.settings.load_options(path), **_given(
            n_ctx=session.n_ctx, n_threads=session.n_threads,
            flash_attention=session.flash_attention, kv_cache=session.kv_cache,
            batch_size=session.batch_size, prompt_threads=session.prompt_threads,
            gpu_layers=session.gpu_layers, draft_model=session.draft_model)).checked()

    def hardware(self) -> devices.Hardware:
        """The devices llama.cpp sees now, with their free memory."""
        return devices.survey()

    def placement(self, entry: ModelEntry, hardware: devices.Hardware) -> offload.Plan | None:
        """Where ``entry``'s layers would go if it loaded now (None: a server's model or
        a file that cannot load)."""
        current = self.model
        return offload.would_go(entry, self.load_options(entry.path), hardware,
                                current.placement if current else None)

    def kept_states(self) -> KeptStates:
        """The conversations' sequence states kept, in memory and on disk (any thread)."""
        return self.engine.kept_states()

    def clear_kept_states(self) -> Future[None]:
        """Forget every kept sequence state (on the inference thread, after its work)."""
        return self.engine.clear_states()

    def sampling(self, path: Path | str | None = None) -> Sampling:
        model = path if path is not None else self._model_path()
        return dataclasses.replace(self.settings.sampling(model),
                                   **_given(**self.session.sampling))

    def system_prompt(self, path: Path | str | None = None) -> str:
        if self.session.system_prompt is not None:
            return self.session.system_prompt
        model = path if path is not None else self._model_path()
        return self.settings.system_prompt_for(model)

    def save_settings(self) -> None:
        try:
            self._save(self.settings)
        except OSError as err:
            logger.warning("settings not saved: %s", err)

    def _model_path(self) -> Path | None:
        model = self.engine.loaded
        return model.path if model else None

    def embedding_model_path(self) -> Path | None:
        """The embedding model documents are searched with: the one chosen in settings,
        else the bundled all-MiniLM-L6-v2."""
        chosen = self.settings.embedding_model
        if chosen and Path(chosen).is_file():
            return Path(chosen)
        return embedding_model.default_embedding_model_path()

    # Documents ---------------------------------------------------------------------------

    def attach(self, paths: Sequence[Path]) -> list[Collection]:
        """Bring files or folders into the open conversation (or the new chat); they are
        indexed in the background. ValueError naming a path that does not exist."""
        return self.documents.attach(self.conversation_id, paths)

    def detach(self, collection_id: int) -> None:
        self.documents.detach(self.conversation_id, collection_id)

    def attached(self) -> list[Collection]:
        """The open conversation's documents (the new chat's before its first message)."""
        return self.documents.attached(self.conversation_id)

    def _given(self, text: str, history: Sequence[Message]) -> Given | None:
        """What a reply to ``text`` after ``history`` is given of the documents."""
        model = self.engine.loaded
        if model is None or not self.documents.attached(self.conversation_id):
            return None
        count = self._token_counter()
        reserve = min(self.sampling().max_tokens, model.n_ctx // 4)
        room = room_for(model.n_ctx, reserve, [self.system_prompt(), text],
                        [m.text + m.attached for m in history], count)
        users = [m for m in history if m.role == "user"]
        return self.documents.given(self.conversation_id, [*(m.text for m in users), text],
                                    [m.sources for m in users], room, count)

    def _token_counter(self) -> Callable[[str], int]:
        """The loaded model's token count of a text (a server's model: an estimate)."""
        def count(text: str) -> int:
            tokens = getattr(self.engine, "tokenize", lambda _text: None)(text)
            return len(tokens.result()) if tokens is not None else estimate_tokens(text)
        return count

    # Actions on the model's sequence: queued, one at a time ----------------------------

    def load(self, path: Path, on_progress: Callable[[float], None] | None = None,
             preempt: bool = False) -> Future[LoadedModel]:
        """Switch model; the open conversation stays and goes on with the new one."""

        cancel = threading.Event()  # a load cancelled while it waits in the queue
        with self._lock:
            self._loads.add(cancel)

        def run() -> LoadedModel:
            try:
                if cancel.is_set():
                    raise LoadCancelled(f"Loading {path.name} was cancelled.")
                future = self.chat.load_model(path, self.load_options(path), on_progress)
                if cancel.is_set():  # between the check and the engine taking it
                    self.engine.cancel_load()
                loaded = future.result()
            finally:
                with self._lock:
                    self._loads.discard(cancel)
            self.settings.last_model = str(path)
            self.save_settings()
            return loaded

        return self._queue(run, preempt)

    def cancel_load(self) -> None:
        """Cancel the load under way and those queued; the model in use stays."""
        with self._lock:
            for cancel in self._loads:
                cancel.set()
        self.engine.cancel_load()

    def send(self, text: str, preempt: bool = False,
             tools: ToolHooks | None = None) -> Future[ChatTurn]:
        """Store ``text`` in the open conversation (a new one if none) and stream a reply:
        the turn's ``pieces`` hold its text as it comes, its future the stored result.
        With ``tools`` (the face's part in calls) the reply may call the tools of the
        servers switched on, if the conversation has tools on."""

        def run() -> ChatTurn:
            model = self.engine.loaded
            history = self.history()
            first = not any(m.role == "assistant" for m in history)
            was_new = self.conversation_id is None
            turn = self.chat.send(text, self.sampling(), self.system_prompt(),
                                  self._tooling(tools), tools_on=self.tools_on,
                                  stopped=self._wanted_now(), given=self._given(text, history))
            if was_new and self.conversation_id is not None:
                self.documents.adopt(self.conversation_id)
            if model is not None and model.base_model and first:
                turn.note = base_model_note(model.name)
            return self._start(turn)

        return self._queue(run, preempt)

    def edit_last(self, text: str, conversation_id: int | None, preempt: bool = False,
                  tools: ToolHooks | None = None) -> Future[Rewound | ChatTurn]:
        """Replace the last user message of ``conversation_id`` (and its reply) with
        ``text``; if another conversation is open by the time it runs, send ``text``
        there as a new message instead (a ChatTurn then). ``conversation_id`` is the
        one ``conversation_id`` said when the edit began."""

        def run() -> Rewound | ChatTurn:
            history = self.chat.history()
            if self.conversation_id != conversation_id or self.last_user_text() is None:
                return self._start(self.chat.send(text, self.sampling(), self.system_prompt(),
                                                  self._tooling(tools),
                                                  stopped=self._wanted_now(),
                                                  given=self._given(text, history)))
            users = [i for i, m in enumerate(history) if m.role == "user"]
            before = history[:users[-1]] if users else history
            turn = self.chat.edit_last(text, self.sampling(), self.system_prompt(),
                                       self._tooling(tools), stopped=self._wanted_now(),
                                       given=self._given(text, before))
            return Rewound(self._start(turn), before, self.conversation_id)

        return self._queue(run, preempt)

    def regenerate(self, preempt: bool = False,
                   tools: ToolHooks | None = None) -> Future[Rewound | None]:
        """Write the last reply again; None if the conversation has no message to answer."""

        def run() -> Rewound | None:
            history = self.chat.history()
            if not any(m.role == "user" for m in history):
                return None
            while history and history[-1].role == "assistant":
                history = history[:-1]
            turn = self.chat.regenerate(self.sampling(), self.system_prompt(),
                                        self._tooling(tools), stopped=self._wanted_now())
            return Rewound(self._start(turn), history, self.conversation_id)

        return self._queue(run, preempt)

    def answer(self, build: PromptBuilder,
               sampling: Callable[[LoadedModel], Sampling]) -> Future[ReplyHandle]:
        """A reply to messages that are no conversation (a local API request), queued
        with the user's actions; the handle once it runs: its text as it streams in its
        ``pieces``, the whole reply in its future. It is never stored, and the user's
        actions do not stop it: only its own client."""

        def run() -> ReplyHandle:
            model = self.engine.loaded
            if model is None or self._closed.is_set():
                raise NoModelLoaded()
            handle = self.engine.generate(build, sampling(model))
            self._reply = handle
            self._hold_documents(handle.future)
            return handle

        return self._queue(run, preempt=False)

    def new_chat(self, preempt: bool = False) -> Future[None]:
        """An empty chat: the sequence's history is cleared, the model stays."""
        return self._queue(self._clear, preempt)

    # Tools --------------------------------------------------------------------------------

    @property
    def tools_on(self) -> bool:
        """The open conversation may call tools (its own switch; on unless turned off)."""
        conversation = self.conversation()
        if conversation is None:
            return self._tools_in_new_chat
        return conversation.settings.get("tools") is not False

    def set_tools_on(self, on: bool) -> None:
        """Switch tools on or off for the open conversation (or the new chat)."""
        conversation = self.conversation()
        if conversation is None:
            self._tools_in_new_chat = on
            return
        self.store.update_settings(conversation.id, {**conversation.settings, "tools": on})

    def _tooling(self, hooks: ToolHooks | None) -> Tooling | None:
        if hooks is None or not self.tools_on or not self.toolbox.configured:
            return None
        return Tooling(self.toolbox, hooks, self.session.tool_choice)

    def open_conversation(self, conversation_id: int,
                          preempt: bool = False) -> Future[list[Message] | None]:
        """Open a conversation: its messages; None if it no longer exists."""

        def run() -> list[Message] | None:
            if self.store.get_conversation(conversation_id) is None:
                return None
            messages = self.chat.open(conversation_id)
            self.documents.focus(conversation_id)
            return messages

        return self._queue(run, preempt)

    def delete_conversation(self, conversation_id: int,
                            preempt: bool = False) -> Future[Conversation | None]:
        """Delete a conversation (it can be brought back until the core closes); a new chat
        follows if it was open. Its record as it was, or None if it was already gone."""

        def run() -> Conversation | None:
            conversation = self.store.get_conversation(conversation_id)
            self.store.delete_conversation(conversation_id)
            if conversation_id == self.chat.conversation_id:
                self._clear()
            self.engine.forget_states(conversation_id).result()  # what the clear kept too
            return conversation

        return self._queue(run, preempt)

    def undelete_conversation(self, conversation_id: int) -> None:
        self.store.undelete_conversation(conversation_id)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.store.rename_conversation(conversation_id, title)

    def conversations(self, query: str = "") -> list[Conversation]:
        return self.store.list_conversations(query or None)

    def stop(self) -> None:
        """Stop the user's reply under way now (its text so far is kept); queued actions
        go on."""
        reply = self._reply
        if isinstance(reply, ChatTurn):
            reply.stop()

    def _clear(self) -> None:
        self._tools_in_new_chat = True
        self.documents.new_chat()
        with contextlib.suppress(NoModelLoaded):  # nothing to clear
            self.chat.new_chat().result()

    def _wanted_now(self) -> bool:
        """An action queued after the one running wants the model now (or Fireside is
        closing): a reply begun now is stopped before its first token."""
        return self._closed.is_set() or self._preempting > 0

    def _start(self, turn: ChatTurn) -> ChatTurn:
        """The reply holds the queue until it is saved (see ``_queue``)."""
        self._reply = turn
        if self._wanted_now():
            turn.stop()  # one that came while it was being set up
        self._hold_documents(turn.future)
        return turn

    def _hold_documents(self, reply: Future[Any]) -> None:
        """Indexing waits while a reply is written: the chat has the CPU first."""
        self.documents.hold()
        reply.add_done_callback(lambda _done: self.documents.release())

    def _queue(self, action: Callable[[], T], preempt: bool) -> Future[T]:
        """Run ``action`` after those queued before it (and their replies). ``preempt``:
        stop the reply under way, and any that an action before this one starts."""
        future: Future[T] = Future()
        with self._lock:
            self._pending.add(future)
            if preempt:
                self._preempting += 1
        if preempt:
            self.stop()

        def run() -> None:
            with self._lock:
                self._pending.discard(future)
                if preempt:
                    self._preempting -= 1
            if not future.set_running_or_notify_cancel():
                return
            try:
                try:
                    value = action()
                finally:
                    self._remember_open()  # before the face hears of it
                future.set_result(value)
            except BaseException as exc:  # delivered to the face, never lost
                future.set_exception(exc)
            reply = self._reply
            if reply is not None:
                with contextlib.suppress(Exception):  # the face hears of it from the reply
                    reply.future.result()
                self._reply = None

        try:
            self._turns.submit(run)
        except RuntimeError:  # closed: nothing more runs
            future.cancel()
        return future

    def _remember_open(self) -> None:
        if not self.session.remember_open or (self.chat.conversation_id or 0) < 0:
            return  # not this face's wish, or held in memory until the disk takes it
        if self.settings.open_conversation != self.conversation_id:
            self.settings.open_conversation = self.conversation_id
            self.save_settings()

    # Leaving ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the reply (its text so far is saved), close the model and the database.

        Takes at most about EXIT_SAVE_S + EXIT_CLOSE_S; actions still queued are cancelled.
        """
        if self._closed.is_set():
            return
        deadline = time.monotonic() + EXIT_SAVE_S + EXIT_CLOSE_S
        self._closed.set()
        self.library.stop_watching()
        self.hub.close()  # a download pauses: its bytes stay for the next start
        self._turns.shutdown(wait=False, cancel_futures=True)
        threading.Thread(target=self.toolbox.close, daemon=True).start()  # their processes end
        with self._lock:
            waiting, self._pending = self._pending, set()
        for future in waiting:
            future.cancel()
        self.cancel_load()
        reply = self._reply
        if reply is not None:
            reply.stop()
            with contextlib.suppress(Exception):  # leaving anyway
                reply.future.result(timeout=EXIT_SAVE_S)
            if isinstance(reply, ChatTurn):
                reply.leave()  # kept as stopped, if it has not ended by itself
        if not self.engine.close(timeout=max(EXIT_CLOSE_S, deadline - time.monotonic())):
            logger.warning("the inference thread did not finish in time")
            self._left_running = True
        error = self.chat.save_unsaved() if self.chat.unsaved else None  # room again?
        if error:
            logger.warning("messages not saved at exit: %s", error)
        try:
            self.store.purge_deleted()  # deleted means deleted once Fireside closes
        except StoreError as err:
            logger.warning("deleted conversations not purged: %s", err)
        self.documents.close()
        self.store.close()

    def exit_if_left_running(self, status: int) -> None:
        """Once closed: end the process now, with ``status``, if the inference thread was
        still inside llama.cpp when the time to leave ran out. Python's teardown would
        free what that thread is using (a crash at exit); all else is saved by then."""
        if not self._left_running:
            return
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # leaving anyway
                stream.flush()
        os._exit(status)


def _given(**values: Any) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}
