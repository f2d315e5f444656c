"""Reading what OpenAI-compatible servers answer, as they really answer it.

The SDK's models are strict where servers are not: Groq adds `service_tier`
and streams its usage in `x_groq.usage`, OpenRouter sends a tool call without
`arguments` and its reasoning as `reasoning`, DeepSeek and vLLM send
`reasoning_content`, Snowflake Cortex sends its reasoning only in OpenRouter's
`reasoning_details`, some servers leave `finish_reason` empty, send a call's
arguments as a JSON object, or give calls no id (or one another provider
would refuse). These functions read a completion body (a dict) and the
pieces of a streamed one, keep what toolchat uses, and ignore the rest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from chat.llm.base import ToolCall

logger = logging.getLogger(__name__)

# An id every provider takes back (Anthropic's pattern, and short enough for all).
_CALL_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
REASONING_FIELDS = ("reasoning_content", "reasoning")
# The entries of `reasoning_details` that hold readable text, and the key that holds it
# (an encrypted entry holds none).
_READABLE_DETAILS = {"reasoning.text": "text", "reasoning.summary": "summary"}


def call_id(given: object, *, response_id: str, index: int, name: str, arguments: str) -> str:
    """The call's id when every provider would take it back, or a stable one of ours.

    Ours is derived from the response and the call, so that the same answer
    (a replay) is stored with the same ids.
    """
    if isinstance(given, str) and _CALL_ID.match(given):
        return given
    seed = f"{response_id}\x00{index}\x00{name}\x00{arguments}\x00{given!r}"
    ours = "call_" + hashlib.sha256(seed.encode()).hexdigest()[:24]
    problem = "no" if not given else "an unusable"
    logger.warning("tool call %s had %s id %r; assigned %s", name, problem, given, ours)
    return ours


def arguments_text(arguments: object) -> str:
    """A call's arguments as the JSON string the API uses (an object is encoded).

    A call sent without arguments, or with "", is a call with none: "{}", since
    servers that parse the history's arguments (vLLM, gateways to Bedrock)
    refuse an empty string as JSON.
    """
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments)


def tool_calls_read(calls: object, *, response_id: str) -> list[ToolCall]:
    """The function calls of a message (dicts), with ids and string arguments."""
    read = []
    for index, call in enumerate(calls if isinstance(calls, list) else []):
        if not isinstance(call, Mapping) or call.get("type", "function") != "function":
            continue
        function = call.get("function")
        function = function if isinstance(function, Mapping) else {}
        name = str(function.get("name") or "")
        arguments = arguments_text(function.get("arguments"))
        read.append(
            ToolCall(
                id=call_id(
                    call.get("id"),
                    response_id=response_id,
                    index=index,
                    name=name,
                    arguments=arguments,
                ),
                name=name,
                arguments=arguments,
            )
        )
    return read


class Usage(NamedTuple):
    """A call's tokens as the server reported them; None for what it did not report."""

    prompt: int | None = None
    completion: int | None = None
    # Of the prompt's tokens, those the server had cached (`prompt_tokens_details`).
    cached: int | None = None


def usage_read(data: Mapping[str, Any]) -> Usage:
    """The tokens of a completion or chunk; None for what it does not report."""
    usage = data.get("usage")
    if not isinstance(usage, Mapping):
        groq = data.get("x_groq")
        usage = groq.get("usage") if isinstance(groq, Mapping) else None
    if not isinstance(usage, Mapping):
        return Usage()
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    return Usage(*(_count(value) for value in (prompt, completion, cached)))


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def reasoning_read(message: Mapping[str, Any]) -> str:
    """The reasoning text of a message or delta, under either name, else in its details."""
    for name in REASONING_FIELDS:
        value = message.get(name)
        if isinstance(value, str) and value:
            return value
    return reasoning_details_text(message.get("reasoning_details"))


def reasoning_details_text(details: object) -> str:
    """The readable text of `reasoning_details` entries (OpenRouter's shape), joined.

    OpenRouter sends these beside `reasoning`, which says the same: they are
    read only when a message has no reasoning under another name.
    """
    parts = []
    for entry in details if isinstance(details, list) else []:
        if not isinstance(entry, Mapping):
            continue
        key = _READABLE_DETAILS.get(str(entry.get("type")))
        if key is not None and isinstance(entry.get(key), str):
            parts.append(entry[key])
    return "".join(parts)


def content_read(message: Mapping[str, Any]) -> str:
    """A message's text: a string, or the text parts of a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "")
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return ""


def logprobs_read(value: Any) -> list[Any]:
    """The token entries of a choice's `logprobs` (`{"content": [...]}`); none when absent.

    Some servers (older vLLM, llama.cpp) send the list itself.
    """
    if isinstance(value, Mapping):
        value = value.get("content")
    return (
        [entry for entry in value if isinstance(entry, Mapping)] if isinstance(value, list) else []
    )
