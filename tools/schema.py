"""JSON Schema for tools: pydantic's parameter schema made fit for OpenAI, and any schema checked.

`clean_schema` makes a Python tool's schema; `parameters_problem` says why a
schema written elsewhere (an MCP server's `inputSchema`, the `parameters` of a
/v1 client's tool) cannot be offered to a model as a function's parameters,
before anything is stored or sent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jsonschema import SchemaError
from jsonschema.validators import validator_for
from referencing import Registry
from referencing.exceptions import Unresolvable

from tools.fields import MAX_JSON_DEPTH, too_deep

# Every model call carries every tool's schema: one this large is a mistake.
MAX_SCHEMA_CHARS = 50_000
# What the OpenAI API refuses at the top of a function's parameters.
_TOP_LEVEL_REFUSED = ("anyOf", "oneOf", "allOf", "not", "enum")

_SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
_SCHEMA_LISTS = {"anyOf", "oneOf", "allOf", "prefixItems"}
_SCHEMA_VALUES = {
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
}


def clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """pydantic's schema made fit for OpenAI: no titles, `$ref`s inlined, `required` present."""
    defs: dict[str, Any] = dict(schema.get("$defs", {}))
    inline = not _has_cycle(defs)
    body = {k: v for k, v in schema.items() if k != "$defs" or not inline}
    cleaned = _clean(body, defs if inline else None)
    return {
        "type": "object",
        "properties": cleaned.pop("properties", {}),
        "required": cleaned.pop("required", []),
        **{key: value for key, value in cleaned.items() if key != "type"},
    }


def _clean(node: Any, defs: Mapping[str, Any] | None) -> Any:
    if isinstance(node, list):
        return [_clean(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if defs is not None and isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = _clean(defs[ref.removeprefix("#/$defs/")], defs)
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        return {**target, **_clean(siblings, defs)}
    out: dict[str, Any] = {}
    for key, value in node.items():
        # Only a schema keyword `title` is noise: a property may well be *named* title.
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _clean(sub, defs) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS or key in _SCHEMA_VALUES:
            out[key] = _clean(value, defs)
        else:
            out[key] = value
    return out


def _has_cycle(defs: Mapping[str, Any]) -> bool:
    edges = {name: _refs(body) for name, body in defs.items()}
    visiting: set[str] = set()
    done: set[str] = set()

    def visit(name: str) -> bool:
        if name in done:
            return False
        if name in visiting:
            return True
        visiting.add(name)
        cyclic = any(visit(dep) for dep in edges.get(name, set()) if dep in edges)
        visiting.discard(name)
        done.add(name)
        return cyclic

    return any(visit(name) for name in edges)


def _refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            found.add(ref.removeprefix("#/$defs/"))
        for value in node.values():
            found |= _refs(value)
    elif isinstance(node, list):
        for item in node:
            found |= _refs(item)
    return found


def parameters_problem(schema: Any, subject: str) -> str | None:
    """Why a schema cannot be a function's parameters, as a sentence about `subject`, or None."""
    problem = _shape_problem(schema) or _schema_problem(schema)
    return f"{subject} {problem}" if problem else None


def _shape_problem(schema: Any) -> str | None:
    """What the model API refuses: anything but a plain, bounded object schema."""
    if not isinstance(schema, dict):
        return "is not a JSON object"
    if schema.get("type") != "object":
        return 'is not of "type": "object", which function parameters must be'
    refused = [key for key in _TOP_LEVEL_REFUSED if key in schema]
    if refused:
        return f"has {', '.join(refused)} at the top level, which the model API refuses"
    if "properties" in schema and not isinstance(schema["properties"], dict):
        return "is not an object schema: its properties is not an object"
    if too_deep(schema):
        return f"is nested more than {MAX_JSON_DEPTH} levels deep"
    try:
        size = len(json.dumps(schema, allow_nan=False))
    except (TypeError, ValueError) as exc:
        return f"is not plain JSON ({exc})"
    if size > MAX_SCHEMA_CHARS:
        return f"is {size} characters, over {MAX_SCHEMA_CHARS}"
    return None


def _schema_problem(schema: dict[str, Any]) -> str | None:
    """What JSON Schema refuses, or what no call could be checked against."""
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        return f"is not valid JSON Schema: {exc.message}"
    try:
        # A `$ref` that loops or points outside the schema fails every call: found now,
        # with an instance that reaches every property (its errors do not matter).
        probe = dict.fromkeys(schema.get("properties") or {})
        for _error in validator_for(schema)(schema, registry=Registry()).iter_errors(probe):
            pass
    except (RecursionError, Unresolvable) as exc:
        return f"cannot be checked: {type(exc).__name__}: {str(exc)[:200]}"
    return None
