"""Fireside's local API with clients no one here wrote (the official `openai` package and
curl) against the real bundled models: answers, streams, the queue shared with the
user's chat, clients that leave, model switches, and what must be refused."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from app.api.server import MAX_BODY, LocalServer, ServeError
from app.core import settings
from app.core.fireside import Fireside
from tests.model_server import free_port

QUESTION = "Name three colours."
SMOLLM2 = "SmolLM2-135M-Instruct"  # the name the loaded model goes by
LONG = 4000  # tokens: a reply no test waits for to the end
# A call its grammar cannot close in fewer than a thousand tokens: forced, a reply runs
# to its max_tokens, or to the context's end, whatever the model would have written.
ENDLESS = {"type": "function", "function": {
    "name": "record", "description": "Record the numbers.",
    "parameters": {"type": "object", "required": ["numbers"], "properties": {
        "numbers": {"type": "array", "items": {"type": "integer"}, "minItems": 500}}}}}


@pytest.fixture
def core(smollm2_path: Path) -> Iterator[Fireside]:
    prefs = settings.load().settings
    prefs.temperature, prefs.seed, prefs.context_size = 0.0, 1, 8192
    core = Fireside.open(prefs=prefs)
    core.load(smollm2_path).result()
    yield core
    core.close()


Serve = Callable[..., LocalServer]


@pytest.fixture
def serve(core: Fireside) -> Iterator[Serve]:
    started: list[LocalServer] = []

    def start(**options: Any) -> LocalServer:
        server = LocalServer(core, free_port(), **options)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def client(server: LocalServer, key: str = "none", **options: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key=key, max_retries=0, **options)


def ask(server: LocalServer, text: str = QUESTION, **fields: Any) -> Any:
    fields = {"max_tokens": 24, "temperature": 0, "seed": 1, **fields}
    with client(server) as api:
        return api.chat.completions.create(
            model="anything", messages=[{"role": "user", "content": text}], **fields)


def streamed(server: LocalServer, text: str = QUESTION, **fields: Any) -> tuple[str, Any]:
    """The text of a streamed answer, and its last chunk: the usage, and the finish
    reason (``finish``) of the chunk before it."""
    fields = {"max_tokens": 24, "temperature": 0, "seed": 1, **fields}
    parts, last, finish = [], None, None
    with client(server) as api:
        for chunk in api.chat.completions.create(
                model="anything", messages=[{"role": "user", "content": text}], stream=True,
                stream_options={"include_usage": True}, **fields):
            parts += [c.delta.content or "" for c in chunk.choices]
            finish = next((c.finish_reason for c in chunk.choices if c.finish_reason), finish)
            last = chunk
    assert last is not None and last.choices == [] and finish in ("stop", "length")
    last.finish = finish
    return "".join(parts), last


def curl(*args: str) -> tuple[int, str]:
    """curl's status line and body for a request to the server."""
    done = subprocess.run(["curl", "-sS", "-N", "-w", "\n%{http_code}", *args],
                          capture_output=True, text=True, timeout=120, check=False)
    body, _, status = done.stdout.rpartition("\n")
    return int(status or 0), body


def test_the_loaded_model_answers_as_it_does_in_fireside_streamed_or_not(
        core: Fireside, serve: Serve) -> None:
    server = serve()
    with client(server) as api:
        raw = api.models.with_raw_response.list()
        listed = raw.parse().data
    assert raw.status_code == 200 and raw.headers["content-type"] == "application/json"
    assert [m.id for m in listed] == [SMOLLM2]
    whole = ask(server)
    text, last = streamed(server)
    assert whole.choices[0].message.content == text and text.strip()
    assert whole.model == SMOLLM2 and whole.choices[0].finish_reason in (
        "stop", "length")
    assert last.usage.completion_tokens == whole.usage.completion_tokens > 0
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens > 5
    # The same words the user gets in the window for the same question and settings.
    core.session = dataclasses.replace(core.session, sampling={"max_tokens": 24})
    turn = core.send(QUESTION).result()
    assert turn.future.result().reply.text == text


