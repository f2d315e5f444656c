"""The WebSocket consumer through the real ASGI stack (auth, origin check, routing)."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing.websocket import WebsocketCommunicator
from django.test import Client
from rest_framework.authtoken.models import Token

from chat.live.event_types import event_data
from chat.live.events import event_publish
from chat.models import ACTIVE_RUN_STATUSES, Message, Run, RunStatus
from project.asgi import application
from tests.assertions import wait_until_async
from tests.chat.openai_api.test_images import data_url, png
from tests.factories import ConversationFactory, RunFactory, UserFactory, event_make

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


def session_headers(user, origin="http://testserver", host="testserver", extra=()):
    """A browser's handshake: its session cookie, the page's Origin, the Host it asked."""
    client = Client()
    client.force_login(user)
    headers = [(b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())]
    if host:
        headers.append((b"host", host.encode()))
    if origin:
        headers.append((b"origin", origin.encode()))
    headers.extend(extra)
    return headers


async def connect(conversation_id, headers, query="", scheme="ws"):
    path = f"/ws/conversations/{conversation_id}/" + (f"?{query}" if query else "")
    communicator = WebsocketCommunicator(application, path, headers=headers)
    communicator.scope["scheme"] = scheme
    connected, code = await communicator.connect(timeout=5)
    return communicator, connected, code


async def receive_events(communicator, count, timeout=10):
    events = []
    while len(events) < count:
        message = json.loads(await communicator.receive_from(timeout=timeout))
        if message.get("type") == "ping":
            continue
        events.append(message)
    return events


@database_sync_to_async
def publish(run, count, start=0):
    return [
        event_publish(run=run, event=event_make("tool.progress", percent=start + i)).seq
        for i in range(count)
    ]


@database_sync_to_async
def make(factory, **kwargs):
    return factory(**kwargs)


@database_sync_to_async
def headers_for(user, **kwargs):
    return session_headers(user, **kwargs)


async def test_the_owner_receives_live_events_in_order(user):
    conversation = await make(ConversationFactory, owner=user)
    run = await make(RunFactory, conversation=conversation)
    communicator, connected, _ = await connect(conversation.id, await headers_for(user), "after=0")
    assert connected
    seqs = await publish(run, 3)
    events = await receive_events(communicator, 3)
    assert [e["seq"] for e in events] == seqs == [1, 2, 3]
    assert events[0] == {
        "seq": 1,
        "type": "tool.progress",
        "run_id": str(run.id),
        "ts": events[0]["ts"],
        "data": event_data(event_make("tool.progress", percent=0)),
    }
    await communicator.disconnect()


async def test_another_users_conversation_is_closed_with_4404(user):
    stranger = await make(UserFactory)
    conversation = await make(ConversationFactory, owner=stranger)
    communicator, connected, _ = await connect(conversation.id, await headers_for(user))
    assert connected
    closed = await communicator.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4404}


async def test_an_unknown_conversation_is_closed_with_4404(user):
    communicator, connected, _ = await connect(
        "00000000-0000-0000-0000-000000000000", await headers_for(user)
    )
    assert connected
    assert (await communicator.receive_output(timeout=5))["code"] == 4404


@pytest.mark.parametrize(
    "path",
    [
        "/ws/nothing/",
        "/ws/conversations/not-a-uuid/",
        "/ws/conversations/12345678-1234-1234-1234-1234567890ab/extra/",
        "/ws/conversations/",
        "/elsewhere/",
    ],
)
async def test_an_unrouted_path_or_a_malformed_id_is_closed_with_4404(user, path, caplog):
    communicator = WebsocketCommunicator(application, path, headers=await headers_for(user))
    connected, code = await communicator.connect(timeout=5)
    assert (connected, code) == (True, None)  # accepted only to say why, as other refusals
    assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}
    assert "No route found" not in caplog.text
    await communicator.wait()


async def test_an_anonymous_socket_is_closed_with_4401(user):
    conversation = await make(ConversationFactory, owner=user)
    communicator, connected, _ = await connect(conversation.id, [(b"origin", b"http://testserver")])
    assert connected
    assert (await communicator.receive_output(timeout=5))["code"] == 4401


async def test_an_anonymous_socket_without_origin_is_closed_with_4401_too(user):
    # No cookie, no token, no Origin: a client with no credentials at all hears
    # the documented 4401, not an HTTP 403 meant for cross-site cookies.
    conversation = await make(ConversationFactory, owner=user)
    communicator, connected, _ = await connect(conversation.id, [])
    assert connected
    assert (await communicator.receive_output(timeout=5))["code"] == 4401


async def test_a_foreign_origin_is_refused_at_the_handshake(user):
    conversation = await make(ConversationFactory, owner=user)
    headers = await headers_for(user, origin="http://evil.example")
    _communicator, connected, _ = await connect(conversation.id, headers)
    assert not connected


@pytest.mark.parametrize(
    ("origin", "host", "scheme", "extra", "allowed"),
    [
        ("http://testserver", "testserver", "ws", (), True),
        ("http://testserver:8000", "testserver:8000", "ws", (), True),
        ("http://testserver:1", "testserver", "ws", (), False),  # another port
        ("https://testserver", "testserver", "ws", (), False),  # another scheme
        ("http://testserver", "testserver", "wss", (), False),  # a plain page, a TLS socket
        ("https://testserver", "testserver", "wss", (), True),
        ("http://127.0.0.1:1", "testserver", "ws", (), False),  # an allowed host, not this one
        ("http://testserver", "evil.example", "ws", (), False),  # a Host not allowed
        ("null", "testserver", "ws", (), False),  # a sandboxed frame, a file: page
        ("https://chat.example.com", "testserver", "ws", (), True),  # CSRF_TRUSTED_ORIGINS
        ("https://a.trusted.example", "testserver", "ws", (), True),  # a wildcard entry
        ("http://a.trusted.example", "testserver", "ws", (), False),  # wrong scheme for it
    ],
)
async def test_a_cookie_socket_needs_the_sites_own_origin(
    user, settings, origin, host, scheme, extra, allowed
):
    """Django's CSRF rule: scheme, host and port, or a trusted origin."""
    settings.CSRF_TRUSTED_ORIGINS = ["https://chat.example.com", "https://*.trusted.example"]
    conversation = await make(ConversationFactory, owner=user)
    headers = await headers_for(user, origin=origin, host=host, extra=extra)
    _communicator, connected, _ = await connect(conversation.id, headers, scheme=scheme)
    assert connected is allowed


