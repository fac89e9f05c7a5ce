"""Fireside's local API: the OpenAI chat-completions routes on 127.0.0.1, answered by the
core's one inference thread in the order requests arrive, queued with the user's chat.

Starlette routes and uvicorn serves (both well kept, and what llama-cpp-python's own
server runs on); sse-starlette frames the event stream and sees a client leave, which
stops that client's reply. Uvicorn runs on a thread of its own with its own event loop,
so neither the window's loop nor the inference thread ever waits on the network. Its
connections must send their requests in good time, and are capped without idle ones
crowding out a client (:mod:`app.api.connections`).
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import uvicorn
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api import embeddings
from app.api.connections import Limits, protocol
from app.core.backend import ReplyHandle
from app.core.conversations.completions import (
    Answer,
    ApiError,
    CompletionRequest,
    error_for,
    finish_reason,
    models_list,
    no_model,
    read_request,
)
from app.core.fireside import Fireside
from app.core.reply.pieces import Pieces, Taken
from app.core.settings import API_PORT as DEFAULT_PORT

logger = logging.getLogger(__name__)
T = TypeVar("T")

HOST = "127.0.0.1"  # never another address: the network wants a real serving engine
PORTS_TRIED = 10  # 8484, else the next free one of these, unless the user chose one
MAX_BODY = 4 * 1024 * 1024
MAX_WAITING = 16
# A stream sends what came in the last FLUSH_S in one chunk (the first piece at once):
# a wake-up of the server and of its client per token would take CPU from the model's
# threads, about 20 % of the decode speed on two cores.
FLUSH_S = 0.05
LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}
LOOPBACK_ORIGIN = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"


class ServeError(Exception):
    """The server could not start; the message is for the user."""


def new_token() -> str:
    return f"fs-{secrets.token_urlsafe(24)}"


class LocalServer:
    """The API for one open core. ``start`` serves on a thread (the window); ``run``
    serves on the calling thread until a signal (``fireside serve``)."""

    def __init__(self, core: Fireside, port: int | None = None, token: str = "",
                 max_waiting: int = MAX_WAITING, limits: Limits | None = None) -> None:
        self.core = core
        self.token = token
        self.max_waiting = max_waiting
        self.waiting = 0  # requests queued behind others
        self.on_change: Callable[[], None] = lambda: None  # any thread; a face adapts it
        self._socket = _bind(port)
        self.port = int(self._socket.getsockname()[1])
        self._replies: set[ReplyHandle] = set()
        self._started = int(time.time())
        self._server = uvicorn.Server(uvicorn.Config(
            self.app(), log_config=None, access_log=False, lifespan="off",
            timeout_graceful_shutdown=1, http=protocol(limits or Limits())))
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    @property
    def busy(self) -> bool:
        """A request is using the model."""
        return self.core.answering

    def run(self) -> None:
        """Serve until SIGINT or SIGTERM (uvicorn's handlers, on the main thread)."""
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._server.serve(sockets=[self._socket])

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="fireside-api", daemon=True)
        self._thread.start()

    def stop_accepting(self, timeout: float = 1.0) -> None:
        """Refuse new connections from now on, waiting (at most ``timeout``) for the
        server's loop to close its listener; the connections open go on."""
        loop, closed = self._loop, threading.Event()

        def close() -> None:
            for listener in self._server.servers:
                listener.close()
            closed.set()

        if loop is None:  # not serving yet
            return
        try:
            loop.call_soon_threadsafe(close)
        except RuntimeError:  # its loop has just ended: nothing listens
            return
        closed.wait(timeout)

    def stop(self, timeout: float = 2.0) -> None:
        """Refuse new connections, stop the requests' replies, close the connections and
        the socket."""
        self.stop_accepting()
        for handle in list(self._replies):
            handle.stop()
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._socket.close()

    # -- the app ---------------------------------------------------------------------

    def app(self) -> ASGIApp:
        routes = [Route("/v1/models", self._models, methods=["GET"]),
                  Route("/v1/chat/completions", self._completions, methods=["POST"]),
                  Route("/v1/embeddings", self._embeddings, methods=["POST"])]
        handlers: dict[Any, Callable[..., Awaitable[Response]]] = {
            HTTPException: _http_error}
        app = Starlette(routes=routes, exception_handlers=handlers, middleware=[
            Middleware(CORSMiddleware, allow_origin_regex=LOOPBACK_ORIGIN,
                       allow_methods=["GET", "POST"], allow_headers=["*"])])
        return _Guard(app, lambda: self.token)

    async def _models(self, _request: Request) -> Response:
        model = self.core.model
        return JSONResponse(models_list(model.name if model else None, self._started))

    async def _completions(self, request: Request) -> Response:
        try:
            asked = read_request(await _json_body(request))
            self._admit()
        except ApiError as err:
            return _error(err)
        except ClientDisconnect:  # it left, or was too slow sending its body
            return Response(status_code=499)
        core = self.core
        # A max_tokens past the room the context leaves is clipped, not refused: the reply
        # ends where the context does (finish_reason "length"), as llama.cpp's own server
        # does. Clients send large values by habit, for a context size they cannot see.
        started = core.answer(
            asked.prompt(),
            lambda model: asked.sampling_for(core.sampling(model.path), model.n_ctx))
        client = _Client(request)
        self._changed(waiting=+1)
        try:
            handle = await client.unless_gone(asyncio.wrap_future(started))
        except _Gone:
            started.cancel()  # never begun; if it has just begun, it is stopped
            started.add_done_callback(_stop_started)
            return Response(status_code=499)
        except Exception as err:  # any refusal goes back in OpenAI's shape
            return _error(error_for(err))
        finally:
            self._changed(waiting=-1)
        self._replies.add(handle)
        handle.future.add_done_callback(lambda _f: self._finished(handle))
        reply = _Reply(asked, Answer(core.model.name if core.model else asked.model), handle,
                       _Arrivals(handle.pieces, asyncio.get_running_loop()))
        try:
            first = await client.unless_gone(reply.arrivals.take())
            if first is None and handle.future.exception() is not None:
                return _error(error_for(handle.future.exception() or Exception()))
            if asked.stream:
                client.close()  # the event stream watches for it from here
                return EventSourceResponse(self._events(reply, first), sep="\n", ping=15)
            return await self._whole(reply, first, client)
        except _Gone:
            handle.stop()
            return Response(status_code=499)
        finally:
            client.close()

    async def _embeddings(self, request: Request) -> Response:
        try:
            body = await _json_body(request)
            texts, encoding = embeddings.read_inputs(body)
            embedded = await asyncio.wrap_future(self.core.documents.embeddings(texts))
            return JSONResponse(embeddings.answer(embedded, encoding, body.get("dimensions")))
        except ApiError as err:
            return _error(err)
        except ClientDisconnect:
            return Response(status_code=499)
        except Exception as err:  # no embedding model, or it could not load
            return _error(ApiError(503, f"No embeddings: {err}", kind="server_error",
                                   code="embedding_model_unavailable"))

    def _admit(self) -> None:
        if self.core.loading:
            raise no_model("A model is loading in Fireside. Ask again in a moment.")
        if self.core.model is None:
            raise no_model()
        if self.waiting >= self.max_waiting:
            raise ApiError(429, f"Fireside is busy: {self.waiting} requests are waiting for "
                           "the model. Ask again later.", kind="requests",
                           code="rate_limit_exceeded")

    async def _whole(self, reply: _Reply, item: Taken | None, client: _Client) -> Response:
        while item is not None:  # the whole reply is in its future once it ends
            item = await client.unless_gone(reply.arrivals.take())
        try:
            done = reply.handle.future.result()
        except Exception as err:
            return _error(error_for(err))
        return JSONResponse(reply.answer.whole(done.text, finish_reason(done.stats),
                                               done.stats, done.thinking, done.tool_calls))

    async def _events(self, reply: _Reply, item: Taken | None) -> AsyncIterator[str]:
        answer = reply.answer
        try:
            yield json.dumps(answer.chunk({"role": "assistant", "content": ""}))
            while item is not None:
                if item.thought:
                    yield json.dumps(answer.chunk({"reasoning_content": item.thought}))
                if item.answer:
                    yield json.dumps(answer.chunk({"content": item.answer}))
                await asyncio.sleep(FLUSH_S)  # what comes meanwhile goes in one chunk
                item = await reply.arrivals.take()
            try:
                done = reply.handle.future.result()
            except Exception as err:  # the headers are sent: say it in the stream
                yield json.dumps(error_for(err).body())
                return
            for chunk in answer.call_chunks(done.tool_calls):
                yield json.dumps(chunk)
            yield json.dumps(answer.last_chunk(finish_reason(done.stats), done.stats))
            if reply.asked.include_usage:
                yield json.dumps(answer.usage_chunk(done.stats))
            yield "[DONE]"
        finally:
            reply.handle.stop()  # the client left (or it is over): free the model

    def _changed(self, waiting: int = 0) -> None:
        self.waiting += waiting
        self.on_change()

    def _finished(self, handle: ReplyHandle) -> None:
        self._replies.discard(handle)
        self.on_change()


