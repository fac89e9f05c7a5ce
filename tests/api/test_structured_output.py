"""Replies held to a JSON schema through the local API, as OpenAI clients ask for them
(``response_format``), on the real bundled models: the official client's ``parse``
helper gets its object back, every reply validates, streamed or not, ``json_object``
gives an object; what cannot be held is refused before any model work, with the part
named."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from app.api.server import LocalServer
from app.core import settings
from app.core.fireside import Fireside
from tests.api.test_tools import api
from tests.model_server import free_port

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 20},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["friend", "colleague", "family"]},
             "maxItems": 3}},
    "required": ["name", "age", "tags"], "additionalProperties": False}
AS_PERSON = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON,
                                                    "strict": True}}
ASK = [{"role": "user", "content": "Alice is 30 and a friend from work. Describe her."}]
# The schema bounds the reply (a name of 20 characters at most, three tags): it ends
# well within this many tokens, so a reply is never cut short of its closing brace.
ROOM = 160


class Person(BaseModel):
    name: str = Field(max_length=20)
    age: int = Field(ge=0, le=120)
    tags: list[Literal["friend", "colleague", "family"]] = Field(max_length=3)


@pytest.fixture(scope="module", params=["smollm2_path", "gemma_path"])
def server(request: pytest.FixtureRequest) -> Iterator[LocalServer]:
    prefs = settings.load().settings
    prefs.temperature, prefs.seed = 0.7, 1
    core = Fireside.open(prefs=prefs)
    core.load(request.getfixturevalue(request.param)).result()
    server = LocalServer(core, free_port())
    server.start()
    yield server
    server.stop()
    core.close()


def test_the_clients_parse_helper_gets_its_object_back(server: LocalServer) -> None:
    with api(server) as client:
        for seed in (1,):
            reply = client.chat.completions.parse(
                model="any", messages=ASK, response_format=Person, seed=seed,
                max_tokens=ROOM)
            choice = reply.choices[0]
            assert choice.finish_reason == "stop"
            assert isinstance(choice.message.parsed, Person), choice.message.content
            assert choice.message.refusal is None


def test_every_reply_follows_the_schema_streamed_or_not(server: LocalServer) -> None:
    with api(server) as client:
        for seed in (1, 2):
            whole = client.chat.completions.create(
                model="any", messages=ASK, response_format=AS_PERSON, seed=seed,
                max_tokens=ROOM)
            assert whole.choices[0].finish_reason == "stop"
            jsonschema.validate(json.loads(whole.choices[0].message.content or ""), PERSON)
            chunks = list(client.chat.completions.create(
                model="any", messages=ASK, response_format=AS_PERSON, seed=seed,
                max_tokens=ROOM, stream=True))
            text = "".join(c.delta.content or "" for ch in chunks for c in ch.choices)
            finishes = [c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason]
            assert finishes == ["stop"]
            jsonschema.validate(json.loads(text), PERSON)
            # The same seed: the same reply, whichever way it comes.
            assert text == whole.choices[0].message.content


def test_json_object_gives_an_object_and_text_gives_free_text(server: LocalServer) -> None:
    # Any object: nothing bounds its length, so the model is shown the kind wanted (as
    # OpenAI asks too), and takes its likeliest tokens.
    ask = [{"role": "user", "content": 'Reply with a JSON object such as {"colour": '
                                       '"blue"}: what colour is the sky?'}]
    with api(server) as client:
        held = client.chat.completions.create(
            model="any", messages=ask, temperature=0, max_tokens=ROOM,
            response_format={"type": "json_object"})
        free = client.chat.completions.create(model="any", messages=ask, temperature=0,
                                              max_tokens=24)
        text = client.chat.completions.create(model="any", messages=ask, temperature=0,
                                              max_tokens=24, response_format={"type": "text"})
    content = held.choices[0].message.content or ""
    assert held.choices[0].finish_reason == "stop", content
    assert isinstance(json.loads(content), dict)
    assert text.choices[0].message.content == free.choices[0].message.content


@pytest.mark.parametrize(("response_format", "said"), [
    ({"type": "json_schema", "json_schema": {"name": "tagged", "schema": {
        "type": "object", "properties": {"tags": {
            "type": "object", "patternProperties": {"^x-": {"type": "string"}}}}}}},
     "'patternProperties' at /properties/tags is not supported"),
    ({"type": "json_schema", "json_schema": {"name": "p", "schema": {
        "type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}}}},
     "'minimum' at /properties/age is not supported"),
    ({"type": "json_schema", "json_schema": {"name": "typo", "schema": {
        "type": "object", "properties": {"name": {"type": "strnig"}}}}},
     "not a valid JSON schema: 'strnig' is not valid under any of the given schemas (at "
     "/properties/name/type)"),
    ({"type": "json_schema", "json_schema": {"name": "bad name!", "schema": PERSON}},
     "'response_format.json_schema.name' must be"),
    ({"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON,
                                             "strict": "yes"}},
     "'response_format.json_schema.strict' must be true or false"),
    ({"type": "json_schema"}, "'response_format.json_schema' must be an object"),
    ({"type": "xml"}, "(not 'xml')"),
    ("json", "'response_format' must be {\"type\": \"text\"}"),
])
def test_what_cannot_be_held_is_refused_before_any_model_work(
        server: LocalServer, response_format: Any, said: str) -> None:
    with api(server) as client, pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="any", messages=ASK, max_tokens=ROOM,
                                       response_format=response_format)
    error = refused.value.body
    assert refused.value.status_code == 400 and isinstance(error, dict)
    assert said in error["message"] and error["param"] == "response_format"


def test_tools_the_model_may_call_and_a_schema_are_refused_together(
        server: LocalServer) -> None:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"who": {"type": "string"}}}}}
    with api(server) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="any", messages=ASK, tools=[tool],
                                           response_format=AS_PERSON, max_tokens=ROOM)
        assert "tool_choice \"none\"" in str(refused.value)
        # With no call allowed (an answer after the tools' results), the schema holds.
        reply = client.chat.completions.create(
            model="any", messages=ASK, tools=[tool], tool_choice="none",
            response_format=AS_PERSON, max_tokens=ROOM, seed=1)
    assert reply.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(reply.choices[0].message.content or ""), PERSON)