@pytest.mark.parametrize(
    ("forwarded", "allowed"), [("https", True), ("http", False), (None, False)]
)
async def test_behind_a_tls_proxy_the_forwarded_scheme_counts(user, settings, forwarded, allowed):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    conversation = await make(ConversationFactory, owner=user)
    extra = [(b"x-forwarded-proto", forwarded.encode())] if forwarded else []
    headers = await headers_for(user, origin="https://testserver", extra=extra)
    _communicator, connected, _ = await connect(conversation.id, headers)
    assert connected is allowed


async def test_a_cookie_without_origin_is_refused(user):
    conversation = await make(ConversationFactory, owner=user)
    _communicator, connected, _ = await connect(
        conversation.id, await headers_for(user, origin=None)
    )
    assert not connected


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://testserver", True),
        ("http://testserver:1", False),  # another port of the same host
        ("https://testserver", False),  # another scheme
        ("http://evil.example", False),
        ("https://chat.example.com", True),  # CSRF_TRUSTED_ORIGINS
    ],
)
async def test_a_token_client_that_sends_an_origin_needs_an_allowed_one(
    user, settings, origin, allowed
):
    """The same rule as a cookie's: a page elsewhere cannot use a token it got hold of."""
    settings.CSRF_TRUSTED_ORIGINS = ["https://chat.example.com"]
    conversation = await make(ConversationFactory, owner=user)
    token = await database_sync_to_async(Token.objects.create)(user=user)
    headers = [
        (b"authorization", f"Token {token.key}".encode()),
        (b"host", b"testserver"),
        (b"origin", origin.encode()),
    ]
    communicator, connected, _ = await connect(conversation.id, headers, "after=0")
    assert connected is allowed
    if connected:
        await communicator.disconnect()


