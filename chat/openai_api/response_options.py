"""A /v1/responses request's options: checked in the Responses API's names, and said as Chat
Completions says them, so that the run's model calls are sent what a completion's are.

| Responses | the run's option (chat/openai_api/options.py) |
|---|---|
| `temperature`, `top_p`, `parallel_tool_calls`, `service_tier`, `prompt_cache_key`, `safety_identifier`, `user`, `metadata` | the same |
| `max_output_tokens` | `max_tokens` |
| `text.format` `json_schema` / `json_object` | `response_format` |
| `text.verbosity`, `reasoning.effort` | `verbosity`, `reasoning_effort` |
| `tool_choice` `{"type": "function", "name"}` | `{"type": "function", "function": {"name"}}` |
| `tool_choice` `{"type": "mcp", "server_label": "toolchat", "name"?}` | that function of toolchat's, or `required` |

A value of the wrong type or range is a 400 naming the Responses field
(`text.format.schema`, `tool_choice`, `metadata`), before anything is stored.
The response echoes each as the specification says (`echo_read`).
"""

from __future__ import annotations

import re
from typing import Any

from chat.exceptions import InvalidInput
from chat.openai_api.response_output import SERVER_LABEL
from tools.registry import registry as tool_registry

# Passed under the same name; each is checked by options_read, as for Chat Completions.
SAME_NAME = (
    "model",
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
    "user",
    "metadata",
    "stream",
)
SCHEMA_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# OpenAI's bounds on `metadata`: 16 pairs, keys up to 64 characters, string values up to 512.
METADATA_PAIRS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512
CHOICES = ("none", "auto", "required")
# What the response shows of a declaration of toolchat's MCP tool, as it was sent.
MCP_ECHOED = ("server_url", "server_description", "require_approval")


def options_as_completion(body: dict[str, Any], tools: list[Any]) -> dict[str, Any]:
    """The Chat Completions fields (tools and messages aside) that ask for the same turn."""
    chat: dict[str, Any] = {key: body[key] for key in SAME_NAME if key in body}
    metadata_check(body.get("metadata"))
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    text = _object(body, "text")
    response_format = _format_read(_object(text, "format", "text.format"))
    if response_format is not None:
        chat["response_format"] = response_format
    if text.get("verbosity") is not None:
        chat["verbosity"] = text["verbosity"]
    reasoning = _object(body, "reasoning")
    if reasoning.get("effort") is not None:
        chat["reasoning_effort"] = reasoning["effort"]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"], tools)
    return chat


def echo_read(body: dict[str, Any]) -> dict[str, Any]:
    """The request's fields as its response shows them; the specification's defaults where none."""
    text = body.get("text") or {}
    reasoning = body.get("reasoning")
    return {
        "instructions": body.get("instructions"),
        "tools": [_tool_echo(tool) for tool in body.get("tools") or []],
        "tool_choice": body.get("tool_choice") or "auto",
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "previous_response_id": body.get("previous_response_id"),
        "store": body.get("store") is not False,
        "user": body.get("user"),
        "text": {
            "format": text.get("format") or {"type": "text"},
            **({"verbosity": text["verbosity"]} if text.get("verbosity") else {}),
        },
        "reasoning": {"effort": reasoning.get("effort"), "summary": None} if reasoning else None,
        "service_tier": body.get("service_tier") or "default",
        "prompt_cache_key": body.get("prompt_cache_key"),
        "safety_identifier": body.get("safety_identifier"),
        "background": body.get("background") is True,
    }


def _tool_echo(tool: dict[str, Any]) -> dict[str, Any]:
    """A function tool as the specification's `FunctionTool` shows it, toolchat's as an `Mcp`.

    The MCP tool's `headers` and `authorization` are neither echoed nor stored.
    """
    if tool.get("type") == "mcp":
        return {
            "type": "mcp",
            "server_label": SERVER_LABEL,
            **{key: tool[key] for key in MCP_ECHOED if tool.get(key) is not None},
        }
    return {
        "type": "function",
        "name": tool.get("name"),
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict"),
    }


