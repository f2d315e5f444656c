"""The HTML pages and the health check, through Django's test client."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.factories import UserFactory

PASSWORD = "correct horse battery staple"  # the factories' password

pytestmark = pytest.mark.django_db


def test_the_chat_page_sends_anonymous_users_to_the_login_page(client: Client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/"


def test_healthz_answers_ok(client: Client):
    response = client.get("/healthz/")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"status": "ok"}


def test_healthz_is_get_only(client: Client):
    assert client.post("/healthz/").status_code == 405


def test_readyz_without_redis_has_nothing_to_reach(client: Client):
    response = client.get("/readyz/")
    assert response.status_code == 200
    assert response.json()["status"] == "ready"
    assert {name: check["ok"] for name, check in response.json()["checks"].items()} == {
        "database": True,
        "broker": True,
        "events": True,
    }


def redis_settings(settings, url: str) -> None:
    """Settings as REDIS_URL=url makes them: Celery's broker and the Redis channel layer."""
    from project.celery import app
    from tests.stack import reset_producer_pool

    settings.TOOLCHAT_TASKS_IN_PROCESS = False
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "chat.live.redis_layer.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": url}]},
        }
    }
    app.conf.broker_url = url
    reset_producer_pool(app)


@pytest.fixture
def broker_restored():
    from project.celery import app
    from tests.stack import reset_producer_pool

    broker = app.conf.broker_url
    yield
    app.conf.broker_url = broker
    reset_producer_pool(app)


@pytest.mark.usefixtures("broker_restored")
def test_readyz_is_503_and_names_what_is_down_when_redis_is(client: Client, settings):
    from tests.plugins.services import free_port

    port = free_port()  # nothing listens there
    redis_settings(settings, f"redis://127.0.0.1:{port}/0")
    response = client.get("/readyz/")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert {name: check["ok"] for name, check in body["checks"].items()} == {
        "database": True,
        "broker": False,
        "events": False,
    }
    assert str(port) not in response.content.decode()  # the details are for the log
    assert client.get("/healthz/").status_code == 200  # alive, only not ready


@pytest.mark.redis
@pytest.mark.usefixtures("broker_restored")
def test_readyz_with_redis_up_is_ready(client: Client, settings, redis_url):
    redis_settings(settings, redis_url)
    response = client.get("/readyz/")
    assert response.status_code == 200, response.json()
    assert response.json()["checks"]["broker"] == {"ok": True, "detail": "celery"}
    assert response.json()["checks"]["events"] == {"ok": True, "detail": "redis"}


