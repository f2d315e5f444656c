"""chat/api/base.py `AsyncApiView`: what a waited post hands to its thread, and what it answers.

Driven through the real ASGI application (Django's handler, the kept request
threads), as uvicorn serves it, with the turn run in this process's threads.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.test import RequestFactory
from rest_framework.authtoken.models import Token
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from chat.api.base import AsyncApiView
from chat.models import ACTIVE_RUN_STATUSES, Run
from project.handler import get_asgi_application
from project.request_threads import KeptRequestThreads
from tests.assertions import wait_until
from tests.factories import ConversationFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def post(path: str, token: str, body: dict[str, Any]) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=KeptRequestThreads(get_asgi_application()))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            return await http.post(path, json=body, headers={"Authorization": f"Token {token}"})

    return asyncio.run(go())


def test_a_waited_post_hands_off_to_its_thread_twice(handoffs, monkeypatch):
    monkeypatch.setattr("chat.live.streams.CATCH_UP_S", 30)  # no read after a quiet spell
    user = UserFactory()
    token = Token.objects.create(user=user).key
    conversation = ConversationFactory(owner=user)
    answer = post(
        f"/api/v1/conversations/{conversation.id}/messages/?wait=true", token, {"content": "2+2"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.json()["run"]["status"] == "completed"
    assert "4" in answer.json()["message"]["content"]
    # Authentication, the checks and the run's start in one; the answer. The wait reads
    # nothing: it began before the run was dispatched, in the process every end is told
    # to (before, it read the run first). Not the render: Django's handler sends a
    # response that still has a `render` method through the thread once more.
    ours = [c for c in handoffs if not c.startswith(DJANGOS)]
    assert ours == ["AsyncApiView._initial_then", "_answer"], handoffs


# Django's hand-offs: its middleware's hooks, its request signals, the response's close.
DJANGOS = (
    "SecurityMiddleware.",
    "SessionMiddleware.",
    "CsrfViewMiddleware.",
    "XFrameOptionsMiddleware.",
    "Signal.asend",
    "HttpResponseBase.close",
)


def test_the_first_part_answers_in_order_unauthenticated_missing_then_invalid(handoffs):
    user = UserFactory()
    token = Token.objects.create(user=user).key
    missing = "/api/v1/conversations/00000000-0000-4000-8000-000000000000/messages/"
    assert post(missing, "not-a-token", {"content": []}).status_code == 401
    assert post(missing, token, {"content": []}).status_code == 404
    theirs = ConversationFactory(owner=UserFactory())
    assert post(f"/api/v1/conversations/{theirs.id}/messages/", token, {}).status_code == 404
    mine = ConversationFactory(owner=user)
    invalid = post(f"/api/v1/conversations/{mine.id}/messages/?timeout=-1", token, {"content": []})
    assert invalid.status_code == 400
    assert invalid.json()["field"] == "timeout"
    assert not mine.messages.exists()


def test_an_in_process_client_still_reads_the_answers_data(api, conversation):
    # DRF's test client and any in-process caller read `data` and `exception`.
    response = api.post(
        f"/api/v1/conversations/{conversation.id}/messages/", {"content": "hi"}, format="json"
    )
    assert response.status_code == 202
    assert response.data["message"]["content"] == "hi"
    assert response.exception is False
    refused = api.post(
        f"/api/v1/conversations/{conversation.id}/messages/", {"content": ""}, format="json"
    )
    assert refused.status_code == 400
    assert refused.data["field"] == "content"
    assert refused.exception is True
    # The accepted post's run goes on in this process's threads: it ends before the
    # test does, or the test database's flush meets its writes (a deadlock).
    run = Run.objects.get(pk=response.data["run"]["id"])
    wait_until(
        lambda: Run.objects.get(pk=run.pk).status not in ACTIVE_RUN_STATUSES, what="the run's end"
    )


class _Probe(AsyncApiView):
    """A view of the base class's own shapes: a first part for GET (and so HEAD), an empty 204."""

    permission_classes = [AllowAny]

    def get_first(self, request: Request) -> str:
        return "started on the thread"

    async def get(self, request: Request, first: str) -> Response:
        return Response({"first": first})

    async def delete(self, request: Request) -> Response:
        return Response(status=204)


def call(view: type[AsyncApiView], method: str) -> Any:
    request = getattr(RequestFactory(), method)("/probe/")
    return async_to_sync(view.as_view())(request)


@pytest.mark.parametrize("method", ["get", "head"])
def test_get_and_head_both_start_with_get_first(method):
    response = call(_Probe, method)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    if method == "get":
        assert json.loads(response.content) == {"first": "started on the thread"}


def test_an_empty_answer_has_no_content_type():
    response = call(_Probe, "delete")
    assert response.status_code == 204
    assert response.content == b""
    assert "Content-Type" not in response
