"""The window's face on the core's models: the ones found, and loading one, as signals.

The picker, the top bar and the settings dialog follow it. Loads run on the core's
queue like every action on the model's sequence, so a load asked during a reply stops
it first and a message sent during a load waits for the model. The servers the user
added are asked for their models off the GUI thread; the picker shows the files first
and each server's models when it answers (one that does not is asked again later).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.backend import EngineError, LoadCancelled, LoadedModel
from app.core.fireside import Fireside
from app.ui import event_loop, notices
from app.ui.bridge import ProgressRelay
from app.ui.desktop import open_models_folder

ASK_AGAIN_MS = 60_000  # a server that did not answer is asked again after this

class ModelController(QObject):
    catalog_changed = Signal(list)  # the models found changed: a list of ModelEntry
    sources_found = Signal(list)  # other apps' stores were looked for: list of sources.Source
    load_started = Signal(object, str)  # this model (Path, name) began loading
    load_progressed = Signal(float)  # the load is this far along, 0.0 to 1.0
    loaded = Signal(object)  # this LoadedModel is ready
    load_failed = Signal(object)  # the LoadedModel still in use, or None
    _library_changed = Signal()  # model files came, went or changed (the watcher's thread)

    def __init__(self, core: Fireside, background: Executor, tasks: event_loop.Tasks,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.core = core
        self._background = background  # the folders are scanned there, off the GUI thread
        self._tasks = tasks  # the window's, replies included
        self._closed = False
        self._loads = 0  # asked for and not yet shown as loaded or failed
        self._progress = ProgressRelay(self)
        self._progress.progressed.connect(self.load_progressed)
        self._library_changed.connect(self.rescan)
        self._ask_again = QTimer(self, singleShot=True, interval=ASK_AGAIN_MS)
        self._ask_again.timeout.connect(self.ask_servers)

    @property
    def model(self) -> LoadedModel | None:
        return self.core.model

    @property
    def loading(self) -> bool:
        """A load was asked for and the window does not show its outcome yet."""
        return self._loads > 0

    def start(self, opened: Path | None = None) -> None:
        """List the models found, follow their folders, and load the one to start with:
        the file ``opened``, else the model at start (also if ``opened`` cannot be used)."""
        try:
            path: Path | None = self.core.startup_model()
        except LookupError:
            path = None  # said below, with a way to the models folder
        self._show_library()
        self.core.library.watch(self._library_changed.emit)
        self.ask_servers()
        if opened is not None:
            self.open_file(opened, instead=path)
        elif path is None:
            notices.warning("No model found yet. Put .gguf files in the models folder.",
                            "Open models folder", open_models_folder)
        elif self.model is None:
            self.load(path)

    def load(self, path: Path) -> asyncio.Task[None]:
        """Switch to the model at ``path``; the open conversation goes on with it."""
        self._loads += 1
        return self._tasks.spawn(self._load(path))

    def open_file(self, path: Path, instead: Path | None = None) -> asyncio.Task[None]:
        """Add the model file at ``path`` to the models and load it. One that cannot be
        used is reported and the model in use stays; with none in use, ``instead`` loads."""
        return self._tasks.spawn(self._open_file(path, instead))

    def reload(self) -> None:
        """Load the current model again (new context size or threads)."""
        if self.model is None:
            notices.info("No model is loaded: choose one, it loads with the new settings.")
        else:
            self.load(self.model.path)

    def cancel_load(self) -> None:
        self.core.cancel_load()

    def rescan(self) -> asyncio.Task[None]:
        return self._tasks.spawn(self._rescan())

    def ask_servers(self) -> asyncio.Task[None] | None:
        """Ask the servers added for their models (none: nothing is asked)."""
        if not self.core.settings.servers and not self.core.library.listings:
            return None
        return self._tasks.spawn(self._ask_servers())

    def close(self) -> None:
        """The core is closing: what is queued here will not run."""
        self._closed = True
        self._ask_again.stop()
        self.cancel_load()

    async def _load(self, path: Path) -> None:
        entry = next((e for e in self.core.library.entries if e.path == path), None)
        self._progress.reset()
        future = self.core.load(path, self._progress.report, preempt=True)
        self.load_started.emit(path, entry.name if entry else path.stem)
        try:
            model = await event_loop.wait(future)
        except EngineError as err:
            if not self._closed:
                (notices.info if isinstance(err, LoadCancelled) else notices.error)(str(err))
            failed = True
        else:
            failed = False
        finally:
            self._loads -= 1
        if failed:
            self.load_failed.emit(self.model)
        else:
            self.loaded.emit(model)
            if model.notice:
                notices.warning(model.notice)

    async def _open_file(self, path: Path, instead: Path | None) -> None:
        loop = asyncio.get_running_loop()
        # The header is read off the GUI thread, and on the thread that rescans: the
        # library is changed by one thread at a time.
        entry = await loop.run_in_executor(self._background, self.core.library.add_file, path)
        if self._closed:
            return
        if entry.error:
            notices.error(f"{path} cannot be opened: {entry.error}.")
            if instead is not None and self.model is None and not self.loading:
                self.load(instead)
            return
        self._show_library()
        self.load(entry.path)  # a split model's first part, whichever part was opened

    async def _rescan(self) -> None:
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        if await loop.run_in_executor(self._background, self.core.library.rescan):
            self._show_library()

    async def _ask_servers(self) -> None:
        library = self.core.library
        # A thread of its own: a slow server holds up neither the disk work nor leaving.
        changed = await event_loop.off_thread(library.ask_servers)
        if self._closed:
            return
        if changed:
            self._show_library()
        if any(listing.problem for listing in library.listings):
            self._ask_again.start()

    def _show_library(self) -> None:
        if not self._closed:
            self.sources_found.emit(list(self.core.library.sources))
            self.catalog_changed.emit(list(self.core.library.entries))
