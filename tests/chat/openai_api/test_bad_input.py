"""/v1 refuses a field of the wrong type or nested too deeply, and a tool schema that is no object's.

Each body is sent as JSON text, as a hostile client would write it: a value of
the wrong type where a string belongs (`"role": ["user"]`), and JSON nested a
few hundred levels deep (which the body parser still reads) in the fields
toolchat keeps and stores. Every one is OpenAI's 400 naming the field, and
nothing is stored.
"""

from __future__ import annotations

import json

import pytest

from chat.models import Conversation, Message, Run
from tests.chat.openai_api.test_completions import MODEL, URL, error_of

pytestmark = pytest.mark.django_db

# Deeper than any request means, shallower than what the body parser refuses.
DEPTH = 400


def nested(template: str = "DEEP") -> str:
    """The JSON text with DEEP replaced by an object nested DEPTH levels deep."""
    return template.replace("DEEP", '{"a": ' * DEPTH + "1" + "}" * DEPTH)


def message(**fields: str) -> str:
    """One message as JSON text: a user's "hi", with the given fields' JSON text in place."""
    parts = {"role": '"user"', "content": '"hi"', **fields}
    return "[{" + ", ".join(f'"{key}": {value}' for key, value in parts.items()) + "}]"


def body(**fields: str) -> str:
    """A request as JSON text: the model and a user's "hi", with the given fields' JSON text."""
    parts = {"model": json.dumps(MODEL), "messages": message(), **fields}
    return "{" + ", ".join(f'"{key}": {value}' for key, value in parts.items()) + "}"


def tool(parameters: str) -> str:
    return '[{"type": "function", "function": {"name": "f", "parameters": PARAMETERS}}]'.replace(
        "PARAMETERS", parameters
    )


HOSTILE = {
    "role as an array": (body(messages=message(role='["user"]')), "messages[0].role"),
    "role as an object": (body(messages=message(role='{"a": 1}')), "messages[0].role"),
    "role nested deeply": (body(messages=message(role=nested())), "messages[0].role"),
    "content nested deeply": (body(messages=message(content=nested())), "messages[0].content"),
    "a tool's parameters nested deeply": (
        body(tools=tool(nested('{"type": "object", "properties": {"p": DEEP}}'))),
        "tools[0].function.parameters",
    ),
    "metadata nested deeply": (body(metadata=nested()), "metadata"),
    "user nested deeply": (body(user=nested()), "user"),
    "user as an array": (body(user='["u-1"]'), "user"),
    "stream as a string": (body(stream='"yes"'), "stream"),
    "response_format nested deeply": (
        body(response_format=nested('{"type": "json_schema", "json_schema": DEEP}')),
        "response_format",
    ),
    "tool_choice nested deeply": (
        body(tool_choice=nested('{"type": "function", "function": {"name": "f", "x": DEEP}}')),
        "tool_choice",
    ),
}


@pytest.mark.parametrize(("text", "param"), HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_field_is_an_openai_400_naming_it_and_nothing_is_stored(
    v1, text, param, llm_server, attack_answers
):
    response = v1.post(URL, text, content_type="application/json")
    attack_answers.add(f"/v1 POST {URL}", response.status_code)
    assert response.status_code == 400, response.content[:300]
    error = error_of(response)
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert not Conversation.objects.exists()
    assert not Message.objects.exists()
    assert not Run.objects.exists()


# --- a client tool's parameters --------------------------------------------------------------

BAD_SCHEMAS = {
    "a string's schema": ('{"type": "string"}', '"type": "object"'),
    "a string": ('"obj"', "not a JSON object"),
    "an array": ('["type", "object"]', "not a JSON object"),
    "no type": ('{"properties": {"a": {"type": "string"}}}', '"type": "object"'),
    "anyOf at the top": ('{"type": "object", "anyOf": [{"required": ["a"]}]}', "anyOf"),
    "an unknown type": (
        '{"type": "object", "properties": {"a": {"type": "nonsense"}}}',
        "not valid JSON Schema",
    ),
    "required as a string": ('{"type": "object", "required": "a"}', "not valid JSON Schema"),
}


@pytest.mark.parametrize(("schema", "says"), BAD_SCHEMAS.values(), ids=BAD_SCHEMAS.keys())
def test_a_client_tool_whose_parameters_are_no_object_schema_is_a_400_before_any_model_call(
    v1, schema, says, llm_server, attack_answers
):
    response = v1.post(URL, body(tools=tool(schema)), content_type="application/json")
    attack_answers.add(f"/v1 POST {URL} (client tool schemas)", response.status_code)
    assert response.status_code == 400, response.content[:300]
    error = error_of(response)
    assert (error["type"], error["param"]) == (
        "invalid_request_error",
        "tools[0].function.parameters",
    )
    assert says in error["message"]
    assert not Conversation.objects.exists()
    assert not Run.objects.exists()
    assert llm_server.requests == []


@pytest.mark.parametrize(("schema", "says"), BAD_SCHEMAS.values(), ids=BAD_SCHEMAS.keys())
def test_a_responses_function_whose_parameters_are_no_object_schema_is_a_400_before_any_call(
    v1, schema, says, llm_server, attack_answers
):
    tools = '[{"type": "function", "name": "f", "parameters": PARAMETERS}]'
    text = body_of_response(tools.replace("PARAMETERS", schema))
    response = v1.post("/v1/responses", text, content_type="application/json")
    attack_answers.add("/v1 POST /v1/responses (client tool schemas)", response.status_code)
    assert response.status_code == 400, response.content[:300]
    error = error_of(response)
    assert (error["type"], error["param"]) == ("invalid_request_error", "tools[0].parameters")
    assert says in error["message"]
    assert not Conversation.objects.exists()
    assert not Run.objects.exists()
    assert llm_server.requests == []


def body_of_response(tools: str) -> str:
    return '{"model": ' + json.dumps(MODEL) + ', "input": "hi", "tools": ' + tools + "}"
