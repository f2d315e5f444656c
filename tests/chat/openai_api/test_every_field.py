"""Every top-level field of /v1/chat/completions and /v1/responses, of a wrong type or nested deeply.

Each field toolchat reads is sent a value of every JSON kind it is not (an
array, an object, a number, a boolean, a string), and every field (those it
ignores too) is sent JSON nested 70 and 700 levels deep, as JSON text a
hostile client writes. Each is OpenAI's 400 naming the field (or the part of
it at fault), and nothing is stored: no conversation, no message, no run.
"""

from __future__ import annotations

import json

import pytest

from chat.models import Conversation, Message, Run
from tests.chat.openai_api.test_completions import MODEL, error_of

pytestmark = pytest.mark.django_db

# A sample of each JSON kind, as JSON text; a number that is not an integer.
SAMPLES = {
    "array": '["x"]',
    "object": '{"a": 1}',
    "number": "1.5",
    "boolean": "true",
    "string": '"x"',
}
# Deeper than any request means; the second near what the body parser itself still reads.
DEPTHS = (70, 700)

# The kinds each field may be ("integer" is a number without a fraction).
COMPLETION_FIELDS: dict[str, frozenset[str]] = {
    "model": frozenset({"string"}),
    "messages": frozenset({"array"}),
    "tools": frozenset({"array"}),
    "tool_choice": frozenset({"string", "object"}),
    "stop": frozenset({"string", "array"}),
    **dict.fromkeys(("n", "max_tokens", "max_completion_tokens", "seed"), frozenset({"integer"})),
    **dict.fromkeys(("top_logprobs", "top_k"), frozenset({"integer"})),
    **dict.fromkeys(
        ("temperature", "top_p", "presence_penalty", "frequency_penalty", "min_p"),
        frozenset({"number"}),
    ),
    "repetition_penalty": frozenset({"number"}),
    **dict.fromkeys(("stream", "logprobs", "parallel_tool_calls"), frozenset({"boolean"})),
    **dict.fromkeys(
        ("stream_options", "metadata", "response_format", "prediction", "logit_bias"),
        frozenset({"object"}),
    ),
    **dict.fromkeys(
        ("user", "reasoning_effort", "verbosity", "service_tier", "prompt_cache_key"),
        frozenset({"string"}),
    ),
    "safety_identifier": frozenset({"string"}),
}
RESPONSE_FIELDS: dict[str, frozenset[str]] = {
    "model": frozenset({"string"}),
    "input": frozenset({"string", "array"}),
    "tools": frozenset({"array"}),
    "tool_choice": frozenset({"string", "object"}),
    "conversation": frozenset({"string", "object"}),
    **dict.fromkeys(("instructions", "previous_response_id", "user"), frozenset({"string"})),
    **dict.fromkeys(
        ("service_tier", "prompt_cache_key", "safety_identifier"), frozenset({"string"})
    ),
    **dict.fromkeys(
        ("store", "background", "stream", "parallel_tool_calls"), frozenset({"boolean"})
    ),
    **dict.fromkeys(("metadata", "text", "reasoning"), frozenset({"object"})),
    **dict.fromkeys(("temperature", "top_p"), frozenset({"number"})),
    "max_output_tokens": frozenset({"integer"}),
}
# Fields toolchat does not read: ignored, but not when nested deeply.
IGNORED = ("store", "audio", "web_search_options")
IGNORED_BY_RESPONSES = ("include", "truncation", "prompt")

ENDPOINTS = {
    "/v1/chat/completions": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {"model": MODEL, "input": "hi"},
}


def deep(depth: int, kind: str) -> str:
    return '{"a": ' * depth + "1" + "}" * depth if kind == "object" else "[" * depth + "]" * depth


def with_field(url: str, path: list[str | int], raw: str, base: dict | None = None) -> str:
    """The endpoint's request as JSON text, with the field at `path` set to the JSON text `raw`."""
    document = json.loads(json.dumps(base or ENDPOINTS[url]))
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = "__field__"
    return json.dumps(document).replace('"__field__"', raw, 1)


def wrong_kinds(fields: dict[str, frozenset[str]]) -> list[tuple[str, str]]:
    valid = {kind for kinds in fields.values() for kind in kinds}
    assert valid <= {*SAMPLES, "integer"}
    return [
        (field, kind) for field, kinds in fields.items() for kind in SAMPLES if kind not in kinds
    ]


def assert_refused(response, param: str, answers) -> None:
    """OpenAI's 400 naming `param` (or a part of it), and nothing stored."""
    answers.add(f"/v1 POST {response.request['PATH_INFO']}", response.status_code)
    assert response.status_code == 400, response.content[:300]
    error = error_of(response)
    assert error["type"] == "invalid_request_error", error
    assert error["param"] == param or error["param"].startswith((f"{param}.", f"{param}[")), error
    assert not Conversation.objects.exists()
    assert not Message.objects.exists()
    assert not Run.objects.exists()


