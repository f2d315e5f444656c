"""The options of a /v1 request: each checked, and kept on the run as `Run.client_options`.

What is kept is what the run's model calls are sent (chat/engine/request.py):
`temperature`, the token limit, `tool_choice` and `response_format` as a
request's own fields, and the rest of chat/llm/base.py `FORWARDED` (`stop`,
`top_p`, `seed`, the penalties, `logit_bias`, `logprobs`, ...) as the client
gave them. `user`, `metadata` and `stream` are kept too, for the run's API and
the audit. A value of the wrong type or range is a 400 naming it, as OpenAI's
is, before anything is stored; any other field is ignored.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from chat.exceptions import InvalidInput
from chat.llm.base import FORWARDED
from tools.fields import MAX_JSON_DEPTH, deep_field, too_deep

KEPT_OPTIONS = (
    "temperature",
    "tool_choice",
    "response_format",
    "metadata",
    "stream",
    *FORWARDED,
)


def _number(low: float, high: float) -> Callable[[Any], bool]:
    return lambda value: (
        not isinstance(value, bool) and isinstance(value, int | float) and low <= value <= high
    )


def _integer(low: float, high: float) -> Callable[[Any], bool]:
    return lambda value: (
        not isinstance(value, bool) and isinstance(value, int) and low <= value <= high
    )


def _kind(kind: type) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, kind)


def _stop(value: Any) -> bool:
    if isinstance(value, str):
        return True
    return isinstance(value, list) and len(value) <= 4 and all(isinstance(s, str) for s in value)


def _logit_bias(value: Any) -> bool:
    return isinstance(value, dict) and all(_number(-100, 100)(bias) for bias in value.values())


def _tool_choice(value: Any) -> bool:
    named = isinstance(value, dict) and isinstance(value.get("function"), dict)
    return value in ("none", "auto", "required") or named


# Each option's check, and what a value must be, as the 400 says it.
_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "temperature": (_number(0, 2), "a number from 0 to 2"),
    "tool_choice": (_tool_choice, '"none", "auto", "required" or a function'),
    "response_format": (_kind(dict), "an object"),
    "metadata": (_kind(dict), "an object"),
    "user": (_kind(str), "a string"),
    "stream": (_kind(bool), "a boolean"),
    "stop": (_stop, "a string or an array of at most 4 strings"),
    "top_p": (_number(0, 1), "a number from 0 to 1"),
    "seed": (_integer(-(2**63), 2**63 - 1), "an integer"),
    "presence_penalty": (_number(-2, 2), "a number from -2 to 2"),
    "frequency_penalty": (_number(-2, 2), "a number from -2 to 2"),
    "logit_bias": (_logit_bias, "an object of token ids to numbers from -100 to 100"),
    "logprobs": (_kind(bool), "a boolean"),
    "top_logprobs": (_integer(0, 20), "an integer from 0 to 20"),
    "parallel_tool_calls": (_kind(bool), "a boolean"),
    "reasoning_effort": (_kind(str), "a string"),
    "verbosity": (_kind(str), "a string"),
    "service_tier": (_kind(str), "a string"),
    "prediction": (_kind(dict), "an object"),
    "prompt_cache_key": (_kind(str), "a string"),
    "safety_identifier": (_kind(str), "a string"),
    "top_k": (_integer(-1, math.inf), "an integer"),
    "min_p": (_number(0, 1), "a number from 0 to 1"),
    "repetition_penalty": (_number(0, math.inf), "a positive number"),
}


def options_read(body: dict[str, Any]) -> dict[str, Any]:
    """The request's options the run keeps (None is not given); InvalidInput names one at fault."""
    for key in KEPT_OPTIONS:
        if too_deep(body.get(key)):
            raise InvalidInput(
                f"{key} is nested more than {MAX_JSON_DEPTH} levels deep.", field=key
            )
    options = {key: body[key] for key in KEPT_OPTIONS if body.get(key) is not None}
    for key, value in options.items():
        check, what = _CHECKS[key]
        if not check(value):
            raise InvalidInput(f"{key} must be {what}.", field=key)
    if "top_logprobs" in options and options.get("logprobs") is not True:
        raise InvalidInput("top_logprobs needs logprobs: true.", field="top_logprobs")
    for key in ("max_tokens", "max_completion_tokens"):
        max_tokens = body.get(key)
        if max_tokens is None:
            continue
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidInput(f"{key} must be a positive integer.", field=key)
        options["max_tokens"] = max_tokens  # max_completion_tokens wins: it is read last
    return options


def stream_options_read(value: Any) -> bool:
    """`stream_options` (an object, or absent): whether the stream ends with the usage."""
    if value is None:
        return False
    if not isinstance(value, dict):
        raise InvalidInput("stream_options must be an object.", field="stream_options")
    include_usage = value.get("include_usage")
    if include_usage is not None and not isinstance(include_usage, bool):
        raise InvalidInput(
            "stream_options.include_usage must be a boolean.", field="stream_options.include_usage"
        )
    return include_usage is True


def depth_check(
    body: dict[str, Any], *, envelopes: dict[str, int] | None = None, skip: tuple[str, ...] = ()
) -> None:
    """Refuse a request any field of which nests more than MAX_JSON_DEPTH levels deep.

    Those toolchat reads are checked as they are read, and named precisely;
    this is the rule for all the others, the ones it ignores too: no request
    means that depth, and what is kept of one (its echo, its input items) is
    written by code that recurses once a level.
    """
    field = deep_field(body, envelopes=envelopes, skip=skip)
    if field is not None:
        raise InvalidInput(
            f"{field} is nested more than {MAX_JSON_DEPTH} levels deep.", field=field
        )
