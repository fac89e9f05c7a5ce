"""Where the env values and headers of a tool server the user added are kept: beside the
keys of model servers (``app.core.remote.secrets``: the system keyring, else a file
only the user can read), never in settings.json.

All of them, not only those named like keys: GITHUB_PERSONAL_ACCESS_TOKEN says what it
holds, DATABASE_URL carries a password without saying so, and an Authorization header
is a key whatever it is called.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from app.core.remote import secrets

# Each server's values under one name of its own, apart from model servers' names.
PREFIX = "tool server: "


def keep(server: str, env: Mapping[str, str], headers: Mapping[str, str]) -> secrets.KeyStore:
    """Keep the values of ``server``; where they went. The file stands in for a missing
    keyring: the values came from a plain file of the user's (their mcpServers JSON)."""
    values = json.dumps({"env": dict(env), "headers": dict(headers)})
    return secrets.keep(PREFIX + server, values, in_file=True)


def find(server: str, where: secrets.KeyStore) -> tuple[dict[str, str], dict[str, str]] | None:
    """The env values and headers kept for ``server``; None if they are gone."""
    kept = secrets.find(PREFIX + server, where)
    try:
        values = json.loads(kept) if kept is not None else None
    except ValueError:
        return None
    if not isinstance(values, dict):
        return None
    env, headers = _strings(values.get("env")), _strings(values.get("headers"))
    return (env, headers) if env is not None and headers is not None else None


def forget(server: str) -> None:
    secrets.forget(PREFIX + server)


def _strings(value: object) -> dict[str, str] | None:
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return None
    return dict(value)
