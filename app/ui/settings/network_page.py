"""Settings → Network: Offline, the Hugging Face Hub's address (a mirror), and the token
for gated models (kept in the keyring, never in settings.json)."""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QLabel, QLineEdit, QWidget

from app.core.hub.access import PUBLIC_HUB, keep_token
from app.ui.settings.defaults import Defaults
from app.ui.settings.form_page import FormPage
from app.ui.settings.form_parts import button_row, line_edit, note, push_button


class NetworkPage(FormPage):
    def __init__(self, defaults: Defaults, parent: QWidget | None = None) -> None:
        super().__init__("networkPage", parent)
        self._defaults = defaults
        form = self.form
        prefs = defaults.prefs
        form.addRow(note("Fireside connects to nothing until you ask: the Hub only when you "
                         "search or download, a server only when you use it. Offline "
                         "refuses every connection.", self))
        self.offline = QCheckBox("Offline: make no connection at all", self)
        self.offline.setObjectName("offlineBox")
        self.offline.setChecked(prefs.offline)
        self.offline.toggled.connect(lambda on: defaults.set("offline", on))
        form.addRow("Connections", self.offline)
        self.endpoint = line_edit(self, "hubEndpointEdit", "Hub address",
                                  f"{PUBLIC_HUB} (or HF_ENDPOINT)")
        self.endpoint.setText(prefs.hub_endpoint)
        self.endpoint.editingFinished.connect(
            lambda: defaults.set("hub_endpoint", self.endpoint.text().strip()))
        form.addRow("Hub address", self.endpoint)
        self.token = line_edit(self, "hubTokenEdit", "Hub token",
                               "for gated models: a read token from your Hub account")
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        save = push_button("Keep token", "keepHubTokenButton", self)
        save.clicked.connect(self._on_keep)
        forget = push_button("Forget token", "forgetHubTokenButton", self)
        forget.clicked.connect(self._on_forget)
        self.token_state = QLabel(self)
        self.token_state.setObjectName("hubTokenState")
        form.addRow("Hub token", self.token)
        form.addRow("", button_row(save, forget, self.token_state))
        self._show_state()

    def _on_keep(self) -> None:
        keep_token(self._defaults.prefs, self.token.text())
        self.token.clear()
        self._defaults.save()
        self._show_state()

    def _on_forget(self) -> None:
        keep_token(self._defaults.prefs, "")
        self._defaults.save()
        self._show_state()

    def _show_state(self) -> None:
        kept = self._defaults.prefs.hub_token_kept
        self.token_state.setText({"keyring": "kept in the system keyring",
                                  "file": "kept in a file only you can read",
                                  "session": "kept until Fireside closes"}.get(
                                      kept, "none kept (HF_TOKEN is used if set)"))