def test_limits_and_stop_strings_end_a_reply_as_openai_does(serve: Serve) -> None:
    server = serve()
    capped = ask(server, max_tokens=5)
    assert capped.choices[0].finish_reason == "length" and capped.usage.completion_tokens == 5
    newer = ask(server, max_tokens=None, max_completion_tokens=5)
    assert newer.choices[0].message.content == capped.choices[0].message.content
    free = ask(server, "Count from 1 to 20, separated by commas.", max_tokens=60)
    text = free.choices[0].message.content
    stop = text[len(text) // 2:len(text) // 2 + 3]
    cut = ask(server, "Count from 1 to 20, separated by commas.", max_tokens=60, stop=[stop])
    assert cut.choices[0].message.content == text[:text.find(stop)]
    assert cut.choices[0].finish_reason == "stop"
    streamed_cut, _ = streamed(server, "Count from 1 to 20, separated by commas.",
                               max_tokens=60, stop=stop)
    assert streamed_cut == text[:text.find(stop)]


def test_curl_reads_the_event_stream_and_bad_requests_get_openais_errors(
        serve: Serve) -> None:
    server = serve()
    body = json.dumps({"model": "x", "stream": True, "max_tokens": 8,
                       "messages": [{"role": "user", "content": QUESTION}]})
    status, stream = curl(f"{server.url}/chat/completions", "-H",
                          "Content-Type: application/json", "-d", body)
    events = [line.removeprefix("data: ") for line in stream.splitlines() if line]
    assert status == 200 and events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"

    def error(*args: str) -> tuple[int, dict[str, Any]]:
        status, body = curl(*args)
        return status, json.loads(body)["error"]

    status, err = error(f"{server.url}/chat/completions", "-d", "{not json")
    assert status == 400 and "not valid JSON" in err["message"]
    status, err = error(f"{server.url}/nowhere")
    assert status == 404 and "/v1/chat/completions" in err["message"]
    status, err = error(f"{server.url}/chat/completions", "-d",
                        json.dumps({"model": "x", "messages": []}))
    assert status == 400 and err["param"] == "messages"
    status, err = error(f"{server.url}/chat/completions", "-d", json.dumps(
        {"model": "x", "messages": [{"role": "user", "content": "hi"}], "n": 2}))
    assert status == 400 and err["code"] == "unsupported_parameter"
    big = "x" * (MAX_BODY + 1)
    done = subprocess.run(["curl", "-sS", "-w", "\n%{http_code}", "-H", "Expect:",
                           "--data-binary", "@-", f"{server.url}/chat/completions"],
                          input=big, capture_output=True, text=True, timeout=60, check=False)
    body, _, code = done.stdout.rpartition("\n")
    assert code == "413" and json.loads(body)["error"]["code"] == "request_too_large"


def test_a_prompt_longer_than_the_context_is_refused_with_openais_code(
        serve: Serve) -> None:
    server = serve()
    with pytest.raises(openai.BadRequestError) as refused:
        ask(server, "the colour of the sea " * 3000)
    assert refused.value.code == "context_length_exceeded"
    assert ask(server).choices[0].message.content  # and the next one is answered


def test_max_tokens_past_the_context_is_clipped_to_the_room_left(smollm2_path: Path) -> None:
    prefs = settings.load().settings
    prefs.temperature, prefs.context_size = 0.0, 512
    core = Fireside.open(prefs=prefs)
    n_ctx = core.load(smollm2_path).result().n_ctx
    server = LocalServer(core, free_port())
    server.start()
    try:
        def endless(max_tokens: int) -> Any:
            return ask(server, "Count.", max_tokens=max_tokens, tools=[ENDLESS],
                       tool_choice="required")

        within = endless(20)
        assert within.choices[0].finish_reason == "length"
        assert within.usage.completion_tokens == 20
        beyond = endless(100 * n_ctx)  # answered, not refused: to the end of the context
        assert beyond.choices[0].finish_reason == "length"
        assert beyond.usage.prompt_tokens + beyond.usage.completion_tokens == n_ctx
        assert not beyond.choices[0].message.tool_calls  # a call cut short is no call
    finally:
        server.stop()
        core.close()


def test_web_pages_other_hosts_and_wrong_tokens_are_refused(serve: Serve) -> None:
    server = serve(token="sesame-31")
    with pytest.raises(openai.AuthenticationError):
        client(server, "wrong").models.list()
    status, body = curl(f"{server.url}/models")  # no token at all
    assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
    assert client(server, "sesame-31").models.list().data
    # RFC 6750: the scheme is named in any case; another scheme is no bearer token.
    for header in ("bearer sesame-31", "BEARER sesame-31", "Bearer   sesame-31 "):
        status, _ = curl(f"{server.url}/models", "-H", f"Authorization: {header}")
        assert status == 200, header
    for header in ("Basic sesame-31", "sesame-31", "Bearer", "Bearersesame-31"):
        status, _ = curl(f"{server.url}/models", "-H", f"Authorization: {header}")
        assert status == 401, header
    status, _ = curl(f"{server.url}/models", "-H", "Authorization: Bearer sesame-31",
                     "-H", "Origin: https://evil.example")
    assert status == 403
    status, _ = curl(f"{server.url}/models", "-H", "Authorization: Bearer sesame-31",
                     "-H", "Host: rebound.example")  # DNS rebinding: a name that led here
    assert status == 403
    status, _ = curl(f"{server.url}/models", "-H", "Authorization: Bearer sesame-31",
                     "-H", "Origin: http://localhost:3000")  # a page on this computer
    assert status == 200
    # A browser asks first (a preflight, with no token): a page on this computer may go
    # on, a page of another site may not.
    preflight = ("-X", "OPTIONS", "-D", "-", "-H", "Access-Control-Request-Method: POST",
                 "-H", "Access-Control-Request-Headers: authorization, content-type")
    status, head = curl(f"{server.url}/chat/completions", *preflight,
                        "-H", "Origin: http://localhost:3000")
    assert status == 200
    assert "access-control-allow-origin: http://localhost:3000" in head.lower()
    status, _ = curl(f"{server.url}/chat/completions", *preflight,
                     "-H", "Origin: https://evil.example")
    assert status == 403


def test_a_port_in_use_is_said_and_the_default_moves_to_the_next_free_one(
        core: Fireside) -> None:
    first = LocalServer(core, free_port())
    try:
        with pytest.raises(ServeError, match=f"Port {first.port} is taken"):
            LocalServer(core, first.port)
    finally:
        first.stop()


def test_concurrent_clients_are_answered_one_at_a_time_in_arrival_order(
        serve: Serve) -> None:
    server = serve()
    prompts = [f"Write one sentence about the number {n}." for n in range(8)]
    alone = {p: ask(server, p).choices[0].message.content for p in prompts}
    firsts: list[int] = []
    # Each request is sent once the one before has arrived: the server queued it.
    arrived = [threading.Event() for _ in prompts]
    queued = [server.waiting]

    def on_change() -> None:  # on the server's thread, once per change
        if server.waiting > queued[0]:
            arrived[sum(e.is_set() for e in arrived)].set()
        queued[0] = server.waiting

    server.on_change = on_change

    async def one(api: openai.AsyncOpenAI, n: int) -> str:
        if n:
            assert await asyncio.to_thread(arrived[n - 1].wait, 120)
        parts = []
        stream = await api.chat.completions.create(
            model="x", messages=[{"role": "user", "content": prompts[n]}], stream=True,
            max_tokens=24, temperature=0, seed=1)
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                if not parts:
                    firsts.append(n)
                parts.append(chunk.choices[0].delta.content)
        return "".join(parts)

    async def all_of_them() -> list[str]:
        async with openai.AsyncOpenAI(base_url=server.url, api_key="none",
                                      max_retries=0) as api:
            return await asyncio.gather(*(one(api, n) for n in range(8)))

    answers = asyncio.run(all_of_them())
    assert all(e.is_set() for e in arrived)
    assert answers == [alone[p] for p in prompts]  # none mixed into another
    assert firsts == list(range(8))


def test_the_users_chat_waits_for_a_request_and_neither_cancels_the_other(
        core: Fireside, serve: Serve) -> None:
    server = serve()
    got: dict[str, Any] = {}
    request = threading.Thread(target=lambda: got.update(
        api=streamed(server, "Tell a long story.", max_tokens=80, tools=[ENDLESS],
                     tool_choice="required")))
    request.start()
    deadline = time.monotonic() + 60
    while not core.answering and time.monotonic() < deadline:
        time.sleep(0.01)
    assert core.answering
    turn = core.send(QUESTION, preempt=True).result()  # as the window sends
    result = turn.future.result()
    request.join()
    _, last = got["api"]
    # The request ran to its own end, not cut by the user's message: a call that cannot
    # close before its max_tokens ends only there.
    assert last.finish == "length" and last.usage.completion_tokens == 80
    assert result.reply.text and result.reply.stats.finish_reason in ("stop", "length")


def test_a_client_that_leaves_stops_its_reply_and_frees_the_model(
        core: Fireside, serve: Serve) -> None:
    server = serve()
    with client(server) as api:
        stream = api.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "Tell a very long story."}],
            stream=True, max_tokens=LONG, temperature=0)
        for pieces, _chunk in enumerate(stream, 1):
            if pieces == 5:
                break
        stream.close()
    deadline = time.monotonic() + 10  # the whole reply would take about a minute
    while core.answering and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not core.answering, "the reply went on after its client left"
    assert ask(server).choices[0].message.content  # the next one is served


