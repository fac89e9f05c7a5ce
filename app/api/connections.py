"""The API's connections: a client must send its request in good time, and connections
that send nothing cannot crowd out one that has a request to make.

uvicorn's h11 protocol bounds only the pause between requests on a kept-alive
connection (``timeout_keep_alive``). A client that connects and sends nothing, or a
header byte now and then, is kept for as long as it likes, and ``limit_concurrency``
counts such connections too: once they fill it, the next real client is answered 503.
So the protocol here adds what nginx calls client_header_timeout and
client_body_timeout, and a cap that makes room rather than turning clients away:

- a request's head must arrive whole within ``head_s`` of the server starting to wait
  for it, and its body within ``body_s`` of its head. A deadline is never renewed by a
  byte, so a trickle cannot stretch it; past it, the connection closes. A request that
  has arrived whole may wait for the model as long as the queue takes (its bound is
  the 429 of a full queue).
- at most ``connections`` are open: one more closes the connection that has waited
  longest without sending a whole head (never one whose request is under way), or,
  with no such connection, the newcomer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# Loopback clients send a head in microseconds and 4 MB of body in milliseconds: these
# leave room for a machine busy with its model, and free a stuck connection soon.
HEAD_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
# The queue admits 16 waiting requests (server.MAX_WAITING) and one answered: the rest
# is room for clients' kept-alive connections.
MAX_CONNECTIONS = 64


@dataclass(frozen=True)
class Limits:
    head_s: float = HEAD_TIMEOUT_S
    body_s: float = BODY_TIMEOUT_S
    connections: int = MAX_CONNECTIONS


def protocol(limits: Limits) -> type[asyncio.Protocol]:
    """The protocol class for a server with ``limits`` (uvicorn makes one per
    connection, from ``Config(http=…)``)."""

    class Limited(_Protocol):
        pass

    Limited.limits = limits
    return Limited


class _Protocol(H11Protocol):
    limits = Limits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._awaited: object = None  # the client's h11 state the deadline is for
        self._waiting_since = 0.0  # when the server began waiting for a head

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._follow()
        self._make_room()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()  # kept alive: the next head is awaited

    def connection_lost(self, exc: Exception | None) -> None:
        self._await(None, 0.0)
        super().connection_lost(exc)

    @property
    def waiting_for_head(self) -> bool:
        return self._awaited is h11.IDLE and not self.transport.is_closing()

    def _follow(self) -> None:
        """Set the deadline for what the server now awaits from the client."""
        state = self.conn.their_state
        if state is self._awaited:
            return
        if state is h11.IDLE:
            self._waiting_since = self.loop.time()
            self._await(state, self.limits.head_s)
        elif state is h11.SEND_BODY:
            self._await(state, self.limits.body_s)
        else:  # the request is in, or the connection is ending: nothing is awaited
            self._await(None, 0.0)

    def _await(self, state: object, seconds: float) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._awaited = state
        if state is not None:
            self._deadline = self.loop.call_later(seconds, self._expired)

    def _expired(self) -> None:
        """Too slow: closed. A body cut short reaches the app as the client leaving."""
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def _make_room(self) -> None:
        open_ = [c for c in self.connections
                 if isinstance(c, _Protocol) and not c.transport.is_closing()]
        if len(open_) <= self.limits.connections:
            return
        idle = [c for c in open_ if c.waiting_for_head]
        oldest = min(idle, key=lambda c: c._waiting_since, default=self)
        oldest.transport.close()
