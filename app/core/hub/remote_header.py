"""A GGUF file's header read from the Hub by HTTP ranges: the metadata and the tensor
table (a few MB at most, the vocabulary's strings partly skipped), never the weights,
so the fit on this machine is known before the download."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.core.hub.access import BUSY, HubAccess, HubError, refusal, retry_after
from app.core.hub.listing import ModelChoice
from app.core.models.gguf import GGUFError, GGUFHeader, joined, read_header_from

if TYPE_CHECKING:
    import httpx2

BLOCK = 512 << 10  # bytes fetched at least per request
_TRIES = 4
_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


class RangeFile:
    """A file on a server, read with seek and read as the GGUF reader does; each read
    fetches only the blocks it lacks, in one request."""

    def __init__(self, client: httpx2.Client, url: str, repo: str, name: str) -> None:
        self._client, self._url, self._repo, self._name = client, url, repo, name
        self._blocks: dict[int, bytes] = {}
        self._pos = 0
        self.fetched = 0  # bytes received
        self.requests = 0
        self.size = 0
        self._get(0, 1)  # the size, and the final address past the Hub's redirect

    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = pos if whence == 0 else (self._pos + pos if whence == 1 else self.size + pos)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n < 0 else min(self.size, self._pos + n)
        if end <= self._pos:
            return b""
        first, last = self._pos // BLOCK, (end - 1) // BLOCK
        missing = [b for b in range(first, last + 1) if b not in self._blocks]
        if missing:
            self._get(missing[0], missing[-1] - missing[0] + 1)
        data = b"".join(self._blocks[b] for b in range(first, last + 1))
        start = self._pos - first * BLOCK
        out = data[start:start + end - self._pos]
        self._pos += len(out)
        return out

    def _get(self, block: int, count: int) -> None:
        start = block * BLOCK
        stop = start + count * BLOCK - 1
        if self.size:
            stop = min(stop, self.size - 1)
        for attempt in range(_TRIES):
            self.requests += 1
            with self._client.stream("GET", self._url,
                                     headers={"range": f"bytes={start}-{stop}"}) as answer:
                if answer.status_code in BUSY and attempt < _TRIES - 1:
                    time.sleep(retry_after(answer.headers, attempt))
                    continue
                if answer.status_code == 200:
                    raise HubError(f"{self._name}: the server sends only whole files, so its "
                                   "header cannot be read before downloading it")
                if answer.status_code != 206:
                    raise refusal(answer.status_code, self._repo, self._name)
                span = _RANGE.match(answer.headers.get("content-range", ""))
                if not span or int(span[1]) != start:
                    raise HubError(f"{self._name}: the server sent another part of the file "
                                   "than the one asked for")
                self.size = int(span[3])
                self._url = str(answer.url)  # the file's host, past the Hub's redirect
                body = answer.read()
            self.fetched += len(body)
            for i in range(count):
                piece = body[i * BLOCK:(i + 1) * BLOCK]
                if piece:
                    self._blocks[block + i] = piece
            return
        raise HubError(f"{self._name}: the Hub stayed busy; try again later")


@dataclass(frozen=True)
class RemoteHeader:
    header: GGUFHeader  # a split model's shards' tensors together, as the catalog does
    fetched: int  # bytes received to read it
    requests: int


def read(access: HubAccess, repo: str, commit: str, choice: ModelChoice) -> RemoteHeader:
    """The header of ``choice`` (every shard's tensor table), read by ranges."""
    import httpx2  # noqa: PLC0415

    headers, fetched, requests = [], 0, 0
    with access.client() as client:
        for file in choice.files:
            try:
                remote = RangeFile(client, access.file_url(repo, commit, file.name), repo,
                                   file.name)
                headers.append(read_header_from(remote, remote.size, file.name))  # type: ignore[arg-type]
            except GGUFError as error:
                raise HubError(f"{file.name} is not a usable GGUF file: {error.reason}") \
                    from None
            except httpx2.TransportError as error:
                raise HubError(f"cannot reach {access.endpoint}: "
                               f"{str(error) or type(error).__name__}") from None
            fetched += remote.fetched
            requests += remote.requests
    return RemoteHeader(joined(headers), fetched, requests)
