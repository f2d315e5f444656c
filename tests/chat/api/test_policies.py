"""Tool policies over the REST API: staff manage the rules; everyone else is refused."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from chat.models import ToolPolicy
from tests.chat.api.conftest import stored_turn, token_client
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

URL = "/api/v1/tool-policies/"


@pytest.fixture
def staff_api():
    return token_client(UserFactory(is_staff=True))


@pytest.fixture
def ops():
    return Group.objects.create(name="ops")


def test_staff_add_list_change_and_delete_a_rule(staff_api, user, ops):
    created = staff_api.post(
        URL,
        {
            "tools": ["delete_*", "tracker__*"],
            "users": [user.username],
            "groups": ["ops"],
            "decision": "ask",
            "note": "a person says yes",
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    rule = created.json()
    assert rule["tools"] == ["delete_*", "tracker__*"]
    assert (rule["users"], rule["groups"], rule["decision"]) == ([user.username], ["ops"], "ask")
    assert staff_api.get(URL).json() == [rule]
    assert staff_api.get(f"{URL}{rule['id']}/").json() == rule

    changed = staff_api.patch(f"{URL}{rule['id']}/", {"decision": "deny"}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["decision"] == "deny"
    assert changed.json()["users"] == [user.username]  # only what was sent changed
    everyone = staff_api.patch(f"{URL}{rule['id']}/", {"users": [], "groups": []}, format="json")
    assert (everyone.json()["users"], everyone.json()["groups"]) == ([], [])

    assert staff_api.delete(f"{URL}{rule['id']}/").status_code == 204
    assert staff_api.get(f"{URL}{rule['id']}/").status_code == 404
    assert not ToolPolicy.objects.exists()


def test_a_user_who_is_not_staff_is_refused_every_operation(api, other_user):
    rule = ToolPolicy.objects.create(tools=["calculator"], decision="deny")
    rule.users.add(other_user)
    own = {"tools": ["calculator"], "users": [other_user.username], "decision": "allow"}
    assert api.get(URL).status_code == 403
    assert api.post(URL, own, format="json").status_code == 403
    assert api.get(f"{URL}{rule.pk}/").status_code == 403
    assert api.patch(f"{URL}{rule.pk}/", {"decision": "allow"}, format="json").status_code == 403
    assert api.delete(f"{URL}{rule.pk}/").status_code == 403
    rule.refresh_from_db()
    assert rule.decision == "deny"
    assert APIClient().get(URL).status_code == 401


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tools": [], "decision": "deny"}, "tools"),
        ({"tools": "calculator", "decision": "deny"}, "tools"),
        ({"tools": ["has space"], "decision": "deny"}, "tools"),
        ({"tools": ["a\x00b"], "decision": "deny"}, "tools.0"),
        ({"tools": ["x" * 129], "decision": "deny"}, "tools.0"),
        ({"tools": ["*"], "decision": "maybe"}, "decision"),
        ({"tools": ["*"]}, "decision"),
        ({"tools": ["*"], "decision": "deny", "users": ["nobody-by-that-name"]}, "users"),
        ({"tools": ["*"], "decision": "deny", "groups": ["no-such-group"]}, "groups"),
        ({"tools": ["*"], "decision": "deny", "priority": 1}, "priority"),
        ({"tools": ["*"], "decision": "deny", "note": "n" * 501}, "note"),
    ],
)
def test_a_bad_rule_is_refused_naming_the_field_and_nothing_is_stored(staff_api, body, field):
    response = staff_api.post(URL, body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert not ToolPolicy.objects.exists()


def test_a_bad_change_leaves_the_rule_as_it_was(staff_api):
    rule = ToolPolicy.objects.create(tools=["calculator"], decision="ask")
    response = staff_api.patch(
        f"{URL}{rule.pk}/", {"decision": "deny", "users": ["nobody"]}, format="json"
    )
    assert response.status_code == 400
    rule.refresh_from_db()
    assert rule.decision == "ask"


def test_a_tool_execution_carries_its_policy_decision(api, conversation):
    turn = stored_turn(conversation)
    turn.tool_executions.update(policy_decision="deny", policy_rule=7)
    rows = api.get(f"/api/v1/tool-executions/?conversation={conversation.pk}").json()["results"]
    assert [row["policy"] for row in rows] == [{"decision": "deny", "rule": 7}]
    turn.tool_executions.update(policy_decision="")
    rows = api.get(f"/api/v1/tool-executions/?conversation={conversation.pk}").json()["results"]
    assert [row["policy"] for row in rows] == [None]