async def test_a_token_client_needs_no_origin(user):
    conversation = await make(ConversationFactory, owner=user)
    token = await database_sync_to_async(Token.objects.create)(user=user)
    headers = [(b"authorization", f"Token {token.key}".encode())]
    communicator, connected, _ = await connect(conversation.id, headers, "after=0")
    assert connected
    run = await make(RunFactory, conversation=conversation)
    await publish(run, 1)
    assert (await receive_events(communicator, 1))[0]["seq"] == 1
    await communicator.disconnect()


async def test_a_bad_token_is_unauthenticated(user):
    conversation = await make(ConversationFactory, owner=user)
    communicator, connected, _ = await connect(
        conversation.id, [(b"authorization", b"Token not-a-real-key")]
    )
    assert connected
    assert (await communicator.receive_output(timeout=5))["code"] == 4401


async def test_resume_replays_stored_events_then_continues_live_without_gaps(user):
    conversation = await make(ConversationFactory, owner=user)
    run = await make(RunFactory, conversation=conversation)
    await publish(run, 5)
    communicator, connected, _ = await connect(conversation.id, await headers_for(user))
    assert connected
    await communicator.send_json_to({"type": "resume", "after": 2})
    replayed = await receive_events(communicator, 3)
    await publish(run, 2, start=5)
    live = await receive_events(communicator, 2)
    assert [e["seq"] for e in replayed + live] == [3, 4, 5, 6, 7]
    assert await communicator.receive_nothing(timeout=0.5)
    await communicator.disconnect()


async def test_without_resume_the_socket_carries_events_from_now_on(user):
    conversation = await make(ConversationFactory, owner=user)
    run = await make(RunFactory, conversation=conversation)
    await publish(run, 4)
    communicator, connected, _ = await connect(conversation.id, await headers_for(user))
    assert connected
    await publish(run, 1, start=4)
    assert [e["seq"] for e in await receive_events(communicator, 1)] == [5]
    await communicator.disconnect()


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ("not json", "invalid_json"),
        ("[1, 2]", "invalid_message"),
        ('{"type": "dance"}', "unknown_type"),
        ('{"type": ["resume"]}', "unknown_type"),
        ('{"type": "resume", "after": "x"}', "invalid_after"),
        ('{"type": "message", "content": 5}', "invalid"),
        ('{"type": "message", "content": "   "}', "invalid"),
        ('{"type": "cancel", "run_id": "00000000-0000-0000-0000-000000000000"}', "not_found"),
        ('{"type": "cancel", "run_id": "nope"}', "not_found"),
        ('{"type": "approve"}', "invalid_execution_id"),
        ('{"type": "reject", "execution_id": 7}', "invalid_execution_id"),
        ('{"type": "approve", "execution_id": "nope"}', "not_found"),
        ('{"type": "reject", "execution_id": "x", "reason": ["no"]}', "invalid_reason"),
    ],
)
async def test_malformed_client_messages_get_an_error_and_the_socket_lives_on(user, payload, code):
    conversation = await make(ConversationFactory, owner=user)
    communicator, connected, _ = await connect(conversation.id, await headers_for(user), "after=0")
    assert connected
    await communicator.send_to(text_data=payload)
    reply = json.loads(await communicator.receive_from(timeout=5))
    assert reply["type"] == "error"
    assert reply["code"] == code
    assert reply["message"]
    await communicator.send_to(text_data='{"type": "resume", "after": 0}')
    await communicator.disconnect()


