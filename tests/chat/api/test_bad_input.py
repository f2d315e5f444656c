"""Hostile input answers a 400 in the one error shape, never a 500.

A JSON body nested deeper than Python's recursion limit, and crafted `?cursor=`
values on the cursor-paged lists.
"""

from __future__ import annotations

import base64
from urllib.parse import quote

import pytest

from chat.models import Conversation, ExecutionStatus, Message, RunStatus
from tests.chat.api.conftest import stored_turn
from tests.factories import MessageFactory, RunFactory, ToolExecutionFactory

pytestmark = pytest.mark.django_db

CONVERSATIONS = "/api/v1/conversations/"
EXECUTIONS = "/api/v1/tool-executions/"
DEPTH = 100_000


def messages_url(conversation) -> str:
    return f"{CONVERSATIONS}{conversation.id}/messages/"


def deep_list(depth: int = DEPTH) -> str:
    return "[" * depth + "]" * depth


def deep_object(depth: int = DEPTH) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


# --- a deeply nested JSON body --------------------------------------------------------------

DEEP_BODIES = {
    "list": deep_list(),
    "object": deep_object(),
    "content": '{"content": ' + deep_list() + "}",
    "title": '{"title": "t", "mode": ' + deep_object() + "}",
}


def assert_parse_error(response) -> None:
    assert response.status_code == 400, response.content[:300]
    body = response.json()
    assert body["code"] == "parse_error"
    assert body["message"]
    assert set(body) <= {"code", "message", "field", "details"}


@pytest.mark.parametrize("body", DEEP_BODIES.values(), ids=DEEP_BODIES.keys())
def test_a_deeply_nested_body_creating_a_conversation_is_a_parse_error(api, body):
    response = api.post(CONVERSATIONS, data=body, content_type="application/json")
    assert_parse_error(response)
    assert not Conversation.objects.exists()


@pytest.mark.parametrize("body", DEEP_BODIES.values(), ids=DEEP_BODIES.keys())
def test_a_deeply_nested_body_posting_a_message_is_a_parse_error(api, conversation, body):
    response = api.post(messages_url(conversation), data=body, content_type="application/json")
    assert_parse_error(response)
    assert not Message.objects.exists()


