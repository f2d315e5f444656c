"""JSON Schema clean-up: pydantic's parameter schema made fit for OpenAI."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
