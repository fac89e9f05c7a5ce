"""Where the key of a server typed into the window is kept: the system keyring (the
``keyring`` library: Secret Service, macOS Keychain, Windows Credential Locker).

Where there is no keyring, the key lives for this session only, unless the user asks
for a file that only they can read. A key is never written to settings.json, a log,
an export or a message.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Literal, get_args

from app.core import paths

logger = logging.getLogger(__name__)

SERVICE = "Fireside"
KeyStore = Literal["keyring", "file", "session"]
_session: dict[str, str] = {}  # keys kept for this session only, by server name
_lock = threading.Lock()


def store_named(value: object) -> KeyStore | None:
    """The place a settings file names (a hand-edited one may name none known)."""
    return next((known for known in get_args(KeyStore) if value == known), None)


def keyring_available() -> bool:
    """True if the system has a keyring Fireside can keep keys in."""
    try:
        import keyring  # noqa: PLC0415 - only when a key is at stake
        from keyring.backends import fail  # noqa: PLC0415
    except ImportError:
        return False
    return not isinstance(keyring.get_keyring(), fail.Keyring)


def keep(server: str, key: str, in_file: bool = False) -> KeyStore:
    """Keep ``key`` for ``server``; where it went. The keyring if there is one; else the
    user's own file if they asked for it; else this session only."""
    if keyring_available():
        import keyring  # noqa: PLC0415

        try:
            keyring.set_password(SERVICE, server, key)
            return "keyring"
        except keyring.errors.KeyringError as err:  # locked, refused: say nothing of the key
            logger.warning("the keyring refused the key for %s: %s", server, type(err).__name__)
    if in_file:
        keys = _read_file()
        keys[server] = key
        _write_file(keys)
        return "file"
    with _lock:
        _session[server] = key
    return "session"


def find(server: str, where: KeyStore) -> str | None:
    """The key kept for ``server`` (None if it is gone: a session's key after a restart)."""
    if where == "keyring" and keyring_available():
        import keyring  # noqa: PLC0415

        try:
            return keyring.get_password(SERVICE, server)
        except keyring.errors.KeyringError:
            return None
    if where == "file":
        return _read_file().get(server)
    with _lock:
        return _session.get(server)


def forget(server: str) -> None:
    """Remove the key of ``server`` from everywhere it could be."""
    with _lock:
        _session.pop(server, None)
    keys = _read_file()
    if keys.pop(server, None) is not None:
        _write_file(keys)
    if keyring_available():
        import keyring  # noqa: PLC0415

        with contextlib.suppress(keyring.errors.KeyringError):  # it was not there
            keyring.delete_password(SERVICE, server)


def key_file() -> Path:
    return paths.config_dir() / "server-keys.json"


def _read_file() -> dict[str, str]:
    try:
        stored = json.loads(key_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in stored.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(stored, dict) else {}


def _write_file(keys: dict[str, str]) -> None:
    """Only the user can read it: created 0600, replaced whole."""
    path = key_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(keys, handle)
    os.replace(temporary, path)
