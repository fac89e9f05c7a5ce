"""Settings: a non-modal dialog; every change is saved at once.

Its pages stand beside a list of their names (app/ui/settings/page_list.py). Models,
Replies, Documents and Appearance edit the defaults; "This model" gives the loaded model settings
of its own over them, and shows each default it still uses as it changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.core.backend import KeptStates
from app.core.settings import Settings
from app.ui.settings.api_page import ApiPage
from app.ui.settings.appearance_page import AppearancePage
from app.ui.settings.defaults import Defaults
from app.ui.settings.documents_page import DocumentsPage
from app.ui.settings.hardware_page import HardwarePage
from app.ui.settings.models_page import ModelsPage
from app.ui.settings.network_page import NetworkPage
from app.ui.settings.page_list import PageList
from app.ui.settings.replies_page import RepliesPage
from app.ui.settings.servers_page import ServersPage
from app.ui.settings.this_model_page import ThisModelPage
from app.ui.settings.tools_page import ToolsPage

if TYPE_CHECKING:
    from app.core.models.catalog import ModelEntry
    from app.core.models.sources import Source

SIZE_DEFAULTS = ("context_size", "kv_cache")  # change the memory every model needs
DEFAULT_SIZE = (780, 700)  # the tallest page, This model, shows whole


class SettingsDialog(QDialog):
    theme_changed = Signal(str)
    """The user picked "system", "light" or "dark"."""
    folders_changed = Signal()
    """The model folders or the other apps' stores in use changed: scan again."""
    context_size_changed = Signal()
    """A context size (the default, or a model's own) changed: model sizes change too."""
    reload_requested = Signal()
    """The user asked to reload the current model with the new load options."""
    open_models_folder_requested = Signal()
    """The user wants to see the models folder in the file manager."""
    about_requested = Signal()
    """The user wants to know about Fireside (version, licenses)."""
    servers_changed = Signal()
    """A model server was added or removed: ask the servers again."""
    tools_changed = Signal()
    """Tool servers were added, removed or switched: the toolbox starts over."""
    clear_states_requested = Signal()
    """The user wants the states kept for conversations left forgotten."""

    def __init__(self, prefs: Settings, save: Callable[[], None], models_dir: Path,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("settingsDialog")
        self.setWindowTitle("Fireside Settings")
        self.setAccessibleName("Settings")
        self.setModal(False)
        self.prefs = prefs
        self.page_list = PageList(self)  # first, so that Tab goes from it into a page
        self._defaults = Defaults(prefs, save, self)
        self._defaults.changed.connect(self._on_default_changed)
        self._add_own_pages(models_dir)
        self._add_other_pages(save)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        close = buttons.button(QDialogButtonBox.StandardButton.Close)
        close.setObjectName("closeSettingsButton")
        close.setIcon(QIcon())  # some styles give it one, which the theme's padding overlaps
        about = buttons.addButton("About Fireside", QDialogButtonBox.ButtonRole.HelpRole)
        about.setObjectName("aboutButton")
        about.clicked.connect(self.about_requested)
        self.finished.connect(self._on_finished)
        layout = QVBoxLayout(self)
        layout.addWidget(self.page_list)
        layout.addWidget(buttons)
        self.resize(*DEFAULT_SIZE)

    def _add_own_pages(self, models_dir: Path) -> None:
        self.models_page = ModelsPage(self._defaults, models_dir, self)
        for signal, to in ((self.models_page.folders_changed, self.folders_changed),
                           (self.models_page.open_models_folder_requested,
                            self.open_models_folder_requested),
                           (self.models_page.reload_requested, self.reload_requested),
                           (self.models_page.clear_states_requested,
                            self.clear_states_requested)):
            signal.connect(to)
        self.replies_page = RepliesPage(self._defaults, self)
        self.this_model_page = ThisModelPage(self.prefs, self._defaults.save, self)
        self.this_model_page.context_size_changed.connect(self.context_size_changed)
        self.this_model_page.reload_requested.connect(self.reload_requested)
        self.documents_page = DocumentsPage(self._defaults, self)
        self.appearance_page = AppearancePage(self._defaults, self)
        self.appearance_page.theme_changed.connect(self.theme_changed)
        self.network_page = NetworkPage(self._defaults, self)
        for name, page in (("Models", self.models_page), ("Replies", self.replies_page),
                           ("This model", self.this_model_page),
                           ("Documents", self.documents_page),
                           ("Appearance", self.appearance_page),
                           ("Network", self.network_page)):
            self.page_list.add_page(name, page)

    def _add_other_pages(self, save: Callable[[], None]) -> None:
        self.servers_page = ServersPage(self.prefs, save, self)
        self.servers_page.servers_changed.connect(self.servers_changed)
        self.tools_page = ToolsPage(self.prefs, save, self)
        # It scrolls its own lists: it takes the page's whole height.
        self.tools_page.setSizePolicy(QSizePolicy.Policy.Preferred,
                                      QSizePolicy.Policy.Expanding)
        self.tools_page.tools_changed.connect(self.tools_changed)
        self.api_page = ApiPage(self.prefs, save, _new_token, self)
        self.hardware_page = HardwarePage(self.prefs, save, self)
        self.hardware_page.placement_changed.connect(self.context_size_changed)
        self.hardware_page.placement_changed.connect(self.this_model_page.refresh)
        for name, object_name, page in (
                ("Servers", "serversPage", self.servers_page),
                ("Tools", "toolsPage", self.tools_page),
                ("Local server", "localServerPage", self.api_page),
                ("Hardware", "hardwarePage", self.hardware_page)):
            page.setObjectName(object_name)
            self.page_list.add_page(name, page)

    # Pages -------------------------------------------------------------------------

    def show_page(self, page: QWidget) -> None:
        """Show ``page`` (self.hardware_page, say), chosen in the list of pages."""
        self.page_list.show_page(page)

    def current_page(self) -> QWidget:
        return self.page_list.current_page()

    # What the window tells the dialog ----------------------------------------------

    def set_states_source(self, source: Callable[[], KeptStates]) -> None:
        """Where the count and the bytes of the states kept are read (any thread)."""
        self.models_page.set_states_source(source)

    def show_saved_states(self) -> None:
        self.models_page.kept_states.refresh()

    def set_models(self, entries: Sequence[ModelEntry]) -> None:
        """Offer these models: the usable ones to load at start, the embedding ones to
        find passages in documents with, the small ones to draft for the loaded model."""
        self.models_page.set_models(entries)
        self.documents_page.set_models(entries)
        self.this_model_page.set_models(entries)

    def set_sources(self, found: Sequence[Source]) -> None:
        """Show where each other app's store was found, or that it was not."""
        self.models_page.set_sources(found)

    def set_model(self, path: Path | None, name: str = "") -> None:
        """The loaded model, whose own settings the "This model" page edits."""
        self.this_model_page.set_model(path, name)

    def add_folder(self, folder: str) -> None:
        self.models_page.add_folder(folder)

    # The pages' controls that the window's tests read ------------------------------

    @property
    def saved_states(self) -> QLabel:
        return self.models_page.saved_states

    @property
    def source_boxes(self) -> dict[str, QCheckBox]:
        return self.models_page.stores.boxes

    @property
    def source_places(self) -> dict[str, QLabel]:
        return self.models_page.stores.places

    @property
    def thinking(self) -> QComboBox:
        return self.replies_page.thinking

    @property
    def model_title(self) -> QLabel:
        return self.this_model_page.model_title

    # Slots -------------------------------------------------------------------------

    def _on_default_changed(self, field: str) -> None:
        self.this_model_page.refresh()  # a default the loaded model uses shows there too
        if field in SIZE_DEFAULTS:
            self.context_size_changed.emit()

    def _on_finished(self) -> None:
        # Keep what was typed just before closing.
        self.replies_page.flush()
        self.this_model_page.flush()


def _new_token() -> str:
    from app.api.server import new_token  # noqa: PLC0415 - the server's modules load late

    return new_token()
