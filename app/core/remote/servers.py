"""Model servers the user added: llama-server, vLLM, Ollama, LM Studio or any other
server that speaks the OpenAI API, and the models each one serves.

Fireside connects to a server only when the user has added it, and only to its host.
A server's key is never in the settings: the terminal names an environment variable
that holds it (``key_env``, read at each use), the window keeps it in the system
keyring (``secrets``). The HTTP client is the official ``openai`` package: its errors
say precisely what went wrong, and we turn each into a sentence that says what to do.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any, Protocol
from urllib.parse import quote, unquote, urlsplit

from app.core.remote import secrets

# Where a server's model stands among the model files: a path no disk holds, so that
# the picker, the settings of each model and the last model used treat both alike.
REMOTE_ROOT = PurePosixPath("/fireside-server:")
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 60.0  # between two pieces of a reply
LIST_TIMEOUT_S = 10.0  # for the list of models, which a working server sends at once
_NAME = re.compile(r"^[\w .@+-]{1,64}$")


@dataclass(frozen=True)
class Server:
    name: str
    url: str  # the API's base, e.g. http://host:8080/v1
    key_env: str | None = None  # the environment variable that holds its key
    key_store: secrets.KeyStore | None = None  # where the window kept its key

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "url": self.url,
                **({"key_env": self.key_env} if self.key_env else {}),
                **({"key_store": self.key_store} if self.key_store else {})}

    @classmethod
    def from_json(cls, record: object) -> Server | None:
        """A stored record, or None if it is not one (a hand-edited file)."""
        if not isinstance(record, dict):
            return None
        name, url, key_env = record.get("name"), record.get("url"), record.get("key_env")
        store = record.get("key_store")
        if not isinstance(name, str) or not isinstance(url, str) \
                or not isinstance(key_env, str | None):
            return None
        return cls(name, url, key_env, secrets.store_named(store))

    def key(self) -> str | None:
        if self.key_env:
            return os.environ.get(self.key_env)
        return secrets.find(self.name, self.key_store) if self.key_store else None

    def missing_key(self) -> str | None:
        """Why the key this server needs is not at hand, if it is not."""
        if self.key_env and self.key() is None:
            return (f"The environment variable {self.key_env}, which holds the key for "
                    f"{self.name}, is not set.")
        if self.key_store and self.key() is None:
            return (f"The key for {self.name} was kept for one session only (this computer "
                    "has no keyring): type it again in Settings → Servers.")
        return None


@dataclass(frozen=True)
class RemoteModel:
    server: str  # the server's name
    id: str  # as the server names it
    context_length: int | None = None  # where the server says

    def to_json(self) -> dict[str, Any]:
        return {"server": self.server, "id": self.id, "context_length": self.context_length}


def added(records: Iterable[object]) -> list[Server]:
    """The servers in the settings' records (a hand-edited record that is not one is left
    out)."""
    return [s for s in map(Server.from_json, records) if s is not None]


def model_path(server: str, model_id: str) -> Path:
    return Path(REMOTE_ROOT / quote(server, safe="") / quote(model_id, safe=""))


def on_server(path: Path | str | None) -> tuple[str, str] | None:
    """(server name, model id) if ``path`` is a server's model, else None."""
    if path is None:
        return None
    parts = PurePosixPath(Path(path).as_posix()).parts
    if len(parts) != 4 or PurePosixPath(*parts[:2]) != REMOTE_ROOT:
        return None
    return unquote(parts[2]), unquote(parts[3])


def display_name(model: RemoteModel) -> str:
    """How the picker names it: a served file's name without its folder, and where."""
    short = model.id
    if "/" in short or short.endswith(".gguf"):
        short = PurePosixPath(short).name.removesuffix(".gguf")
    return f"{short} on {model.server}"


@dataclass(frozen=True)
class Listing:
    """What asking a server for its models gave: its models, or why there are none."""

    server: Server
    models: tuple[RemoteModel, ...] = ()
    problem: str | None = None


def check(name: str, url: str, key_env: str | None = None) -> Server:
    """A server as the user typed it, tidied; ValueError with a sentence if it is unusable."""
    name = name.strip()
    if not _NAME.match(name):
        raise ValueError("A server's name is 1 to 64 letters, digits, spaces or . @ + - _")
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"“{url}” is not a server address: write it as "
                         "http://host:port/v1 (or https://…).")
    if parts.username or parts.password:
        raise ValueError("Put the key in an environment variable, not in the address.")
    if parts.path in ("", "/"):
        url += "/v1"  # every server this is for serves the API there
    if key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key_env):
        raise ValueError(f"“{key_env}” is not an environment variable's name.")
    return Server(name, url, key_env)


class ServerRecords(Protocol):
    """Where the servers the user added are kept: the settings (``Settings.servers``),
    which this room sits below and so names only by what it holds."""

    servers: list[dict[str, str]]


@dataclass(frozen=True)
class Added:
    """A server just added, and what the user should know about it."""

    server: Server
    notes: tuple[str, ...] = ()


