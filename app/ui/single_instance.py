"""One window per user and data folder: a later launch hands its files to the window
already open and exits.

The window holds a lock file in the data folder and listens on a local socket (a named
pipe on Windows) named for the user and the folder. A launch that cannot take the lock
sends the window its files over that socket; the window says ``ok``, or ``no`` while it
closes, and then the launch waits for the lock to come free. The lock, not the socket,
decides who is the window: two launches at once cannot both find no listener and both
open a window, and a socket left by a window that crashed is removed by the launch that
takes the lock after it (Qt tells a dead owner's lock from a live one's).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QLockFile, QObject
from PySide6.QtNetwork import QLocalServer, QLocalSocket

logger = logging.getLogger(__name__)

LOCK_FILE = "window.lock"
CONNECT_MS = 2000
REPLY_MS = 10_000  # the window answers from its event loop, between two of its jobs
# How long a launch waits for a window that is starting (it holds the lock before it
# listens) or closing (it saves the reply and closes the model first, in bounded time).
WAIT_S = 30.0
RETRY_S = 0.1
MAX_REQUEST = 1 << 16
OK, NO = b"ok\n", b"no\n"


class NotAnswering(Exception):
    """Another window holds the data folder and does not answer."""


def server_name(data_dir: Path) -> str:
    """The socket's name: one per user and data folder (two test homes, two users never
    meet). In the user's runtime folder where there is one, where no one else can claim
    the name first."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name in the environment or the password database
        user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    folder = hashlib.sha256(os.fsencode(data_dir.resolve())).hexdigest()[:16]
    name = f"fireside-{''.join(c for c in user if c.isalnum() or c in '-_.')[:32]}-{folder}"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    # A Unix socket's path has room for 107 bytes.
    if sys.platform != "win32" and runtime and len(os.fsencode(runtime)) + len(name) < 100:
        return str(Path(runtime) / name)
    return name


def claim(data_dir: Path, files: Sequence[Path] = ()) -> WindowLink | None:
    """Become the window for ``data_dir``: its link, to answer later launches. None when
    a window was already open and took ``files`` (and came to the front). Raises
    NotAnswering when that window holds the folder but does not take them."""
    name = server_name(data_dir)
    lock = QLockFile(str(data_dir / LOCK_FILE))
    lock.setStaleLockTime(0)  # only a dead owner's lock is stale, however old
    request = json.dumps({"files": [str(Path(f).absolute()) for f in files]}).encode() + b"\n"
    deadline = time.monotonic() + WAIT_S
    while not lock.tryLock(0):
        if lock.error() != QLockFile.LockError.LockFailedError:
            # No lock can be made in this folder (read-only, full): no one holds one
            # either, so this launch opens its window, unguarded, rather than wait.
            logger.warning("no lock in %s (%s): later launches open windows of their own",
                           data_dir, lock.error().name)
            return WindowLink(name, lock)
        if _hand_over(name, request):
            logger.info("handed over to the window already open")
            return None
        if time.monotonic() > deadline:
            pid, host, _ = lock.getLockInfo()
            raise NotAnswering(f"Fireside is already open (process {pid} on {host}) and "
                               "does not answer. Close it, or end that process.")
        time.sleep(RETRY_S)
    return WindowLink(name, lock)


def _hand_over(name: str, request: bytes) -> bool:
    """Send the request to the window listening on ``name``; True if it took it."""
    socket = QLocalSocket()
    socket.connectToServer(name)
    if not socket.waitForConnected(CONNECT_MS):
        return False  # none listens yet, or any more
    socket.write(request)
    socket.flush()
    reply = b""
    while b"\n" not in reply and socket.waitForReadyRead(REPLY_MS):
        reply += socket.readAll().data()
    socket.abort()
    return reply == OK


class WindowLink(QObject):
    """The window's end: holds the data folder's lock and takes what later launches send.

    ``on_launch`` gets the files of each later launch (maybe none: it only wants the
    window in front) and says whether the window took them; False while it closes.
    """

    def __init__(self, name: str, lock: QLockFile, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.on_launch: Callable[[list[Path]], bool] | None = None
        self._lock = lock
        self._server = QLocalServer(self)
        self._server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        self._server.newConnection.connect(self._on_new_connection)
        # Whoever holds the lock owns the name: a socket still there is a dead window's.
        QLocalServer.removeServer(name)
        if self._server.listen(name):
            logger.info("later launches reach this window at %s", self._server.fullServerName())
        else:
            logger.warning("later launches cannot reach this window (%s): each will wait, "
                           "then say so", self._server.errorString())

    @property
    def address(self) -> str:
        return self._server.fullServerName()

    def close(self) -> None:
        """Stop answering and free the folder for the next launch."""
        self._server.close()
        self._lock.unlock()

    def _on_new_connection(self) -> None:
        while self._server.hasPendingConnections():
            socket = self._server.nextPendingConnection()
            received = bytearray()
            socket.readyRead.connect(lambda s=socket, r=received: self._on_ready_read(s, r))
            socket.disconnected.connect(socket.deleteLater)
            if socket.bytesAvailable():
                self._on_ready_read(socket, received)

    def _on_ready_read(self, socket: QLocalSocket, received: bytearray) -> None:
        received += socket.readAll().data()
        if b"\n" not in received:
            if len(received) > MAX_REQUEST:
                socket.abort()
            return
        line = bytes(received.split(b"\n", 1)[0])
        received.clear()
        socket.write(OK if self._take(line) else NO)
        socket.disconnectFromServer()  # after what was written has gone

    def _take(self, line: bytes) -> bool:
        try:
            files = [Path(f) for f in json.loads(line)["files"]]
        except (ValueError, KeyError, TypeError):
            logger.warning("a later launch sent what this window cannot read: %r", line[:200])
            return False
        return self.on_launch is not None and self.on_launch(files)
