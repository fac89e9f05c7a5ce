"""A Hugging Face Hub on loopback: the HTTP API ``huggingface_hub`` and Fireside's
downloader use (search, a model's info with each LFS file's sha256, ``resolve`` with a
redirect to a second origin that serves ``Range``, ``If-Range`` and ETags), serving real
GGUF files, with real faults made on demand: a connection cut mid-file, 429 and 503 with
Retry-After, a stall, a file changed between two tries, a wrong sha256, a gated repo."""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

TOKEN = "hf_loopback_token"


@dataclass
class Repo:
    id: str
    files: dict[str, Path]  # repository path -> the real file served
    gated: bool = False
    downloads: int = 0
    likes: int = 0
    modified: str = "2026-01-01T00:00:00.000Z"
    license: str = "apache-2.0"
    commit: str = "0" * 40
    wrong_sha: set[str] = field(default_factory=set)


@dataclass
class Sent:
    path: str
    range: str | None
    status: int
    bytes: int = 0
    at: float = field(default_factory=time.monotonic)  # when it was asked


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while piece := file.read(1 << 20):
            digest.update(piece)
    return digest.hexdigest()


class LoopbackHub:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.sent: list[Sent] = []  # every answer of the file server
        self.api_paths: list[str] = []  # every request to the Hub's API and resolve
        self.cut_at: dict[str, int] = {}  # file name -> close the connection at this offset
        # file name -> (offset, go): from there send nothing until ``go`` is set
        self.stall_at: dict[str, tuple[int, threading.Event]] = {}
        self.busy: list[tuple[int, int]] = []  # (status, Retry-After) for the next answers
        self.pace: float | None = None  # bytes a second a file is sent at; None: at once
        self._sha: dict[Path, str] = {}
        self._blobs: dict[str, Path] = {}
        self._lock = threading.Lock()
        self.hub = _serve(_HubHandler, self)
        self.cdn = _serve(_CdnHandler, self)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.hub.server_address[1]}"

    def add(self, repo_id: str, files: dict[str, Path], **details: object) -> Repo:
        repo = Repo(repo_id, dict(files), **details)  # type: ignore[arg-type]
        repo.commit = hashlib.sha1(repo_id.encode() + str(time.time()).encode()).hexdigest()
        for path in files.values():
            self._blob(path)
        self.repos[repo_id] = repo
        return repo

    def replace(self, repo_id: str, name: str, path: Path) -> None:
        """Another version of the file under the same name: new bytes, sha256, commit."""
        repo = self.repos[repo_id]
        repo.files[name] = path
        self._blob(path)
        repo.commit = hashlib.sha1(repo.commit.encode() + name.encode()).hexdigest()

    def sha(self, path: Path) -> str:
        return self._blob(path)

    def file_bytes_sent(self, name: str) -> int:
        return sum(s.bytes for s in self.sent if s.path.endswith("n=" + quote(name, safe="")))

    def close(self) -> None:
        for server in (self.hub, self.cdn):
            server.shutdown()
            server.server_close()

    def _blob(self, path: Path) -> str:
        if path not in self._sha:
            self._sha[path] = sha256_of(path)
            self._blobs[self._sha[path]] = path
        return self._sha[path]

    # The Hub: its API and resolve -------------------------------------------------------

    def _search(self, query: dict[str, list[str]]) -> list[dict[str, object]]:
        text = (query.get("search") or [""])[0].casefold()
        sort = (query.get("sort") or ["downloads"])[0]
        limit = int((query.get("limit") or ["1000"])[0])
        found = [r for r in self.repos.values() if text in r.id.casefold()]
        key = {"likes": lambda r: r.likes, "lastModified": lambda r: r.modified}.get(
            sort, lambda r: r.downloads)
        found.sort(key=key, reverse=True)
        return [{"id": r.id, "modelId": r.id, "downloads": r.downloads, "likes": r.likes,
                 "lastModified": r.modified, "gated": "manual" if r.gated else False,
                 "tags": ["gguf"]} for r in found[:limit]]

    def _info(self, repo: Repo) -> dict[str, object]:
        siblings = []
        for name, path in repo.files.items():
            sha = self.sha(path)
            if name in repo.wrong_sha:
                sha = hashlib.sha256(b"not " + sha.encode()).hexdigest()
            size = path.stat().st_size
            siblings.append({"rfilename": name, "size": size, "blobId": sha[:40],
                             "lfs": {"sha256": sha, "size": size, "pointerSize": 134}})
        return {"id": repo.id, "modelId": repo.id, "sha": repo.commit,
                "gated": "manual" if repo.gated else False, "private": False,
                "downloads": repo.downloads, "likes": repo.likes,
                "lastModified": repo.modified, "tags": ["gguf", f"license:{repo.license}"],
                "cardData": {"license": repo.license}, "siblings": siblings}

    # The second origin: the files' bytes --------------------------------------------

class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass


