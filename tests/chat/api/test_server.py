"""The API on a real uvicorn: waiting is async, SSE streams over HTTP, the docs work offline."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request

import pytest
from rest_framework.authtoken.models import Token

from chat.models import ExecutionStatus, ToolExecution
from tests.assertions import wait_until
from tests.factories import ConversationFactory, UserFactory

pytestmark = pytest.mark.postgres


@pytest.fixture
def client(asgi_server):
    """Request helper against the server: (status, headers, body bytes)."""
    user = UserFactory()
    token = Token.objects.create(user=user).key

    def request(method, path, body=None, headers=None, timeout=30):
        data = json.dumps(body).encode() if body is not None else None
        all_headers = {"Authorization": f"Token {token}", **(headers or {})}
        if data is not None:
            all_headers["Content-Type"] = "application/json"
        req = urllib.request.Request(
            f"{asgi_server}{path}", data=data, method=method, headers=all_headers
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers, error.read()

    request.user = user
    return request


def sse_frames(body: bytes) -> list[dict]:
    frames = []
    for block in body.decode().split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":")
        )
        if fields:
            frames.append(fields)
    return frames


def test_a_waiting_post_does_not_hold_up_other_requests(client):
    slow = ConversationFactory(owner=client.user)
    other = ConversationFactory(owner=client.user)
    result = {}

    def wait_for_slow_run():
        started = time.monotonic()
        result["answer"] = client(
            "POST",
            f"/api/v1/conversations/{slow.id}/messages/?wait=true",
            {"content": 'Run slow_step with label "api" for 3 seconds'},
        )
        result["seconds"] = time.monotonic() - started

    waiter = threading.Thread(target=wait_for_slow_run)
    waiter.start()
    running = ToolExecution.objects.filter(
        run__conversation=slow, status=ExecutionStatus.RUNNING
    ).exists
    wait_until(running, what="the slow tool to run behind the waiting POST")
    for _ in range(5):
        status, _, _ = client("GET", f"/api/v1/conversations/{other.id}/messages/")
        assert status == 200
    # Answered while the slow tool still ran, so while the POST still waited: a
    # blocked server would have answered them only after it.
    assert running(), "the GETs were answered only once the slow run had ended"
    assert waiter.is_alive()
    waiter.join(30)

    status, _, body = result["answer"]
    assert status == 200, body
    answer = json.loads(body)
    assert answer["run"]["status"] == "completed"
    (execution,) = answer["run"]["tool_executions"]
    assert execution["name"].startswith("slow_")
    assert result["seconds"] >= 3


def test_sse_over_http_and_resuming_with_last_event_id(client):
    conversation = ConversationFactory(owner=client.user)
    status, headers, body = client(
        "POST",
        f"/api/v1/conversations/{conversation.id}/messages/",
        {"content": "What is 6*7?"},
        headers={"Accept": "text/event-stream"},
    )
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    assert headers["Cache-Control"] == "no-cache"
    frames = sse_frames(body)
    assert [f["event"] for f in frames[:2]] == ["message.created", "run.started"]
    assert frames[-1]["event"] == "run.completed"
    seqs = [int(f["id"]) for f in frames]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "contiguous, no duplicate"
    run_id = json.loads(frames[0]["data"])["run_id"]

    middle = seqs[len(seqs) // 2]
    status, _, body = client(
        "GET",
        f"/api/v1/runs/{run_id}/events/",
        headers={"Accept": "text/event-stream", "Last-Event-ID": str(middle)},
    )
    assert status == 200
    assert [int(f["id"]) for f in sse_frames(body)] == [s for s in seqs if s > middle]

    status, _, body = client("GET", f"/api/v1/runs/{run_id}/events/?after={middle}")
    assert [e["seq"] for e in json.loads(body)["events"]] == [s for s in seqs if s > middle]


def test_the_swagger_ui_loads_its_assets_from_this_server(asgi_server):
    with urllib.request.urlopen(f"{asgi_server}/api/v1/docs/", timeout=10) as response:
        html = response.read().decode()
    assets = re.findall(r'"(/static/drf_spectacular_sidecar/[^"]+)"', html)
    assert any(a.endswith("swagger-ui-bundle.js") for a in assets)
    for asset in assets:
        with urllib.request.urlopen(f"{asgi_server}{asset}", timeout=10) as response:
            assert response.status == 200
            assert response.read(), asset
    with urllib.request.urlopen(
        f"{asgi_server}/api/v1/schema/?format=json", timeout=10
    ) as response:
        assert json.loads(response.read())["openapi"].startswith("3.")
