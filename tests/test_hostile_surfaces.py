"""Hostile bytes at every field of every surface: REST, /v1, the WebSocket, SSE and the pages.

Each surface's fields are listed from what serves them (the REST API's own
OpenAPI schema, the frames the socket reads, the query parameters the pages
read), and each is sent every value of HOSTILE. Whatever toolchat answers, it
is never a 5xx (nor, on the socket, a crash that drops the connection). Each
answer is counted for the attack suite's table (tests/plugins/attack_table.py),
which `make attack` prints at the end: cases, and answers by class, by surface.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import Client
from drf_spectacular.generators import SchemaGenerator
from rest_framework.authtoken.models import Token

from tests.factories import (
    ConversationFactory,
    MessageFactory,
    RunFactory,
    ToolExecutionFactory,
    UserFactory,
)
from tests.plugins.attack_table import AttackAnswers

# Each a JSON text, spliced into a body as the field's value.
HOSTILE: dict[str, str] = {
    "nul": json.dumps("a\x00b"),
    "lone surrogate": '"\\ud800x"',
    "deep list": "[" * 5000 + "]" * 5000,
    "deep object": '{"a": ' * 5000 + "1" + "}" * 5000,
    "long text": json.dumps("x" * 200_000),
    "huge integer": "1" + "0" * 400,
    "negative": "-1",
    "float": "1e308",
    "boolean": "true",
    "null": "null",
    "empty list": "[]",
    "empty object": "{}",
    "markup": json.dumps('<img src=x onerror="alert(1)">'),
}
# The same as query-string text.
HOSTILE_QUERY: dict[str, str] = {
    "nul": "a%00b",
    "invalid utf-8": "%ff%fe",
    "long text": "x" * 20_000,
    "huge integer": "1" + "0" * 400,
    "negative": "-1",
    "markup": "%3Cscript%3E",
    "brackets": "[]",
}

# Bytes no UTF-8 decoder takes, each inside a binary frame's message content.
NOT_UTF8: dict[str, bytes] = {
    "a stray byte": b"\xff",
    "a lone continuation byte": b"\x80",
    "an overlong slash": b"\xc0\xaf",
    "a surrogate's encoding": b"\xed\xa0\x80",
    "a cut sequence": b"\xe2\x82",
    "Latin-1 text": "caf\u00e9".encode("latin-1"),
}

_PLACEHOLDER = "__hostile__"


class Tally:
    """Answers by surface, counted for the attack suite's table; the 5xx with what caused each."""

    def __init__(self, answers: AttackAnswers) -> None:
        self.answers = answers
        self.failures: list[str] = []

    def add(self, surface: str, status: int, what: str) -> None:
        self.answers.add(surface, status)
        if status >= 500 or status < 100:
            self.failures.append(f"{surface} {what}: {status}")

    def report(self) -> None:
        assert not self.failures, self.failures[:20]


def body_with(base: dict[str, Any], path: list[str], raw: str) -> str:
    """`base` as JSON, with the field at `path` (keys into nested objects) set to `raw`."""
    document = json.loads(json.dumps(base))
    target = document
    for key in path[:-1]:
        target = target.setdefault(key, {})
        if not isinstance(target, dict):
            return json.dumps(document)
    target[path[-1]] = _PLACEHOLDER
    return json.dumps(document).replace(f'"{_PLACEHOLDER}"', raw, 1)


@pytest.fixture
def world(db):
    """A staff person with a token and one of everything an id in a path can name."""
    user = UserFactory(is_staff=True)
    token = Token.objects.create(user=user).key
    conversation = ConversationFactory(owner=user)
    run = RunFactory(conversation=conversation, status="completed")
    message = MessageFactory(conversation=conversation, run=run, role="assistant", content="hi")
    execution = ToolExecutionFactory(run=run, message=message, status="awaiting_approval")
    return {
        "user": user,
        "token": token,
        "ids": {
            "conversation_id": str(conversation.pk),
            "run_id": str(run.pk),
            "execution_id": str(execution.pk),
            "message_id": str(message.pk),
            "resource_id": "00000000-0000-0000-0000-000000000000",
            "policy_id": "1",
            "limit_id": "1",
            "approval_id": "1",
            "model_id": "offline",
        },
    }


def _operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in ("get", "post", "patch", "put"):
                yield path, method, operation