def _serve(handler: type[BaseHTTPRequestHandler], hub: LoopbackHub) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.hub = hub  # type: ignore[attr-defined]
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _HubHandler(_Quiet):
    def do_GET(self) -> None:
        hub = self.server.hub  # type: ignore[attr-defined]
        hub.api_paths.append(self.path)
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if url.path == "/api/models":
            return self._json(200, hub._search(query))
        found = re.match(r"^/api/models/([^/]+/[^/]+?)(?:/revision/[^/]+)?$", url.path)
        if found:
            return self._info(unquote(found[1]))
        found = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", url.path)
        if found:
            return self._resolve(unquote(found[1]), unquote(found[3]))
        return self._error(404, None, "Not found")

    do_HEAD = do_GET

    def _info(self, repo_id: str) -> None:
        hub = self.server.hub  # type: ignore[attr-defined]
        repo = hub.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        return self._json(200, hub._info(repo))

    def _resolve(self, repo_id: str, name: str) -> None:
        hub = self.server.hub  # type: ignore[attr-defined]
        repo = hub.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        if repo.gated and self.headers.get("authorization") != f"Bearer {TOKEN}":
            return self._error(401, "GatedRepo", "Access to this model is restricted")
        if name not in repo.files:
            return self._error(404, "EntryNotFound", "Entry not found")
        sha = hub.sha(repo.files[name])
        self.send_response(302)
        cdn = f"http://127.0.0.1:{hub.cdn.server_address[1]}"
        self.send_header("location", f"{cdn}/blob/{sha}?n={quote(name, safe='')}")
        self.send_header("x-repo-commit", repo.commit)
        self.send_header("x-linked-etag", f'"{sha}"')
        self.send_header("x-linked-size", str(repo.files[name].stat().st_size))
        self.send_header("content-length", "0")
        self.end_headers()

    def _json(self, status: int, data: object) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str | None, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        if code:
            self.send_header("x-error-code", code)
        self.send_header("x-error-message", message)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class _CdnHandler(_Quiet):
    def do_GET(self) -> None:
        hub = self.server.hub  # type: ignore[attr-defined]
        url = urlsplit(self.path)
        asked = self.headers.get("range")
        record = Sent(self.path, asked, 0)
        with hub._lock:
            hub.sent.append(record)
            busy = hub.busy.pop(0) if hub.busy else None
        if busy:
            record.status = busy[0]
            return self._empty(busy[0], "retry-after", str(busy[1]))
        sha = url.path.removeprefix("/blob/")
        name = unquote(parse_qs(url.query).get("n", [""])[0])
        path = hub._blobs.get(sha)
        if path is None:
            record.status = 404
            self.send_error(404)
            return
        size = path.stat().st_size
        start, end, status = 0, size - 1, 200
        etag = f'"{sha}"'
        if_range = self.headers.get("if-range")
        found = re.match(r"bytes=(\d+)-(\d*)$", asked or "")
        if found and (if_range is None or if_range == etag):
            start = int(found[1])
            end = min(int(found[2]), size - 1) if found[2] else size - 1
            if start >= size:
                record.status = 416
                return self._empty(416, "content-range", f"bytes */{size}")
            status = 206
        record.status = status
        self.send_response(status)
        self.send_header("etag", etag)
        self.send_header("accept-ranges", "bytes")
        self.send_header("content-length", str(end - start + 1))
        if status == 206:
            self.send_header("content-range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        self._send(path, start, end + 1, name, record)

    def _empty(self, status: int, header: str, value: str) -> None:
        self.send_response(status)
        self.send_header(header, value)
        self.send_header("content-length", "0")
        self.end_headers()

    def _send(self, path: Path, start: int, stop: int, name: str, record: Sent) -> None:
        hub = self.server.hub  # type: ignore[attr-defined]
        with hub._lock:
            cut = hub.cut_at.get(name)
            stall = hub.stall_at.get(name)
            if cut is not None and start <= cut < stop:
                del hub.cut_at[name]
            else:
                cut = None
            if stall is not None and start <= stall[0] < stop:
                del hub.stall_at[name]
            else:
                stall = None
        limit = cut if cut is not None else stop
        with path.open("rb") as file:
            file.seek(start)
            at = start
            try:
                if stall is None and not hub.pace:
                    # As a file server does: the kernel copies the file to the socket,
                    # so the server takes little of the CPU the client is measured on.
                    self.wfile.flush()
                    sent = self.connection.sendfile(file, start, limit - start)
                    at += sent
                    record.bytes += sent
                while at < limit:
                    if stall is not None and at >= stall[0]:
                        self.wfile.flush()
                        stall[1].wait(120)  # holds the connection, sends nothing
                        stall = None
                    end = limit if stall is None else min(limit, stall[0])
                    piece = file.read(min(1 << 16, end - at)) if end > at else b""
                    self.wfile.write(piece)
                    at += len(piece)
                    record.bytes += len(piece)
                    if hub.pace:  # a link of that speed: ahead of it, wait
                        ahead = record.bytes / hub.pace - (time.monotonic() - record.at)
                        if ahead > 0:
                            time.sleep(ahead)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return
        if cut is not None:
            # A cut: the connection ends mid-body, as when the network drops.
            self.connection.shutdown(socket.SHUT_WR)
            self.close_connection = True


def main() -> None:
    """``python tests/loopback_hub.py [--pace BYTES_PER_S] OWNER/REPO=FILE ...``: a Hub in a
    process of its own (for benchmarks, where the server must not share a Python lock
    with the client); prints its address, serves until stdin closes."""
    import sys

    hub = LoopbackHub()
    specs = sys.argv[1:]
    if specs[:1] == ["--pace"]:
        hub.pace, specs = float(specs[1]), specs[2:]
    for spec in specs:
        repo, _, file = spec.partition("=")
        hub.add(repo, {Path(file).name: Path(file)})
    print(hub.endpoint, flush=True)
    sys.stdin.read()
    hub.close()


if __name__ == "__main__":
    main()
