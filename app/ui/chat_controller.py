"""The window's face on the core: its actions and their outcomes, as Qt signals.

Everything runs on the GUI thread's event loop and awaits the core's futures through
qasync, so nothing here blocks the window. The core (:class:`app.core.fireside.Fireside`)
runs the actions on the model's sequence in order; the window's own actions preempt:
each stops the reply on screen first, as a person who asks for something new wants.

This module imports llama.cpp (through the core); the window imports it off the GUI
thread after its first paint.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any, TypeVar

from PySide6.QtCore import QObject, Signal

from app.core import catalog, sources
from app.core.backend import EngineError, LoadCancelled, LoadedModel
from app.core.chat import ChatResult, ChatTurn
from app.core.engine import Engine
from app.core.fireside import EXIT_CLOSE_S, Fireside, Rewound
from app.core.settings import Settings
from app.core.store import Conversation, StoreError
from app.ui import event_loop, notices
from app.ui.bridge import PieceStream, ProgressRelay
from app.ui.desktop import open_models_folder

logger = logging.getLogger(__name__)

T = TypeVar("T")

def _shown_in_order(method: Callable[..., Coroutine[Any, Any, None]]
                    ) -> Callable[..., Coroutine[Any, Any, None]]:
    """The window's actions reach the screen in the order they were asked: each waits
    for the one before it (the core runs them in that order too)."""

    @functools.wraps(method)
    async def run(self: ChatController, *args: Any, **kwargs: Any) -> None:
        async with self._lock:
            await method(self, *args, **kwargs)

    return run


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
    reply_started = Signal(str, PieceStream)
    """A reply began, from the model with this name; its text streams into the second."""
    reply_finished = Signal(str, object)
    """The reply ended (finished or stopped): its whole text and its stats."""
    reply_failed = Signal(str)
    """The reply could not be produced, for this reason."""
    streaming_changed = Signal(bool)
    """A reply started or stopped streaming."""
    send_refused = Signal(str)
    """This text could not be sent (the reason was shown); give it back to the user."""

    _settings_changed = Signal()
    """The core changed a setting (from its own thread): the window saves them."""

    def __init__(self, prefs: Settings, models_dirs: Sequence[Path],
                 save_settings: Callable[[], None], background: Executor,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        event_loop.ensure()
        self._background = background  # for disk work that must not block the window
        self.prefs = prefs
        self._models_dirs = list(models_dirs)
        self._save_settings = save_settings
        self._settings_changed.connect(save_settings)
        self.engine = Engine()
        self.core: Fireside | None = None  # opened by start(), off the GUI thread
        self.loading = False
        self._library_changed.connect(self._on_library_changed)
        self._turn: ChatTurn | None = None
        self._stream_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._lock = asyncio.Lock()
        self._closed = False
        self._progress = ProgressRelay(self)
        self._progress.progressed.connect(self.model_load_progressed)

    # State -------------------------------------------------------------------------

    @property
    def model(self) -> LoadedModel | None:
        return self.engine.loaded

    @property
    def entries(self) -> list[catalog.ModelEntry]:
        return self.core.library.entries if self.core else []

    @property
    def sources(self) -> list[sources.Source]:
        return self.core.library.sources if self.core else []

    @property
    def conversation_id(self) -> int | None:
        return self.core.conversation_id if self.core else None

    @property
    def streaming(self) -> bool:
        return self._turn is not None

    @property
    def busy(self) -> bool:
        """An action is under way: a load, a reply, or a change of conversation."""
        return bool(self._tasks) or self.loading or self.streaming

    def conversations(self, query: str = "") -> list[Conversation]:
        return self._read(lambda core: core.conversations(query), [])

    def conversation(self) -> Conversation | None:
        """The open conversation, if it has been saved."""
        return self._read(lambda core: core.conversation(), None, quiet=True)

    def last_user_text(self) -> str | None:
        return self._read(lambda core: core.last_user_text(), None)

    def _read(self, read: Callable[[Fireside], T], default: T, quiet: bool = False) -> T:
        if self.core is None:
            return default
        try:
            return read(self.core)
        except StoreError as err:
            if not quiet:
                notices.error(str(err))
            return default

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
            notices.info("No model is loaded: choose one, it loads with the new settings.")
            return
        self._spawn(self._load(model.path))

    def cancel_load(self) -> None:
        if self.core is not None:
            self.core.cancel_load()
        else:
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
        if self.core is None:
            return
        try:
            self.core.rename_conversation(conversation_id, title)
        except StoreError as err:
            notices.error(str(err))
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
        self.stop()
        self.cancel_load()
        core = self.core
        if core is not None:
            await asyncio.get_running_loop().run_in_executor(self._background, core.close)
        elif not self.engine.close(timeout=EXIT_CLOSE_S):
            logger.warning("the inference thread did not finish in time")
        pending = [task for task in self._tasks if task is not asyncio.current_task()
                   and not task.done()]
        for task in pending:
            task.cancel()  # an action the core will no longer run
        if pending:
            await asyncio.wait(pending)

    # Coroutines --------------------------------------------------------------------

    def _spawn(self, coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._on_task_done)
        return task

    def _on_task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            notices.report_exception(task.exception())  # type: ignore[arg-type]

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        opened = functools.partial(Fireside.open, self._models_dirs, self.engine, self.prefs,
                                   lambda _prefs: self._settings_changed.emit())
        core = await loop.run_in_executor(self._background, opened)
        self.core = core
        for notice in core.notices:
            notices.warning(notice)
        if core.store_error:
            notices.error(f"{core.store_error} Conversations in this window will not be "
                           "saved.")
        self.conversations_changed.emit()
        wanted = self.prefs.open_conversation
        if wanted is not None:
            await self._open(wanted, quiet=True)
        if self._closed:
            return
        path = self._startup_model()
        self.sources_found.emit(list(core.library.sources))
        self.catalog_changed.emit(list(core.library.entries))
        core.library.watch(self._library_changed.emit)  # the picker follows the folders
        self.started.emit()
        if path is None:
            notices.warning("No model found yet. Put .gguf files in the models folder.",
                             "Open models folder", open_models_folder)
            return
        if self.model is None and not self._closed:
            await self._load(path)

    def _startup_model(self) -> Path | None:
        library = self._core().library
        wanted = self.prefs.default_model
        if wanted and Path(wanted).is_file():
            path = Path(wanted)
        else:
            try:
                path = library.choose(None)
            except LookupError:
                return None
        library.add(path)  # listed even if no folder holds it
        return path

    async def _rescan(self) -> None:
        library = self._core().library
        changed = await asyncio.get_running_loop().run_in_executor(self._background,
                                                                   library.rescan)
        if changed and not self._closed:
            self.sources_found.emit(list(library.sources))
            self.catalog_changed.emit(list(library.entries))

    def _on_library_changed(self) -> None:
        if not self._closed and self.core is not None:
            self.rescan()

    @_shown_in_order
    async def _load(self, path: Path) -> None:
        if self._closed:
            return
        core = self._core()
        await self._finish_reply_on_screen()
        entry = next((e for e in core.library.entries if e.path == path), None)
        self.loading = True
        self.model_load_started.emit(path, entry.name if entry else path.stem)
        self._progress.reset()
        try:
            loaded = await _wait(core.load(path, self._progress.report, preempt=True))
        except LoadCancelled as err:
            self._load_failed(err, notices.info)
            return
        except EngineError as err:
            self._load_failed(err, notices.error)
            return
        finally:
            self.loading = False
        logger.info("%s is ready (%d-token context)", loaded.name, loaded.n_ctx)
        self.model_loaded.emit(loaded)

    def _load_failed(self, err: Exception, tell: Callable[[str], None]) -> None:
        if not self._closed:
            tell(str(err))
        self.model_load_failed.emit(self.model)

    @_shown_in_order
    async def _send(self, text: str, edit_in: int | None = None) -> None:
        """Send ``text``; as an edit of the last message if ``edit_in`` is still open."""
        if self._closed:
            return
        core = self._core()
        await self._finish_reply_on_screen()
        pieces = PieceStream(self)  # filled by the inference thread
        try:
            if edit_in is not None:
                started = await _wait(core.edit_last(text, edit_in, pieces.put, preempt=True))
            else:
                started = await _wait(core.send(text, pieces.put, preempt=True))
        except (EngineError, StoreError) as err:
            notices.error(str(err))
            self.send_refused.emit(text)
            return
        turn = started.turn if isinstance(started, Rewound) else started
        if isinstance(started, Rewound):
            self.conversation_opened.emit(turn.conversation_id, started.before)
            await asyncio.sleep(0)
        if core.saved_conversation_id is not None:  # else a full disk holds it for now
            self._remember_open(core.saved_conversation_id)
        await self._begin(turn, text, pieces)
        self.conversations_changed.emit()  # a new conversation, or a new order

    @_shown_in_order
    async def _regenerate(self) -> None:
        if self._closed:
            return
        await self._finish_reply_on_screen()
        pieces = PieceStream(self)
        try:
            started = await _wait(self._core().regenerate(pieces.put, preempt=True))
        except (EngineError, StoreError) as err:
            notices.error(str(err))
            return
        if started is None:
            return
        self.conversation_opened.emit(started.turn.conversation_id, started.before)
        await asyncio.sleep(0)
        await self._begin(started.turn, "", pieces)

    async def _begin(self, turn: ChatTurn, text: str, pieces: PieceStream) -> None:
        self._turn = turn
        self.streaming_changed.emit(True)
        if text:
            self.message_sent.emit(text)
            # Each addition to the transcript gets its own turn of the event loop, so
            # the window never stalls for both at once.
            await asyncio.sleep(0)
        model = self.model
        self.reply_started.emit(model.name if model else "", pieces)
        self._stream_task = self._spawn(self._stream(turn, pieces))
        await asyncio.sleep(0)

    async def _stream(self, turn: ChatTurn, pieces: PieceStream) -> None:
        try:
            result: ChatResult = await _wait(turn.future)
        except (EngineError, StoreError) as err:
            self.reply_failed.emit(str(err))
            if not self._closed or isinstance(err, StoreError):
                notices.error(str(err))
        else:
            self.reply_finished.emit(result.reply.text, result.reply.stats)
            if not result.saved:
                reason = (result.save_error or "The reply could not be saved").rstrip(".")
                notices.error(f"{reason}. The reply is shown and kept in this window; it "
                               "is saved as soon as there is room again.")
        finally:
            pieces.deleteLater()  # the transcript is done with it
            self._turn = None
            self.streaming_changed.emit(False)
            if not self._closed:
                self.conversations_changed.emit()

    @_shown_in_order
    async def _new_chat(self) -> None:
        if self._closed:
            return
        await self._finish_reply_on_screen()
        try:
            await _wait(self._core().new_chat(preempt=True))
        except EngineError as err:
            if not self._closed:
                notices.error(str(err))
        self._remember_open(None)
        self.chat_cleared.emit()

    @_shown_in_order
    async def _open(self, conversation_id: int, quiet: bool = False) -> None:
        core = self._core()
        if self._closed or conversation_id == core.conversation_id:
            return
        await self._finish_reply_on_screen()
        try:
            history = await _wait(core.open_conversation(conversation_id, preempt=True))
        except StoreError as err:
            notices.error(str(err))
            return
        if history is None:
            if not quiet:
                notices.warning("That conversation no longer exists.")
            self.conversations_changed.emit()
            return
        self._remember_open(conversation_id)
        self.conversation_opened.emit(conversation_id, history)

    @_shown_in_order
    async def _delete(self, conversation_id: int) -> None:
        if self._closed:
            return
        core = self._core()
        was_open = conversation_id == core.conversation_id
        if was_open:
            await self._finish_reply_on_screen()
        try:
            conversation = await _wait(core.delete_conversation(conversation_id,
                                                                preempt=was_open))
        except StoreError as err:
            notices.error(str(err))
            return
        if was_open:
            self._remember_open(None)
            self.chat_cleared.emit()
        self.conversations_changed.emit()
        title = conversation.title if conversation else "the conversation"
        notices.info(f"Deleted “{title}”.", "Undo",
                      lambda: self._undelete(conversation_id, was_open))

    def _undelete(self, conversation_id: int, reopen: bool) -> None:
        try:
            self._core().undelete_conversation(conversation_id)
        except StoreError as err:
            notices.error(str(err))
            return
        self.conversations_changed.emit()
        if reopen and self.conversation_id is None and not self.streaming:
            self.open_conversation(conversation_id)

    # Helpers -----------------------------------------------------------------------

    async def _finish_reply_on_screen(self) -> None:
        """Stop the reply on screen, if any, and wait until it is finished there (and
        saved): what comes next never shows next to it."""
        task = self._stream_task
        if task is not None and not task.done():
            self.stop()
            await asyncio.wait([task])

    def _core(self) -> Fireside:
        if self.core is None:
            raise RuntimeError("the core is not open yet")
        return self.core

    def _remember_open(self, conversation_id: int | None) -> None:
        """Reopen this conversation at the next start (None: a new chat)."""
        if self.prefs.open_conversation != conversation_id:
            self.prefs.open_conversation = conversation_id
            self._save_settings()


async def _wait(future: Future[T]) -> T:
    """The core's future, awaited on the event loop (cancelled if the core closed)."""
    return await asyncio.wrap_future(future)
