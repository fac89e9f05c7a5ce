"""How Fireside reaches the Hub: its address (a mirror's, when the user set one), the
token for gated models, the Offline switch, and the one HTTP client downloads and
header reads go through.

``huggingface_hub`` runs with its telemetry off: with it on, an ordinary call also
fetches ``/api/agent-harnesses`` on its own, which is not what the user asked for.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.core.remote import secrets
from app.core.settings import Settings

if TYPE_CHECKING:
    import httpx2
    from huggingface_hub.hf_api import HfApi

PUBLIC_HUB = "https://huggingface.co"
TOKEN_NAME = "Hugging Face Hub"  # the token's name in the keyring, apart from servers'
CONNECT_TIMEOUT_S = 15.0
READ_BYTES = 1 << 20
STALL_S = 30.0  # no byte for this long: the connection is dropped and made again


class HubError(Exception):
    """Something the user should read: the Hub refused, a file is not there, no network."""


class Offline(HubError):
    def __init__(self) -> None:
        super().__init__("Fireside is offline: it makes no connection. Turn Offline off "
                         "(Settings → Network) to search the Hub or download.")


def _quiet_library() -> None:
    """Telemetry off before ``huggingface_hub`` reads its settings, and after, in case
    another library imported it first."""
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    from huggingface_hub import constants  # noqa: PLC0415 - only when the Hub is asked

    constants.HF_HUB_DISABLE_TELEMETRY = True


@dataclass(frozen=True)
class HubAccess:
    endpoint: str
    token: str | None = None
    offline: bool = False
    stall_s: float = STALL_S

    @classmethod
    def from_settings(cls, prefs: Settings) -> HubAccess:
        """The setting's address, else HF_ENDPOINT, else the public Hub; the token kept
        in the keyring, else HF_TOKEN."""
        endpoint = prefs.hub_endpoint.strip() or os.environ.get("HF_ENDPOINT", "") \
            or PUBLIC_HUB
        kept = secrets.store_named(prefs.hub_token_kept)
        token = secrets.find(TOKEN_NAME, kept) if kept else None
        stall = float(os.environ.get("FIRESIDE_HUB_STALL_S", STALL_S))
        return cls(endpoint.rstrip("/"), token or os.environ.get("HF_TOKEN") or None,
                   prefs.offline, stall)

    def check(self) -> None:
        if self.offline:
            raise Offline

    def api(self) -> HfApi:
        self.check()
        _quiet_library()
        # From its module, not the package's lazy names: a bundler follows this import.
        from huggingface_hub.hf_api import HfApi  # noqa: PLC0415 - slow, rarely needed

        from app import __version__  # noqa: PLC0415

        # token=False: a token only when the user gave one (keyring or HF_TOKEN), never
        # one another program left on disk.
        return HfApi(endpoint=self.endpoint, token=self.token or False,
                     library_name="fireside", library_version=__version__)

    def client(self) -> httpx2.Client:
        """For the file downloads and header reads: redirects followed (the Hub sends a
        file's bytes from another host, without the token), a stall bounded."""
        self.check()
        import httpx2  # noqa: PLC0415
        from httpcore2._sync.http11 import HTTP11Connection  # noqa: PLC0415

        from app import __version__  # noqa: PLC0415

        # Reads of 1 MB, not httpcore's 64 KB: past a few hundred MB/s (a fast link, a
        # mirror on the same network) each read's Python costs more than its bytes.
        HTTP11Connection.READ_NUM_BYTES = max(HTTP11Connection.READ_NUM_BYTES, READ_BYTES)
        headers: dict[str, Any] = {"user-agent": f"fireside/{__version__}"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        timeout = httpx2.Timeout(CONNECT_TIMEOUT_S, read=self.stall_s)
        return httpx2.Client(headers=headers, timeout=timeout, follow_redirects=True)

    def file_url(self, repo: str, revision: str, name: str) -> str:
        from urllib.parse import quote  # noqa: PLC0415

        return f"{self.endpoint}/{repo}/resolve/{quote(revision, safe='')}/{quote(name)}"


def keep_token(prefs: Settings, token: str) -> str | None:
    """Keep the user's Hub token (the keyring, as servers' keys); "" forgets it."""
    secrets.forget(TOKEN_NAME)
    prefs.hub_token_kept = ""
    if token.strip():
        prefs.hub_token_kept = secrets.keep(TOKEN_NAME, token.strip())
    return prefs.hub_token_kept or None


BUSY = (429, 503)  # the Hub or its CDN asks to come back later
MAX_WAIT_S = 60.0


def retry_after(headers: Any, attempt: int) -> float:
    """How long to wait before trying again: the server's Retry-After (seconds) when it
    gave one, else a backoff doubling from 1 s; never more than a minute."""
    given = str(headers.get("retry-after", "")).strip()
    if given.isdigit():
        return min(float(given), MAX_WAIT_S)
    return min(2.0 ** attempt, MAX_WAIT_S)


def refusal(status: int, repo: str, name: str) -> HubError:
    """A download or header read the Hub refused, as a message."""
    if status in (401, 403):
        return HubError(f"{repo} is gated or private: accept its terms on the Hub, then add "
                        f"a token (Settings → Network, or HF_TOKEN)")
    if status == 404:
        return HubError(f"{name} is not in {repo} (404)")
    if status == 416:
        return HubError(f"{name}: the server refused the part of the file asked for (416)")
    return HubError(f"{name}: the Hub answered {status}")
