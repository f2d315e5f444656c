"""A socket opened with a W3C traceparent: the turns posted on it join the caller's trace."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from chat.models import Run, RunStatus
from tests.assertions import wait_until_async
from tests.chat.live.test_consumers import connect, headers_for, make, receive_events
from tests.chat.telemetry.conftest import turn_spans
from tests.factories import ConversationFactory

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


async def test_a_turn_posted_on_a_traced_socket_continues_the_callers_trace(otlp, user, settings):
    settings.LLM_PROVIDER = "offline"
    conversation = await make(ConversationFactory, owner=user)
    caller_trace, caller_span = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    headers = await headers_for(
        user, extra=[(b"traceparent", f"00-{caller_trace}-{caller_span}-01".encode())]
    )
    communicator, connected, _ = await connect(conversation.id, headers, "after=0")
    assert connected
    await communicator.send_json_to({"type": "message", "content": "hello"})
    ack = None
    while ack is None:
        (message,) = await receive_events(communicator, 1)
        ack = message if message["type"] == "ack" else None
    run = await database_sync_to_async(Run.objects.get)(pk=ack["run_id"])

    async def ended() -> bool:
        await database_sync_to_async(run.refresh_from_db)()
        return run.status == RunStatus.COMPLETED

    await wait_until_async(ended, what="the run to complete")
    await communicator.disconnect()
    # The offline model answers, then suggests follow-ups: two calls.
    turn, *calls = await database_sync_to_async(turn_spans)(otlp, run, 1 + run.model_calls)
    assert (turn.trace_id, turn.parent_span_id) == (caller_trace, caller_span)
    assert [c.name for c in calls] == ["chat offline"] * run.model_calls
    assert {c.parent_span_id for c in calls} == {turn.span_id}