def add(kept: ServerRecords, name: str, url: str, *, key_env: str | None = None,
        key: str = "", key_in_file: bool = False) -> Added:
    """Add a server to ``kept`` (the caller saves it): the terminal names the variable
    that holds its key (``key_env``), the window hands the key itself, which goes to the
    keyring (``secrets.keep``; ``key_in_file``: the user's own file where there is no
    keyring). ValueError with a sentence if the server is unusable or its name taken."""
    server = check(name, url, key_env)
    known = added(kept.servers)
    if any(s.name == server.name for s in known):
        raise ValueError(f"There is already a server called “{server.name}”; remove it "
                         "first to change it.")
    notes = []
    key = key.strip()
    if key:
        server = replace(server, key_store=secrets.keep(server.name, key, key_in_file))
        if server.key_store == "session":
            notes.append("This computer has no keyring: the key is kept until Fireside "
                         "closes.")
    if travels_unencrypted(server.url):
        notes.append(f"{server.url} is plain http to another network: your messages and "
                     "its replies travel unencrypted. Use https if it offers it.")
    kept.servers = [s.to_json() for s in (*known, server)]
    return Added(server, tuple(notes))


def remove(kept: ServerRecords, name: str) -> bool:
    """Take the server called ``name`` out of ``kept`` (the caller saves it) and forget
    its key wherever Fireside kept it; False if there is no such server."""
    known = added(kept.servers)
    if not any(s.name == name for s in known):
        return False
    secrets.forget(name)
    kept.servers = [s.to_json() for s in known if s.name != name]
    return True


def travels_unencrypted(url: str) -> bool:
    """Plain http to a host that is neither this computer nor on a private network."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme != "http" or host == "localhost" or host.endswith((".local", ".lan")):
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return True  # a name: where it leads is not known here
    return not (address.is_loopback or address.is_private or address.is_link_local)


def ask_models(server: Server, timeout: float = LIST_TIMEOUT_S) -> Listing:
    """The models ``server`` serves (its ``/models``); the problem, said for people, if
    it cannot be asked. Blocking: call it off any thread that must stay responsive."""
    import openai  # noqa: PLC0415 - only when a server was added

    missing = server.missing_key()
    if missing:
        return Listing(server, problem=missing)
    client = openai.OpenAI(base_url=server.url, api_key=server.key() or "none",
                           max_retries=0,
                           timeout=openai.Timeout(timeout, connect=CONNECT_TIMEOUT_S))
    try:
        with client:
            answer = client.models.with_raw_response.list()
            if "json" not in answer.headers.get("content-type", ""):
                return Listing(server, problem=not_an_api(server))
            models = tuple(RemoteModel(server.name, str(m.id), _context_length(m))
                           for m in answer.parse().data)
    except openai.OpenAIError as err:
        return Listing(server, problem=explain(err, server))
    except (ValueError, TypeError, AttributeError):  # JSON, but not a list of models
        return Listing(server, problem=not_an_api(server))
    return Listing(server, models)


def not_an_api(server: Server) -> str:
    return (f"{server.name} at {server.url} did not answer as an OpenAI-compatible server "
            "does. Check that the address is the API's (it usually ends in /v1).")


def _context_length(model: Any) -> int | None:
    """The context length, where the server says it (fields differ between servers)."""
    extra = getattr(model, "model_extra", None) or {}
    meta = extra.get("meta")
    meta = meta if isinstance(meta, dict) else {}
    for value in (extra.get("context_length"), extra.get("max_model_len"),
                  meta.get("n_ctx_train"), meta.get("n_ctx")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def explain(err: Exception, server: Server) -> str:
    """What went wrong with ``server``, and what to do, in a sentence or two."""
    import openai  # noqa: PLC0415

    where = f"{server.name} at {server.url}"
    if isinstance(err, openai.APITimeoutError):
        return (f"{where} did not answer in time. Check that it is running and not "
                "overloaded, then try again.")
    if isinstance(err, openai.APIConnectionError):
        cause = _root_cause(err)
        if "ssl" in cause.lower() or "certificate" in cause.lower():
            return (f"A secure connection to {where} failed ({cause}). Check the address "
                    "(http or https) and the server's certificate.")
        return (f"Could not connect to {where} ({cause}). Check that the server is running "
                "and the address is right.")
    if isinstance(err, openai.AuthenticationError | openai.PermissionDeniedError):
        hint = (f"Check the key in {server.key_env}." if server.key_env else
                "Check its key in Settings → Servers." if server.key_store else
                "It needs a key: add the server again with its key.")
        return f"{where} refused the key ({_status(err)}). {hint}"
    if isinstance(err, openai.NotFoundError):
        return (f"{where} has no such model or path ({_status(err)}). Check the address "
                "ends in /v1 and that the model is still served.")
    if isinstance(err, openai.RateLimitError):
        return f"{where} is busy ({_status(err)}). Try again in a moment."
    if isinstance(err, openai.InternalServerError):
        return f"{where} failed ({_status(err)}). Its own log says why; try again later."
    if isinstance(err, openai.APIStatusError):
        return f"{where} refused the request ({_status(err)})."
    return not_an_api(server)


def _status(err: Any) -> str:
    return f"HTTP {err.status_code}"


def _root_cause(err: BaseException) -> str:
    while err.__cause__ is not None:
        err = err.__cause__
    text = str(err).strip()
    return text.rsplit("] ", 1)[-1] if text else type(err).__name__