def test_a_queue_past_its_bound_is_answered_busy(serve: Serve) -> None:
    server = serve(max_waiting=1)
    threads = [threading.Thread(target=lambda: ask(server, "Tell a long story.",
                                                   max_tokens=400)) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.3)
    deadline = time.monotonic() + 30
    while server.waiting < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(openai.RateLimitError, match="requests are waiting"):
        ask(server)
    for thread in threads:
        thread.join()


def test_a_model_switch_lets_waiting_requests_finish_and_the_next_gets_the_new_model(
        core: Fireside, serve: Serve, gemma_path: Path) -> None:
    server = serve()
    story = "Write a long story about a lighthouse keeper and a storm."
    whole = ask(server, story, max_tokens=120)  # the same request, with no switch coming
    done: list[Any] = []
    first = threading.Thread(target=lambda: done.append(ask(server, story, max_tokens=120)))
    first.start()
    deadline = time.monotonic() + 60
    while not core.answering and time.monotonic() < deadline:
        time.sleep(0.01)
    switched = core.load(gemma_path, preempt=True)  # as the picker asks
    with pytest.raises(openai.InternalServerError, match="loading"):
        ask(server)  # while the switch waits its turn
    first.join()
    switched.result()
    assert done[0].model == SMOLLM2
    # Not cut by the switch: all of it, as without one.
    assert done[0].choices[0].message.content == whole.choices[0].message.content
    assert done[0].usage.completion_tokens == whole.usage.completion_tokens
    after = ask(server)
    assert after.model == "Gemma 3 270M" and after.choices[0].message.content


