"""`fireside chat --schema`: replies held to a JSON schema in the terminal, on a real
model and on a real server's model; a schema file that cannot be used is named, with
exit status 2, before any model is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.api.test_structured_output import PERSON
from tests.cli.test_commands import events, fireside
from tests.model_server import llama_server

ASK = "Alice is 30 and a friend from work. Describe her."


def schema_file(folder: Path, schema: object, name: str = "person.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(schema), encoding="utf-8")
    return path


@pytest.mark.parametrize("model", ["smollm2_path", "gemma_path"])
def test_every_reply_follows_the_schema_in_json_and_in_plain_text(
        model: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    path = str(request.getfixturevalue(model))
    schema = str(schema_file(tmp_path, PERSON))
    result = fireside("chat", "--json", "--model", path, "--schema", schema,
                      "--max-tokens", "160", "--seed", "1", stdin=f"{ASK}\nAnd Bob?\n")
    assert result.returncode == 0, result.stderr
    stream = events(result.stdout)
    replies = [e for e in stream if e["event"] == "reply"]
    assert len(replies) == 2  # each reply of the session is held
    for reply in replies:
        assert reply["finish_reason"] == "stop"
        jsonschema.validate(json.loads(reply["text"]), PERSON)
    assert "".join(e["text"] for e in stream if e["event"] == "delta") == \
        "".join(r["text"] for r in replies)
    plain = fireside("chat", "--model", path, "--schema", schema, "--max-tokens", "160",
                     "--seed", "1", ASK)
    assert plain.returncode == 0, plain.stderr
    jsonschema.validate(json.loads(plain.stdout), PERSON)


@pytest.mark.parametrize(("content", "said"), [
    (None, "missing.json does not exist."),
    ("{'type': 'object'}", "missing.json is not JSON: Expecting property name"),
    (json.dumps({"type": "object", "properties": {"tags": {
        "type": "object", "patternProperties": {"^x": {}}}}}),
     "The schema in {path} cannot be held: 'patternProperties' at /properties/tags is not "
     "supported."),
    (json.dumps({"type": "object", "properties": {"age": {"type": "int"}}}),
     "not a valid JSON schema: 'int' is not valid under any of the given schemas (at "
     "/properties/age/type)"),
])
def test_a_schema_that_cannot_be_used_is_named_and_nothing_is_loaded(
        content: str | None, said: str, tmp_path: Path, smollm2_path: Path) -> None:
    path = tmp_path / "missing.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    said = said.format(path=path)
    result = fireside("chat", "--model", str(smollm2_path), "--schema", str(path), "Hi")
    assert result.returncode == 2
    assert said in result.stderr and not result.stdout
    assert "is ready" not in result.stderr  # refused before the model was loaded
    as_json = fireside("chat", "--json", "--model", str(smollm2_path), "--schema",
                       str(path), "Hi")
    assert as_json.returncode == 2
    [error] = events(as_json.stdout)
    assert error["event"] == "error" and said in error["message"]


def test_a_schema_and_tools_are_refused_together(tmp_path: Path, smollm2_path: Path) -> None:
    tools = tmp_path / "mcp.json"
    tools.write_text(json.dumps({"mcpServers": {}}), encoding="utf-8")
    result = fireside("chat", "--model", str(smollm2_path), "--tools", str(tools),
                      "--schema", str(schema_file(tmp_path, PERSON)), "Hi")
    assert result.returncode == 2
    assert "--schema and --tools cannot go together" in result.stderr


def test_a_servers_model_is_held_by_the_server(tmp_path: Path, smollm2_path: Path) -> None:
    """The schema goes to the server as OpenAI's ``response_format`` and the server
    holds the reply to it (llama-cpp-python's server holds ``json_object``)."""
    question = "What colour is the sky?"
    with llama_server(smollm2_path) as server:
        assert fireside("servers", "add", "box", server.url).returncode == 0
        model = f"{smollm2_path.stem} on box"
        free = fireside("chat", "--json", "--model", model, "--temperature", "0",
                        "--max-tokens", "24", question)
        held = fireside("chat", "--json", "--model", model, "--temperature", "0",
                        "--max-tokens", "160", "--schema",
                        str(schema_file(tmp_path, {"type": "object"})), question)
    assert free.returncode == 0 and held.returncode == 0, held.stderr
    [free_reply] = [e for e in events(free.stdout) if e["event"] == "reply"]
    [held_reply] = [e for e in events(held.stdout) if e["event"] == "reply"]
    assert not free_reply["text"].lstrip().startswith("{")  # words, unless held
    assert held_reply["finish_reason"] == "stop"
    assert isinstance(json.loads(held_reply["text"]), dict)