def _body_fields(operation: dict[str, Any], components: dict[str, Any]) -> list[list[str]]:
    content = (operation.get("requestBody") or {}).get("content") or {}
    schema = (content.get("application/json") or {}).get("schema") or {}
    if "$ref" in schema:
        schema = components[schema["$ref"].rsplit("/", 1)[1]]
    fields = [[name] for name in (schema.get("properties") or {})]
    return fields or [["unknown"]]


@pytest.mark.django_db
def test_every_rest_field_and_query_parameter_survives_hostile_values(
    world, attack_answers, settings, monkeypatch
):
    from django.core.cache import cache
    from rest_framework.throttling import ScopedRateThrottle

    settings.TOOLCHAT_TASKS_EAGER = False
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"messages": "100000/min"})
    cache.clear()
    client = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Token {world['token']}")
    components = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    tally = Tally(attack_answers)
    for template, method, operation in _operations():
        if template.endswith(("/events/", "/schema/")) or template.startswith("/v1/"):
            continue  # the event streams and /v1 have their own tests; the schema takes no input
        path = template.format_map(collections.defaultdict(lambda: "x", world["ids"]))
        surface = f"REST {method.upper()} {template}"
        if method == "get":
            names = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
            for name in names or ["unknown"]:
                for kind, raw in HOSTILE_QUERY.items():
                    response = client.get(f"{path}?{name}={raw}")
                    tally.add(surface, response.status_code, f"?{name}= {kind}")
            continue
        for field in _body_fields(operation, components):
            for kind, raw in HOSTILE.items():
                response = client.generic(
                    method.upper(), path, body_with({}, field, raw), "application/json"
                )
                tally.add(surface, response.status_code, f"{'.'.join(field)} {kind}")
    for kind in HOSTILE_QUERY:
        bad = HOSTILE_QUERY[kind]
        response = client.get(f"/api/v1/conversations/{bad}/")
        tally.add("REST a hostile id in the path", response.status_code, kind)
    tally.report()


V1_FIELDS: dict[str, tuple[dict[str, Any], list[list[str]]]] = {
    "/v1/chat/completions": (
        {"model": "offline/offline", "messages": [{"role": "user", "content": "hi"}]},
        [
            ["model"],
            ["messages"],
            ["tools"],
            ["tool_choice"],
            ["temperature"],
            ["top_p"],
            ["max_tokens"],
            ["stop"],
            ["seed"],
            ["stream"],
            ["stream_options"],
            ["metadata"],
            ["user"],
            ["response_format"],
            ["logit_bias"],
            ["logprobs"],
            ["n"],
            ["parallel_tool_calls"],
        ],
    ),
    "/v1/responses": (
        {"model": "offline/offline", "input": "hi"},
        [
            ["model"],
            ["input"],
            ["instructions"],
            ["tools"],
            ["tool_choice"],
            ["previous_response_id"],
            ["store"],
            ["stream"],
            ["metadata"],
            ["text"],
            ["max_output_tokens"],
            ["temperature"],
            ["conversation"],
        ],
    ),
    "/v1/conversations": (
        {"items": [{"type": "message", "role": "user", "content": "hi"}]},
        [["items"], ["metadata"]],
    ),
}


@pytest.mark.django_db(transaction=True)
def test_every_v1_field_survives_hostile_values(world, attack_answers, settings, monkeypatch):
    from django.core.cache import cache
    from rest_framework.throttling import ScopedRateThrottle

    # A request that is accepted runs its turn at once, in the request, on the offline model;
    # the message rate would answer most of them 429 before their fields are read.
    settings.TOOLCHAT_TASKS_EAGER = True
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"messages": "100000/min"})
    cache.clear()
    client = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {world['token']}")
    tally = Tally(attack_answers)
    for path, (base, fields) in V1_FIELDS.items():
        for field in fields:
            for kind, raw in HOSTILE.items():
                if field == ["stream"] and kind == "boolean":
                    continue  # a valid stream: its answer is read below, once
                response = client.generic(
                    "POST", path, body_with(base, field, raw), "application/json"
                )
                tally.add(f"/v1 POST {path}", response.status_code, f"{field[0]} {kind}")
    for kind, raw in HOSTILE_QUERY.items():
        for path in (
            f"/v1/responses/{raw}",
            f"/v1/models/{raw}",
            f"/v1/conversations/{raw}",
            f"/v1/conversations/{raw}/items",
        ):
            response = client.get(path)
            tally.add("/v1 GET a hostile id", response.status_code, f"{path} {kind}")
    tally.report()


