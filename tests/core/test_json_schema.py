"""JSON schemas a reply is held to: what Fireside cannot hold is refused with the part
and where it is, never dropped; what it holds becomes a grammar that llama.cpp itself
(with SmolLM2's vocabulary) lets write exactly the JSON texts the schema allows."""

from __future__ import annotations

import ctypes
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import hypothesis.strategies as st
import jsonschema
import llama_cpp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from pydantic import BaseModel, Field

from app.core.reply import json_schema, tool_calls

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 20},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["friend", "colleague", "family"]},
             "maxItems": 3}},
    "required": ["name", "age"], "additionalProperties": False}


@pytest.mark.parametrize(("schema", "said"), [
    ({"type": "object", "properties": {"tags": {
        "type": "object", "patternProperties": {"^x": {"type": "string"}}}}},
     "'patternProperties' at /properties/tags is not supported"),
    ({"not": {"type": "string"}}, "'not' at the root is not supported"),
    ({"type": "object", "properties": {"a": {"type": "string"}},
      "if": {"required": ["a"]}, "then": {"required": []}}, "'if' at the root"),
    ({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
      "dependentRequired": {"a": ["b"]}}, "'dependentRequired' at the root"),
    ({"type": "object", "properties": {"a": {"type": "string"}},
      "dependentSchemas": {"a": {"required": ["a"]}}}, "'dependentSchemas' at the root"),
    ({"type": "object", "propertyNames": {"maxLength": 3}}, "'propertyNames' at the root"),
    ({"type": "object", "properties": {"list": {
        "type": "array", "items": {"type": "integer"}, "contains": {"const": 3}}}},
     "'contains' at /properties/list is not supported"),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
     "'uniqueItems' at the root"),
    ({"type": "number", "multipleOf": 0.5}, "'multipleOf' at the root is not supported"),
    ({"type": "object", "properties": {"price": {"type": "number", "minimum": 0}}},
     "'minimum' at /properties/price is not supported"),
    ({"type": "integer", "minimum": 0}, "'minimum' at the root is not supported"),
    ({"type": "integer", "minimum": 0, "maximum": 100_000},
     "at most 256 values apart"),
    ({"$defs": {"a": {"type": "array", "items": {"type": "string", "format": "email"}}},
      "$ref": "#/$defs/a"}, "'format': 'email' at /$defs/a/items is not supported"),
    ({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}},
     "'$ref' at /properties/a points outside the schema"),
    ({"type": "object", "properties": {"a": {"$ref": "#thing"}}},
     "'$ref' at /properties/a names an anchor"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
     "points to #/$defs/missing, which is not in the schema"),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "'oneOf' at the root"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]},
     "'required' at the root names 'b', which is not among its 'properties'"),
    ({"type": "object", "properties": {"a": {"type": "string", "maxLength": 5000}}},
     "'maxLength' at /properties/a is over 1000"),
    ({"type": "string", "pattern": "^(?=a)b$"}, "lookarounds"),
    ({"type": "string", "pattern": '^a"b$'}, "quotes and control characters"),
    ({"type": "string", "pattern": "^a\\bc$"}, "'\\b' is not supported"),
    ({"type": "string", "pattern": "^[a-z]+$", "maxLength": 4}, "'maxLength' beside 'pattern'"),
    ({"type": "object", "properties": {"a": {"$id": "https://x/a", "type": "string"}}},
     "'$id' at /properties/a is not supported below the root"),
    ({"type": "string", "maxLength": 2, "enum": ["abc", "long"]},
     "none of the values it lists is allowed by the rest of it"),
    ({"type": "object", "properties": {"": {"type": "string"}}}, "an empty name"),
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "no value has at once"),
    ({"type": "object", "properties": {"a": {"type": "string"}},
      "allOf": [{"properties": {"b": {"type": "string"}}}], "additionalProperties": False},
     "'additionalProperties' at the root would hold against"),
    ({"type": "strin"}, "not a valid JSON schema: 'strin' is not valid"),
    ({"type": "object", "properties": {"a": {"type": "string", "minLength": -1}}},
     "(at /properties/a/minLength)"),
    ([{"type": "string"}], "A JSON schema is an object"),
    (False, "allows no value at all"),
])
def test_what_cannot_be_held_is_refused_with_its_part_and_where_it_is(
        schema: Any, said: str) -> None:
    with pytest.raises(json_schema.SchemaError) as refused:
        json_schema.check(schema)
    assert said in str(refused.value)


class Pet(BaseModel):
    kind: Literal["cat", "dog"]
    name: str = Field(max_length=30)
    born: str | None = Field(default=None, json_schema_extra={"format": "date"})


class Household(BaseModel):
    """As an app would define it: nested models, optional fields, literals, a range."""

    owner: str = Field(description="Who lives there", max_length=40)
    people: int = Field(ge=1, le=12)
    pets: list[Pet] = Field(max_length=4)
    note: str | None = None


