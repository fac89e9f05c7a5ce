"""Settings → Servers: the model servers the user chats with beside the local models.

Adding one is offline: Fireside asks it for its models afterwards, off the GUI thread,
and the list here says what each answered. Its key goes to the system keyring; where
there is none, it is kept for this session only unless the user asks for a file that
only they can read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QWidget,
)

from app.core.remote import secrets, servers
from app.core.remote.servers import Listing, Server
from app.core.settings import Settings
from app.ui.settings.form_parts import button_row, line_edit, note


class ServersPage(QWidget):
    servers_changed = Signal()
    """A server was added or removed: ask the servers again."""

    def __init__(self, prefs: Settings, save: Callable[[], None],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.prefs = prefs
        self._save = save
        self._listings: dict[str, Listing] = {}
        form = QFormLayout(self)
        form.addRow(note("Chat with models that run on another computer, under any server "
                         "that speaks the OpenAI API (llama.cpp's llama-server, vLLM, "
                         "Ollama, LM Studio). Fireside connects only to the servers listed "
                         "here.", self))

        self.server_list = QListWidget(self)
        self.server_list.setObjectName("serverList")
        self.server_list.setAccessibleName("Servers")
        self.server_list.setMaximumHeight(130)
        remove = QPushButton("Remove", self)
        remove.setObjectName("removeServerButton")
        remove.clicked.connect(self._on_remove_clicked)
        form.addRow("Servers", self.server_list)
        form.addRow("", button_row(remove))

        self.name_edit = line_edit(self, "serverNameEdit", "Name", "big-box")
        self.url_edit = line_edit(self, "serverUrlEdit", "Address", "http://192.168.1.20:8080/v1")
        self.key_edit = line_edit(self, "serverKeyEdit", "Key", "if the server asks for one")
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_in_file = QCheckBox("Keep the key in a file only I can read", self)
        self.key_in_file.setObjectName("keyInFileBox")
        self.key_in_file.setVisible(not secrets.keyring_available())
        add = QPushButton("Add server", self)
        add.setObjectName("addServerButton")
        add.clicked.connect(self.add_server)
        self.message = QLabel("", self)
        self.message.setObjectName("serverMessage")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        for label, widget in (("Name", self.name_edit), ("Address", self.url_edit),
                              ("Key", self.key_edit)):
            form.addRow(label, widget)
        form.addRow("", self.key_in_file)
        form.addRow("", button_row(add))
        form.addRow(self.message)
        self.timeout_box = QSpinBox(self)
        self.timeout_box.setObjectName("serverTimeoutBox")
        self.timeout_box.setAccessibleName("Wait for a silent server")
        self.timeout_box.setRange(5, 600)
        self.timeout_box.setSuffix(" s")
        self.timeout_box.setValue(round(prefs.server_timeout_s))
        self.timeout_box.valueChanged.connect(self._on_timeout_changed)
        form.addRow("Wait for a silent server", self.timeout_box)
        self._fill()

    @property
    def added(self) -> list[Server]:
        return servers.added(self.prefs.servers)

    def set_listings(self, listings: Sequence[Listing]) -> None:
        """What each server answered when it was last asked."""
        self._listings = {listing.server.name: listing for listing in listings}
        self._fill()

    def add_server(self) -> None:
        try:
            added = servers.add(self.prefs, self.name_edit.text(), self.url_edit.text(),
                                key=self.key_edit.text(),
                                key_in_file=self.key_in_file.isChecked())
        except ValueError as err:
            self._say(str(err))
            return
        self._save()
        for edit in (self.name_edit, self.url_edit, self.key_edit):
            edit.clear()
        self._say(" ".join([f"Added {added.server.name}; asking it for its models…",
                            *added.notes]))
        self._fill()
        self.servers_changed.emit()

    def _on_remove_clicked(self) -> None:
        item = self.server_list.currentItem()
        if item is None:
            return
        name = item.data(Qt.ItemDataRole.UserRole)
        servers.remove(self.prefs, name)
        self._save()
        self._say(f"Removed {name}.")
        self._fill()
        self.servers_changed.emit()

    def _on_timeout_changed(self, seconds: int) -> None:
        self.prefs.server_timeout_s = float(seconds)  # from the next model chosen
        self._save()

    def _fill(self) -> None:
        self.server_list.clear()
        for server in self.added:
            listing = self._listings.get(server.name)
            if listing is None:
                state = "not asked yet"
            elif listing.problem:
                state = f"unreachable: {listing.problem}"
            else:
                count = len(listing.models)
                state = f"{count} model{'' if count == 1 else 's'}"
            item = QListWidgetItem(f"{server.name} — {server.url} — {state}")
            item.setData(Qt.ItemDataRole.UserRole, server.name)
            item.setToolTip(state)
            self.server_list.addItem(item)

    def _say(self, text: str) -> None:
        self.message.setText(text)


