"""The main window: sidebar, model picker, transcript, documents, composer and status line.

The window paints before anything heavy is imported. ``start()`` then imports the
chat (the transcript, asyncio, the core and llama.cpp) and opens the core off the GUI
thread; the chat pane is built once the core is ready, restores the conversation and
loads a model with its progress on screen. Closing stops a streaming reply, saves it
and closes the model in bounded time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QGuiApplication,
    QKeySequence,
    QPalette,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QApplication,
    QLabel,
    QMainWindow,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.core import paths, settings
from app.ui import desktop, icons, notices, theme
from app.ui.composer import ComposerBar
from app.ui.document_strip import DocumentStrip
from app.ui.notices import NoticeBar
from app.ui.sidebar import Sidebar
from app.ui.status import StatusLine
from app.ui.top_bar import TopBar

if TYPE_CHECKING:
    from app.core.conversations.store import Conversation
    from app.core.fireside import Fireside
    from app.core.settings import Settings
    from app.ui.chat_controller import ChatController
    from app.ui.chat_pane import ChatPane
    from app.ui.get_models import GetModelsDialog
    from app.ui.settings.dialog import SettingsDialog
    from app.ui.transcript import TranscriptView

logger = logging.getLogger(__name__)

APP_TITLE = "Fireside"


class MainWindow(QMainWindow):
    ready = Signal()
    """The window is painted and the composer takes input."""
    started = Signal()
    """The conversations are open and the models are listed (a model may still load)."""
    closed = Signal()
    """Everything is saved and the model is closed."""
    _core_opened = Signal(object)
    """The start thread finished (a Future of the chat pane's module and the core)."""
    _core_changed_settings = Signal()
    """The core changed a setting (on its own thread): saved from the GUI thread."""

    def __init__(self, prefs: Settings, models_dirs: Sequence[Path] = (),
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.setWindowTitle(APP_TITLE)
        self.setAccessibleName(APP_TITLE)
        self.prefs = prefs
        self.models_dirs = list(models_dirs)
        self.chat: ChatPane | None = None  # built once the core is open
        self._start_requested = False
        self._start_thread: threading.Thread | None = None
        self._closing = False
        self._closing_lock = threading.Lock()  # the start thread checks _closing under it
        self._shut_down = False
        self._announced_ready = False
        self._settings_dialog: SettingsDialog | None = None
        self.get_models: GetModelsDialog | None = None
        self._model_to_open: Path | None = None  # opened before the core was ready
        self._empty_text = self._empty_text_for(None)
        # Short disk jobs kept off the GUI thread: settings, the database, model scans.
        self._background = ThreadPoolExecutor(1, thread_name_prefix="fireside-background")
        self._core_opened.connect(self._on_core_opened)
        self._core_changed_settings.connect(self.save_settings)
        self._build()
        self.resize(1180, 760)
        QGuiApplication.styleHints().colorSchemeChanged.connect(self._on_color_scheme_changed)

    # Layout ------------------------------------------------------------------------

    def _build(self) -> None:
        self.sidebar = Sidebar(self)
        self.sidebar.setMinimumWidth(200)
        self.top_bar = TopBar(str(paths.models_dir()), self)
        self.top_bar.models_folder_requested.connect(desktop.open_models_folder)
        self.top_bar.settings_requested.connect(self.show_settings)
        self.top_bar.get_models_requested.connect(self.show_get_models)
        self.picker = self.top_bar.picker

        self.message_bar = NoticeBar(self)
        # Until the transcript is imported (after the first paint), its empty state.
        self.placeholder = QLabel(self._empty_text, self)
        self.placeholder.setObjectName("chatPlaceholder")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setWordWrap(True)
        self.placeholder.setMargin(40)
        self.chat_view = QStackedWidget(self)
        self.chat_view.setObjectName("chatView")
        self.chat_view.addWidget(self.placeholder)

        self.document_strip = DocumentStrip(self)  # shown once there are documents
        self.composer_bar = ComposerBar(self)
        self.composer = self.composer_bar.composer
        self.composer_bar.set_can_send(False, "Waiting for the model to load")
        self.status = StatusLine(self)

        self.chat_area = main = QWidget(self)  # files dropped here join the conversation
        main.setObjectName("chatArea")
        column = QVBoxLayout(main)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(self.top_bar)
        bar_row = QVBoxLayout()
        bar_row.setContentsMargins(16, 10, 16, 0)
        bar_row.addWidget(self.message_bar)
        column.addLayout(bar_row)
        column.addWidget(self.chat_view, 1)
        bottom = QVBoxLayout()
        bottom.setContentsMargins(20, 6, 20, 10)
        bottom.setSpacing(6)
        bottom.addWidget(self.document_strip)
        bottom.addWidget(self.composer_bar)
        bottom.addWidget(self.status)
        column.addLayout(bottom)

        splitter = QSplitter(self)
        splitter.setObjectName("mainSplitter")
        splitter.setHandleWidth(1)
        splitter.setChildrenCollapsible(False)
        splitter.addWidget(self.sidebar)
        splitter.addWidget(main)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([260, 920])
        self.setCentralWidget(splitter)
        self.composer_bar.focus()
        self._apply_icons()

    def _apply_icons(self) -> None:
        color = self.palette().color(QPalette.ColorRole.WindowText)
        self.sidebar.new_chat_button.setIcon(icons.glyph("plus", color, 16))
        self.sidebar.search_action.setIcon(icons.glyph("search", color, 16))
        self.top_bar.apply_icons(color)
        self.composer_bar.apply_icons(color)
        self.document_strip.apply_icons(color)
        self.message_bar.close_button.setIcon(icons.glyph("close", color, 14))
        self.sidebar.set_logo(icons.app_icon())

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._apply_icons()

    def _add_actions(self) -> None:
        actions: tuple[tuple[str, list[QKeySequence.StandardKey | str], Callable[[], object]],
                       ...] = (
            ("Search conversations", ["Ctrl+K"], self.sidebar.focus_search),
            ("Settings", ["Ctrl+,"], self.show_settings),
            ("Quit", [QKeySequence.StandardKey.Quit, "Ctrl+Q"], self.close),
            ("Stop", ["Esc"], self._on_escape),
            ("Write a message", ["Ctrl+L"], self.focus_composer),
            ("Choose a model", ["Ctrl+M"], self._on_choose_model),
            ("Get models", ["Ctrl+Shift+M"], self.show_get_models),
            ("About Fireside", ["F1"], self.show_about),
        )
        for text, keys, slot in actions:
            action = QAction(text, self)
            sequences = {QKeySequence(k).toString(): QKeySequence(k) for k in keys}
            action.setShortcuts(list(sequences.values()))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            action.triggered.connect(slot)
            self.addAction(action)

    # Startup and shutdown ------------------------------------------------------------

    def start(self) -> None:
        """After the first paint: import the chat (the core, llama.cpp) and open the core
        off the GUI thread; the chat pane follows on the GUI thread."""
        if self._start_requested:
            return
        self._start_requested = True
        future: Future[tuple[Any, Fireside]] = Future()
        prefs, models_dirs = self.prefs, self.models_dirs
        changed = self._core_changed_settings.emit

        def run() -> None:
            try:
                pane = importlib.import_module("app.ui.chat_pane")
                from app.core.fireside import Fireside, SessionSettings  # noqa: PLC0415

                core = Fireside.open(models_dirs, prefs=prefs, save_settings=lambda _: changed())
                core.session = SessionSettings(remember_open=True)
                future.set_result((pane, core))
            except BaseException as exc:  # reported on the GUI thread
                future.set_exception(exc)
            with self._closing_lock:
                if self._closing and future.exception() is None:
                    future.result()[1].close()  # closed before it could be shown
                    return
            with contextlib.suppress(RuntimeError):  # the window was deleted meanwhile
                self._core_opened.emit(future)

        self._start_thread = threading.Thread(target=run, name="fireside-start")
        self._start_thread.start()

    def wait_for_start_thread(self) -> None:
        """At exit: the start thread holds the window, and a widget's last reference
        must not drop on another thread once the application is gone (it crashed when
        the window closed while the core was opening)."""
        if self._start_thread is not None:
            self._start_thread.join()

    def _on_core_opened(self, future: Future[tuple[Any, Fireside]]) -> None:
        try:
            pane_module, core = future.result()
        except Exception as exc:
            notices.report_exception(exc, "starting up")
            return
        if self._closing:  # closing began after the start thread looked
            threading.Thread(target=core.close, name="fireside-close").start()
            return
        for notice in core.notices:
            notices.warning(notice)
        if core.store_error:
            notices.error(f"{core.store_error} Conversations in this window will not be "
                          "saved.")
        chat: ChatPane = pane_module.ChatPane(self, core, self._background)
        self.chat = chat
        chat.transcript.set_empty_text(self._empty_text)
        chat.transcript.get_models_requested.connect(self.show_get_models)
        self.chat_view.addWidget(chat.transcript)
        self.chat_view.setCurrentWidget(chat.transcript)
        if self._settings_dialog is not None:
            chat.attach_settings(self._settings_dialog)
        chat.start(self._model_to_open)
        # Everything imported so far lives as long as the app: keep it out of the
        # garbage collector's full passes, which would otherwise stall the window for
        # tens of milliseconds in the middle of a reply.
        gc.freeze()
        self.started.emit()

    @property
    def controller(self) -> ChatController | None:
        return self.chat.controller if self.chat else None

    @property
    def transcript(self) -> TranscriptView | None:
        return self.chat.transcript if self.chat else None

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if not self._announced_ready:
            self.composer.viewport().installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint and not self._announced_ready \
                and watched is self.composer.viewport():
            self._announced_ready = True
            watched.removeEventFilter(self)
            # Runs once this paint pass (the whole window) has reached the screen.
            QTimer.singleShot(0, self._on_first_shown)
        return super().eventFilter(watched, event)

    def _on_first_shown(self) -> None:
        # Shortcuts a few milliseconds after the first paint: creating them is not free.
        self._add_actions()
        self.sidebar.add_actions()
        self.activateWindow()
        self.composer.setFocus(Qt.FocusReason.ActiveWindowFocusReason)
        self.ready.emit()

    def closeEvent(self, event: QCloseEvent) -> None:
        if self._shut_down:
            event.accept()
            return
        if self._closing:
            event.ignore()
            return
        with self._closing_lock:
            self._closing = True
        if self._settings_dialog is not None:
            self._settings_dialog.close()
        if self.chat is None:
            self._finish_close()  # nothing to stop or save yet
            event.accept()
            return
        event.ignore()
        # Stop the reply (saved), close the model, then close for real.
        self.chat.api.close()
        self.chat.models.close()
        self.chat.controller.shut_down(then=self._finish_close)

    def _finish_close(self) -> None:
        self._background.shutdown(wait=True)  # the last settings reach the disk
        self._shut_down = True
        self.close()
        self.closed.emit()

    @property
    def is_shut_down(self) -> bool:
        return self._shut_down

    @property
    def is_closing(self) -> bool:
        """Closing has begun: the window takes no new work."""
        return self._closing

    # Actions -----------------------------------------------------------------------

    def show_settings(self) -> None:
        if self._settings_dialog is None:
            from app.ui.settings.dialog import SettingsDialog  # noqa: PLC0415 - on first use

            dialog = SettingsDialog(self.prefs, self.save_settings, paths.models_dir(), self)
            dialog.theme_changed.connect(self._on_theme_changed)
            dialog.open_models_folder_requested.connect(desktop.open_models_folder)
            dialog.about_requested.connect(self.show_about)
            if self.chat is not None:  # else it joins the chat once the core is open
                self.chat.attach_settings(dialog)
            self._settings_dialog = dialog
        if self._settings_dialog.isVisible():
            self._settings_dialog.raise_()
        self._settings_dialog.show()
        self._settings_dialog.activateWindow()

    def show_get_models(self) -> None:
        """The Get models window (the Hub): once the core is open, as it owns the hub."""
        if self.chat is None:
            notices.info("Fireside is still starting; Get models opens once it is ready.")
            return
        if self.get_models is None:
            from app.ui.get_models import GetModelsDialog  # noqa: PLC0415 - on first use

            chat = self.chat
            dialog = GetModelsDialog(chat.models.core.hub, self)
            dialog.use_requested.connect(chat.models.open_file)
            dialog.downloaded.connect(lambda _job: chat.models.rescan())
            self.get_models = dialog
        self.get_models.show()
        self.get_models.raise_()
        self.get_models.activateWindow()

    def open_model(self, path: Path) -> None:
        """Add the model file at ``path`` to the models and load it (a file opened from
        the file manager); one that cannot be used is reported and nothing changes."""
        if self.chat is None:
            self._model_to_open = path  # loaded instead of the model at start
        else:
            self.chat.models.open_file(path)

    def bring_to_front(self) -> None:
        self.setWindowState(self.windowState() & ~Qt.WindowState.WindowMinimized)
        self.show()
        self.raise_()
        self.activateWindow()

    def show_about(self) -> None:
        from app.ui.about import show_about  # noqa: PLC0415 - on first use

        show_about(self)

    def save_settings(self) -> None:
        """Save a copy of the settings off the GUI thread (the write waits for the disk)."""
        snapshot = dataclasses.replace(self.prefs, model_folders=list(self.prefs.model_folders))
        try:
            self._background.submit(_save_settings, snapshot)
        except RuntimeError:  # shutting down: no more background work
            _save_settings(snapshot)

    # Slots ---------------------------------------------------------------------------

    def _on_escape(self) -> None:
        if self.chat is not None and self.chat.escape():
            return
        if self.sidebar.search_box.hasFocus() and self.sidebar.search_text():
            self.sidebar.search_box.clear()
        elif self.message_bar.isVisible():
            self.message_bar.dismiss()

    def _on_choose_model(self) -> None:
        self.picker.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.picker.showPopup()

    def _on_theme_changed(self, value: str) -> None:
        app = QApplication.instance()
        if isinstance(app, QApplication):
            theme.apply(app, value)

    def _on_color_scheme_changed(self) -> None:
        if self.prefs.theme == "system":
            self._on_theme_changed("system")

    def focus_composer(self) -> None:
        self.composer.setFocus(Qt.FocusReason.ShortcutFocusReason)

    # What the chat pane shows --------------------------------------------------------

    def show_title(self, conversation: Conversation | None) -> None:
        self.setWindowTitle(f"{APP_TITLE} — {conversation.title}" if conversation else APP_TITLE)

    def set_empty_text(self, model_name: str | None, server: str | None = None) -> None:
        """What an empty chat says: which model answers (on ``server``, if not here),
        where more models go."""
        self._empty_text = self._empty_text_for(model_name, server)
        self.placeholder.setText(self._empty_text)
        if self.transcript is not None:
            self.transcript.set_empty_text(self._empty_text)

    def _empty_text_for(self, model_name: str | None, server: str | None = None) -> str:
        folder = paths.models_dir()
        if model_name is None:
            return f"Fireside runs language models on this computer. Put GGUF files in {folder}."
        where = (f"it runs on {server}, which your messages go to" if server else
                 "it runs on this computer and nothing leaves it")
        return (f"Ask {model_name} anything — {where}.\n\nMore models: put GGUF files in "
                f"{folder}.")


def _save_settings(prefs: Settings) -> None:
    try:
        settings.save(prefs)
    except OSError as err:
        notices.error(f"Settings could not be saved: {err.strerror or err}")
