"""The window's host for Fireside's local API: started and stopped as the settings say,
its state told to the window (``changed``) from the server's own thread."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.ui import notices

if TYPE_CHECKING:
    from app.api.server import LocalServer
    from app.core.fireside import Fireside


class ApiHost(QObject):
    changed = Signal()
    """Serving started or stopped, or a request began or ended using the model."""

    def __init__(self, core: Fireside, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.core = core
        self.server: LocalServer | None = None
        self.problem = ""  # why it could not start
        self._port: int | None = None  # as asked: None is 8484, else the next free one

    def apply(self) -> None:
        """Serve, or stop serving, as the settings now say."""
        from app.core.settings import API_PORT  # noqa: PLC0415

        prefs = self.core.settings
        port = None if prefs.api_port == API_PORT else prefs.api_port
        current = self.server
        if current is not None and prefs.serve_api and port == self._port:
            current.token = prefs.api_token  # the next request wants the new one
            return
        self.close()
        self.problem = ""
        if prefs.serve_api:
            from app.api.server import LocalServer, ServeError  # noqa: PLC0415 - when asked

            try:
                self.server = LocalServer(self.core, port, prefs.api_token)
                self._port = port
            except ServeError as err:
                self.problem = str(err)
                notices.error(f"The local server could not start. {err}")
            else:
                self.server.on_change = self.changed.emit  # queued to the GUI thread
                self.server.start()
        self.changed.emit()

    def status(self) -> str:
        """A line for the window: off, where it serves, and what it is doing."""
        server = self.server
        if server is None:
            return self.problem
        text = f"Serving at {server.url}"
        if server.busy:
            text += " · answering a request"
        if server.waiting:
            text += f" · {server.waiting} waiting"
        return text

    def close(self) -> None:
        """Stop serving: new connections are refused at once (a wake-up of the server's
        loop), the rest ends off the GUI thread (connections close within a second)."""
        server, self.server = self.server, None
        if server is not None:
            server.on_change = lambda: None
            server.stop_accepting()
            threading.Thread(target=server.stop, name="fireside-api-stop").start()