@pytest.mark.parametrize("schema", [
    PERSON, Household.model_json_schema(), {"type": "object"}, {}, True,
    {"type": ["string", "null"], "maxLength": 3, "title": "Optional short text"},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
     "items": [{"type": "integer"}, {"type": "string"}], "additionalItems": False},
    {"type": "string", "format": "date-time", "description": "When", "examples": ["x"]},
])
def test_what_can_be_held_is_kept_as_given_and_becomes_a_grammar(schema: Any) -> None:
    text = json_schema.check(schema)
    assert json.loads(text) == schema
    gbnf = json_schema.grammar(text)
    assert gbnf.startswith("root ::= ")
    assert json_schema.grammar(text) is gbnf  # asked again: not built again


def test_tool_calls_and_replies_share_the_converter_and_its_ranges() -> None:
    tool = tool_calls.Tool("rate", "", {"type": "object", "properties": {
        "stars": {"type": "integer", "minimum": 1, "maximum": 5},
        "why": {"type": "string"}}, "required": ["stars", "why"]})
    gbnf = tool_calls.grammar(tool_calls.HERMES, tool_calls.ToolUse((tool,)))
    assert '"5"' in gbnf and '"6"' not in gbnf
    # A JSON string in a call holds no raw control character either.
    assert "\\x00-\\x1F" in gbnf


# -- the grammar, read by llama.cpp ----------------------------------------------------

_TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)],
                       align=True)


class Reader:
    """llama.cpp's grammar sampler over SmolLM2's vocabulary: whether it lets a model
    write a text, token by token, and then end."""

    def __init__(self, llm: llama_cpp.Llama) -> None:
        self.llm = llm
        self.vocab = llama_cpp.llama_model_get_vocab(llm.model)
        self._one = np.zeros(1, _TOKEN_DATA)

    def accepts(self, gbnf: str, text: str) -> bool:
        grammar = llama_cpp.llama_sampler_init_grammar(self.vocab, gbnf.encode(), b"root")
        assert grammar, "llama.cpp did not read the grammar"
        tokens = self.llm.tokenize(text.encode(), add_bos=False, special=False)
        assert self.llm.detokenize(tokens) == text.encode(), "the vocabulary cannot spell it"
        try:
            for token in tokens:
                if not self._allowed(grammar, token):
                    return False
                llama_cpp.llama_sampler_accept(grammar, token)
            return self._allowed(grammar, self.llm.token_eos())
        finally:
            llama_cpp.llama_sampler_free(grammar)

    def _allowed(self, grammar: Any, token: int) -> bool:
        self._one[0] = (token, 0.0, 0.0)
        array = llama_cpp.llama_token_data_array(
            data=self._one.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)),
            size=1, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(array))
        return bool(np.isfinite(self._one[0]["logit"]))


@pytest.fixture(scope="module")
def reader(smollm2_path: Path) -> Iterator[Reader]:
    llm = llama_cpp.Llama(model_path=str(smollm2_path), vocab_only=True, verbose=False)
    yield Reader(llm)
    llm.close()


def held(reader: Reader, schema: Any, value: Any) -> bool:
    """Whether the grammar for ``schema`` lets a model write ``value`` as JSON."""
    text = json.dumps(value, ensure_ascii=False)
    return reader.accepts(json_schema.grammar(json_schema.check(schema)), text)


def valid(schema: Any, value: Any) -> bool:
    kind = jsonschema.validators.validator_for(schema)
    return bool(kind(schema, format_checker=kind.FORMAT_CHECKER).is_valid(value))


