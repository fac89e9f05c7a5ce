"""The main window: sidebar, model picker, transcript, composer and status line.

The window paints before anything heavy is imported. ``start()`` then imports the
transcript and the chat controller (with asyncio, the core and llama.cpp) off the
GUI thread, opens the conversations and loads a model with its progress on screen.
Closing stops a streaming reply, saves it and closes the model in bounded time.
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
from types import ModuleType
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QGuiApplication,
    QKeySequence,
    QPalette,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
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
from app.ui.notices import NoticeBar
from app.ui.sidebar import Sidebar
from app.ui.status import StatusLine
from app.ui.top_bar import TopBar

if TYPE_CHECKING:
    from app.core.catalog import ModelEntry
    from app.core.engine import LoadedModel
    from app.core.replies import ReplyStats
    from app.core.settings import Settings
    from app.core.sources import Source
    from app.core.store import Message
    from app.ui.chat_controller import ChatController
    from app.ui.settings_dialog import SettingsDialog
    from app.ui.transcript import TranscriptView

logger = logging.getLogger(__name__)

APP_TITLE = "Fireside"
# Imported after the first paint, off the GUI thread: the transcript (Markdown,
# highlighting) and the chat controller (asyncio, the core, llama.cpp, numpy).
HEAVY_MODULES = ("app.ui.transcript", "app.ui.chat_controller")


class MainWindow(QMainWindow):
    ready = Signal()
    """The window is painted and the composer takes input."""
    started = Signal()
    """The conversations are open and the models are listed (a model may still load)."""
    closed = Signal()
    """Everything is saved and the model is closed."""
    _heavy_imported = Signal(object)
    """The import thread finished (a Future of the modules); emitted from that thread."""

    def __init__(self, prefs: Settings, models_dirs: Sequence[Path] = (),
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.setWindowTitle(APP_TITLE)
        self.setAccessibleName(APP_TITLE)
        self.prefs = prefs
        self.models_dirs = list(models_dirs)
        self.controller: ChatController | None = None
        # Installed just before the controller: every controller slot can rely on it.
        self.transcript: TranscriptView | None = None
        self._start_requested = False
        self._closing = False
        self._shut_down = False
        self._announced_ready = False
        self._settings_dialog: SettingsDialog | None = None
        self._edit_conversation: int | None = None  # where an edit under way belongs
        self._empty_text = self._empty_text_for(None)
        # Short disk jobs kept off the GUI thread: settings, the database, model scans.
        self._background = ThreadPoolExecutor(1, thread_name_prefix="fireside-background")
        self._heavy_imported.connect(self._on_heavy_imported)
        self._build()
        self.resize(1180, 760)
        QGuiApplication.styleHints().colorSchemeChanged.connect(self._on_color_scheme_changed)

    # Layout ------------------------------------------------------------------------

    def _build(self) -> None:
        self.sidebar = Sidebar(self)
        self.sidebar.setMinimumWidth(200)
        self.sidebar.new_chat_requested.connect(self.new_chat)
        self.sidebar.conversation_chosen.connect(self._on_conversation_chosen)
        self.sidebar.delete_requested.connect(self._on_delete_requested)
        self.sidebar.search_changed.connect(self._refresh_conversations)
        self.sidebar.model.rename_requested.connect(self._on_rename_requested)
        self._refresh_after_edit = False
        self.sidebar.list.itemDelegate().closeEditor.connect(self._on_title_editor_closed)

        self.top_bar = TopBar(str(paths.models_dir()), self)
        self.top_bar.cancel_load_requested.connect(self._on_cancel_load_requested)
        self.top_bar.models_folder_requested.connect(desktop.open_models_folder)
        self.top_bar.settings_requested.connect(self.show_settings)
        self.picker = self.top_bar.picker
        self.picker.model_chosen.connect(self._on_model_chosen)

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

        self.composer_bar = ComposerBar(self)
        self.composer = self.composer_bar.composer
        self.composer_bar.send_requested.connect(self._on_send_requested)
        self.composer_bar.stop_requested.connect(self.stop)
        self.composer_bar.set_can_send(False, "Waiting for the model to load")
        self.status = StatusLine(self)

        main = QWidget(self)
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
        self.message_bar.close_button.setIcon(icons.glyph("close", color, 14))
        self.sidebar.set_logo(icons.app_icon())

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._apply_icons()

    def _add_actions(self) -> None:
        actions: tuple[tuple[str, list[QKeySequence.StandardKey | str], Callable[[], object]],
                       ...] = (
            ("New chat", [QKeySequence.StandardKey.New], self.new_chat),
            ("Search conversations", ["Ctrl+K"], self.sidebar.focus_search),
            ("Settings", ["Ctrl+,"], self.show_settings),
            ("Quit", [QKeySequence.StandardKey.Quit, "Ctrl+Q"], self.close),
            ("Stop", ["Esc"], self._on_escape),
            ("Regenerate the last reply", ["Ctrl+R"], self.regenerate),
            ("Edit the last message", ["Ctrl+E"], self.edit_last),
            ("Write a message", ["Ctrl+L"], self._focus_composer),
            ("Choose a model", ["Ctrl+M"], self._on_choose_model),
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
        """After the first paint: import the heavy parts off the GUI thread, then bring
        up the core (conversations, models, a model load)."""
        if self._start_requested:
            return
        self._start_requested = True
        future: Future[list[ModuleType]] = Future()

        def run() -> None:
            try:
                future.set_result([importlib.import_module(m) for m in HEAVY_MODULES])
            except BaseException as exc:  # reported on the GUI thread
                future.set_exception(exc)
            with contextlib.suppress(RuntimeError):  # the window was closed meanwhile
                self._heavy_imported.emit(future)

        threading.Thread(target=run, name="fireside-import").start()

    def _on_heavy_imported(self, future: Future[list[ModuleType]]) -> None:
        if self._closing:
            return
        try:
            transcript_module, controller_module = future.result()
        except Exception as exc:
            notices.report_exception(exc, "starting up")
            return
        self._install_transcript(transcript_module.TranscriptView(self))
        controller: ChatController = controller_module.ChatController(
            self.prefs, self.models_dirs, self.save_settings, self._background, self)
        self.controller = controller
        assert self.transcript is not None
        controller.catalog_changed.connect(self._on_catalog_changed)
        controller.sources_found.connect(self._on_sources_found)
        controller.model_load_started.connect(self._on_model_load_started)
        controller.model_load_progressed.connect(self.top_bar.show_progress)
        controller.model_loaded.connect(self._on_model_loaded)
        controller.model_load_failed.connect(self._on_model_load_failed)
        controller.conversations_changed.connect(self._refresh_conversations)
        controller.conversation_opened.connect(self._on_conversation_opened)
        controller.chat_cleared.connect(self._on_chat_cleared)
        controller.message_sent.connect(self.transcript.add_user_message)
        controller.reply_started.connect(self.transcript.begin_reply)
        controller.reply_finished.connect(self._on_reply_finished)
        controller.reply_failed.connect(self.transcript.fail_reply)
        controller.streaming_changed.connect(self._on_streaming_changed)
        controller.send_refused.connect(self._on_send_refused)
        controller.started.connect(self._on_core_started)
        controller.start()

    def _on_core_started(self) -> None:
        # Everything imported so far lives as long as the app: keep it out of the
        # garbage collector's full passes, which would otherwise stall the window for
        # tens of milliseconds in the middle of a reply.
        gc.freeze()
        self.started.emit()

    def _install_transcript(self, transcript: TranscriptView) -> None:
        transcript.regenerate_requested.connect(self.regenerate)
        transcript.edit_requested.connect(self._on_edit_requested)
        transcript.copy_done.connect(self._on_copy_done)
        transcript.link_clicked.connect(self._on_link_clicked)
        transcript.set_empty_text(self._empty_text)
        self.transcript = transcript
        self.chat_view.addWidget(transcript)
        self.chat_view.setCurrentWidget(transcript)

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

    @property
    def _view(self) -> TranscriptView:
        assert self.transcript is not None, "installed before the controller's first signal"
        return self.transcript

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
        self._closing = True
        if self._settings_dialog is not None:
            self._settings_dialog.close()
        if self.controller is None:
            self._finish_close()  # nothing to stop or save yet
            event.accept()
            return
        event.ignore()
        # Stop the reply (saved), close the model, then close for real.
        self.controller.shut_down(then=self._finish_close)

    def _finish_close(self) -> None:
        self._background.shutdown(wait=True)  # the last settings reach the disk
        self._shut_down = True
        self.close()
        self.closed.emit()

    @property
    def is_shut_down(self) -> bool:
        return self._shut_down

    # Actions -----------------------------------------------------------------------

    def new_chat(self) -> None:
        self.composer_bar.cancel_edit()
        if self.controller is not None and self.controller.core is not None:
            self.controller.new_chat()
        self._focus_composer()

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()

    def regenerate(self) -> None:
        controller = self.controller
        if controller is not None and controller.model is not None and not controller.loading:
            controller.regenerate()

    def edit_last(self) -> None:
        if self.controller is None or self.controller.streaming:
            return
        text = self.controller.last_user_text()
        if text is not None:
            self._begin_edit(text)

    def show_settings(self) -> None:
        if self._settings_dialog is None:
            from app.ui.settings_dialog import SettingsDialog  # noqa: PLC0415 - on first use

            dialog = SettingsDialog(self.prefs, self.save_settings, paths.models_dir(), self)
            dialog.theme_changed.connect(self._on_theme_changed)
            dialog.context_size_changed.connect(
                lambda: self._show_models(self.picker.list_model.entries))
            dialog.folders_changed.connect(self._rescan)
            dialog.reload_requested.connect(self._on_reload_requested)
            dialog.open_models_folder_requested.connect(desktop.open_models_folder)
            dialog.about_requested.connect(self.show_about)
            if self.controller is not None:
                dialog.set_models(self.controller.entries)
                dialog.set_sources(self.controller.sources)
                model = self.controller.model
                if model is not None:
                    dialog.set_model(model.path, model.name)
            self._settings_dialog = dialog
        if self._settings_dialog.isVisible():
            self._settings_dialog.raise_()
        self._settings_dialog.show()
        self._settings_dialog.activateWindow()

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

    # Slots: widgets --------------------------------------------------------------------

    def _on_send_requested(self, text: str) -> None:
        if self.controller is None:
            return
        text = text.strip()
        if self.composer_bar.editing:
            self.composer_bar.finish_edit()
            self.controller.edit_last(text, self._edit_conversation)
        else:
            self.controller.send(text)
        self.composer.clear()

    def _on_send_refused(self, text: str) -> None:
        if not self.composer.text().strip():
            self.composer.set_text(text)

    def _on_escape(self) -> None:
        controller = self.controller
        if controller is not None and controller.streaming:
            controller.stop()
        elif controller is not None and controller.loading:
            controller.cancel_load()
        elif self.composer_bar.editing:
            self.composer_bar.cancel_edit()
        elif self.sidebar.search_box.hasFocus() and self.sidebar.search_text():
            self.sidebar.search_box.clear()
        elif self.message_bar.isVisible():
            self.message_bar.dismiss()

    def _on_edit_requested(self, text: str) -> None:
        if self.controller is not None and not self.controller.streaming:
            self._begin_edit(text)

    def _begin_edit(self, text: str) -> None:
        # The edit belongs to the conversation shown now, even if another one is opening.
        assert self.controller is not None
        self._edit_conversation = self.controller.conversation_id
        self.composer_bar.begin_edit(text)

    def _on_copy_done(self, notice: str) -> None:
        notices.info(notice)

    def _on_link_clicked(self, url: QUrl) -> None:
        desktop.open_link(url)

    def _on_conversation_chosen(self, conversation_id: int) -> None:
        if self.controller is not None:
            self.composer_bar.cancel_edit()
            self.controller.open_conversation(conversation_id)

    def _on_delete_requested(self, conversation_id: int) -> None:
        if self.controller is not None:
            self.controller.delete_conversation(conversation_id)

    def _on_rename_requested(self, conversation_id: int, title: str) -> None:
        if self.controller is not None:
            self.controller.rename_conversation(conversation_id, title)

    def _on_title_editor_closed(self) -> None:
        # Connected after the view's own slot: the editor is closed by now. (A reset of
        # the list while an editor is open, even while it commits, would leave that
        # editor on screen, detached from the list.)
        if self._refresh_after_edit:
            self._refresh_conversations()

    def _on_model_chosen(self, path: Path) -> None:
        if self.controller is not None:
            self.controller.load_model(path)

    def _on_cancel_load_requested(self) -> None:
        if self.controller is not None:
            self.controller.cancel_load()

    def _on_choose_model(self) -> None:
        self.picker.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.picker.showPopup()

    def _on_reload_requested(self) -> None:
        if self.controller is not None:
            self.controller.reload_model()

    def _rescan(self) -> None:
        if self.controller is not None:
            self.controller.rescan()

    def _on_theme_changed(self, value: str) -> None:
        app = QApplication.instance()
        if isinstance(app, QApplication):
            theme.apply(app, value)

    def _on_color_scheme_changed(self) -> None:
        if self.prefs.theme == "system":
            self._on_theme_changed("system")

    def _focus_composer(self) -> None:
        self.composer.setFocus(Qt.FocusReason.ShortcutFocusReason)

    # Slots: the controller -------------------------------------------------------------

    def _on_catalog_changed(self, entries: list[ModelEntry]) -> None:
        self._show_models(entries)
        if self.controller is not None and self.controller.model is not None:
            self.picker.set_current(self.controller.model.path)
        if self._settings_dialog is not None:
            self._settings_dialog.set_models(entries)

    def _on_sources_found(self, found: list[Source]) -> None:
        if self._settings_dialog is not None:
            self._settings_dialog.set_sources(found)

    def _on_model_load_started(self, path: Path, name: str) -> None:
        self.picker.set_current(path)
        self.top_bar.show_loading(name)
        self.composer_bar.set_can_send(False, f"Waiting for {name} to load")

    def _on_model_loaded(self, model: LoadedModel) -> None:
        self.top_bar.show_loading(None)
        self.picker.set_current(model.path)
        self.status.set_context_size(model.n_ctx)
        self.status.set_message(f"{model.name} · {model.n_ctx:,}-token context")
        self.composer_bar.set_can_send(True)
        self._set_empty_text(self._empty_text_for(model.name))
        if self._settings_dialog is not None:
            self._settings_dialog.set_model(model.path, model.name)

    def _on_model_load_failed(self, model: LoadedModel | None) -> None:
        self.top_bar.show_loading(None)
        self.picker.set_current(model.path if model else None)
        if model is None:
            self.status.set_context_size(0)
            self.status.set_message("No model loaded")
            self.composer_bar.set_can_send(False, "Choose a model first")
        else:
            self.composer_bar.set_can_send(True)

    def _on_conversation_opened(self, conversation_id: int, history: list[Message]) -> None:
        self._leave_edit()
        self._view.set_messages(history)
        self.sidebar.set_current(conversation_id)
        replies = [m.reply_stats for m in history if m.role == "assistant" and m.stats]
        self.status.show_reply(replies[-1] if replies else None)
        self._update_title()

    def _on_chat_cleared(self) -> None:
        self._leave_edit()
        self._view.clear()
        self.sidebar.set_current(None)
        self.status.show_reply(None)
        self._update_title()

    def _show_models(self, entries: Sequence[ModelEntry]) -> None:
        """List the models, each sized at the context its settings would load it with."""
        self.picker.set_entries(entries, {e.path: self.prefs.load_options(e.path).n_ctx
                                          for e in entries})

    def _leave_edit(self) -> None:
        """Another conversation is shown: an edit begun in the last one becomes a draft."""
        if self.composer_bar.editing:
            self.composer_bar.finish_edit()

    def _on_reply_finished(self, text: str, stats: ReplyStats) -> None:
        self._view.finish_reply(text, stats)
        self.status.show_reply(stats)

    def _on_streaming_changed(self, streaming: bool) -> None:
        had_focus = self.composer_bar.send_button.hasFocus() or \
            self.composer_bar.stop_button.hasFocus()
        self.composer_bar.set_streaming(streaming)
        if had_focus:
            self._focus_composer()

    def _refresh_conversations(self) -> None:
        if self.controller is None:
            return
        if self.sidebar.list.state() == QAbstractItemView.State.EditingState:
            # Refreshing the list would throw away the title being typed: wait for it.
            self._refresh_after_edit = True
            self._update_title()
            return
        self._refresh_after_edit = False
        conversations = self.controller.conversations(self.sidebar.search_text())
        self.sidebar.set_conversations(conversations, self.controller.conversation_id)
        self._update_title()

    # Helpers -----------------------------------------------------------------------

    def _update_title(self) -> None:
        conversation = self.controller.conversation() if self.controller else None
        self.setWindowTitle(f"{APP_TITLE} — {conversation.title}" if conversation else APP_TITLE)

    def _set_empty_text(self, text: str) -> None:
        self._empty_text = text
        self.placeholder.setText(text)
        if self.transcript is not None:
            self.transcript.set_empty_text(text)

    def _empty_text_for(self, model_name: str | None) -> str:
        folder = paths.models_dir()
        if model_name is None:
            return f"Fireside runs language models on this computer. Put GGUF files in {folder}."
        return (f"Ask {model_name} anything — it runs on this computer and nothing leaves "
                f"it.\n\nMore models: put GGUF files in {folder}.")


def _save_settings(prefs: Settings) -> None:
    try:
        settings.save(prefs)
    except OSError as err:
        notices.error(f"Settings could not be saved: {err.strerror or err}")