@pytest.mark.parametrize("depth", [50, 500, 800])
def test_a_moderately_nested_content_is_a_plain_validation_error(api, conversation, depth):
    # Deep, but within what the parser takes: the field is refused as not a string.
    # (What it takes is Python's recursion limit, 1,000, less the frames of the stack
    # it runs on: 899 deep here, in the request's thread after authentication.)
    body = '{"content": ' + deep_list(depth) + "}"
    response = api.post(messages_url(conversation), data=body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["field"] == "content"


def test_a_deeply_nested_body_changing_a_conversation_is_a_parse_error(api, conversation):
    response = api.patch(
        f"{CONVERSATIONS}{conversation.id}/", data=deep_list(), content_type="application/json"
    )
    assert_parse_error(response)


# --- crafted cursors ------------------------------------------------------------------------


def b64(text: str | bytes) -> str:
    raw = text.encode("latin-1") if isinstance(text, str) else text
    return quote(base64.b64encode(raw).decode("ascii"), safe="")


BAD_CURSORS = {
    "not-ascii": "%FF",
    "short-base64": "AAAA",
    "garbage": "garbage",
    "base64-of-bytes": b64(b"\xff\xfe\x00\x01garbage\x80"),
    "nul-position": b64("r=1&p=%00"),
    "nul-in-position": b64("p=2024-01-01%00"),
    "text-position": b64("p=not-a-date"),
    "huge-position": b64("p=" + "9" * 40),
    "negative-huge-position": b64("p=-" + "9" * 40),
    "bad-date": b64("p=2024-13-45 99:99:99"),
    "year-9999-west": b64("p=9999-12-31 23:59:59-12:00"),
    "year-1-east": b64("p=0001-01-01 00:00:00+12:00"),
    "naive-date": b64("p=2024-01-01 00:00:00"),
    "empty-position": b64("p="),
    "float-position": b64("p=1.5"),
    "nan-position": b64("p=nan"),
    "bad-offset": b64("o=-1"),
    "bad-reverse": b64("r=x"),
    "huge-reverse": b64("r=" + "9" * 5000),
    "very-long": "A" * 100_000,
    "very-long-base64": b64("p=" + "1" * 50_000),
}


def assert_bad_cursor(response) -> None:
    assert response.status_code == 400, response.content[:300]
    body = response.json()
    assert body["code"] == "invalid"
    assert body["field"] == "cursor"
    assert body["message"].startswith("cursor: ")
    assert body["details"] == {"errors": {"cursor": ["Invalid cursor."]}}


@pytest.mark.parametrize("cursor", BAD_CURSORS.values(), ids=BAD_CURSORS.keys())
def test_a_crafted_cursor_on_the_conversation_list_is_a_400(api, conversation, cursor):
    assert_bad_cursor(api.get(f"{CONVERSATIONS}?cursor={cursor}"))


@pytest.mark.parametrize("cursor", BAD_CURSORS.values(), ids=BAD_CURSORS.keys())
def test_a_crafted_cursor_on_the_message_list_is_a_400(api, conversation, cursor):
    stored_turn(conversation)
    assert_bad_cursor(api.get(f"{messages_url(conversation)}?cursor={cursor}"))


@pytest.mark.parametrize("cursor", BAD_CURSORS.values(), ids=BAD_CURSORS.keys())
def test_a_crafted_cursor_on_the_execution_list_is_a_400(api, conversation, cursor):
    stored_turn(conversation)
    assert_bad_cursor(api.get(f"{EXECUTIONS}?cursor={cursor}"))


@pytest.mark.parametrize(
    ("url", "position"),
    [
        (CONVERSATIONS, "2024-01-01 00:00:00+00:00"),
        (CONVERSATIONS, "2024-01-01T00:00:00Z"),
        (EXECUTIONS, "2999-01-01 00:00:00.123456+02:00"),
        ("messages", "2"),
    ],
)
def test_a_well_formed_hand_made_cursor_still_pages(api, conversation, url, position):
    stored_turn(conversation)
    url = messages_url(conversation) if url == "messages" else url
    response = api.get(f"{url}?cursor={b64('p=' + quote(position))}")
    assert response.status_code == 200, response.content[:300]
    assert "results" in response.json()


def test_a_huge_offset_is_capped_as_drf_does(api, conversation):
    response = api.get(f"{CONVERSATIONS}?cursor={b64('o=' + '9' * 40)}")
    assert response.status_code == 200
    assert response.json()["results"] == []


@pytest.mark.parametrize("value", ["5", 5.5, True, None])
def test_max_steps_of_another_type_than_an_integer_is_a_400(api, value):
    response = api.post("/api/v1/conversations/", {"max_steps": value}, format="json")

    assert response.status_code == 400, response.content
    assert response.json()["field"] == "max_steps"
    assert not Conversation.objects.exists()


def test_an_anonymous_event_stream_request_is_a_401_not_a_406(conversation):
    from rest_framework.test import APIClient

    for path in (messages_url(conversation), "/api/v1/conversations/"):
        response = APIClient().get(path, HTTP_ACCEPT="text/event-stream")
        assert response.status_code == 401, (path, response.content)
        assert response.json()["code"] == "not_authenticated"


def test_a_body_over_the_upload_limit_is_a_json_413(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = '{"title": "' + "x" * 5000 + '"}'
    response = api.generic("POST", "/api/v1/conversations/", body, content_type="application/json")

    assert response.status_code == 413
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["code"] == "too_large"
    assert not Conversation.objects.exists()


# --- a key that is not valid Unicode ------------------------------------------------------

# A lone surrogate, escaped as JSON allows; it has no UTF-8 form, so it cannot be echoed back.
SURROGATE_KEY_BODY = '{"\\ud800": 1}'


def test_a_lone_surrogate_in_a_key_is_a_400_on_every_body_the_api_reads(api, conversation, user):
    run = RunFactory(conversation=conversation, status=RunStatus.AWAITING_APPROVAL)
    asking = MessageFactory(
        conversation=conversation,
        run=run,
        role="assistant",
        content=None,
        tool_calls=[
            {
                "id": "call_d",
                "type": "function",
                "function": {"name": "delete_notes", "arguments": "{}"},
            }
        ],
    )
    execution = ToolExecutionFactory(
        run=run,
        message=asking,
        tool_call_id="call_d",
        name="delete_notes",
        status=ExecutionStatus.AWAITING_APPROVAL,
        result=None,
    )
    title = conversation.title
    urls = {
        "create": ("post", CONVERSATIONS),
        "patch": ("patch", f"{CONVERSATIONS}{conversation.id}/"),
        "message": ("post", messages_url(conversation)),
        "approve": ("post", f"{EXECUTIONS}{execution.id}/approve/"),
        "reject": ("post", f"{EXECUTIONS}{execution.id}/reject/"),
    }
    for name, (method, url) in urls.items():
        response = getattr(api, method)(
            url, data=SURROGATE_KEY_BODY, content_type="application/json"
        )
        assert_parse_error(response), name
        assert "not valid Unicode" in response.json()["message"], name
    assert Conversation.objects.count() == 1
    conversation.refresh_from_db()
    assert conversation.title == title
    assert Message.objects.filter(role="user").count() == 0
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.AWAITING_APPROVAL