@pytest.mark.django_db(transaction=True)  # the event streams' async views read from a thread
def test_the_event_stream_and_the_pages_survive_hostile_query_strings(world, attack_answers):
    client = Client(raise_request_exception=False)
    client.force_login(world["user"])
    ids = world["ids"]
    pages = {
        "/": ["conversation", "unknown"],
        "/login/": ["next"],
        "/audit/": ["period", "start", "end", "status", "replays", "page", "include_replays"],
        "/audit/tools.csv": ["period", "start", "end"],
        "/audit/people.csv": ["period"],
        f"/audit/runs/{ids['run_id']}/": ["compare", "unknown"],
        f"/audit/conversations/{ids['conversation_id']}/": ["page"],
        "/audit/replays/": ["period", "model", "page"],
    }
    tally = Tally(attack_answers)
    for page, names in pages.items():
        for name in names:
            for kind, raw in HOSTILE_QUERY.items():
                response = client.get(f"{page}?{name}={raw}")
                tally.add(
                    f"page {page.split('/')[1] or '/'}", response.status_code, f"{name} {kind}"
                )
    streams = [
        f"/api/v1/conversations/{ids['conversation_id']}/events/",
        f"/api/v1/runs/{ids['run_id']}/events/",
    ]
    for stream in streams:
        for accept in ("text/event-stream", "application/json"):
            for kind, raw in HOSTILE_QUERY.items():
                response = client.get(f"{stream}?after={raw}", HTTP_ACCEPT=accept)
                tally.add(f"SSE/events ({accept})", response.status_code, f"after {kind}")
                getattr(response, "close", lambda: None)()
    tally.report()


FRAMES: dict[str, list[str]] = {
    "message": ["content", "replaces"],
    "cancel": ["run_id"],
    "approve": ["execution_id", "reason", "arguments", "scope", "match_arguments"],
    "reject": ["execution_id", "reason"],
    "resume": ["after"],
}


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_every_socket_frame_field_survives_hostile_values(attack_answers, settings):
    from channels.testing.websocket import WebsocketCommunicator

    from project.asgi import application
    from tests.chat.live.test_consumers import session_headers

    settings.TOOLCHAT_TASKS_EAGER = False
    user = await database_sync_to_async(UserFactory)()
    conversation = await database_sync_to_async(ConversationFactory)(owner=user)
    headers = await database_sync_to_async(session_headers)(user)
    tally = Tally(attack_answers)
    communicator = WebsocketCommunicator(
        application, f"/ws/conversations/{conversation.pk}/", headers=headers
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    frames: list[tuple[str, str, dict[str, Any]]] = []
    for frame, fields in FRAMES.items():
        for field in fields:
            for kind, raw in HOSTILE.items():
                if kind == "long text":
                    continue  # over the frame limit: the socket closes by design (test_consumers)
                text = body_with({"type": frame}, [field], raw)
                frames.append((f"socket {frame}", f"{field} {kind}", {"text_data": text}))
                # The same frame as a binary one, which is read as the UTF-8 text it must be.
                binary = {"bytes_data": text.encode("utf-8", "surrogatepass")}
                frames.append(("socket binary frames", f"{frame} {field} {kind}", binary))
    for kind, raw_bytes in NOT_UTF8.items():
        frame_bytes = b'{"type": "message", "content": "bin' + raw_bytes + b'ary"}'
        frames.append(("socket binary frames", f"not UTF-8: {kind}", {"bytes_data": frame_bytes}))
    for surface, what, sent in frames:
        await communicator.send_to(**sent)
        try:
            reply = json.loads(await communicator.receive_from(timeout=5))
            while reply.get("type") not in ("error", "ack"):
                reply = json.loads(await communicator.receive_from(timeout=5))
            tally.add(surface, 400 if reply["type"] == "error" else 200, what)
        except AssertionError:
            tally.add(surface, 0, f"{what} (no answer)")
            await communicator.disconnect()
            communicator = WebsocketCommunicator(
                application, f"/ws/conversations/{conversation.pk}/", headers=headers
            )
            await communicator.connect(timeout=5)
    await communicator.disconnect()
    # Bytes that are not UTF-8 are refused, never repaired into a stored message.
    from chat.models import Message

    repaired = Message.objects.filter(content__startswith="bin")
    assert not await database_sync_to_async(repaired.exists)()
    # A frame that was a valid message started a turn: let it end before the data goes.
    from chat.models import ACTIVE_RUN_STATUSES, Run
    from tests.assertions import wait_until_async

    idle = database_sync_to_async(
        lambda: not Run.objects.filter(status__in=ACTIVE_RUN_STATUSES).exists()
    )
    await wait_until_async(idle, what="the socket's turns to end")
    tally.report()