DEEP = "[" * 50_000 + "]" * 50_000  # within the size limit, far past the parser's recursion


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ('{"type": "message", "content": "a\\u0000b"}', "invalid"),
        ('{"type": "message", "content": "half \\ud800 a pair"}', "invalid"),
        ('{"type": "message", "content": "\\u200b\\u200b\\ufeff"}', "invalid"),
        ('{"type": "message", "content": {"a": [[[["deep"]]]]}}', "invalid"),
        (DEEP, "invalid_json"),
        ('{"type": "message", "content": ' + DEEP + "}", "invalid_json"),
        ('{"type": "\\ud800"}', "unknown_type"),
        ('{"type": "cancel", "run_id": "\\ud800\\u0000"}', "not_found"),
        ('{"type": "approve", "execution_id": "\\udfff", "reason": "\\u0000"}', "not_found"),
        ('{"type": "resume", "after": 1e999}', "invalid_after"),
        ('{"type": "resume", "after": ' + "9" * 5000 + "}", "invalid_json"),
    ],
    ids=[
        "nul",
        "surrogate",
        "zero-width",
        "nested-content",
        "deep",
        "deep-content",
        "surrogate-type",
        "surrogate-run-id",
        "surrogate-execution-id",
        "infinite-after",
        "huge-after",
    ],
)
async def test_hostile_frames_get_an_error_and_store_nothing(user, payload, code):
    conversation = await make(ConversationFactory, owner=user)
    communicator, connected, _ = await connect(conversation.id, await headers_for(user), "after=0")
    assert connected
    await communicator.send_to(text_data=payload)
    raw = await communicator.receive_from(timeout=5)
    raw.encode("utf-8")  # what a real server must be able to send
    reply = json.loads(raw)
    assert (reply["type"], reply["code"]) == ("error", code), reply
    await communicator.send_to(text_data='{"type": "dance"}')
    assert json.loads(await communicator.receive_from(timeout=5))["code"] == "unknown_type"
    assert not await database_sync_to_async(Run.objects.filter(conversation=conversation).exists)()
    await communicator.disconnect()


async def test_an_oversized_client_message_is_refused(user, settings):
    settings.TOOLCHAT_WS_MAX_MESSAGE_BYTES = 100
    conversation = await make(ConversationFactory, owner=user)
    communicator, _, _ = await connect(conversation.id, await headers_for(user), "after=0")
    await communicator.send_json_to({"type": "message", "content": "x" * 200})
    reply = json.loads(await communicator.receive_from(timeout=5))
    assert (reply["type"], reply["code"]) == ("error", "too_large")
    await communicator.disconnect()


async def test_a_message_over_the_socket_starts_a_run_and_streams_it(user, settings):
    settings.LLM_PROVIDER = "offline"
    conversation = await make(ConversationFactory, owner=user)
    communicator, _, _ = await connect(conversation.id, await headers_for(user), "after=0")
    await communicator.send_json_to({"type": "message", "content": "what is 12*7"})
    ack, events = None, []
    while not events or events[-1]["type"] != "run.completed":
        (message,) = await receive_events(communicator, 1)
        if message["type"] == "ack":
            ack = message  # before or after the user message's event: either may come first
        else:
            events.append(message)
    assert ack is not None
    assert events[0]["type"] == "message.created"
    assert events[0]["data"]["message_id"] == ack["message_id"]
    assert events[0]["data"]["message"]["content"] == "what is 12*7"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert {e["run_id"] for e in events} == {ack["run_id"]}
    text = "".join(e["data"]["text"] for e in events if e["type"] == "message.delta")
    assert "84" in text
    await communicator.disconnect()


