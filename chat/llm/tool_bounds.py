"""A tool's JSON Schema as a model server can take it: large bounds said in words.

The tool keeps its full schema and checks its arguments against it (tools/);
only what is sent to the model changes. See docs/providers.md for the servers
that need it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A JSON Schema bound above this is told to the model in words, not as the bound.
# Servers that constrain generation with a grammar built from the schema
# (llama-cpp-python, and llama.cpp-based servers) expand `maxLength: N` into N
# nested repetitions: at a few thousand, llama-cpp-python's server crashes with
# a stack overflow. The tool still validates its arguments against its full
# schema (tools/), and an over-long argument goes back to the model as an error.
LARGE_BOUND = 1000
_BOUND_WORDS = {"maxLength": "characters", "maxItems": "items", "maxProperties": "properties"}
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONES = ("items", "additionalProperties", "not", "if", "then", "else", "contains")


def tools_for_model(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `tools` parameter with every bound above `LARGE_BOUND` said in its description.

    Returns the same list when no bound is that large (the usual case: no copy).
    """
    if not any(_large_bound(tool.get("function", {}).get("parameters")) for tool in tools):
        return tools
    shaped = []
    for tool in tools:
        function = tool.get("function", {})
        parameters = function.get("parameters")
        if _large_bound(parameters):
            tool = {**tool, "function": {**function, "parameters": _bounds_worded(parameters)}}
        shaped.append(tool)
    return shaped


def _subschemas(schema: Mapping[str, Any]) -> list[Any]:
    found: list[Any] = []
    for key in _SCHEMA_MAPS:
        if isinstance(schema.get(key), Mapping):
            found.extend(schema[key].values())
    for key in _SCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            found.extend(schema[key])
    for key in _SCHEMA_ONES:
        if key in schema:
            value = schema[key]
            found.extend(value if isinstance(value, list) else [value])
    return found


def _large_bound(schema: object) -> bool:
    if not isinstance(schema, Mapping):
        return False
    for key in _BOUND_WORDS:
        bound = schema.get(key)
        if isinstance(bound, int) and bound > LARGE_BOUND:
            return True
    return any(_large_bound(sub) for sub in _subschemas(schema))


def _bounds_worded(schema: Any) -> Any:
    """A copy of `schema` whose large bounds are words at the end of its description."""
    if not isinstance(schema, Mapping):
        return schema
    shaped = dict(schema)
    words = []
    for key, unit in _BOUND_WORDS.items():
        bound = shaped.get(key)
        if isinstance(bound, int) and bound > LARGE_BOUND:
            del shaped[key]
            words.append(f"at most {bound} {unit}")
    if words:
        told = f"({', '.join(words)})"
        shaped["description"] = (
            f"{shaped['description']} {told}" if shaped.get("description") else told
        )
    for key in _SCHEMA_MAPS:
        if isinstance(shaped.get(key), Mapping):
            shaped[key] = {name: _bounds_worded(sub) for name, sub in shaped[key].items()}
    for key in _SCHEMA_LISTS:
        if isinstance(shaped.get(key), list):
            shaped[key] = [_bounds_worded(sub) for sub in shaped[key]]
    for key in _SCHEMA_ONES:
        if key in shaped:
            value = shaped[key]
            shaped[key] = (
                [_bounds_worded(sub) for sub in value]
                if isinstance(value, list)
                else _bounds_worded(value)
            )
    return shaped