class _Arrivals:
    """A reply's pieces as the server's event loop takes them: the writer wakes the loop
    (``call_soon_threadsafe``) only when it waits, as the window's frame clock is."""

    def __init__(self, pieces: Pieces, loop: asyncio.AbstractEventLoop) -> None:
        self._pieces = pieces
        self._ready = asyncio.Event()
        pieces.on_arrival(lambda: loop.call_soon_threadsafe(self._ready.set))

    async def take(self) -> Taken | None:
        """Everything since the last take; None once the reply is over and all taken."""
        while True:
            self._ready.clear()
            taken = self._pieces.take()
            if taken:
                return taken
            if taken.ended:
                return None
            await self._ready.wait()


@dataclass
class _Reply:
    """A request's reply under way: its text arrives through ``arrivals``."""

    asked: CompletionRequest
    answer: Answer
    handle: ReplyHandle
    arrivals: _Arrivals


def _stop_started(started: Any) -> None:
    if not started.cancelled() and started.exception() is None:
        started.result().stop()


class _Gone(Exception):
    """The client closed the connection."""


class _Client:
    """Watches for the client leaving while a request waits for its turn or its text."""

    def __init__(self, request: Request) -> None:
        self._gone = asyncio.ensure_future(_disconnected(request))

    async def unless_gone(self, awaitable: Awaitable[T]) -> T:
        task = asyncio.ensure_future(awaitable)
        await asyncio.wait({task, self._gone}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        task.cancel()
        raise _Gone

    def close(self) -> None:
        self._gone.cancel()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


class _Guard:
    """Refuses what must not reach the model: a Host or a browser Origin that is not
    this computer (a web page driving the user's model: cross-site requests and DNS
    rebinding), and a missing or wrong token when one is set."""

    def __init__(self, app: ASGIApp, token: Callable[[], str]) -> None:
        self._app = app
        self._token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = self._problem(Headers(scope=scope), scope["method"])
            if problem is not None:
                await _error(problem)(scope, receive, send)
                return
        await self._app(scope, receive, send)

    def _problem(self, headers: Headers, method: str) -> ApiError | None:
        if _hostname(f"//{headers.get('host', '')}") not in LOOPBACK_NAMES:
            return ApiError(403, "Fireside's server answers only requests addressed to "
                            "127.0.0.1 or localhost.", code="forbidden_host")
        origin = headers.get("origin")
        if origin is not None and _hostname(origin) not in LOOPBACK_NAMES:
            return ApiError(403, "Fireside's server does not answer web pages from other "
                            "sites.", code="forbidden_origin")
        token = self._token()
        if token and method != "OPTIONS":  # a browser's preflight carries no token
            # RFC 6750: the scheme's name is matched in any case ("bearer KEY").
            scheme, _, given = headers.get("authorization", "").strip().partition(" ")
            given = given.strip() if scheme.lower() == "bearer" else ""
            if not hmac.compare_digest(given.encode(), token.encode()):
                return ApiError(401, "Incorrect or missing token. Fireside's settings show "
                                "the token this server wants.", code="invalid_api_key")
        return None


def _hostname(url: str) -> str:
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


async def _json_body(request: Request) -> Any:
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_BODY:
        raise _too_large()
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise _too_large()
    try:
        return json.loads(body)
    except ValueError as err:
        raise ApiError(400, f"The request body is not valid JSON ({err}).") from None


def _too_large() -> ApiError:
    return ApiError(413, f"The request body is over {MAX_BODY // (1024 * 1024)} MB.",
                    code="request_too_large")


def _error(err: ApiError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status)


async def _http_error(_request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 500)
    message = {404: "There is no such route. Fireside serves GET /v1/models, POST "
                    "/v1/chat/completions and POST /v1/embeddings.",
               405: "This route does not take that method."}.get(status, str(exc))
    return _error(ApiError(status, message))


def _bind(port: int | None) -> socket.socket:
    """A listening socket on loopback: ``port``, or the first free of the usual ones."""
    ports = [port] if port else range(DEFAULT_PORT, DEFAULT_PORT + PORTS_TRIED)
    for candidate in ports:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((HOST, candidate))
            sock.listen(128)
            return sock
        except OSError as err:
            sock.close()
            if err.errno != errno.EADDRINUSE:
                raise ServeError(f"Fireside could not listen on port {candidate}: "
                                 f"{err.strerror}.") from err
    taken = f"Port {port} is" if port else (f"Ports {DEFAULT_PORT} to "
                                           f"{DEFAULT_PORT + PORTS_TRIED - 1} are")
    raise ServeError(f"{taken} taken by another program. Choose another port.")