def mcp_declaration_check(tool: dict[str, Any], where: str) -> None:
    """An MCP tool in `tools` declares toolchat's own tools; any other server is refused."""
    label = tool.get("server_label")
    if label != SERVER_LABEL:
        raise InvalidInput(
            f"{where}.server_label: toolchat serves its own tools as the MCP server "
            f'"{SERVER_LABEL}" and calls no other, not {label!r}; declare a tool of your own '
            "as a function tool.",
            field=f"{where}.server_label",
        )
    if tool.get("allowed_tools") is not None:
        raise InvalidInput(
            f"{where}.allowed_tools is not supported: toolchat's tool policies decide which "
            "of its tools run and which ask for approval (docs/openai-api.md).",
            field=f"{where}.allowed_tools",
        )
    require = tool.get("require_approval")
    if require is not None and not isinstance(require, str | dict):
        raise InvalidInput(
            f'{where}.require_approval must be "always", "never" or an object.',
            field=f"{where}.require_approval",
        )


def _object(body: dict[str, Any], key: str, field: str | None = None) -> dict[str, Any]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput(f"{field or key} must be an object.", field=field or key)
    return value


def metadata_check(metadata: Any) -> None:
    """OpenAI's rule for `metadata`: at most 16 string pairs, of bounded lengths."""
    if not isinstance(metadata, dict):
        return  # None, or options_read says what is wrong with it
    if len(metadata) > METADATA_PAIRS:
        raise InvalidInput(
            f"metadata has {len(metadata)} pairs; at most {METADATA_PAIRS} are accepted.",
            field="metadata",
        )
    for key, value in metadata.items():
        if len(key) > METADATA_KEY_CHARS:
            raise InvalidInput(
                f"metadata keys are at most {METADATA_KEY_CHARS} characters.", field="metadata"
            )
        if not isinstance(value, str) or len(value) > METADATA_VALUE_CHARS:
            raise InvalidInput(
                f"metadata.{key} must be a string of at most {METADATA_VALUE_CHARS} characters.",
                field=f"metadata.{key}",
            )


def _format_read(text_format: dict[str, Any]) -> dict[str, Any] | None:
    """`text.format` as a Chat Completions `response_format` (None for plain text)."""
    kind = text_format.get("type") if text_format else "text"
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        shown = repr(kind) if isinstance(kind, str) else "a missing or non-string type"
        raise InvalidInput(
            f'text.format.type must be "text", "json_schema" or "json_object", not {shown}.',
            field="text.format.type",
        )
    name = text_format.get("name")
    if not isinstance(name, str) or not SCHEMA_NAME_RE.match(name):
        raise InvalidInput(
            "text.format.name is required: letters, digits, _ and -, at most 64.",
            field="text.format.name",
        )
    if not isinstance(text_format.get("schema"), dict):
        raise InvalidInput(
            "text.format.schema must be a JSON Schema object.", field="text.format.schema"
        )
    schema = {key: value for key, value in text_format.items() if key != "type"}
    return {"type": "json_schema", "json_schema": schema}


def _tool_choice(choice: Any, tools: list[Any]) -> Any:
    """The Responses `tool_choice` as Chat Completions says it; a function it names must exist."""
    if isinstance(choice, str):
        if choice not in CHOICES:
            raise InvalidInput(
                f'tool_choice must be "none", "auto", "required" or an object, not {choice!r}.',
                field="tool_choice",
            )
        return choice
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "function":
        name = choice.get("name")
        declared = {tool.get("name") for tool in tools if isinstance(tool, dict)}
        if not isinstance(name, str) or name not in declared:
            raise InvalidInput(
                f"tool_choice names the function {name!r}, which tools does not declare.",
                field="tool_choice.name",
            )
        return {"type": "function", "function": {"name": name}}
    if kind == "mcp" and choice.get("server_label") == SERVER_LABEL:
        name = choice.get("name")
        if name is None:
            return "required"
        if not isinstance(name, str) or tool_registry.get(name) is None:
            raise InvalidInput(
                f"tool_choice names {name!r}, which is not one of toolchat's tools "
                "(GET /api/v1/tools/).",
                field="tool_choice.name",
            )
        return {"type": "function", "function": {"name": name}}
    raise InvalidInput(
        "tool_choice must be a mode, a function tool ({type: function, name}) or one of "
        f'toolchat\'s ({{type: mcp, server_label: "{SERVER_LABEL}", name}}), not {kind!r}.',
        field="tool_choice",
    )
