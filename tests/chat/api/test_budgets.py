"""Budgets over the REST API and /v1: staff manage the limits, a post over one is a 429 saying
which, and each person reads their own usage."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth.models import Group

from chat.models import BudgetLimit, Message
from tests.chat.api.conftest import token_client
from tests.chat.openai_api.conftest import bearer_client
from tests.factories import ConversationFactory, ModelCallFactory, RunFactory, UserFactory

pytestmark = pytest.mark.django_db

URL = "/api/v1/budget-limits/"


@pytest.fixture
def staff_api():
    return token_client(UserFactory(is_staff=True))


def spent(user, prompt: int, completion: int, *, model="test-model", cost=None):
    run = RunFactory(conversation=ConversationFactory(owner=user), status="completed")
    return ModelCallFactory(
        run=run,
        model=model,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost_usd=None if cost is None else Decimal(cost),
    )


def test_staff_add_list_change_and_delete_a_limit(staff_api, user):
    Group.objects.create(name="interns")
    created = staff_api.post(
        URL,
        {"groups": ["interns"], "period": "day", "tokens": 200000, "cost_usd": 5, "note": "n"},
        format="json",
    )
    assert created.status_code == 201, created.content
    limit = created.json()
    assert (limit["groups"], limit["tokens"], limit["cost_usd"], limit["hard"]) == (
        ["interns"],
        200000,
        5.0,
        True,
    )
    assert limit["model_calls"] is None
    assert staff_api.get(URL).json() == [limit]
    assert staff_api.get(f"{URL}{limit['id']}/").json() == limit

    changed = staff_api.patch(
        f"{URL}{limit['id']}/", {"hard": False, "tokens": None}, format="json"
    )
    assert changed.status_code == 200, changed.content
    assert (changed.json()["hard"], changed.json()["tokens"], changed.json()["cost_usd"]) == (
        False,
        None,
        5.0,
    )
    # A change that would leave it capping nothing is refused, and changes nothing.
    emptied = staff_api.patch(f"{URL}{limit['id']}/", {"cost_usd": None}, format="json")
    assert emptied.status_code == 400
    assert emptied.json()["field"] == "tokens"
    assert BudgetLimit.objects.get(pk=limit["id"]).cost_usd == Decimal(5)
    # A day has no model calls of its own.
    wrong = staff_api.patch(f"{URL}{limit['id']}/", {"model_calls": 3}, format="json")
    assert (wrong.status_code, wrong.json()["field"]) == (400, "model_calls")

    assert staff_api.delete(f"{URL}{limit['id']}/").status_code == 204
    assert staff_api.get(f"{URL}{limit['id']}/").status_code == 404


def test_a_person_who_is_not_staff_cannot_read_or_raise_their_own_limit(api, user):
    limit = BudgetLimit.objects.create(period="day", tokens=10)
    limit.users.add(user)
    assert api.get(URL).status_code == 403
    assert api.post(URL, {"period": "day", "tokens": 10**9}, format="json").status_code == 403
    raised = api.patch(f"{URL}{limit.pk}/", {"tokens": 10**9}, format="json")
    assert raised.status_code == 403
    assert api.delete(f"{URL}{limit.pk}/").status_code == 403
    assert BudgetLimit.objects.get(pk=limit.pk).tokens == 10
    assert token_client(UserFactory()).get(URL).status_code == 403
    from rest_framework.test import APIClient

    assert APIClient().get(URL).status_code == 401


def test_a_post_over_a_hard_limit_is_a_429_that_says_which_and_when_it_resets(api, user):
    limit = BudgetLimit.objects.create(period="day", tokens=100)
    spent(user, 80, 20)
    conversation = ConversationFactory(owner=user)
    response = api.post(
        f"/api/v1/conversations/{conversation.pk}/messages/", {"content": "hi"}, format="json"
    )
    assert response.status_code == 429, response.content
    body = response.json()
    assert body["code"] == "budget_exceeded"
    assert "daily limit of 100 tokens" in body["message"]
    assert (body["details"]["limit"]["id"], body["details"]["limit"]["used"]) == (limit.pk, 100)
    assert int(response["Retry-After"]) == body["details"]["retry_after"] > 0
    assert not Message.objects.filter(conversation=conversation).exists()


def test_v1_refuses_a_post_over_a_hard_limit_in_openais_shape(user, llm_server):
    BudgetLimit.objects.create(period="month", tokens=50)
    spent(user, 40, 10)
    response = bearer_client(user).post(
        "/v1/chat/completions",
        {"model": "openai/test-model", "messages": [{"role": "user", "content": "hi"}]},
        format="json",
    )
    assert response.status_code == 429, response.content
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "budget_exceeded")
    assert "monthly limit of 50 tokens" in error["message"]
    assert int(response["Retry-After"]) > 0
    assert llm_server.requests == []


def test_usage_is_each_persons_own_per_model_and_day_with_their_limits(api, user, other_user):
    limit = BudgetLimit.objects.create(period="day", tokens=1000, cost_usd=Decimal("1"))
    limit.users.add(user)
    spent(user, 100, 20, model="a", cost="0.01")
    spent(user, 50, 5, model="a", cost="0.02")
    spent(user, 10, 1, model="b")  # no price
    spent(other_user, 999, 999, model="a", cost="9")

    usage = api.get("/api/v1/usage/").json()
    assert (usage["period"], usage["tokens"], usage["cost_usd"]) == ("day", 186, 0.03)
    assert usage["by_model"] == [
        {
            "model": "a",
            "provider": "openai",
            "calls": 2,
            "prompt_tokens": 150,
            "completion_tokens": 25,
            "tokens": 175,
            "cost_usd": 0.03,
        },
        {
            "model": "b",
            "provider": "openai",
            "calls": 1,
            "prompt_tokens": 10,
            "completion_tokens": 1,
            "tokens": 11,
            "cost_usd": None,
        },
    ]
    assert [day["tokens"] for day in usage["by_day"]] == [186]
    (mine,) = usage["limits"]
    assert (mine["id"], mine["used_tokens"], mine["used_cost_usd"], mine["hard"]) == (
        limit.pk,
        186,
        0.03,
        True,
    )
    assert mine["resets_at"] == usage["resets_at"]
    assert api.get("/api/v1/usage/?period=month").json()["tokens"] == 186
    bad = api.get("/api/v1/usage/?period=week")
    assert (bad.status_code, bad.json()["field"]) == (400, "period")


def test_usage_with_no_price_says_null_never_zero(api, user):
    spent(user, 10, 1)
    assert api.get("/api/v1/usage/").json()["cost_usd"] is None
