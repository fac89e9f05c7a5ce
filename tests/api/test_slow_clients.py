"""Clients that connect and send nothing, or trickle their request a byte at a time, on
real sockets against `fireside serve` and the server as the window starts it: they are
closed at their deadlines or to make room, and a real `openai` client is answered
meanwhile. No assert here reads a clock: each waits for the event itself (a socket the
server closed, a reply), with generous timeouts only as guards against a hang."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from app.api.connections import MAX_CONNECTIONS, Limits
from app.api.server import LocalServer
from app.core import settings
from app.core.fireside import Fireside
from tests.model_server import free_port

GUARD_S = 120.0  # only a hang takes this long
QUESTION = [{"role": "user", "content": "Name three colours."}]


def closed_by_server(sock: socket.socket, deadline: float | None = None) -> bool:
    """Whether the server closes ``sock`` (it reads end of file, or a reset) before
    ``deadline`` (``time.monotonic``; a guard); what it sent before is dropped."""
    deadline = deadline or time.monotonic() + GUARD_S
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def raw_get(port: int, path: str = "/v1/models") -> bytes:
    """A whole request on a connection of its own, and the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=GUARD_S) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Connection: close\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    return answer


def answered(reply: Any) -> bool:
    """The model read the prompt and ended its reply, whatever it wrote."""
    return reply.usage.prompt_tokens > 0 and reply.choices[0].finish_reason in (
        "stop", "length")


class Trickle(threading.Thread):
    """A client that sends a request's head one byte every two seconds and never ends
    it, until the server closes the connection."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        self.closed = threading.Event()
        self.given_up = threading.Event()

    def run(self) -> None:
        while not self.given_up.is_set():
            readable, _, _ = select.select([self.sock], [], [], 2.0)  # the pace, no order
            try:
                if readable and not self.sock.recv(4096):
                    break
                self.sock.sendall(b"X")
            except OSError:  # reset, or a broken pipe: closed by the server
                break
        else:
            return  # the test gave up on it
        self.closed.set()


@pytest.fixture
def serve_command(smollm2_path: Path) -> Iterator[int]:
    """`fireside serve` on a port of its own, answering; its port."""
    port = free_port()
    served = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port), "--model",
         str(smollm2_path)], stderr=subprocess.PIPE, text=True)
    try:
        assert served.stderr is not None
        for line in served.stderr:
            if "Serving" in line:
                break
        else:
            pytest.fail(f"fireside serve ended with {served.wait()}")
        # The rest is read, so that no message can fill the pipe and stall the server.
        threading.Thread(target=served.stderr.read, daemon=True).start()
        yield port
    finally:
        served.terminate()
        assert served.wait(timeout=30) == 0


def test_two_hundred_idle_and_trickling_connections_keep_no_client_waiting(
        serve_command: int) -> None:
    port = serve_command
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(100)]
    trickles = [Trickle(port) for _ in range(100)]
    for trickle in trickles:
        trickle.start()
    try:
        assert len(idle) + len(trickles) > MAX_CONNECTIONS  # the cap is full of them
        # One more connection is answered only once the server has taken those before
        # it: the kernel hands connections over in the order they came.
        assert raw_get(port).startswith(b"HTTP/1.1 200")
        with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none",
                           max_retries=0, timeout=GUARD_S) as api:
            reply = api.chat.completions.create(model="any", messages=QUESTION,
                                                max_tokens=8)
        assert answered(reply)
        # None of them is kept: closed to make room, or at the head's deadline, which
        # a byte now and then does not put off.
        guard = time.monotonic() + GUARD_S  # for all of them together
        assert all(closed_by_server(sock, guard) for sock in idle)
        for trickle in trickles:
            kept = not trickle.closed.wait(max(0.01, guard - time.monotonic()))
            assert not kept, "a trickling client was kept"
    finally:
        for trickle in trickles:
            trickle.given_up.set()
        for trickle in trickles:
            trickle.join(5)
            trickle.sock.close()
        for sock in idle:
            sock.close()


@pytest.fixture
def core(smollm2_path: Path) -> Iterator[Fireside]:
    prefs = settings.load().settings
    prefs.temperature, prefs.seed = 0.0, 1
    core = Fireside.open(prefs=prefs)
    core.load(smollm2_path).result()
    yield core
    core.close()


@pytest.fixture
def quick_server(core: Fireside) -> Iterator[LocalServer]:
    """The server as the window starts it, with deadlines of a second."""
    server = LocalServer(core, free_port(), limits=Limits(head_s=1.0, body_s=1.0))
    server.start()
    yield server
    server.stop()


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.01)


def test_a_body_that_stops_coming_closes_its_connection_and_the_server_goes_on(
        quick_server: LocalServer) -> None:
    with socket.create_connection(("127.0.0.1", quick_server.port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 400\r\n\r\n"
                     b'{"model": "any", "messages": [')
        assert closed_by_server(sock)
    assert raw_get(quick_server.port).startswith(b"HTTP/1.1 200")


def test_requests_in_the_queue_and_streams_outlive_the_deadlines(
        quick_server: LocalServer) -> None:
    """The deadlines are for reading a request: one that has arrived waits for the
    model, and a reply streams, however long that takes."""
    got: dict[str, Any] = {}
    api = openai.OpenAI(base_url=quick_server.url, api_key="none", max_retries=0,
                        timeout=GUARD_S)
    stream = api.chat.completions.create(
        model="any", messages=[{"role": "user", "content": "Tell a very long story."}],
        stream=True, max_tokens=4000)
    chunks = iter(stream)
    next(chunks)
    queued = threading.Thread(target=lambda: got.update(reply=api.chat.completions.create(
        model="any", messages=QUESTION, max_tokens=8)))
    queued.start()
    try:
        wait_for(lambda: quick_server.waiting == 1, "the second request queued")
        # A connection opened after both: once its head deadline has passed, theirs
        # have too, had they any.
        with socket.create_connection(("127.0.0.1", quick_server.port)) as late:
            assert closed_by_server(late)
        assert next(chunks).choices is not None  # the stream goes on
    finally:
        stream.close()  # the client leaves: the model turns to the queued request
        queued.join(GUARD_S)
        api.close()
    assert answered(got["reply"])
