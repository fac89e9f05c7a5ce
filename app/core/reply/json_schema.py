"""JSON schemas a reply is held to from its first token (the local API's
``response_format``, ``fireside chat --schema``): :func:`check` says whether Fireside can
hold a schema, naming the part it cannot, and :func:`grammar` turns it into the
llama.cpp grammar that holds the reply to it.

llama-cpp-python's converter (``llama_cpp.llama_grammar.SchemaConverter``) reads one
branch of each schema node and drops whatever that branch does not read: a type list
loses the rest of its node, ``maxLength`` beside ``enum`` is lost, and so on. So a
schema is first rewritten into the shapes it reads exactly (type lists and ``allOf``
spread out, enumerations kept to the values the rest of their node allows, small
integer ranges listed, references renamed so that no rule name clashes), and what it
cannot hold (``not``, ``if``, ``patternProperties``, bounds on numbers...) is refused,
never dropped. Plain text work; the converter (llama.cpp's package) loads at the first
grammar.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote

# The schema of ``response_format: {"type": "json_object"}``: any JSON object.
JSON_OBJECT = '{"type": "object"}'

MAX_LISTED = 256  # values of an integer range written out as an enumeration
# Lengths and counts a grammar spells out one by one (each a nested group llama.cpp
# reads recursively); past this, a reply could not be written in a context anyway.
MAX_REPEAT = 1000
MAX_DEPTH = 64  # schemas within schemas

ANY: dict[str, Any] = {"type": "value"}  # the converter's rule for any JSON value
FORMATS = ("date", "time", "date-time", "uuid")  # those the converter writes exactly
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")

# The keywords that assert something, by the type they apply to; every other keyword
# (title, description, examples, default, $schema, $comment, $defs...) only describes.
_STRING = frozenset({"minLength", "maxLength", "pattern", "format"})
_NUMBER = frozenset({*_BOUNDS, "multipleOf"})
_OBJECT = frozenset({"properties", "required", "additionalProperties", "minProperties",
                     "maxProperties", "patternProperties", "propertyNames",
                     "dependentRequired", "dependentSchemas", "dependencies",
                     "unevaluatedProperties"})
_ARRAY = frozenset({"items", "prefixItems", "additionalItems", "minItems", "maxItems",
                    "uniqueItems", "contains", "minContains", "maxContains",
                    "unevaluatedItems"})
_EVERY_TYPE = frozenset({"type", "enum", "const", "allOf", "anyOf", "oneOf", "not", "if",
                         "then", "else", "$ref", "$dynamicRef", "$recursiveRef"})
_ASSERTING = _STRING | _NUMBER | _OBJECT | _ARRAY | _EVERY_TYPE
_OF_TYPE = {"string": _STRING, "integer": _NUMBER, "number": _NUMBER, "object": _OBJECT,
            "array": _ARRAY, "boolean": frozenset(), "null": frozenset()}
# What the converter has no rule for, wherever it is.
_REFUSED = ("not", "if", "then", "else", "$dynamicRef", "$recursiveRef",
            "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas",
            "dependencies", "unevaluatedProperties", "contains", "minContains",
            "maxContains", "uniqueItems", "unevaluatedItems")
_ON_BOUNDS = (f"Fireside holds bounds and 'multipleOf' only on an integer with both a "
              f"lower and an upper bound, at most {MAX_LISTED} values apart")


class SchemaError(ValueError):
    """A schema Fireside cannot hold, or no schema at all; the message names the part
    and where it is (a JSON pointer)."""


def check(schema: Any) -> str:
    """``schema`` (parsed JSON) as the text to keep in ``Sampling.schema``, once it is
    a valid JSON schema whose every part Fireside can hold; else SchemaError."""
    if not isinstance(schema, Mapping | bool):
        raise SchemaError("A JSON schema is an object (or true).")
    text = json.dumps(schema, ensure_ascii=False)
    _checked(text)
    return text


@functools.lru_cache(maxsize=64)
def _checked(text: str) -> None:
    schema = json.loads(text)
    from jsonschema import exceptions, validators  # noqa: PLC0415 - slow to load; used here only

    try:
        validators.validator_for(schema).check_schema(schema)
    except exceptions.SchemaError as err:
        raise SchemaError(f"This is not a valid JSON schema: {err.message} (at "
                          f"{_where(tuple(str(p) for p in err.absolute_path))}).") from err
    if not _read_by_llama(grammar(text)):
        raise SchemaError("The schema's grammar is larger than llama.cpp reads: lower its "
                          "lengths and counts (maxLength, maxItems, a pattern's {m,n}).")


def _read_by_llama(gbnf: str) -> bool:
    import llama_cpp  # noqa: PLC0415 - llama.cpp: only where a schema is checked

    # llama.cpp reads a grammar without a model's vocabulary (only a grammar that names
    # tokens needs one), and refuses one past its limits (about a thousand repetitions
    # within one another).
    made = llama_cpp.llama_sampler_init_grammar(None, gbnf.encode(), b"root")
    if made:
        llama_cpp.llama_sampler_free(made)
    return bool(made)


@functools.lru_cache(maxsize=64)
def grammar(schema_text: str) -> str:
    """GBNF for a reply that is one JSON value following the schema (``check``'s text),
    whitespace as llama.cpp's converter allows it; its first rule is ``root``."""
    try:
        schema = json.loads(schema_text)
    except ValueError as err:
        raise SchemaError(f"The schema is not JSON: {err}") from err
    prepared = _Prepared(schema)
    try:
        return rules(prepared.root, prepared.refs)
    except (ValueError, AssertionError, KeyError, RecursionError) as err:
        raise SchemaError(f"The schema cannot be turned into a grammar: {err}") from err


def rules(schema: Any, refs: Mapping[str, Any] | None = None) -> str:
    """GBNF for ``schema`` by llama-cpp-python's converter, its root rule ``root``, with
    strings and literals kept valid JSON. ``refs``: the schemas that ``{"$ref": NAME}``
    names (None: the schema's own ``#/...`` references, resolved by the converter).
    Raises whatever the converter finds wrong."""
    converter = _converter()
    if refs is None:
        schema = converter.resolve_refs(schema, "")
    else:
        converter._refs.update(refs)
    converter.visit(schema, "")
    gbnf: str = converter.format_grammar()
    # The converter sorts its rules by name: llama.cpp needs no order, people do.
    lines = gbnf.splitlines()
    root = next(line for line in lines if line.startswith("root ::="))
    return "\n".join([root, *(line for line in lines if line != root)]) + "\n"


@functools.cache
def _converter_class() -> type:
    from llama_cpp import llama_grammar  # noqa: PLC0415 - llama.cpp's package: only for a grammar

    # A character of a JSON string: the converter's own lets control characters (a raw
    # line break) through, which no JSON reader accepts. And a pattern's "." matches
    # only what a JSON string may hold as it is.
    char = llama_grammar.BuiltinRule(
        r'[^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] '
        r'[0-9a-fA-F] [0-9a-fA-F])', [])
    dot = r'[^"\\\x00-\x1F\u2028\u2029]'

    class Converter(llama_grammar.SchemaConverter):
        def _format_literal(self, literal: str) -> str:
            # It is handed JSON text (a constant, a property's name) with ASCII escapes:
            # written here as the characters themselves, as a model writes them, and
            # escaped for llama.cpp, whose own escapes a backslash would otherwise be.
            with contextlib.suppress(ValueError):
                literal = json.dumps(json.loads(literal), ensure_ascii=False)
            return json.dumps(literal, ensure_ascii=False)

        def _add_primitive(self, name: str, rule: Any) -> str:
            return str(super()._add_primitive(name, char if name == "char" else rule))

        def _add_rule(self, name: str, rule: str) -> str:
            added = super()._add_rule(name, dot if name == "dot" else rule)  # type: ignore[no-untyped-call]
            return str(added)

    return Converter


def _converter() -> Any:
    return _converter_class()(prop_order={}, allow_fetch=False, dotall=False,
                              raw_pattern=False)


# -- integer ranges --------------------------------------------------------------------


def integer_range(schema: Mapping[str, Any]) -> range | None:
    """The values of an integer schema bounded at both ends, when there are at most
    MAX_LISTED: the converter drops bounds, an enumeration it keeps."""
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    if schema.get("type") != "integer" or not _is_number(low) or not _is_number(high):
        return None
    first = math.ceil(low) + (low == math.ceil(low) and "minimum" not in schema)
    last = math.floor(high) - (high == math.floor(high) and "maximum" not in schema)
    return range(first, last + 1) if 0 < last - first + 1 <= MAX_LISTED else None


def ranges_listed(schema: Any) -> Any:
    """The schema with each integer range of up to MAX_LISTED values listed as an enum."""
    if isinstance(schema, list):
        return [ranges_listed(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {k: ranges_listed(v) for k, v in schema.items()}
    listed = integer_range(out)
    if listed is None:
        return out
    rest = {k: v for k, v in out.items() if k not in (*_BOUNDS, "type")}
    return {**rest, "enum": list(listed)}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# -- the schema, rewritten for the converter -------------------------------------------

Path = tuple[str, ...]


class _Prepared:
    """A schema as the converter reads it exactly: ``root``, and ``refs``, the schemas
    its references name. SchemaError for a part it cannot hold."""

    def __init__(self, schema: Any) -> None:
        self._schema = schema
        self._validator: Any = None
        self._names: dict[str, str] = {}  # a reference's pointer: the name it goes by
        self.refs: dict[str, Any] = {}
        # The converter names a reference's rule by the reference's last part, and a
        # property's by the property's name: references get names no property begins.
        self._prefix = "ref"
        taken = _property_names(schema)
        while any(name.startswith(self._prefix) for name in taken):
            self._prefix += "f"
        self.root = self._node(schema, (), 0)

    def _node(self, schema: Any, path: Path, depth: int) -> dict[str, Any]:
        node = _asserting(schema, path, depth)
        if node is None:
            return dict(ANY)
        listed = integer_range(node)
        if "const" in node or "enum" in node or listed is not None:
            # Whatever else the node says, the values it lets through are these.
            values: list[Any] = [node["const"]] if "const" in node \
                else list(node["enum"]) if "enum" in node else list(listed or ())
            return self._values(schema, values, path)
        if "$ref" in node:
            ref = node.pop("$ref")
            if not node:
                return self._ref(ref, path, depth)
            # What stands beside a reference holds too (as from draft 2019-09 on).
            node["allOf"] = [{"$ref": ref}, *node.get("allOf", [])]
        if "allOf" in node:
            return self._node(self._merged(node, path), path, depth + 1)
        if "anyOf" in node or "oneOf" in node:
            return self._union(node, path, depth)
        return self._typed(node, path, depth)

    def _typed(self, node: dict[str, Any], path: Path, depth: int) -> dict[str, Any]:
        kind = node.get("type")
        if isinstance(kind, list) and len(kind) != 1:
            return {"anyOf": [self._node(_of_type(node, t), path, depth + 1) for t in kind]}
        kind = (kind[0] if isinstance(kind, list) else kind) or _inferred(node, path)
        if kind is not None:
            node = _of_type(node, kind)
        found = _refused(node)
        if found:
            raise SchemaError(f"'{found}' at {_where(path)} is not supported.")
        if kind == "string":
            return _string(node, path)
        if kind == "object":
            return self._object(node, path, depth)
        if kind == "array":
            return self._array(node, path, depth)
        bound = next((k for k in (*_BOUNDS, "multipleOf") if k in node), None)
        if bound is not None:
            raise SchemaError(f"'{bound}' at {_where(path)} is not supported: {_ON_BOUNDS}.")
        return {"type": kind} if kind is not None else dict(ANY)

    def _values(self, schema: Mapping[str, Any], values: list[Any], path: Path
                ) -> dict[str, Any]:
        """An enumeration of the values that ``schema`` as a whole allows."""
        if self._validator is None:
            from jsonschema import validators  # noqa: PLC0415 - slow to load

            kind = validators.validator_for(self._schema)
            self._validator = kind(self._schema, format_checker=kind.FORMAT_CHECKER)
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        whole = self._validator.evolve(schema=schema)
        kept = [v for v in values if whole.is_valid(v)]
        if not kept:
            raise SchemaError(f"No value can follow the schema at {_where(path)}: none of "
                              f"the values it lists is allowed by the rest of it "
                              f"({', '.join(sorted(rest)) or 'its type'}).")
        return {"enum": kept}

    def _ref(self, ref: Any, path: Path, depth: int) -> dict[str, Any]:
        pointer = _pointer(ref, path)
        name = self._names.get(pointer)
        if name is None:
            name = self._names[pointer] = f"{self._prefix}{len(self._names)}"
            self.refs[name] = dict(ANY)  # while its own references are followed
            target_path = tuple(_unescaped(p) for p in pointer.split("/")[1:])
            self.refs[name] = self._node(self._target(pointer, path), target_path,
                                         depth + 1)
        return {"$ref": name}

    def _target(self, pointer: str, path: Path) -> Any:
        target = self._schema
        for part in pointer.split("/")[1:]:
            key = _unescaped(part)
            if isinstance(target, Mapping) and key in target:
                target = target[key]
            elif isinstance(target, list) and key.isdigit() and int(key) < len(target):
                target = target[int(key)]
            else:
                raise SchemaError(f"'$ref' at {_where(path)} points to #{pointer}, which "
                                  "is not in the schema.")
        return target

    def _resolved(self, schema: Any, path: Path) -> Any:
        """``schema``, or the schema its ``$ref`` (alone) names, followed to the end."""
        seen: set[str] = set()
        while isinstance(schema, Mapping) and set(schema) & _ASSERTING == {"$ref"}:
            pointer = _pointer(schema["$ref"], path)
            if pointer in seen:
                raise SchemaError(f"'$ref' at {_where(path)} refers to itself.")
            seen.add(pointer)
            schema = self._target(pointer, path)
        return schema

    def _merged(self, node: Mapping[str, Any], path: Path) -> dict[str, Any]:
        """One node for ``allOf`` and what stands beside it."""
        parts: list[dict[str, Any]] = [{k: v for k, v in node.items() if k != "allOf"}]
        for i, listed in enumerate(node["allOf"]):
            part = self._resolved(listed, (*path, "allOf", str(i)))
            if part is False:
                raise SchemaError(f"'allOf' at {_where(path)} holds a schema that allows "
                                  "no value at all.")
            if isinstance(part, Mapping):
                parts.append({k: v for k, v in part.items() if k in _ASSERTING})
        bounded = [p for p in parts if "additionalProperties" in p]
        if len(bounded) > 1 or any(
                set(p.get("properties", {})) - set(bounded[0].get("properties", {}))
                for p in parts if bounded and p is not bounded[0]):
            raise SchemaError(f"'additionalProperties' at {_where(path)} would hold "
                              "against the properties another part of 'allOf' adds: that "
                              "is not supported.")
        merged: dict[str, Any] = {}
        for part in parts:
            merged = _merge(merged, part, path)
        return merged

    def _union(self, node: Mapping[str, Any], path: Path, depth: int) -> dict[str, Any]:
        if "anyOf" in node and "oneOf" in node:
            raise SchemaError(f"'anyOf' beside 'oneOf' at {_where(path)} is not supported.")
        key = "oneOf" if "oneOf" in node else "anyOf"
        rest = {k: v for k, v in node.items() if k != key}
        if key == "oneOf" and not self._disjoint(node[key], (*path, key)):
            raise SchemaError(
                f"'oneOf' at {_where(path)} is not supported where a value could match two "
                "of its schemas (Fireside holds it where they are of different types, or "
                "constants, or objects told apart by a required property's constant); "
                "'anyOf' is supported.")
        return {"anyOf": [
            self._node({"allOf": [rest, alternative]} if rest else alternative,
                       (*path, key, str(i)), depth + 1)
            for i, alternative in enumerate(node[key])]}

    def _disjoint(self, alternatives: Sequence[Any], path: Path) -> bool:
        """Whether no value can match two of ``alternatives``."""
        found = [self._resolved(a, path) for a in alternatives]
        nodes = [a if isinstance(a, Mapping) else {} for a in found]
        kinds = [n.get("type") for n in nodes]
        if all(isinstance(k, str) for k in kinds) and len(set(kinds)) == len(kinds) \
                and not {"integer", "number"} <= set(kinds):
            return True
        if _apart([_constants(n) for n in nodes]):
            return True
        for name in nodes[0].get("required", []) if nodes else ():
            if all(name in n.get("required", ()) for n in nodes) and _apart([
                    _constants(self._resolved(n.get("properties", {}).get(name), path))
                    for n in nodes]):
                return True
        return False

    def _object(self, node: Mapping[str, Any], path: Path, depth: int) -> dict[str, Any]:
        properties = node.get("properties", {})
        required = list(dict.fromkeys(node.get("required", [])))
        extra = node.get("additionalProperties")
        for name in required:
            if name not in properties:
                raise SchemaError(f"'required' at {_where(path)} names {name!r}, which is "
                                  "not among its 'properties': Fireside writes only the "
                                  "properties a schema lists.")
        if "" in properties:
            raise SchemaError(f"A property with an empty name at {_where(path)} is not "
                              "supported.")
        if node.get("minProperties", 0) > len(required):
            raise SchemaError(f"'minProperties' at {_where(path)} is not supported beyond "
                              "the number of 'required' properties.")
        most = node.get("maxProperties")
        if most is not None and (len(properties) > most or extra not in (None, False)):
            raise SchemaError(f"'maxProperties' at {_where(path)} is not supported below "
                              "the number of properties the object may have.")
        out: dict[str, Any] = {"type": "object"}
        if "properties" in node or most is not None:
            out["properties"] = {
                name: self._node(s, (*path, "properties", name), depth + 1)
                for name, s in properties.items()}
        if required:
            out["required"] = required
        if extra is True:
            out["additionalProperties"] = dict(ANY)
        elif extra is not None and extra is not False:
            out["additionalProperties"] = self._node(extra, (*path, "additionalProperties"),
                                                     depth + 1)
        elif extra is False:
            out["additionalProperties"] = False
        return out

    def _array(self, node: Mapping[str, Any], path: Path, depth: int) -> dict[str, Any]:
        least, most = node.get("minItems", 0), node.get("maxItems")
        _counted(node, ("minItems", "maxItems"), path)
        items = node.get("items")
        key, prefix = "prefixItems", node.get("prefixItems")
        if isinstance(items, list):  # drafts 4 to 7: a tuple
            key, prefix, items = "items", items, None
        if prefix is not None:
            # The converter writes every listed item and no other: as many as allowed.
            if least > len(prefix):
                raise SchemaError(f"'minItems' at {_where(path)} asks for more items than "
                                  f"'{key}' lists: that is not supported.")
            listed = prefix[:most] if most is not None else prefix
            return {"type": "array", "prefixItems": [
                self._node(s, (*path, key, str(i)), depth + 1) for i, s in enumerate(listed)]}
        if items is False:
            most = 0
        out: dict[str, Any] = {"type": "array", "items": self._node(
            True if items in (None, False) else items, (*path, "items"), depth + 1)}
        if least:
            out["minItems"] = least
        if most is not None:
            out["maxItems"] = most
        return out


def _asserting(schema: Any, path: Path, depth: int) -> dict[str, Any] | None:
    """What of a schema node asserts something; None for ``true`` (any value)."""
    if depth > MAX_DEPTH:
        raise SchemaError(f"The schema is nested too deeply at {_where(path)}.")
    if schema is True:
        return None
    if schema is False:
        raise SchemaError(f"The schema at {_where(path)} allows no value at all.")
    if not isinstance(schema, Mapping):
        raise SchemaError(f"The schema at {_where(path)} is not an object.")
    if path and "$id" in schema:
        raise SchemaError(f"'$id' at {_where(path)} is not supported below the root.")
    return {k: v for k, v in schema.items() if k in _ASSERTING}


def _string(node: Mapping[str, Any], path: Path) -> dict[str, Any]:
    lengths = {k: node[k] for k in ("minLength", "maxLength") if k in node}
    kind = node.get("format")
    if kind is not None:
        if kind not in FORMATS:
            raise SchemaError(f"'format': {kind!r} at {_where(path)} is not supported "
                              f"(Fireside holds {', '.join(FORMATS)}).")
        beside = next((k for k in ("pattern", *lengths) if k in node), None)
        if beside is not None:
            raise SchemaError(f"'{beside}' beside 'format' at {_where(path)} is not "
                              "supported.")
        return {"type": "string", "format": kind}
    if "pattern" in node:
        if lengths:
            raise SchemaError(f"'{next(iter(lengths))}' beside 'pattern' at "
                              f"{_where(path)} is not supported.")
        return {"type": "string", "pattern": _pattern(node["pattern"], path)}
    _counted(node, ("minLength", "maxLength"), path)
    return {"type": "string", **lengths}


def _counted(node: Mapping[str, Any], keys: tuple[str, str], path: Path) -> None:
    least, most = (node.get(k) for k in keys)
    for key, value in zip(keys, (least, most), strict=True):
        if value is not None and value > MAX_REPEAT:
            raise SchemaError(f"'{key}' at {_where(path)} is over {MAX_REPEAT}: that is "
                              "not supported.")
    if least is not None and most is not None and least > most:
        raise SchemaError(f"No value can follow the schema at {_where(path)}: its "
                          f"'{keys[0]}' is over its '{keys[1]}'.")


def _merge(base: dict[str, Any], part: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """Two parts of an ``allOf`` as one node: what both say."""
    out = dict(base)
    for key, value in part.items():
        mine: Any = out.get(key)
        if key not in out or mine == value:
            out[key] = value
        elif key == "properties":
            out[key] = {**mine, **{name: {"allOf": [mine[name], s]} if name in mine else s
                                   for name, s in value.items()}}
        elif key == "required":
            out[key] = list(dict.fromkeys([*mine, *value]))
        elif key == "type":
            out[key] = _common_types(mine, value, path)
        elif key in ("minLength", "minItems", "minProperties", "minimum"):
            out[key] = max(mine, value)
        elif key in ("maxLength", "maxItems", "maxProperties", "maximum"):
            out[key] = min(mine, value)
        elif key == "enum":
            out[key] = [v for v in mine if v in value]
        elif key == "allOf":
            out[key] = [*mine, *value]
        elif key in ("items", "additionalProperties") and not isinstance(value, list) \
                and not isinstance(mine, list):
            out[key] = {"allOf": [mine, value]}
        else:
            raise SchemaError(f"'{key}' in more than one part of 'allOf' at "
                              f"{_where(path)} is not supported.")
    return out


def _common_types(a: Any, b: Any, path: Path) -> Any:
    def widened(kind: Any) -> set[str]:
        kinds = set(kind if isinstance(kind, list) else [kind])
        return kinds | {"integer"} if "number" in kinds else kinds

    common = widened(a) & widened(b)
    if "number" in common:
        common.discard("integer")
    if not common:
        raise SchemaError(f"'allOf' at {_where(path)} asks for types that no value has at "
                          "once.")
    return sorted(common) if len(common) > 1 else common.pop()


def _of_type(node: Mapping[str, Any], kind: Any) -> dict[str, Any]:
    """What of ``node`` applies to values of type ``kind`` (the rest holds for others)."""
    own = _OF_TYPE.get(kind, frozenset()) if isinstance(kind, str) else frozenset()
    return {**{k: v for k, v in node.items() if k in _EVERY_TYPE or k in own}, "type": kind}


def _inferred(node: Mapping[str, Any], path: Path) -> str | None:
    """The type a node without one must be to be held (None: any)."""
    kinds = {kind for kind, keys in (("string", _STRING), ("number", _NUMBER),
                                     ("object", _OBJECT), ("array", _ARRAY))
             if set(node) & keys}
    if len(kinds) > 1:
        raise SchemaError(f"The schema at {_where(path)} has keywords of several types "
                          f"({', '.join(sorted(kinds))}) and no 'type': give it one.")
    return kinds.pop() if kinds else None


def _refused(node: Mapping[str, Any]) -> str | None:
    return next((k for k in _REFUSED if k in node
                 and not (k == "uniqueItems" and node[k] is False)), None)


def _constants(schema: Any) -> list[str] | None:
    if not isinstance(schema, Mapping):
        return None
    if "const" in schema:
        return [_canonical(schema["const"])]
    if isinstance(schema.get("enum"), list):
        return [_canonical(v) for v in schema["enum"]]
    return None


def _canonical(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return json.dumps(value, sort_keys=True)


def _apart(groups: list[list[str] | None]) -> bool:
    """Whether the groups of values are all known and share no value."""
    if not groups or any(g is None for g in groups):
        return False
    values = [v for g in groups if g is not None for v in set(g)]
    return len(values) == len(set(values))


def _pointer(ref: Any, path: Path) -> str:
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise SchemaError(f"'$ref' at {_where(path)} points outside the schema ({ref}): "
                          "only references within it, such as #/$defs/name, are "
                          "supported.")
    pointer = unquote(ref[1:])
    if pointer and not pointer.startswith("/"):
        raise SchemaError(f"'$ref' at {_where(path)} names an anchor ({ref}): only JSON "
                          "pointers, such as #/$defs/name, are supported.")
    return pointer


def _unescaped(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def _where(path: Path) -> str:
    """A JSON pointer to ``path``; the root as "the root"."""
    if not path:
        return "the root"
    return "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in path)


def _property_names(schema: Any) -> set[str]:
    """Every property name in ``schema``, as the converter writes it in a rule's name."""
    names: set[str] = set()
    if isinstance(schema, list):
        for item in schema:
            names |= _property_names(item)
    elif isinstance(schema, Mapping):
        for key, value in schema.items():
            if key == "properties" and isinstance(value, Mapping):
                names |= {re.sub(r"[^a-zA-Z0-9-]+", "-", str(name)) for name in value}
            names |= _property_names(value)
    return names


# -- patterns --------------------------------------------------------------------------

# Shorthand classes as the converter can write them (a JSON string holds no raw white
# space but the space itself).
_SHORTHANDS = {"d": "0-9", "w": "a-zA-Z0-9_", "s": " "}
# What a negated class must leave out too, to stay valid in a JSON string.
_NOT_IN_JSON = '"\\\\\\x00-\\x1F'


def _pattern(pattern: str, path: Path) -> str:
    """``pattern`` in the regular expressions the converter reads (anchored at both
    ends, a match anywhere spelled out with ``.*``), keeping to what a JSON string can
    hold as it is; SchemaError for what it cannot."""
    start = pattern.startswith("^")
    body = pattern[1:] if start else pattern
    end = body.endswith("$") and not _escaped_at(body, len(body) - 1)
    body = body[:-1] if end else body
    out: list[str] = []
    at = 0
    while at < len(body):
        char = body[at]
        if char == "\\":
            out.append(f"[{_escape(body[at + 1:at + 2], pattern, path)}]")
            at += 2
        elif char == "[":
            closing = _class_end(body, at)
            if closing < 0:
                raise _bad_pattern(pattern, path, "a '[' is not closed")
            out.append(_class(body[at + 1:closing], pattern, path))
            at = closing + 1
        elif char == "(" and body.startswith("(?:", at):
            out.append("(")
            at += 3
        elif char == "(" and body.startswith("(?", at):
            raise _bad_pattern(pattern, path, "lookarounds and named groups are not "
                                              "supported")
        elif char in "^$":
            raise _bad_pattern(pattern, path, f"'{char}' is supported only at its ends")
        elif char == '"' or ord(char) < 0x20:
            raise _bad_pattern(pattern, path, "quotes and control characters are not "
                                              "supported")
        else:
            out.append(char)
            at += 1
    return f"^{'' if start else '.*'}({''.join(out)}){'' if end else '.*'}$"


def _escaped_at(text: str, at: int) -> bool:
    """Whether the character at ``at`` follows an odd number of backslashes."""
    count = 0
    while at - count - 1 >= 0 and text[at - count - 1] == "\\":
        count += 1
    return count % 2 == 1


def _class_end(body: str, at: int) -> int:
    end = at + 1
    while end < len(body) and body[end] != "]":
        end += 2 if body[end] == "\\" else 1
    return end if end < len(body) else -1


def _escape(letter: str, pattern: str, path: Path) -> str:
    """An escaped character as the inside of a class the converter copies as it is."""
    if letter in _SHORTHANDS:
        return _SHORTHANDS[letter]
    if letter and not letter.isalnum() and letter not in '"\\' and letter.isprintable():
        return f"\\x{ord(letter):02X}" if ord(letter) < 0x100 else f"\\u{ord(letter):04X}"
    raise _bad_pattern(pattern, path, f"'\\{letter}' is not supported")


def _class(inside: str, pattern: str, path: Path) -> str:
    negated = inside.startswith("^")
    out: list[str] = ["^"] if negated else []
    at = 1 if negated else 0
    while at < len(inside):
        char = inside[at]
        if char == "\\":
            out.append(_escape(inside[at + 1:at + 2], pattern, path))
            at += 2
            continue
        if char == '"' or ord(char) < 0x20:
            raise _bad_pattern(pattern, path, "quotes and control characters are not "
                                              "supported")
        out.append(char)
        at += 1
    if negated:
        out.append(_NOT_IN_JSON)
    return "[" + "".join(out) + "]"


def _bad_pattern(pattern: str, path: Path, why: str) -> SchemaError:
    return SchemaError(f"'pattern' at {_where(path)} ({pattern!r}) is not supported: "
                       f"{why}.")
