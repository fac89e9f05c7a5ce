"""The chat, once the core is open: the window's widgets wired to its two controllers.

The window paints first and builds this when the core is ready, so nothing here waits
for a core that is not there yet: the sidebar, the picker, the composer and the
transcript talk to the controllers, and the controllers' signals change them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QAbstractItemView, QWidget

from app.core.backend import LoadedModel
from app.core.conversations.store import Message
from app.core.fireside import Fireside
from app.core.models.catalog import ModelEntry
from app.core.models.sources import Source
from app.core.remote import servers
from app.core.reply.replies import ReplyStats
from app.ui import desktop, event_loop, notices
from app.ui.api_host import ApiHost
from app.ui.chat_controller import ChatController
from app.ui.composer import Composer, ComposerBar
from app.ui.document_chooser import choose_documents
from app.ui.document_strip import DocumentStrip
from app.ui.documents_controller import DocumentsController
from app.ui.event_loop import read
from app.ui.file_drop import FileDrop
from app.ui.model_controller import ModelController
from app.ui.model_picker import ModelPicker
from app.ui.sidebar import Sidebar
from app.ui.source_view import SourceView
from app.ui.status import StatusLine
from app.ui.top_bar import TopBar
from app.ui.transcript import TranscriptView

if TYPE_CHECKING:
    from app.core.conversations.store import Conversation
    from app.ui.settings.dialog import SettingsDialog


class ChatWindow(Protocol):
    """What the pane needs of the window that holds it (the window imports the pane,
    never the other way round)."""

    sidebar: Sidebar
    top_bar: TopBar
    picker: ModelPicker
    composer_bar: ComposerBar
    composer: Composer
    document_strip: DocumentStrip
    status: StatusLine
    chat_area: QWidget  # what files are dropped on

    def window(self) -> QWidget: ...  # QWidget's own: the top-level widget, the parent here
    def focus_composer(self) -> None: ...
    def show_title(self, conversation: Conversation | None) -> None: ...
    def set_empty_text(self, model_name: str | None, server: str | None = None) -> None: ...


class ChatPane(QObject):
    def __init__(self, window: ChatWindow, core: Fireside, background: Executor) -> None:
        super().__init__(window.window())
        event_loop.ensure()
        self.window = window
        self._tasks = tasks = event_loop.Tasks()  # one set: busy while either works
        self.controller = ChatController(core, background, tasks, self)
        self.models = ModelController(core, background, tasks, self)
        self.api = ApiHost(core, self)  # Fireside's local API, when the user turns it on
        self.documents = DocumentsController(core, background, tasks, self)
        self.transcript = TranscriptView(window.window())
        # The composer takes drops of text of its own: files dropped on it are taken here.
        self.file_drop = FileDrop(window.chat_area,
                                  (window.composer, window.composer.viewport()))
        self.source_view: SourceView | None = None  # made when a source is first opened
        self._edit_conversation: int | None = None  # where an edit under way belongs
        self._refresh_after_edit = False
        self._settings: SettingsDialog | None = None
        self._connect_widgets()
        self._connect_controllers()

    def start(self, opened: Path | None = None) -> None:
        """The conversation open last time, the models found, a model loading (the file
        ``opened``, if one was)."""
        self.controller.start()
        self.documents.refresh()
        self._refresh_conversations()
        self.models.start(opened)
        self.api.apply()

    def _connect_widgets(self) -> None:
        w = self.window
        w.sidebar.new_chat_requested.connect(self.new_chat)
        w.sidebar.conversation_chosen.connect(self._on_conversation_chosen)
        w.sidebar.delete_requested.connect(self.controller.delete_conversation)
        w.sidebar.search_changed.connect(self._refresh_conversations)
        w.sidebar.model.rename_requested.connect(self.controller.rename_conversation)
        w.sidebar.list.itemDelegate().closeEditor.connect(self._on_title_editor_closed)
        w.picker.model_chosen.connect(self.models.load)
        w.top_bar.cancel_load_requested.connect(self.models.cancel_load)
        w.composer_bar.send_requested.connect(self._on_send_requested)
        w.composer_bar.stop_requested.connect(self.controller.stop)
        self.transcript.regenerate_requested.connect(self.regenerate)
        self.transcript.edit_requested.connect(self._on_edit_requested)
        self.transcript.copy_done.connect(notices.info)
        self.transcript.link_clicked.connect(desktop.open_link)
        self.transcript.source_requested.connect(self.show_source)
        self.file_drop.dropped.connect(self.documents.attach)
        w.composer_bar.attach_files_requested.connect(lambda: self.choose_documents(False))
        w.composer_bar.attach_folder_requested.connect(lambda: self.choose_documents(True))
        w.composer_bar.set_can_attach(True)
        w.document_strip.detach_requested.connect(self.documents.detach)
        w.document_strip.cancel_requested.connect(self.documents.cancel)
        actions: tuple[tuple[str, QKeySequence.StandardKey | str, Callable[[], object]], ...] = (
            ("New chat", QKeySequence.StandardKey.New, self.new_chat),
            ("Regenerate the last reply", "Ctrl+R", self.regenerate),
            ("Edit the last message", "Ctrl+E", self.edit_last),
        )
        for text, key, slot in actions:
            action = QAction(text, w.window())
            action.setShortcut(QKeySequence(key))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            action.triggered.connect(slot)
            w.window().addAction(action)

    def _connect_controllers(self) -> None:
        c, m, view = self.controller, self.models, self.transcript
        m.catalog_changed.connect(self._on_catalog_changed)
        m.sources_found.connect(self._on_sources_found)
        m.load_started.connect(self._on_load_started)
        m.load_progressed.connect(self.window.top_bar.show_progress)
        m.loaded.connect(self._on_loaded)
        m.load_failed.connect(self._on_load_failed)
        c.conversations_changed.connect(self._refresh_conversations)
        c.conversation_opened.connect(self._on_conversation_opened)
        c.chat_cleared.connect(self._on_chat_cleared)
        c.message_sent.connect(view.add_user_message)
        c.reply_started.connect(view.begin_reply)
        c.reply_finished.connect(self._on_reply_finished)
        c.sources_given.connect(view.show_sources)
        c.reply_failed.connect(view.fail_reply)
        c.streaming_changed.connect(self._on_streaming_changed)
        c.send_refused.connect(self._on_send_refused)
        c.tool_call_changed.connect(view.show_call)
        view.tool_decided.connect(c.decide)
        self.window.composer_bar.tools_button.toggled.connect(self._on_tools_toggled)
        self.documents.attached_changed.connect(self.window.document_strip.show_attached)
        self.documents.progress_changed.connect(self.window.document_strip.show_progress)
        self._show_tools_switch()
        self.api.changed.connect(self._on_api_changed)

    def attach_settings(self, dialog: SettingsDialog) -> None:
        """The settings dialog shows the models found and changes how they load."""
        self._settings = dialog
        dialog.context_size_changed.connect(lambda: self._show_models(self.models.core.library
                                                                      .entries))
        dialog.folders_changed.connect(self.models.rescan)
        dialog.reload_requested.connect(self.models.reload)
        dialog.servers_changed.connect(self.models.ask_servers)
        dialog.tools_changed.connect(self._on_tools_changed)
        dialog.api_page.changed.connect(self.api.apply)
        dialog.set_states_source(self.models.core.kept_states)
        dialog.hardware_page.set_survey(self.models.core.hardware)
        dialog.clear_states_requested.connect(self._on_clear_states_requested)
        dialog.api_page.show_status(self.api.status())
        dialog.servers_page.set_listings(self.models.core.library.listings)
        dialog.set_models(self.models.core.library.entries)
        dialog.set_sources(self.models.core.library.sources)
        if self.models.model is not None:
            dialog.set_model(self.models.model.path, self.models.model.name)

    def _on_clear_states_requested(self) -> None:
        async def clear() -> None:
            await event_loop.wait(self.models.core.clear_kept_states())
            if self._settings is not None:
                self._settings.show_saved_states()

        self._tasks.spawn(clear())

    def _on_api_changed(self) -> None:
        status = self.api.status()
        self.window.status.set_serving(status if self.api.server else "")
        if self._settings is not None:
            self._settings.api_page.show_status(status)

    # Actions -------------------------------------------------------------------------

    def new_chat(self) -> None:
        self.window.composer_bar.cancel_edit()
        self.controller.new_chat()
        self.window.focus_composer()

    def regenerate(self) -> None:
        if self.models.model is not None and not self.models.loading:
            self.controller.regenerate()

    def edit_last(self) -> None:
        text = None if self.controller.streaming else self.controller.last_user_text()
        if text is not None:
            self._begin_edit(text)

    def choose_documents(self, folder: bool) -> None:
        """The Attach menu: files, or a folder, picked in a file dialog."""
        choose_documents(self.window.window(), folder, self.documents.attach)

    def show_source(self, source: Mapping[str, Any]) -> None:
        """A reply's source: its passage in a window of its own."""
        if self.source_view is None:
            self.source_view = SourceView(self.window.window())
        self.source_view.show_source(source)

    def escape(self) -> bool:
        """Esc: stop the reply, or the load, or the edit. False if there was none."""
        if self.controller.streaming:
            self.controller.stop()
        elif self.models.loading:
            self.models.cancel_load()
        elif self.window.composer_bar.editing:
            self.window.composer_bar.cancel_edit()
        else:
            return False
        return True

    # Slots: widgets --------------------------------------------------------------------

    def _on_send_requested(self, text: str) -> None:
        bar = self.window.composer_bar
        text = text.strip()
        if bar.editing:
            bar.finish_edit()
            self.controller.edit_last(text, self._edit_conversation)
        else:
            self.controller.send(text)
        self.window.composer.clear()

    def _on_send_refused(self, text: str) -> None:
        if not self.window.composer.text().strip():
            self.window.composer.set_text(text)

    def _on_edit_requested(self, text: str) -> None:
        if not self.controller.streaming:
            self._begin_edit(text)

    def _begin_edit(self, text: str) -> None:
        # The edit belongs to the conversation shown now, even if another one is opening.
        self._edit_conversation = self.controller.conversation_id
        self.window.composer_bar.begin_edit(text)

    def _on_conversation_chosen(self, conversation_id: int) -> None:
        self.window.composer_bar.cancel_edit()
        self.controller.open_conversation(conversation_id)

    def _on_title_editor_closed(self) -> None:
        # Connected after the view's own slot: the editor is closed by now. (A reset of
        # the list while an editor is open, even while it commits, would leave that
        # editor on screen, detached from the list.)
        if self._refresh_after_edit:
            self._refresh_conversations()

    # Slots: the controllers ------------------------------------------------------------

    def _on_catalog_changed(self, entries: list[ModelEntry]) -> None:
        self._show_models(entries)
        if self.models.model is not None:
            self.window.picker.set_current(self.models.model.path)
        if self._settings is not None:
            self._settings.set_models(entries)
            self._settings.servers_page.set_listings(self.models.core.library.listings)

    def _on_sources_found(self, found: list[Source]) -> None:
        if self._settings is not None:
            self._settings.set_sources(found)

    def _on_load_started(self, path: Path, name: str) -> None:
        self.window.picker.set_current(path)
        self.window.top_bar.show_loading(name)
        self.window.composer_bar.set_can_send(False, f"Waiting for {name} to load")

    def _on_loaded(self, model: LoadedModel) -> None:
        w = self.window
        w.top_bar.show_loading(None)
        w.picker.set_current(model.path)
        w.status.set_context_size(model.n_ctx)
        drafted = f" · drafted by {model.draft}" if model.draft else ""
        w.status.set_message(f"{model.name} · {model.n_ctx:,}-token context{drafted}")
        w.status.set_placement(model.placement)
        w.composer_bar.set_can_send(True)
        served = servers.on_server(model.path)
        w.set_empty_text(model.name, served[0] if served else None)
        if self._settings is not None:
            self._settings.set_model(model.path, model.name)

    def _on_load_failed(self, model: LoadedModel | None) -> None:
        w = self.window
        w.top_bar.show_loading(None)
        w.picker.set_current(model.path if model else None)
        if model is None:
            w.status.set_context_size(0)
            w.status.set_message("No model loaded")
            w.status.set_placement(None)
            w.composer_bar.set_can_send(False, "Choose a model first")
        else:
            w.composer_bar.set_can_send(True)

    def _on_conversation_opened(self, conversation_id: int | None,
                                history: list[Message]) -> None:
        self._leave_edit()
        self.transcript.set_messages(history)
        self.window.sidebar.set_current(conversation_id)
        replies = [m.reply_stats for m in history if m.role == "assistant" and m.stats]
        self.window.status.show_reply(replies[-1] if replies else None)
        self._update_title()
        self._show_tools_switch()
        self.documents.refresh()

    def _on_chat_cleared(self) -> None:
        self._leave_edit()
        self.transcript.clear()
        self.window.sidebar.set_current(None)
        self.window.status.show_reply(None)
        self._update_title()
        self._show_tools_switch()
        self.documents.refresh()

    # Tools ----------------------------------------------------------------------------

    def _show_tools_switch(self) -> None:
        """The composer's Tools switch: there once a server is added, set as the open
        conversation has it."""
        core, button = self.models.core, self.window.composer_bar.tools_button
        button.setVisible(core.toolbox.configured)
        button.blockSignals(True)
        button.setChecked(read(lambda: core.tools_on, True, quiet=True))
        button.blockSignals(False)

    def _on_tools_toggled(self, on: bool) -> None:
        read(lambda: self.models.core.set_tools_on(on), None)

    def _on_tools_changed(self) -> None:
        # Servers added, removed or switched: the next reply starts them as they are now.
        threading.Thread(target=self.models.core.toolbox.reset, daemon=True,
                         name="fireside-tools-reset").start()
        self._show_tools_switch()

    def _on_reply_finished(self, text: str, stats: ReplyStats) -> None:
        self.transcript.finish_reply(text, stats)
        self.window.status.show_reply(stats)

    def _on_streaming_changed(self, streaming: bool) -> None:
        bar = self.window.composer_bar
        had_focus = bar.send_button.hasFocus() or bar.stop_button.hasFocus()
        bar.set_streaming(streaming)
        if had_focus:
            self.window.focus_composer()

    def _refresh_conversations(self) -> None:
        sidebar = self.window.sidebar
        if sidebar.list.state() == QAbstractItemView.State.EditingState:
            # Refreshing the list would throw away the title being typed: wait for it.
            self._refresh_after_edit = True
            self._update_title()
            return
        self._refresh_after_edit = False
        conversations = self.controller.conversations(sidebar.search_text())
        sidebar.set_conversations(conversations, self.controller.conversation_id)
        self._update_title()

    # Helpers -------------------------------------------------------------------------

    def _show_models(self, entries: Sequence[ModelEntry]) -> None:
        """List the models, each sized at the context its settings would load it with,
        and placed on the devices as it would load now."""
        core = self.models.core
        hardware = core.hardware()
        self.window.picker.set_entries(entries, {e.path: core.load_options(e.path)
                                                 for e in entries},
                                       {e.path: core.placement(e, hardware) for e in entries})

    def _leave_edit(self) -> None:
        """Another conversation is shown: an edit begun in the last one becomes a draft."""
        if self.window.composer_bar.editing:
            self.window.composer_bar.finish_edit()

    def _update_title(self) -> None:
        self.window.show_title(self.controller.conversation())