# Each schema with values it allows and values it does not, chosen where llama-cpp-
# python's converter alone goes wrong (the comment says how).
ROUND_TRIPS: list[tuple[Any, list[Any], list[Any]]] = [
    (PERSON, [{"name": "Ann", "age": 30}, {"name": "", "age": 0, "tags": ["family"]}],
     [{"name": "Ann", "age": 121}, {"name": "x" * 21, "age": 3}, {"name": "Ann"},
      {"name": "Ann", "age": 3, "pet": "cat"}]),
    # A raw line break in a string is no JSON.
    ({"type": "string"}, ["two\nlines", "tab\there", 'a "quote"'], []),
    # Quotes and backslashes in constants and property names.
    ({"type": "object", "properties": {'say "hi"': {"enum": ["a\\b", "c\nd", "é😀"]}},
      "required": ['say "hi"']},
     [{'say "hi"': "a\\b"}, {'say "hi"': "c\nd"}, {'say "hi"': "é😀"}],
     [{'say "hi"': "ab"}, {"say hi": "a\\b"}]),
    # A type list keeps the rest of its node.
    ({"type": ["string", "null"], "maxLength": 2}, ["ab", None], ["abc", 1]),
    # An enumeration keeps to the rest of its node.
    ({"type": "string", "maxLength": 3, "enum": ["abc", "abcd", "x"]}, ["abc", "x"],
     ["abcd"]),
    # A recursive schema, and a reference named like a property.
    ({"type": "object", "required": ["item", "next"], "properties": {
        "item": {"type": "object", "properties": {"q": {"type": "string"}},
                 "required": ["q"]},
        "next": {"anyOf": [{"$ref": "#/$defs/item"}, {"type": "null"}]}},
      "$defs": {"item": {"type": "object", "required": ["v", "next"], "properties": {
          "v": {"type": "integer"},
          "next": {"anyOf": [{"$ref": "#/$defs/item"}, {"type": "null"}]}}}}},
     [{"item": {"q": "s"}, "next": {"v": 1, "next": {"v": 2, "next": None}}}],
     [{"item": {"q": "s"}, "next": {"q": "s"}}, {"item": {"q": "s"}, "next": {"v": 1}}]),
    # What stands beside a reference, and allOf, hold too.
    ({"$defs": {"named": {"type": "object", "properties": {"name": {"type": "string"}},
                          "required": ["name"]}},
      "allOf": [{"$ref": "#/$defs/named"},
                {"properties": {"age": {"type": "integer", "minimum": 1, "maximum": 3}},
                 "required": ["age"]}]},
     [{"name": "a", "age": 2}], [{"name": "a"}, {"name": "a", "age": 4}]),
    # Integer ranges, with multipleOf, are listed.
    ({"type": "integer", "minimum": 0, "exclusiveMaximum": 20, "multipleOf": 5},
     [0, 5, 10, 15], [20, 3, -5]),
    # Patterns: escapes, shorthand classes, a match anywhere; never a broken string.
    ({"type": "string", "pattern": r"^[A-Z]{2}\.\d{3}$"}, ["AB.123"],
     ["AB.12", "ab.123", "AB-123"]),
    ({"type": "string", "pattern": "x.y"}, ["axzyb", "x-y"], ["xy", "x\ny"]),
    ({"type": "string", "pattern": "^[^a]+$"}, ["bcd", "é"], ["bad", ""]),
    ({"type": "string", "format": "date"}, ["2024-02-29"], ["2024-2-29", "yesterday"]),
    ({"oneOf": [{"type": "object", "properties": {"kind": {"const": "cat"}},
                 "required": ["kind"]},
                {"type": "object", "properties": {"kind": {"const": "dog"},
                                                  "bark": {"type": "boolean"}},
                 "required": ["kind", "bark"]}]},
     [{"kind": "cat"}, {"kind": "dog", "bark": True}], [{"kind": "dog"}, {"kind": "cow"}]),
    ({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
      "maxItems": 1}, [[1]], [[1, "a"], ["a"]]),
    ({"type": "array", "minItems": 2, "maxItems": 3}, [[1, "a"], [None, {}, []]],
     [[1], [1, 2, 3, 4]]),
    ({"type": "object"}, [{}, {"a": [1, {"b": None}]}], [[], "x"]),
    (True, [1, "x", [None], {"a": 1.5}], []),
]


@pytest.mark.parametrize(("schema", "allowed", "refused"), ROUND_TRIPS)
def test_the_grammar_lets_a_model_write_exactly_what_the_schema_allows(
        reader: Reader, schema: Any, allowed: list[Any], refused: list[Any]) -> None:
    for value in [*allowed, *refused]:
        # The lists are right about the schema...
        assert valid(schema, value) == (value in allowed)
        # ...and llama.cpp, reading the grammar, agrees.
        assert held(reader, schema, value) == (value in allowed), value


def test_a_pattern_is_held_to_what_a_json_string_holds_unescaped(reader: Reader) -> None:
    """A pattern matches the string's characters, and the converter writes them as they
    are: characters JSON must escape are left out (still valid, never written), rather
    than written raw into a broken string."""
    for pattern, value in (("x.y", 'x"y'), ("^[^a]+$", "b\\"), ("^[^a]+$", "b\n")):
        schema = {"type": "string", "pattern": pattern}
        assert valid(schema, value) and not held(reader, schema, value)
        gbnf = json_schema.grammar(json_schema.check(schema))
        raw = '"' + value + '"'  # the characters as they are, not escaped
        assert not reader.accepts(gbnf, raw)
    string = json_schema.grammar(json_schema.check({"type": "string"}))
    assert reader.accepts(string, '"two\\nlines"') and not reader.accepts(string, '"two\nlines"')


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.fixed_dictionaries(
    # Characters of the first plane: SmolLM2's vocabulary cannot spell some others.
    {"name": st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs",)),
                     max_size=24),
     "age": st.integers(-3, 125)},
    optional={"tags": st.lists(st.sampled_from(["friend", "family", "colleague", "boss"]),
                               max_size=4),
              "extra": st.none()}))
def test_near_misses_are_held_exactly_as_the_schema_says(
        reader: Reader, value: dict[str, Any]) -> None:
    # Properties come in the schema's order (the grammar writes them so).
    value = {key: value[key] for key in ("name", "age", "tags", "extra") if key in value}
    assert held(reader, PERSON, value) == valid(PERSON, value)