async def test_an_edit_over_the_socket_replaces_the_last_question_as_rest_does(user, settings):
    settings.LLM_PROVIDER = "offline"
    conversation = await make(ConversationFactory, owner=user)
    communicator, _, _ = await connect(conversation.id, await headers_for(user), "after=0")

    async def post(body):
        await communicator.send_json_to({"type": "message", **body})
        ack, ended = None, False
        while ack is None or not ended:
            (message,) = await receive_events(communicator, 1)
            if message["type"] == "ack":
                ack = message
            elif message["type"] == "error":
                raise AssertionError(message)
            ended = ended or message["type"] == "run.completed"
        return ack

    first = await post({"content": "what is 2+2"})
    await post({"content": "what is 3+3", "replaces": first["message_id"]})
    old = await database_sync_to_async(Message.objects.get)(pk=first["message_id"])
    assert old.superseded_at is not None  # kept in the record, out of the history
    await communicator.disconnect()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"content": "hi", "colour": "blue"}, "colour"),
        ({"content": "hi", "replaces": "not-an-id"}, "replaces"),
        ({"content": "hi", "\ud800": 1}, "\\ud800"),
        ({"content": ""}, "content"),
        ({}, "content"),
    ],
    ids=["unknown-field", "bad-replaces", "surrogate-key", "blank", "missing"],
)
async def test_a_socket_post_is_checked_by_the_rest_posts_rules(user, body, field):
    conversation = await make(ConversationFactory, owner=user)
    communicator, _, _ = await connect(conversation.id, await headers_for(user), "after=0")
    await communicator.send_to(text_data=json.dumps({"type": "message", **body}))
    raw = await communicator.receive_from(timeout=5)
    raw.encode("utf-8")
    reply = json.loads(raw)
    assert (reply["type"], reply["code"], reply["field"]) == ("error", "invalid", field), reply
    assert field in reply["details"]["errors"]
    assert not await database_sync_to_async(Run.objects.filter(conversation=conversation).exists)()
    await communicator.disconnect()


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "resume", "after": 0, "colour": "blue"},
        {"type": "cancel", "run_id": "00000000-0000-0000-0000-000000000000", "colour": "blue"},
        {"type": "approve", "execution_id": "nope", "colour": "blue"},
        {"type": "reject", "execution_id": "nope", "reason": "no", "colour": "blue"},
    ],
    ids=["resume", "cancel", "approve", "reject"],
)
async def test_every_frame_refuses_unknown_fields_as_a_post_does(user, frame):
    conversation = await make(ConversationFactory, owner=user)
    communicator, _, _ = await connect(conversation.id, await headers_for(user), "after=0")
    await communicator.send_to(text_data=json.dumps(frame))
    reply = json.loads(await communicator.receive_from(timeout=5))
    assert (reply["type"], reply["code"], reply["field"]) == ("error", "invalid", "colour"), reply
    assert reply["details"]["errors"] == {"colour": ["Unknown field."]}
    await communicator.send_to(text_data='{"type": "dance"}')
    assert json.loads(await communicator.receive_from(timeout=5))["code"] == "unknown_type"
    await communicator.disconnect()


async def test_a_binary_frame_that_is_not_utf8_is_refused_and_nothing_is_stored(user):
    conversation = await make(ConversationFactory, owner=user)
    communicator, _, _ = await connect(conversation.id, await headers_for(user), "after=0")
    await communicator.send_to(bytes_data=b'{"type": "message", "content": "a\xffb"}')
    reply = json.loads(await communicator.receive_from(timeout=5))
    assert (reply["type"], reply["code"]) == ("error", "invalid_json"), reply
    assert "UTF-8" in reply["message"]
    # A binary frame that is UTF-8 is read as a text frame is.
    await communicator.send_to(bytes_data='{"type": "dance", "é": 1}'.encode())
    assert json.loads(await communicator.receive_from(timeout=5))["code"] == "unknown_type"
    assert not await database_sync_to_async(
        Message.objects.filter(conversation=conversation).exists
    )()
    assert not await database_sync_to_async(Run.objects.filter(conversation=conversation).exists)()
    await communicator.disconnect()


async def test_cancel_over_the_socket(user):
    conversation = await make(ConversationFactory, owner=user)
    run = await make(RunFactory, conversation=conversation, status=RunStatus.RUNNING)
    communicator, _, _ = await connect(conversation.id, await headers_for(user), "after=0")
    await communicator.send_json_to({"type": "cancel", "run_id": str(run.id)})
    messages = [json.loads(await communicator.receive_from(timeout=5)) for _ in range(2)]
    types = {m["type"] for m in messages}
    assert types == {"ack", "run.cancelled"}
    status = await database_sync_to_async(lambda: Run.objects.get(pk=run.pk).status)()
    assert status == RunStatus.CANCELLED
    await communicator.disconnect()


def waiting_call(conversation):
    """A run paused on a call that needs approval, as the engine leaves it."""
    from chat.models import ExecutionStatus, Role
    from tests.factories import MessageFactory, ToolExecutionFactory

    run = RunFactory(conversation=conversation, status=RunStatus.AWAITING_APPROVAL)
    call_id = f"call_waiting_{run.pk.hex[:12]}"
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "launch_rocket", "arguments": '{"target": "mars"}'},
    }
    message = MessageFactory(
        conversation=conversation, run=run, role=Role.ASSISTANT, content="", tool_calls=[call]
    )
    return ToolExecutionFactory(
        run=run,
        message=message,
        tool_call_id=call_id,
        name="launch_rocket",
        arguments={"target": "mars"},
        arguments_raw='{"target": "mars"}',
        status=ExecutionStatus.AWAITING_APPROVAL,
        result=None,
        content="",
        started_at=None,
        finished_at=None,
        duration_ms=None,
        attempts=0,
    )


