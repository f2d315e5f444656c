"""A run's model calls: each one recorded once, and counted once, whatever became of it.

`Run.model_calls` (the API's run, the `run.completed` event, the chat's turn
badge, the admin) is the number of the run's ModelCall rows (the audit's
step table): the steps' calls, the follow-ups call after the answer, and the
calls that failed or were stopped (docs/audit.md).
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from chat.models import Mode, ModelCall, Run, RunEvent
from tests.assertions import wait_until
from tests.chat.api.conftest import token_client
from tests.factories import ConversationFactory, UserFactory
from tests.llm_server import error_reply, text_reply, tool_calls_reply
from tests.stack import wait_for_run

pytestmark = pytest.mark.django_db(transaction=True)


def post(user, conversation, content, *, wait=True):
    query = "?wait=true&timeout=30" if wait else ""
    response = token_client(user).post(
        f"/api/v1/conversations/{conversation.id}/messages/{query}",
        {"content": content},
        format="json",
    )
    assert response.status_code in (200, 202), response.json()
    return response.json()


def counted(run_id) -> tuple[int, int, int | None]:
    """The run's counter, its ModelCall rows, and what its run.completed event said."""
    run = Run.objects.get(pk=run_id)
    completed = RunEvent.objects.filter(run_id=run_id, type="run.completed").first()
    said = completed.data["model_calls"] if completed else None
    return run.model_calls, ModelCall.objects.filter(run_id=run_id).count(), said


def test_the_follow_ups_call_counts_among_the_runs_model_calls(user, llm_server, settings):
    settings.LLM_SUGGESTIONS = "on"
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "2+2"}', "call_1")]),
        text_reply("4."),
        text_reply(json.dumps({"suggestions": ["And 3+3?"]})),
    )

    body = post(user, conversation, "what is 2+2")

    assert body["run"]["status"] == "completed"
    assert counted(body["run"]["id"]) == (3, 3, 3)
    assert body["run"]["model_calls"] == 3


def test_a_follow_ups_call_that_fails_counts_too(user, llm_server, settings):
    settings.LLM_SUGGESTIONS = "on"
    settings.LLM_MAX_RETRIES = 0
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    llm_server.push(text_reply("Hello!"), error_reply(500))

    body = post(user, conversation, "hi")

    assert body["run"]["status"] == "completed"
    assert counted(body["run"]["id"]) == (2, 2, 2)


def test_a_call_that_fails_the_run_counts(user, llm_server, settings):
    settings.LLM_MAX_RETRIES = 0
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    # A 5xx to a streamed request with tools is asked once more unstreamed (docs/providers.md).
    llm_server.push(error_reply(500), error_reply(500))

    body = post(user, conversation, "hi")

    run = wait_for_run(Run.objects.get(pk=body["run"]["id"]))
    assert run.status == "failed"
    assert counted(run.pk) == (1, 1, None)


def test_a_call_stopped_by_a_cancel_counts(user, llm_server, settings):
    settings.LLM_SUGGESTIONS = "off"
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    llm_server.push(text_reply("Too late.", delay_s=3))
    client = token_client(user)
    body = post(user, conversation, "hi", wait=False)
    run_id = body["run"]["id"]
    wait_until(lambda: len(llm_server.requests) >= 1, what="the model to be asked")

    assert client.post(f"/api/v1/runs/{run_id}/cancel/").status_code == 200

    wait_until(
        lambda: ModelCall.objects.filter(run_id=run_id).exists(),
        what="the stopped call to be recorded",
    )
    assert wait_for_run(Run.objects.get(pk=run_id)).status == "cancelled"
    wait_until(lambda: counted(run_id)[:2] == (1, 1), what="the stopped call to be counted")


def test_runs_stored_before_count_every_call_once_migrated(user):
    from importlib import import_module

    from django.apps import apps
    from django.utils import timezone

    from tests.factories import ConversationFactory as Conversations

    migration = import_module("chat.migrations.0012_run_model_calls_every_call")
    conversation = Conversations(owner=user)
    ended = {"mode": Mode.TWO_PASS, "status": "completed", "model_calls": 2}
    answered = Run.objects.create(conversation=conversation, **ended)
    for step, purpose in ((1, "tools"), (2, "compose"), (2, "suggest")):
        ModelCall.objects.create(
            run=answered, step=step, purpose=purpose, model="m", started_at=timezone.now()
        )
    older = Run.objects.create(conversation=conversation, **ended)

    migration.count_every_call(apps, None)

    answered.refresh_from_db()
    older.refresh_from_db()
    assert (answered.model_calls, older.model_calls) == (3, 2)


def test_a_turn_costs_what_its_calls_cost_at_the_providers_prices(
    user, llm_server, settings, tmp_path
):
    from decimal import Decimal

    settings.TOOLCHAT_PROVIDERS = str(tmp_path / "providers.json")
    (tmp_path / "providers.json").write_text(
        json.dumps(
            {
                "providers": {
                    "cloud": {
                        "baseUrl": llm_server.base_url,
                        "apiKey": "sk-test",
                        "models": ["priced", "free"],
                        "prices": {"priced": {"input": 2, "cached_input": 1, "output": 10}},
                    }
                }
            }
        )
    )
    settings.LLM_MODEL = "cloud/priced"
    llm_server.push(
        tool_calls_reply(
            [("calculator", '{"expression": "6*7"}')],
            prompt_tokens=1000,
            completion_tokens=100,
            cached_tokens=600,
        ),
        text_reply("42.", prompt_tokens=2000, completion_tokens=50),
    )
    conversation = ConversationFactory(owner=user)
    body = post(user, conversation, "What is 6*7?")
    run = Run.objects.get(pk=body["run"]["id"])
    first, second = ModelCall.objects.filter(run=run).order_by("started_at")
    # 400 input at $2, 600 cached at $1 and 100 output at $10, per million
    assert first.cost_usd == Decimal("0.0008") + Decimal("0.0006") + Decimal("0.001")
    assert first.cached_tokens == 600
    assert second.cost_usd == Decimal("0.004") + Decimal("0.0005")
    assert run.cost_usd == first.cost_usd + second.cost_usd
    shown = token_client(user).get(f"/api/v1/runs/{run.pk}/").json()
    assert shown["usage"]["cost_usd"] == pytest.approx(0.0069)
    assert shown["usage"]["cached_tokens"] == 600
    assert [call["cost_usd"] for call in shown["model_call_log"]] == pytest.approx([0.0024, 0.0045])
    assert body["message"]["usage"]["cost_usd"] == pytest.approx(0.0045)
    staff = UserFactory(is_staff=True)
    page = Client()
    page.force_login(staff)
    audit = page.get(f"/audit/runs/{run.pk}/").content.decode()
    assert "$0.006900" in audit  # the run
    assert "$0.004500" in audit  # the answer's call

    # a model with no price: tokens, and no cost (never 0)
    type(conversation).objects.filter(pk=conversation.pk).update(model="cloud/free")
    llm_server.push(text_reply("Hello."))
    body = post(user, conversation, "Hi")
    run = Run.objects.get(pk=body["run"]["id"])
    assert run.cost_usd is None
    audit = page.get(f"/audit/runs/{run.pk}/").content.decode()
    assert "no price" in audit
    assert body["message"]["usage"] == {
        "prompt_tokens": 11,
        "completion_tokens": 7,
        "cost_usd": None,
    }
