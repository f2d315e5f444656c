"""Server-Sent Events: posting with Accept: text/event-stream, and a run's event stream."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import SyncToAsync
from channels.db import database_sync_to_async
from django.db import connections
from django.test import AsyncClient

from chat.live.events import event_publish
from chat.models import Run, RunStatus
from tests.factories import RunFactory, event_make
from tests.llm_server import text_reply, tool_calls_reply

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

SSE = "text/event-stream"


def parse_sse(text: str) -> list[dict]:
    """SSE frames as dicts of their fields (comments dropped)."""
    frames = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line.startswith(":") or ": " not in line:
                continue
            key, value = line.split(": ", 1)
            fields[key] = value
        if fields:
            frames.append(fields)
    return frames


async def read_stream(response) -> str:
    assert response.streaming
    chunks = [chunk async for chunk in response.streaming_content]
    return b"".join(c if isinstance(c, bytes) else c.encode() for c in chunks).decode()


@pytest.fixture(autouse=True)
def _close_the_sync_threads_connection():
    yield
    # In an async test, sync views run on asgiref's one sync thread; its database
    # connection would otherwise outlive the test database (PostgreSQL refuses to
    # drop a database in use).
    SyncToAsync.single_thread_executor.submit(connections.close_all).result()


@pytest.fixture
def headers(api):
    return {"Authorization": api._credentials["HTTP_AUTHORIZATION"], "Accept": SSE}


async def test_posting_for_sse_streams_the_run_to_its_end(headers, conversation, llm_server):
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "6*7"}', "call_sse")]),
        text_reply("It is 42."),
    )
    response = await AsyncClient().post(
        f"/api/v1/conversations/{conversation.id}/messages/",
        {"content": "6*7?"},
        content_type="application/json",
        headers=headers,
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith(SSE)
    assert response["Cache-Control"] == "no-cache"

    frames = parse_sse(await read_stream(response))

    types = [frame["event"] for frame in frames]
    assert types[:2] == ["message.created", "run.started"]  # the user's message, then the run
    assert json.loads(frames[0]["data"])["data"]["role"] == "user"
    assert types[-1] == "run.completed"
    assert "tool_call.completed" in types
    envelopes = [json.loads(frame["data"]) for frame in frames]
    assert [int(frame["id"]) for frame in frames] == [e["seq"] for e in envelopes]
    seqs = [e["seq"] for e in envelopes]
    assert seqs == sorted(set(seqs)), "no duplicate, in order"
    run = await database_sync_to_async(Run.objects.get)()
    assert all(e["run_id"] == str(run.id) for e in envelopes)
    assert run.status == RunStatus.COMPLETED
    completed = [e for e in envelopes if e["type"] == "message.completed"]
    assert completed[-1]["data"]["message"]["content"] == "It is 42."


async def test_the_events_of_an_ended_run_replay_and_end(headers, turn):
    seqs = await database_sync_to_async(
        lambda: [
            event_publish(run=turn, event=event_make(kind)).seq
            for kind in ("run.started", "message.created", "run.completed")
        ]
    )()
    response = await AsyncClient().get(f"/api/v1/runs/{turn.id}/events/", headers=headers)
    assert response.status_code == 200
    frames = parse_sse(await read_stream(response))
    assert [int(f["id"]) for f in frames] == seqs
    assert [f["event"] for f in frames] == ["run.started", "message.created", "run.completed"]


async def test_last_event_id_resumes_the_stream(headers, turn):
    seqs = await database_sync_to_async(
        lambda: [
            event_publish(run=turn, event=event_make(kind)).seq
            for kind in ("run.started", "message.created", "run.completed")
        ]
    )()
    response = await AsyncClient().get(
        f"/api/v1/runs/{turn.id}/events/", headers={**headers, "Last-Event-ID": str(seqs[0])}
    )
    frames = parse_sse(await read_stream(response))
    assert [int(f["id"]) for f in frames] == seqs[1:]


async def test_a_live_run_streams_what_comes_next(headers, conversation):
    run = await database_sync_to_async(RunFactory)(
        conversation=conversation, status=RunStatus.RUNNING
    )
    first = await database_sync_to_async(event_publish)(run=run, event=event_make("run.started"))

    async def finish():
        await database_sync_to_async(event_publish)(run=run, event=event_make("message.created"))
        await database_sync_to_async(event_publish)(run=run, event=event_make("run.completed"))

    response = await AsyncClient().get(f"/api/v1/runs/{run.id}/events/", headers=headers)
    assert response.status_code == 200
    body = ""
    async for chunk in response.streaming_content:
        body += chunk.decode() if isinstance(chunk, bytes) else chunk
        if f"id: {first.seq}\n" in body and "message.created" not in body:
            await finish()
    assert [f["event"] for f in parse_sse(body)] == [
        "run.started",
        "message.created",
        "run.completed",
    ]


async def test_sse_errors_are_json(headers, foreign):
    _, finished, _ = foreign
    response = await AsyncClient().get(f"/api/v1/runs/{finished.id}/events/", headers=headers)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "not_found"
