"""Who may call the API: token or session (with CSRF), and only on their own objects."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from django.test import Client
from rest_framework.test import APIClient

from chat.models import Conversation, Message, Run, RunStatus
from tests.factories import ConversationFactory

pytestmark = pytest.mark.django_db

SOME_ID = uuid.UUID("00000000-0000-4000-8000-000000000000")

# Every operation, with a placeholder for the id it takes.
OPERATIONS = [
    ("get", "/api/v1/conversations/"),
    ("post", "/api/v1/conversations/"),
    ("get", "/api/v1/conversations/{conversation}/"),
    ("patch", "/api/v1/conversations/{conversation}/"),
    ("delete", "/api/v1/conversations/{conversation}/"),
    ("get", "/api/v1/conversations/{conversation}/messages/"),
    ("post", "/api/v1/conversations/{conversation}/messages/"),
    ("get", "/api/v1/conversations/{conversation}/export/"),
    ("get", "/api/v1/runs/{run}/"),
    ("get", "/api/v1/runs/{run}/events/"),
    ("post", "/api/v1/runs/{run}/cancel/"),
    ("get", "/api/v1/tools/"),
    ("get", "/api/v1/tool-executions/"),
]
WITH_IDS = [(method, path) for method, path in OPERATIONS if "{" in path]


def call(client, method: str, path: str, **ids):
    body = None
    if method in ("post", "patch"):
        body = {"content": "hi"} if path.endswith("messages/") else {"title": "x"}
    return getattr(client, method)(path.format(**ids), body, format="json")


@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_without_credentials_every_operation_is_a_401(method, path):
    response = call(APIClient(), method, path, conversation=SOME_ID, run=SOME_ID)
    assert response.status_code == 401
    assert response.json() == {
        "code": "not_authenticated",
        "message": "Authentication credentials were not provided.",
    }
    assert response["WWW-Authenticate"] == "Token"


def test_the_schema_and_its_docs_page_are_public_and_every_operation_they_list_is_not():
    """As docs/api.md says: a client may read the API's description before it has a token."""
    anonymous = APIClient()
    assert anonymous.get("/api/v1/docs/").status_code == 200
    response = anonymous.get("/api/v1/schema/?format=json")
    assert response.status_code == 200
    paths = json.loads(response.content)["paths"]
    operations = [
        (method, _filled(path, item[method]))
        for path, item in paths.items()
        for method in item
        if method in ("get", "post", "patch", "put", "delete")
    ]
    assert len(operations) > len(OPERATIONS)
    for method, path in operations:
        answer = getattr(anonymous, method)(path, {}, format="json")
        assert answer.status_code == 401, (method, path, answer.status_code)


def _filled(path: str, operation: dict) -> str:
    """The path with an id that is not there for each parameter, of the parameter's type."""
    integers = {
        parameter["name"]
        for parameter in operation.get("parameters", [])
        if parameter["schema"].get("type") == "integer"
    }
    return re.sub(r"\{([^}]+)\}", lambda id: "999999" if id[1] in integers else str(SOME_ID), path)


def test_a_wrong_token_is_a_401():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    response = client.get("/api/v1/conversations/")
    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"


@pytest.mark.parametrize(("method", "path"), WITH_IDS)
def test_someone_elses_ids_are_a_404_on_every_path_and_change_nothing(api, foreign, method, path):
    conversation, finished, active = foreign
    run = active if path.endswith("cancel/") else finished
    before = (Conversation.objects.count(), Message.objects.count(), Run.objects.count())

    response = call(api, method, path, conversation=conversation.id, run=run.id)

    assert response.status_code == 404, response.content
    assert response.json()["code"] == "not_found"
    assert (Conversation.objects.count(), Message.objects.count(), Run.objects.count()) == before
    active.refresh_from_db()
    assert active.status == RunStatus.QUEUED
    conversation.refresh_from_db()
    assert conversation.title != "x"


@pytest.mark.parametrize(("method", "path"), WITH_IDS)
def test_ids_that_do_not_exist_are_a_404_too(api, method, path):
    response = call(api, method, path, conversation=uuid.uuid4(), run=uuid.uuid4())
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.parametrize(("method", "path"), WITH_IDS)
def test_malformed_ids_are_a_json_404(api, method, path):
    response = call(api, method, path, conversation="12", run="not-a-uuid")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_staff_see_only_their_own_through_the_api(admin_user, other_user, foreign):
    client = APIClient()
    client.force_authenticate(admin_user)
    conversation, finished, _ = foreign
    assert client.get("/api/v1/conversations/").json()["results"] == []
    assert client.get(f"/api/v1/conversations/{conversation.id}/").status_code == 404
    assert client.get(f"/api/v1/runs/{finished.id}/").status_code == 404
    assert client.get("/api/v1/tool-executions/").json()["results"] == []


# --- the session -----------------------------------------------------------------------------


@pytest.fixture
def browser(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def test_the_session_authenticates_reads(browser, user):
    ConversationFactory(owner=user, title="mine")
    response = browser.get("/api/v1/conversations/")
    assert response.status_code == 200
    assert [c["title"] for c in response.json()["results"]] == ["mine"]


def test_a_session_write_without_the_csrf_token_is_a_403(browser, conversation):
    response = browser.post(
        f"/api/v1/conversations/{conversation.id}/messages/",
        {"content": "hi"},
        content_type="application/json",
    )
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert "CSRF" in response.json()["message"]
    assert not Message.objects.exists()


def test_a_session_write_with_the_csrf_token_works(browser):
    browser.get("/login/")  # sets the csrftoken cookie, as the chat page does
    token = browser.cookies["csrftoken"].value
    response = browser.post(
        "/api/v1/conversations/",
        {"title": "from the page"},
        content_type="application/json",
        HTTP_X_CSRFTOKEN=token,
    )
    assert response.status_code == 201
    assert Conversation.objects.get().title == "from the page"


def test_a_token_needs_no_csrf_token(api, conversation):
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(**api._credentials)
    response = client.post(
        f"/api/v1/conversations/{conversation.id}/messages/", {"content": "hi"}, format="json"
    )
    assert response.status_code == 202