def test_the_login_page_has_the_form(client: Client):
    response = client.get("/login/?next=/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<title>Log in · toolchat</title>" in html
    assert 'name="username"' in html
    assert 'name="password"' in html
    assert 'name="csrfmiddlewaretoken"' in html
    assert '<input type="hidden" name="next" value="/">' in html


def test_a_wrong_password_shows_an_error_and_keeps_the_username(client: Client):
    UserFactory(username="ada")
    response = client.post("/login/", {"username": "ada", "password": "wrong"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "didn't match" in html.replace("&#x27;", "'")
    assert 'value="ada"' in html
    assert "_auth_user_id" not in client.session


def test_what_the_user_typed_is_escaped_when_the_page_comes_back(client: Client):
    hostile = '"><script>alert(1)</script>'
    response = client.post("/login/", {"username": hostile, "password": "x"})
    html = response.content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_logging_in_lands_on_the_chat_page_with_the_provider(client: Client):
    UserFactory(username="ada")
    response = client.post("/login/", {"username": "ada", "password": PASSWORD}, follow=True)
    assert response.redirect_chain == [("/", 302)]
    html = response.content.decode()
    assert "ada" in html
    assert "offline" in html  # the provider the test settings select


def test_a_redirect_after_login_stays_on_this_site(client: Client):
    UserFactory(username="ada")
    response = client.post(
        "/login/",
        {"username": "ada", "password": PASSWORD, "next": "https://evil.example.com/"},
    )
    assert response.status_code == 302
    assert response["Location"] == "/"


def test_usernames_are_escaped_on_the_chat_page(client: Client):
    user = UserFactory(username="<b>bold</b>")
    client.force_login(user)
    html = client.get("/").content.decode()
    assert "<b>bold</b>" not in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html


def test_logout_is_post_only(client: Client):
    client.force_login(UserFactory())
    assert client.get("/logout/").status_code == 405
    assert "_auth_user_id" in client.session

    response = client.post("/logout/")
    assert response.status_code == 302
    assert response["Location"] == "/login/"
    assert "_auth_user_id" not in client.session


def test_the_admin_login_page_renders(client: Client):
    response = client.get("/admin/login/?next=/admin/")
    assert response.status_code == 200
    assert "admin/css/base.css" in response.content.decode()


def test_pages_are_not_framed_and_not_sniffed(client: Client):
    response = client.get("/login/")
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"


def test_a_page_that_fails_for_another_reason_is_still_the_plain_500(rf):
    """Only an unreachable database is a 503 (tests/chat/engine/test_database_outage.py);
    a bug stays a 500, so that it is seen and not taken for an outage."""
    from chat.views import server_error

    try:
        raise ValueError("a bug")
    except ValueError:
        response = server_error(rf.get("/"))
    assert response.status_code == 500
    assert "Retry-After" not in response


def test_every_figure_of_a_run_is_written_with_thousands_separators_on_its_pages(
    admin_client: Client,
):
    from chat.models import Message, ModelCall, Run, ToolExecution
    from tests.factories import ConversationFactory, finished_run

    run = finished_run(ConversationFactory())
    Run.objects.filter(pk=run.pk).update(latency_ms=67890)
    answer = Message.objects.filter(run=run, role="assistant").last()
    Message.objects.filter(pk=answer.pk).update(
        latency_ms=56789, prompt_tokens=78901, reasoning="thinking " * 1371
    )
    ModelCall.objects.filter(run=run).update(message_count=89012)
    ModelCall.objects.filter(run=run).update(
        first_token_ms=12345, latency_ms=23456, prompt_tokens=13672, completion_tokens=10102
    )
    ToolExecution.objects.filter(run=run).update(duration_ms=34567, result_chars=45678)
    call = ModelCall.objects.filter(run=run).first()
    execution = ToolExecution.objects.get(run=run)
    pages = {
        "run page": f"/audit/runs/{run.pk}/",
        "admin run": f"/admin/chat/run/{run.pk}/change/",
        "admin model call": f"/admin/chat/modelcall/{call.pk}/change/",
        "admin tool executions": "/admin/chat/toolexecution/",
        "admin tool execution": f"/admin/chat/toolexecution/{execution.pk}/change/",
        "admin message": f"/admin/chat/message/{answer.pk}/change/",
        "admin conversation": f"/admin/chat/conversation/{run.conversation_id}/change/",
    }
    for name, url in pages.items():
        response = admin_client.get(url)
        assert response.status_code == 200, name
        # What a reader sees: the data attributes are for scripts and tests.
        html = re.sub(r'data-[a-z-]+="[^"]*"', "", response.content.decode())
        for raw in (
            "12345",
            "23456",
            "13672",
            "10102",
            "34567",
            "45678",
            "56789",
            "67890",
            "12339",
            "89012",
        ):
            assert raw not in html, (name, raw)
    run_page = admin_client.get(f"/audit/runs/{run.pk}/").content.decode()
    assert "45,678 chars" in run_page
    assert "first token at 12,345 ms" in run_page
    assert "Reasoning (12,339 characters" in run_page
    assert "89,012 messages sent" in run_page
    admin_run = admin_client.get(f"/admin/chat/run/{run.pk}/change/").content.decode()
    assert "12,345 ms" in admin_run
    assert "34,567 ms" in admin_run


def test_the_chat_page_names_its_one_model_by_the_providers_label(client, settings, tmp_path):
    import json

    providers = tmp_path / "providers.json"
    providers.write_text(
        json.dumps({"providers": {"lab": {"type": "offline", "label": "The lab's demo model"}}})
    )
    settings.TOOLCHAT_PROVIDERS = str(providers)
    settings.LLM_MODEL = "lab/offline"
    client.force_login(UserFactory())
    page = client.get("/").content.decode()
    assert '<span data-testid="provider">The lab&#x27;s demo model</span>' in page
    assert 'title="The default model: lab/offline"' in page
