"""The window's side of the core: model loads, replies and conversations, as signals.

Everything runs on the GUI thread's event loop and awaits the core's futures through
qasync, so nothing here blocks the window. Actions that change what the model's
sequence holds (send, regenerate, edit, new chat, open, delete, model change) take
turns through one lock, and each first stops a streaming reply and waits until it is
saved: a reply can never land in another conversation.

This module imports llama.cpp (through the core); the window imports it off the GUI
thread after its first paint.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any, TypeVar

from PySide6.QtCore import QObject, QTimer, Signal

from app.core import catalog, cpu_backends, sources
from app.core.chat import ChatResult, ChatService, ChatTurn
from app.core.engine import (
    EXIT_CLOSE_S,
    EXIT_SAVE_S,
    Engine,
    EngineError,
    LoadCancelled,
    LoadedModel,
    NoModelLoaded,
)
from app.core.models import choose_model
from app.core.options import Sampling
from app.core.settings import Settings
from app.core.store import Conversation, Message, Store, StoreError, open_store
from app.core.watch import Watcher
from app.ui import event_loop, messages
from app.ui.bridge import PieceStream, ProgressRelay
from app.ui.desktop import open_models_folder

logger = logging.getLogger(__name__)

T = TypeVar("T")

DELIVERY_MS = 33  # streamed text reaches the transcript about 30 times a second


class ChatController(QObject):
    started = Signal()
    """The conversations are open and the models are listed (a model may still load)."""
    catalog_changed = Signal(list)
    """The models found on disk changed (a list of ModelEntry)."""
    sources_found = Signal(list)
    """Other apps' model stores were looked for (a list of sources.Source, found or not)."""
    _library_changed = Signal()
    """Model files appeared, went or changed (emitted from the watcher's thread)."""
    model_load_started = Signal(object, str)
    """A model (Path, name) began loading."""
    model_load_progressed = Signal(float)
    """The load is this far along (0.0 to 1.0)."""
    model_loaded = Signal(object)
    """This LoadedModel is ready."""
    model_load_failed = Signal(object)
    """The load failed; the argument is the LoadedModel still in use, or None."""
    conversations_changed = Signal()
    """Conversations were added, renamed, deleted or reordered."""
    conversation_opened = Signal(int, list)
    """This conversation (id, its messages) is now shown."""
    chat_cleared = Signal()
    """A new, empty chat is shown."""
    message_sent = Signal(str)
    """The user's message was saved; its reply follows."""
    reply_started = Signal(str)
    """A reply began, from the model with this name; its text follows."""
    reply_text_arrived = Signal(str)
    """More text of the reply."""
    reply_finished = Signal(str, dict)
    """The reply ended (finished or stopped): its whole text and its stats."""
    reply_failed = Signal(str)
    """The reply could not be produced, for this reason."""
    streaming_changed = Signal(bool)
    """A reply started or stopped streaming."""
    send_refused = Signal(str)
    """This text could not be sent (the reason was shown); give it back to the user."""

    def __init__(self, prefs: Settings, models_dirs: Sequence[Path],
                 save_settings: Callable[[], None], background: Executor,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        event_loop.ensure()
        self._background = background  # for disk work that must not block the window
        self.prefs = prefs
        self._models_dirs = list(models_dirs)
        self._save_settings = save_settings
        self.engine = Engine()
        cpu_notice = cpu_backends.notice()
        if cpu_notice:
            messages.warning(cpu_notice)
        self.store: Store | None = None
        self.chat: ChatService | None = None
        self.entries: list[catalog.ModelEntry] = []
        self.sources: list[sources.Source] = []
        self.loading = False
        # What the watcher looks at, replaced whole (never mutated) when it changes.
        self._library: tuple[tuple[tuple[Path, str], ...], frozenset[str]] = ((), frozenset())
        self._watcher = Watcher(self._watch_list, self._library_changed.emit)
        self._library_changed.connect(self._on_library_changed)
        self._lock = asyncio.Lock()
        self._turn: ChatTurn | None = None
        self._stream_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._showing = False  # the transcript shows the streaming reply
        self._pieces = PieceStream(self)
        self._pieces.arrived.connect(self._on_pieces_arrived)
        # Streamed text is handed on once per frame, not once per token: every wake-up
        # of the GUI thread takes a core away from the model on a small machine.
        self._delivery = QTimer(self)
        self._delivery.setSingleShot(True)
        self._delivery.setInterval(DELIVERY_MS)
        self._delivery.timeout.connect(self._deliver_pieces)
        self._progress = ProgressRelay(self)
        self._progress.progressed.connect(self.model_load_progressed)

    # State -------------------------------------------------------------------------

    @property
    def model(self) -> LoadedModel | None:
        return self.engine.loaded

    @property
    def conversation_id(self) -> int | None:
        return self.chat.conversation_id if self.chat else None

    @property
    def streaming(self) -> bool:
        return self._turn is not None

    @property
    def busy(self) -> bool:
        """An action is under way: a load, a reply, or a change of conversation."""
        return bool(self._tasks) or self.loading or self.streaming

    def conversations(self, query: str = "") -> list[Conversation]:
        if self.store is None:
            return []
        try:
            return self.store.list_conversations(query or None)
        except StoreError as err:
            messages.error(str(err))
            return []

    def conversation(self) -> Conversation | None:
        """The open conversation, if it has been saved."""
        if self.chat is None:
            return None
        try:
            return self.chat.conversation()
        except StoreError:
            return None

    def last_user_text(self) -> str | None:
        history = self._history()
        users = [m for m in history if m.role == "user"]
        return users[-1].text if users else None

    # Actions (each returns its task; failures reach the message bar) ----------------

    def start(self) -> asyncio.Task[None]:
        """Open the conversations, restore the open one, find the models, load one."""
        return self._spawn(self._start())

    def load_model(self, path: Path) -> asyncio.Task[None]:
        return self._spawn(self._load(path))

    def reload_model(self) -> None:
        """Load the current model again (new context size or threads)."""
        model = self.model
        if model is None:
            messages.info("No model is loaded: choose one, it loads with the new settings.")
            return
        self._spawn(self._load(model.path))

    def cancel_load(self) -> None:
        self.engine.cancel_load()

    def rescan(self) -> asyncio.Task[None]:
        return self._spawn(self._rescan())

    def send(self, text: str) -> asyncio.Task[None]:
        return self._spawn(self._send(text))

    def edit_last(self, text: str, conversation_id: int | None) -> asyncio.Task[None]:
        """Replace the last user message (and its reply) of the conversation with ``text``
        and send it; if another conversation is open by then, send ``text`` there instead."""
        return self._spawn(self._send(text, edit_in=conversation_id))

    def regenerate(self) -> asyncio.Task[None]:
        return self._spawn(self._regenerate())

    def stop(self) -> None:
        if self._turn is not None:
            self._turn.stop()

    def new_chat(self) -> asyncio.Task[None]:
        return self._spawn(self._new_chat())

    def open_conversation(self, conversation_id: int) -> asyncio.Task[None]:
        return self._spawn(self._open(conversation_id))

    def delete_conversation(self, conversation_id: int) -> asyncio.Task[None]:
        return self._spawn(self._delete(conversation_id))

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        if self.store is None:
            return
        try:
            self.store.rename_conversation(conversation_id, title)
        except StoreError as err:
            messages.error(str(err))
        self.conversations_changed.emit()

    def shut_down(self, then: Callable[[], None]) -> None:
        """Close in the background (see ``shutdown``), then call ``then``."""

        async def run() -> None:
            try:
                await self.shutdown()
            finally:
                then()

        self._spawn(run())

    async def shutdown(self) -> None:
        """Stop the reply (its text so far is saved), close the model and the database."""
        self._closed = True
        self._watcher.stop()
        self.stop()
        self.engine.cancel_load()
        task = self._stream_task
        if task is not None and not task.done():
            await asyncio.wait([task], timeout=EXIT_SAVE_S)
        if not self.engine.close(timeout=EXIT_CLOSE_S):
            logger.warning("the inference thread did not finish in time")
        pending = [task for task in self._tasks if task is not asyncio.current_task()
                   and not task.done()]
        for task in pending:
            task.cancel()  # a load or clear that can no longer finish
        if pending:
            await asyncio.wait(pending)
        if self.chat is not None and self.chat.unsaved:
            error = self.chat.save_unsaved()  # the disk may have room again
            if error:
                logger.warning("messages not saved at exit: %s", error)
        if self.store is not None:
            try:
                self.store.purge_deleted()  # deleted means deleted once the window closes
            except StoreError as err:
                logger.warning("deleted conversations not purged: %s", err)
            self.store.close()

    # Coroutines --------------------------------------------------------------------

    def _spawn(self, coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._on_task_done)
        return task

    def _on_task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            messages.report_exception(task.exception())  # type: ignore[arg-type]

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self.store = await loop.run_in_executor(self._background, _open_store)
        self.chat = ChatService(self.engine, self.store)
        self.conversations_changed.emit()
        wanted = self.prefs.open_conversation
        if wanted is not None and self.store.get_conversation(wanted) is not None:
            await self._open(wanted)
        await self._rescan()
        if not self._closed:
            self._watcher.start()  # from now on the picker follows the folders by itself
        path = self._startup_model()
        if path is None:
            messages.warning("No model found yet. Put .gguf files in the models folder.",
                             "Open models folder", open_models_folder)
            self.started.emit()
            return
        self.started.emit()
        if self.model is None and not self._closed:
            await self._load(path)

    def _startup_model(self) -> Path | None:
        wanted = self.prefs.default_model
        if wanted and Path(wanted).is_file():
            path = Path(wanted)
        else:
            try:
                path = choose_model(None, self.entries, self.prefs)
            except LookupError:
                return None
        if not any(path == e.path or path in e.shards for e in self.entries):
            self.entries.append(catalog.describe(path))
            self.catalog_changed.emit(list(self.entries))
        return path

    async def _rescan(self) -> None:
        folders = catalog.default_folders([Path(p) for p in self.prefs.model_folders],
                                          self._models_dirs)
        self._library = (tuple(folders), frozenset(self.prefs.disabled_sources))
        loop = asyncio.get_running_loop()
        entries, found = await loop.run_in_executor(self._background, _find_models,
                                                    *self._library)
        if self._closed:
            return
        if found != self.sources:
            self.sources = found
            self.sources_found.emit(list(found))
        if entries != self.entries:
            self.entries = entries
            self.catalog_changed.emit(list(entries))

    def _watch_list(self) -> list[tuple[str, Path]]:
        folders, disabled = self._library  # on the watcher's thread: one read, no locks
        return catalog.watch_list(folders, disabled)

    def _on_library_changed(self) -> None:
        if not self._closed:
            self.rescan()

    def _reply_settings(self) -> tuple[Sampling, str]:
        """Sampling and system prompt for the loaded model (its own, else the defaults)."""
        model = self.model.path if self.model else None
        return self.prefs.sampling(model), self.prefs.system_prompt_for(model)

    async def _load(self, path: Path) -> None:
        async with self._lock:
            if self._closed:
                return
            await self._settle()
            entry = next((e for e in self.entries if e.path == path), None)
            self.loading = True
            self.model_load_started.emit(path, entry.name if entry else path.stem)
            self._progress.reset()
            try:
                future = self._chat().load_model(path, self.prefs.load_options(path),
                                                  self._progress.report)
                loaded = await _wait(future)
            except LoadCancelled as err:
                self.loading = False
                if not self._closed:
                    messages.info(str(err))
                self.model_load_failed.emit(self.model)
                return
            except EngineError as err:
                self.loading = False
                if not self._closed:
                    messages.error(str(err))
                self.model_load_failed.emit(self.model)
                return
            self.loading = False
            logger.info("%s is ready (%d-token context)", loaded.name, loaded.n_ctx)
            self.prefs.last_model = str(path)
            self._save_settings()
            self.model_loaded.emit(loaded)

    async def _send(self, text: str, edit_in: int | None = None) -> None:
        """Send ``text``; as an edit of the last message if ``edit_in`` is still open."""
        async with self._lock:
            if self._closed:
                return
            await self._settle()
            chat = self._chat()
            before = None
            if edit_in is not None and chat.conversation_id == edit_in:
                history = self._history()
                users = [i for i, m in enumerate(history) if m.role == "user"]
                before = history[:users[-1]] if users else history
            sampling, prompt = self._reply_settings()
            try:
                if before is not None:
                    turn = chat.edit_last(text, sampling, prompt, self._pieces.put)
                else:
                    turn = chat.send(text, sampling, prompt, self._pieces.put)
            except (EngineError, StoreError) as err:
                messages.error(str(err))
                self.send_refused.emit(text)
                return
            if before is not None:
                self.conversation_opened.emit(turn.conversation_id, before)
                await asyncio.sleep(0)
            self._remember_open(turn.conversation_id)
            await self._begin(turn, text)
            self.conversations_changed.emit()  # a new conversation, or a new order

    async def _regenerate(self) -> None:
        async with self._lock:
            if self._closed:
                return
            await self._settle()
            chat = self._chat()
            history = self._history()
            if not any(m.role == "user" for m in history):
                return
            while history and history[-1].role == "assistant":
                history = history[:-1]
            sampling, prompt = self._reply_settings()
            try:
                turn = chat.regenerate(sampling, prompt, self._pieces.put)
            except (EngineError, StoreError) as err:
                messages.error(str(err))
                return
            self.conversation_opened.emit(turn.conversation_id, history)
            await asyncio.sleep(0)
            await self._begin(turn, "")

    async def _begin(self, turn: ChatTurn, text: str) -> None:
        self._turn = turn
        self.streaming_changed.emit(True)
        if text:
            self.message_sent.emit(text)
            # Each addition to the transcript gets its own turn of the event loop, so
            # the window never stalls for both at once.
            await asyncio.sleep(0)
        model = self.model
        self.reply_started.emit(model.name if model else "")
        self._showing = True
        self._deliver_pieces()  # what streamed in while the reply was being set up
        self._stream_task = self._spawn(self._stream(turn))
        await asyncio.sleep(0)

    async def _stream(self, turn: ChatTurn) -> None:
        try:
            result: ChatResult = await _wait(turn.future)
        except EngineError as err:
            self._finish_delivery()
            self.reply_failed.emit(str(err))
            if not self._closed:
                messages.error(str(err))
        except StoreError as err:
            self._finish_delivery()
            self.reply_failed.emit(str(err))
            messages.error(str(err))
        else:
            self._finish_delivery()
            self.reply_finished.emit(result.reply.text, dataclasses.asdict(result.reply.stats))
            if not result.saved:
                reason = (result.save_error or "The reply could not be saved").rstrip(".")
                messages.error(f"{reason}. The reply is shown and kept in this window; it "
                               "is saved as soon as there is room again.")
        finally:
            self._turn = None
            self._showing = False
            self.streaming_changed.emit(False)
            if not self._closed:
                self.conversations_changed.emit()

    async def _settle(self) -> None:
        """Stop the streaming reply, if any, and wait until it is saved."""
        task = self._stream_task
        if task is None or task.done():
            return
        self.stop()
        await asyncio.wait([task])

    async def _new_chat(self) -> None:
        async with self._lock:
            if self._closed:
                return
            await self._settle()
            await self._clear()

    async def _clear(self) -> None:
        future = self._chat().new_chat()
        self._remember_open(None)
        self.chat_cleared.emit()
        try:
            await _wait(future)
        except NoModelLoaded:
            pass  # nothing to clear
        except EngineError as err:
            if not self._closed:
                messages.error(str(err))

    async def _open(self, conversation_id: int) -> None:
        async with self._lock:
            chat = self._chat()
            if self._closed or conversation_id == chat.conversation_id:
                return
            await self._settle()
            try:
                if self._store().get_conversation(conversation_id) is None:
                    messages.warning("That conversation no longer exists.")
                    self.conversations_changed.emit()
                    return
                history = chat.open(conversation_id)
            except StoreError as err:
                messages.error(str(err))
                return
            self._remember_open(conversation_id)
            self.conversation_opened.emit(conversation_id, history)

    async def _delete(self, conversation_id: int) -> None:
        async with self._lock:
            if self._closed:
                return
            store, chat = self._store(), self._chat()
            was_open = conversation_id == chat.conversation_id
            if was_open:
                await self._settle()
            try:
                conversation = store.get_conversation(conversation_id)
                store.delete_conversation(conversation_id)
            except StoreError as err:
                messages.error(str(err))
                return
            if was_open:
                await self._clear()
            self.conversations_changed.emit()
            title = conversation.title if conversation else "the conversation"
            messages.info(f"Deleted “{title}”.", "Undo",
                          lambda: self._undelete(conversation_id, was_open))

    def _undelete(self, conversation_id: int, reopen: bool) -> None:
        try:
            self._store().undelete_conversation(conversation_id)
        except StoreError as err:
            messages.error(str(err))
            return
        self.conversations_changed.emit()
        if reopen and self.conversation_id is None and not self.streaming:
            self.open_conversation(conversation_id)

    # Helpers -----------------------------------------------------------------------

    def _chat(self) -> ChatService:
        if self.chat is None:
            raise RuntimeError("the chat service is not started")
        return self.chat

    def _store(self) -> Store:
        if self.store is None:
            raise RuntimeError("the conversation store is not open")
        return self.store

    def _history(self) -> list[Message]:
        if self.chat is None:
            return []
        try:
            return self.chat.history()  # with any messages the disk refused
        except StoreError as err:
            messages.error(str(err))
            return []

    def _remember_open(self, conversation_id: int | None) -> None:
        if conversation_id is not None and conversation_id < 0:
            return  # not saved yet (the disk is full): nothing to reopen next time
        if self.prefs.open_conversation != conversation_id:
            self.prefs.open_conversation = conversation_id
            self._save_settings()

    def _on_pieces_arrived(self) -> None:
        # Until the transcript has the reply to put text in, it waits in the stream.
        if self._showing and not self._delivery.isActive():
            self._delivery.start()

    def _finish_delivery(self) -> None:
        self._delivery.stop()
        self._deliver_pieces()

    def _deliver_pieces(self) -> None:
        if not self._showing:
            return
        text = self._pieces.take()
        if text:
            self.reply_text_arrived.emit(text)


async def _wait(future: Future[T]) -> T:
    return await asyncio.wrap_future(future)


def _find_models(folders: Sequence[tuple[Path, str]], disabled: frozenset[str]
                 ) -> tuple[list[catalog.ModelEntry], list[sources.Source]]:
    """The models in the folders and in the other apps' stores that are switched on."""
    found = sources.discover()
    return catalog.scan(folders, catalog.switched_on(found, disabled)), found


def _open_store() -> Store:
    """The conversation database (a damaged one is set aside and a new one begun); if it
    cannot be opened at all, a temporary one in memory."""
    try:
        store = open_store()
    except StoreError as err:
        messages.error(f"{err} Conversations in this window will not be saved.")
        return Store(":memory:")
    if store.notice:
        messages.warning(store.notice)
    return store