async def test_a_waiting_call_is_rejected_over_the_socket_once(user):
    from chat.models import ExecutionStatus, ToolExecution

    conversation = await make(ConversationFactory, owner=user)
    execution = await database_sync_to_async(waiting_call)(conversation)
    communicator, _, _ = await connect(conversation.id, await headers_for(user), "after=0")
    decision = {"type": "reject", "execution_id": str(execution.pk), "reason": "not mars"}
    await communicator.send_json_to(decision)
    seen = []
    while not any(m.get("type") == "ack" for m in seen) or "tool_call.completed" not in {
        m.get("type") for m in seen
    }:
        seen.append(json.loads(await communicator.receive_from(timeout=5)))
    decided = next(m for m in seen if m["type"] == "tool_call.approval_decided")
    assert (decided["data"]["approved"], decided["data"]["reason"]) == (False, "not mars")
    row = await database_sync_to_async(lambda: ToolExecution.objects.get(pk=execution.pk))()
    assert row.status == ExecutionStatus.REJECTED
    # A second decision is refused, with the first one.
    await communicator.send_json_to({**decision, "type": "approve"})
    while (reply := json.loads(await communicator.receive_from(timeout=5)))["type"] != "error":
        pass
    assert (reply["code"], reply["details"]["status"]) == ("conflict", "rejected")
    await communicator.disconnect()
    # The run went on after the rejection (in this process): let it end before the
    # test's data goes.
    ended = database_sync_to_async(
        lambda: not Run.objects.filter(pk=execution.run_id, status__in=ACTIVE_RUN_STATUSES).exists()
    )
    await wait_until_async(ended, what="the run to end after the rejection")


