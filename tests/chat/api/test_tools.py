"""Tools and the audit rows of their calls over the REST API."""

from __future__ import annotations

import uuid

import pytest

from tests.chat.api.conftest import stored_turn
from tests.factories import ConversationFactory, UserFactory
from tools.registry import registry

pytestmark = pytest.mark.django_db

EXECUTIONS = "/api/v1/tool-executions/"


def test_the_tools_are_listed_with_their_json_schemas_and_flags(api):
    response = api.get("/api/v1/tools/")
    assert response.status_code == 200
    body = response.json()
    assert (body["next"], body["previous"]) == (None, None)
    tools = {tool["name"]: tool for tool in body["results"]}
    assert list(tools) == registry.names()
    calculator = tools["calculator"]
    assert calculator["parameters"] == registry.get("calculator").parameters
    assert calculator["parameters"]["properties"]["expression"]["type"] == "string"
    assert calculator["description"]
    assert calculator["idempotent"] is True
    assert calculator["requires_approval"] is False
    assert calculator["timeout_s"] > 0
    assert tools["record_note"]["idempotent"] is False
    assert calculator["policy"] is None  # no rule: its own settings decide


def test_the_list_says_what_the_policies_decide_for_the_user(api, user, settings):
    from chat.models import ToolPolicy

    ToolPolicy.objects.create(tools=["calc*"], decision="deny")
    asked = ToolPolicy.objects.create(tools=["calculator", "record_note"], decision="ask")
    ToolPolicy.objects.create(tools=["record_note"], decision="deny").users.add(UserFactory())
    tools = {tool["name"]: tool for tool in api.get("/api/v1/tools/").json()["results"]}
    assert tools["calculator"]["policy"]["decision"] == "deny"
    assert tools["record_note"]["policy"] == {"decision": "ask", "rule": asked.pk}
    assert tools["get_current_time"]["policy"] is None
    settings.TOOLCHAT_TOOLS_DEFAULT = "deny"
    tools = {tool["name"]: tool for tool in api.get("/api/v1/tools/").json()["results"]}
    assert tools["get_current_time"]["policy"] == {"decision": "deny", "rule": None}


def test_executions_are_your_own_newest_first(api, user, other_user):
    mine = ConversationFactory(owner=user)
    older, newer = stored_turn(mine), stored_turn(mine)
    stored_turn(ConversationFactory(owner=other_user))

    body = api.get(EXECUTIONS).json()

    assert [e["run_id"] for e in body["results"]] == [str(newer.id), str(older.id)]
    assert all(e["conversation_id"] == str(mine.id) for e in body["results"])


def test_executions_filter_by_conversation_and_by_run(api, user):
    first, second = ConversationFactory(owner=user), ConversationFactory(owner=user)
    run_a, run_b = stored_turn(first), stored_turn(first)
    stored_turn(second)

    by_conversation = api.get(f"{EXECUTIONS}?conversation={first.id}").json()["results"]
    assert {e["run_id"] for e in by_conversation} == {str(run_a.id), str(run_b.id)}
    by_run = api.get(f"{EXECUTIONS}?run={run_b.id}").json()["results"]
    assert [e["run_id"] for e in by_run] == [str(run_b.id)]
    both = api.get(f"{EXECUTIONS}?conversation={second.id}&run={run_b.id}").json()["results"]
    assert both == []


def test_filtering_by_someone_elses_ids_finds_nothing(api, foreign):
    conversation, finished, _ = foreign
    for query in (f"conversation={conversation.id}", f"run={finished.id}", f"run={uuid.uuid4()}"):
        response = api.get(f"{EXECUTIONS}?{query}")
        assert response.status_code == 200
        assert response.json()["results"] == []


@pytest.mark.parametrize("query", ["conversation=12", "run=not-a-uuid"])
def test_a_malformed_filter_is_a_400_naming_it(api, query):
    response = api.get(f"{EXECUTIONS}?{query}")
    assert response.status_code == 400
    assert response.json()["field"] == query.split("=")[0]


def test_executions_page_with_a_cursor(api, conversation):
    runs = [stored_turn(conversation) for _ in range(5)]
    seen = []
    url = f"{EXECUTIONS}?page_size=2"
    while url:
        body = api.get(url).json()
        seen.extend(e["run_id"] for e in body["results"])
        url = body["next"]
    assert seen == [str(run.id) for run in reversed(runs)]


@pytest.mark.parametrize("turns", [1, 20])
def test_listing_executions_costs_two_queries(api, conversation, turns, django_assert_num_queries):
    for _ in range(turns):
        stored_turn(conversation)
    with django_assert_num_queries(2):
        assert len(api.get(EXECUTIONS).json()["results"]) == turns