CASES = [
    (url, field, kind)
    for url, fields in (
        ("/v1/chat/completions", COMPLETION_FIELDS),
        ("/v1/responses", RESPONSE_FIELDS),
    )
    for field, kind in wrong_kinds(fields)
]


@pytest.mark.parametrize(("url", "field", "kind"), CASES, ids=[" ".join(c) for c in CASES])
def test_a_field_of_a_wrong_kind_is_a_400_naming_it(
    v1, llm_server, attack_answers, url, field, kind
):
    response = v1.generic("POST", url, with_field(url, [field], SAMPLES[kind]), "application/json")
    assert_refused(response, field, attack_answers)


DEEP_CASES = [
    (url, field, depth, kind)
    for url, fields, ignored in (
        ("/v1/chat/completions", COMPLETION_FIELDS, IGNORED),
        ("/v1/responses", RESPONSE_FIELDS, IGNORED_BY_RESPONSES),
    )
    for field in [*fields, *ignored]
    for depth in DEPTHS
    for kind in ("object", "array")
]


@pytest.mark.parametrize(
    ("url", "field", "depth", "kind"),
    DEEP_CASES,
    ids=[f"{url} {field} {depth} {kind}" for url, field, depth, kind in DEEP_CASES],
)
def test_a_field_nested_deeply_is_a_400_naming_it(
    v1, llm_server, attack_answers, url, field, depth, kind
):
    response = v1.generic(
        "POST", url, with_field(url, [field], deep(depth, kind)), "application/json"
    )
    assert_refused(response, field, attack_answers)


RESPONSE_TOOL = {"type": "function", "name": "f", "parameters": {"type": "object"}}
COMPLETION_TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
INPUT_ITEM = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
# Fields inside the ones above that toolchat keeps, each: (endpoint, base, path, param).
INNER = {
    "a tool's description": (
        "/v1/chat/completions",
        {**ENDPOINTS["/v1/chat/completions"], "tools": [COMPLETION_TOOL]},
        ["tools", 0, "function", "description"],
        "tools[0].function.description",
    ),
    "a tool's strict": (
        "/v1/chat/completions",
        {**ENDPOINTS["/v1/chat/completions"], "tools": [COMPLETION_TOOL]},
        ["tools", 0, "function", "strict"],
        "tools[0].function.strict",
    ),
    "a tool's type": (
        "/v1/chat/completions",
        {**ENDPOINTS["/v1/chat/completions"], "tools": [COMPLETION_TOOL]},
        ["tools", 0, "type"],
        "tools[0].type",
    ),
    "stream_options.include_usage": (
        "/v1/chat/completions",
        {**ENDPOINTS["/v1/chat/completions"], "stream_options": {}},
        ["stream_options", "include_usage"],
        "stream_options.include_usage",
    ),
    "a response tool's description": (
        "/v1/responses",
        {**ENDPOINTS["/v1/responses"], "tools": [RESPONSE_TOOL]},
        ["tools", 0, "description"],
        "tools[0].description",
    ),
    "a response tool's strict": (
        "/v1/responses",
        {**ENDPOINTS["/v1/responses"], "tools": [RESPONSE_TOOL]},
        ["tools", 0, "strict"],
        "tools[0].strict",
    ),
    "an input item's type": (
        "/v1/responses",
        {**ENDPOINTS["/v1/responses"], "input": [INPUT_ITEM]},
        ["input", 0, "type"],
        "input[0].type",
    ),
    "text.format": (
        "/v1/responses",
        {**ENDPOINTS["/v1/responses"], "text": {}},
        ["text", "format"],
        "text.format",
    ),
}


@pytest.mark.parametrize("kind", ["array", "object", "number"])
@pytest.mark.parametrize(("url", "base", "path", "param"), INNER.values(), ids=INNER.keys())
def test_a_kept_field_inside_another_of_a_wrong_kind_is_a_400_naming_it(
    v1, llm_server, attack_answers, url, base, path, param, kind
):
    text = with_field(url, path, SAMPLES[kind], base)
    assert_refused(v1.generic("POST", url, text, "application/json"), param, attack_answers)


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize(("url", "base", "path", "param"), INNER.values(), ids=INNER.keys())
def test_a_field_inside_another_nested_deeply_is_a_400_naming_it(
    v1, llm_server, attack_answers, url, base, path, param, depth
):
    text = with_field(url, path, deep(depth, "object"), base)
    assert_refused(v1.generic("POST", url, text, "application/json"), path[0], attack_answers)


@pytest.mark.parametrize("depth", DEPTHS)
def test_an_input_item_with_a_deep_field_of_its_own_is_a_400_naming_input(
    v1, llm_server, attack_answers, depth
):
    base = {**ENDPOINTS["/v1/responses"], "input": [{**INPUT_ITEM, "note": 1}]}
    text = with_field("/v1/responses", ["input", 0, "note"], deep(depth, "object"), base)
    assert_refused(
        v1.generic("POST", "/v1/responses", text, "application/json"), "input", attack_answers
    )