async def test_a_waiting_call_is_approved_over_the_socket_with_other_arguments(
    user, tmp_path, monkeypatch
):
    from chat.models import Message, ToolExecution

    monkeypatch.setenv("TOOLCHAT_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    conversation = await make(ConversationFactory, owner=user)
    execution = await database_sync_to_async(waiting_call)(conversation)
    communicator, _, _ = await connect(conversation.id, await headers_for(user), "after=0")
    await communicator.send_json_to(
        {
            "type": "approve",
            "execution_id": str(execution.pk),
            "arguments": {"target": "venus"},
            "scope": "conversation",
        }
    )
    seen = []
    while not {"ack", "tool_call.approval_decided"} <= {m.get("type") for m in seen}:
        seen.append(json.loads(await communicator.receive_from(timeout=5)))
    decided = next(m for m in seen if m["type"] == "tool_call.approval_decided")
    assert decided["data"]["arguments"] == {"target": "venus"}
    await communicator.disconnect()
    ended = database_sync_to_async(
        lambda: not Run.objects.filter(pk=execution.run_id, status__in=ACTIVE_RUN_STATUSES).exists()
    )
    await wait_until_async(ended, what="the run to end after the approval")
    # Once the call ran with the approved arguments, its row still says what the model asked.
    row = await database_sync_to_async(
        lambda: ToolExecution.objects.select_related("standing_approval").get(pk=execution.pk)
    )()
    assert (row.arguments, row.approved_arguments) == ({"target": "mars"}, {"target": "venus"})
    assert row.arguments_raw == '{"target": "mars"}'
    assert row.standing_approval.tool == "launch_rocket"
    calls = await database_sync_to_async(
        lambda: Message.objects.get(pk=execution.message_id).tool_calls
    )()
    assert json.loads(calls[0]["function"]["arguments"]) == {"target": "venus"}


async def test_a_call_of_another_conversation_is_not_found_over_the_socket(user, other_user):
    from chat.models import ExecutionStatus, ToolExecution

    elsewhere = await make(ConversationFactory, owner=other_user)
    foreign = await database_sync_to_async(waiting_call)(elsewhere)
    mine = await make(ConversationFactory, owner=user)
    own_elsewhere = await database_sync_to_async(waiting_call)(
        await make(ConversationFactory, owner=user)
    )
    communicator, _, _ = await connect(mine.id, await headers_for(user), "after=0")
    for execution in (foreign, own_elsewhere):
        await communicator.send_json_to({"type": "approve", "execution_id": str(execution.pk)})
        reply = json.loads(await communicator.receive_from(timeout=5))
        assert (reply["type"], reply["code"]) == ("error", "not_found")
        status = await database_sync_to_async(
            lambda e=execution: ToolExecution.objects.get(pk=e.pk).status
        )()
        assert status == ExecutionStatus.AWAITING_APPROVAL
    await communicator.disconnect()


async def test_sockets_per_user_are_limited(user, settings):
    settings.TOOLCHAT_WS_MAX_SOCKETS_PER_USER = 1
    conversation = await make(ConversationFactory, owner=user)
    headers = await headers_for(user)
    first, connected, _ = await connect(conversation.id, headers, "after=0")
    assert connected
    second, connected, _ = await connect(conversation.id, headers, "after=0")
    assert (await second.receive_output(timeout=5))["code"] == 4429
    await first.disconnect()
    third, connected, _ = await connect(conversation.id, headers, "after=0")
    await third.send_json_to({"type": "resume", "after": 0})
    assert await third.receive_nothing(timeout=0.3)  # open, and quiet
    await third.disconnect()


async def test_the_server_pings(user, settings):
    settings.TOOLCHAT_WS_PING_S = 0.1
    conversation = await make(ConversationFactory, owner=user)
    communicator, _, _ = await connect(conversation.id, await headers_for(user), "after=0")
    assert json.loads(await communicator.receive_from(timeout=5)) == {"type": "ping"}
    await communicator.disconnect()


async def test_a_late_resume_fills_what_came_before_the_live_events(user):
    conversation = await make(ConversationFactory, owner=user)
    run = await make(RunFactory, conversation=conversation)
    await publish(run, 5)
    communicator, _, _ = await connect(conversation.id, await headers_for(user))
    # The socket is live from seq 5, the cursor when it connected. No waiting out
    # the grace period for a `resume` (RESUME_GRACE_S): whether the stream starts
    # before these two are published or after, it starts at seq 5, so they are the
    # socket's first events, and receiving them is what makes the resume late.
    await publish(run, 2, start=5)
    live = await receive_events(communicator, 2)
    await communicator.send_json_to({"type": "resume", "after": 2})
    missed = await receive_events(communicator, 3)
    assert [e["seq"] for e in live] == [6, 7]
    assert [e["seq"] for e in missed] == [3, 4, 5]
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()


def open_sockets_of(user) -> int:
    from chat.live.slots import slots_in_memory

    return slots_in_memory().get(user.pk, 0)


async def test_a_socket_whose_layer_cannot_be_read_stays_open_and_delivers_from_the_database(
    user, settings
):
    # Every read of the layer fails, as BZPOPMIN did under redis-py 8's 5 s read
    # timeout: the socket must not die of it (nor leak its slot), and the events
    # still come, from the database.
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "tests.chat.live.test_streams.LayerThatCannotReceive"}
    }
    conversation = await make(ConversationFactory, owner=user)
    run = await make(RunFactory, conversation=conversation)
    communicator, connected, _ = await connect(conversation.id, await headers_for(user), "after=0")
    assert connected
    seqs = await publish(run, 3)
    assert [e["seq"] for e in await receive_events(communicator, 3)] == seqs
    assert open_sockets_of(user) == 1
    await communicator.disconnect()
    assert open_sockets_of(user) == 0


async def test_a_socket_that_dies_of_an_error_gives_its_slot_back(user, settings, monkeypatch):
    from chat.live.consumers import ConversationConsumer

    async def crash(self, text_data=None, bytes_data=None):
        raise RuntimeError("boom")

    settings.TOOLCHAT_WS_MAX_SOCKETS_PER_USER = 1
    conversation = await make(ConversationFactory, owner=user)
    headers = await headers_for(user)
    communicator, connected, _ = await connect(conversation.id, headers, "after=0")
    assert connected
    assert open_sockets_of(user) == 1
    monkeypatch.setattr(ConversationConsumer, "receive", crash)
    await communicator.send_to(text_data="{}")
    with pytest.raises(RuntimeError, match="boom"):
        await communicator.wait(timeout=5)  # the application ends with the error
    monkeypatch.undo()
    # `disconnect` never ran (the application itself failed), yet the slot is free.
    assert open_sockets_of(user) == 0
    again, connected, _ = await connect(conversation.id, headers, "after=0")
    assert connected
    await again.send_json_to({"type": "resume", "after": 0})
    assert await again.receive_nothing(timeout=0.3)  # open, not refused with 4429
    await again.disconnect()