def test_with_no_model_loaded_requests_are_told_so(tmp_path: Path) -> None:
    core = Fireside.open()
    server = LocalServer(core, free_port())
    server.start()
    try:
        with pytest.raises(openai.InternalServerError, match="No model is loaded"):
            ask(server)
        assert client(server).models.list().data == []
    finally:
        server.stop()
        core.close()


def test_a_shared_prefix_is_read_once(serve: Serve) -> None:
    server = serve()
    system = {"role": "system", "content": "You are a careful assistant. " * 80}
    with client(server) as api:
        def ask_with(text: str) -> Any:
            return api.chat.completions.create(
                model="x", messages=[system, {"role": "user", "content": text}],
                max_tokens=4, temperature=0)
        cold = ask_with("First question?")
        warm = ask_with("Second question?")
    assert cold.usage.prompt_tokens > 400
    assert warm.usage.prompt_tokens_details.cached_tokens > 0.9 * cold.usage.prompt_tokens


def test_a_thinking_models_thought_comes_as_reasoning_content_never_as_content(
        thinking_model_path: Path) -> None:
    prefs = settings.load().settings
    prefs.temperature, prefs.seed, prefs.thinking_budget = 0.0, 1, 20
    core = Fireside.open(prefs=prefs)
    server = LocalServer(core, free_port())
    try:
        core.load(thinking_model_path).result()
        server.start()
        story = "Write a long story about a dragon who loves tea."
        whole = ask(server, story, max_tokens=80)
        message = whole.choices[0].message
        thought = getattr(message, "reasoning_content", None)
        assert thought and message.content and "think>" not in message.content + thought
        assert 0 < whole.usage.completion_tokens_details.reasoning_tokens <= 22
        thoughts, answers = [], []
        with client(server) as api:
            for chunk in api.chat.completions.create(
                    model="anything", messages=[{"role": "user", "content": story}],
                    stream=True, max_tokens=80, temperature=0, seed=1):
                for choice in chunk.choices:
                    thoughts.append(getattr(choice.delta, "reasoning_content", None) or "")
                    answers.append(choice.delta.content or "")
        assert ("".join(thoughts), "".join(answers)) == (thought, message.content)
        # reasoning_effort "none" switches thinking off, as the thinking setting does.
        off = ask(server, story, max_tokens=40, reasoning_effort="none")
        assert not getattr(off.choices[0].message, "reasoning_content", None)
        assert off.usage.completion_tokens_details.reasoning_tokens == 0
    finally:
        server.stop()
        core.close()
