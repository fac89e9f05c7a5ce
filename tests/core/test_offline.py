"""Offline: every connection Fireside would make is refused with a message saying so,
and nothing reaches the network (a real listening socket on loopback counts)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from app.core import settings
from app.core.backend import ModelLoadError
from app.core.models.library import ModelLibrary
from app.core.remote import servers
from app.core.remote.server_backend import RemoteBackend
from app.core.tools.toolbox import Toolbox


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A port on loopback that would notice any connection."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        yield server


def connections(listener: socket.socket) -> int:
    count = 0
    while True:
        try:
            accepted, _ = listener.accept()
        except BlockingIOError:
            return count
        accepted.close()
        count += 1


def offline_with(listener: socket.socket) -> tuple[settings.Settings, str]:
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    prefs = settings.Settings(offline=True)
    prefs.servers = [servers.Server("box", url).to_json()]
    prefs.mcp_servers = {"remote-tools": {"url": url.removesuffix("/v1") + "/mcp"}}
    return prefs, url


def test_offline_asks_no_server_and_loads_none_of_their_models(
        listener: socket.socket) -> None:
    prefs, _ = offline_with(listener)
    library = ModelLibrary(prefs)
    library.ask_servers()
    assert [(listing.server.name, listing.problem) for listing in library.listings] == [
        ("box", "Fireside is offline")]
    backend = RemoteBackend(lambda name: servers.added(prefs.servers)[0],
                            offline=lambda: prefs.offline)
    try:
        with pytest.raises(ModelLoadError, match="Fireside is offline: box is not asked"):
            backend.load(servers.model_path("box", "some-model")).result(timeout=30)
    finally:
        backend.close(timeout=10)
    assert connections(listener) == 0


def test_offline_starts_no_url_tool_server_and_says_why(listener: socket.socket) -> None:
    prefs, _ = offline_with(listener)
    toolbox = Toolbox(prefs)
    try:
        assert toolbox.tools() == ()
        assert toolbox.take_problems() == [
            "Fireside is offline: the tool server 'remote-tools' (a url) is not asked. Turn "
            "Offline off in Settings → Network to use it."]
    finally:
        toolbox.close()
    assert connections(listener) == 0