async def test_posting_over_the_socket_counts_against_the_same_rate_limit_as_rest(
    user, settings, monkeypatch
):
    from django.core.cache import cache
    from rest_framework.test import APIClient
    from rest_framework.throttling import ScopedRateThrottle

    settings.LLM_PROVIDER = "offline"
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"messages": "3/min"})
    await database_sync_to_async(cache.clear)()
    rest_conversation = await make(ConversationFactory, owner=user)

    def post_over_rest() -> int:
        client = APIClient()
        client.force_authenticate(user)
        url = f"/api/v1/conversations/{rest_conversation.id}/messages/?wait=true"
        return client.post(url, {"content": "what is 1+1"}, format="json").status_code

    assert await database_sync_to_async(post_over_rest)() == 200  # one of three used
    acks, throttled = 0, []
    for _ in range(3):
        conversation = await make(ConversationFactory, owner=user)
        communicator, _, _ = await connect(conversation.id, await headers_for(user), "after=0")
        await communicator.send_json_to({"type": "message", "content": "what is 2+2"})
        while True:
            reply = json.loads(await communicator.receive_from(timeout=5))
            if reply["type"] == "ack":
                acks += 1
                while reply.get("type") != "run.completed":  # let the run end
                    reply = json.loads(await communicator.receive_from(timeout=10))
                break
            if reply["type"] == "error":
                throttled.append(reply)
                break
        await communicator.disconnect()
    assert acks == 2
    assert [(r["code"], 0 < r["details"]["retry_after"] <= 60) for r in throttled] == [
        ("throttled", True)
    ]
    await database_sync_to_async(cache.clear)()


async def test_a_message_over_a_hard_budget_is_an_error_frame_saying_which_with_nothing_stored(
    user,
):
    from chat.models import BudgetLimit
    from tests.factories import ModelCallFactory

    limit = await make(BudgetLimit.objects.create, period="day", tokens=10)
    spent = await make(RunFactory, conversation=await make(ConversationFactory, owner=user))
    await make(ModelCallFactory, run=spent, prompt_tokens=8, completion_tokens=2)
    conversation = await make(ConversationFactory, owner=user)
    communicator, _, _ = await connect(conversation.id, await headers_for(user))
    await communicator.send_json_to({"type": "message", "content": "one more"})
    while (reply := json.loads(await communicator.receive_from(timeout=5)))["type"] != "error":
        assert reply["type"] != "ack"
    assert reply["code"] == "budget_exceeded"
    assert "daily limit of 10 tokens" in reply["message"]
    assert reply["details"]["limit"]["id"] == limit.pk
    assert reply["details"]["retry_after"] > 0
    stored = database_sync_to_async(
        lambda: Message.objects.filter(conversation=conversation).exists()
    )
    assert not await stored()
    await communicator.disconnect()


async def test_a_socket_post_carries_images_as_the_rest_post_does(user, settings):
    settings.LLM_PROVIDER = "offline"
    conversation = await make(ConversationFactory, owner=user)
    communicator, _, _ = await connect(conversation.id, await headers_for(user), "after=0")
    await communicator.send_json_to(
        {"type": "message", "content": "", "images": ["http://example.com/a.png"]}
    )
    (refused,) = await receive_events(communicator, 1)
    assert (refused["type"], refused["field"]) == ("error", "images"), refused
    await communicator.send_json_to(
        {"type": "message", "content": "", "images": [{"url": data_url(png(6, 4))}]}
    )
    events = []
    while not any(e["type"] == "run.completed" for e in events):
        events.extend(await receive_events(communicator, 1))
    created = next(e for e in events if e["type"] == "message.created")
    assert created["data"]["message"]["images"][0]["width"] == 6
    text = "".join(e["data"]["text"] for e in events if e["type"] == "message.delta")
    assert text.startswith("I see 1 image (image/png, 6x4).")
    await communicator.disconnect()
