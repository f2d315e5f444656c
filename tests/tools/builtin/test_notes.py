"""record_note and search_notes, run through the executor (so in its thread: real commits)."""

from __future__ import annotations

import json

import pytest

from tests.factories import ResourceFactory
from tools.executor import execute_tool
from tools.models import Resource

pytestmark = pytest.mark.django_db(transaction=True)


def call(make_context, user, name, **arguments):
    return execute_tool(name=name, arguments=json.dumps(arguments), context=make_context(user=user))


def test_record_note_creates_a_note_owned_by_the_user(make_context, user):
    result = call(make_context, user, "record_note", title="  Boiler serviced ", body="By Acme.")
    assert result.status == "succeeded", result.content
    note = Resource.objects.get()
    assert (note.owner, note.kind, note.title) == (user, "note", "Boiler serviced")
    assert note.data == {"title": "Boiler serviced", "body": "By Acme."}
    assert result.result["message"] == "Noted: Boiler serviced"
    assert result.result["data"]["id"] == str(note.pk)
    assert result.resource_id == str(note.pk)


def test_record_note_needs_a_title(make_context, user):
    result = call(make_context, user, "record_note", title="   ")
    assert result.status == "failed"
    assert "title" in json.loads(result.content)["error"]
    assert not Resource.objects.exists()


def test_record_note_is_not_idempotent():
    from tools.registry import registry

    assert registry.get("record_note").idempotent is False
    assert registry.get("search_notes").idempotent is True


def test_a_user_cannot_see_another_users_notes(make_context, user, other_user):
    ResourceFactory(owner=other_user, title="Secret milk plan", data={"body": "milk"})
    ResourceFactory(owner=user, title="My milk", data={"body": ""})

    mine = call(make_context, user, "search_notes", query="milk")
    assert [n["title"] for n in mine.result["data"]] == ["My milk"]
    assert mine.result["total_available"] == 1

    everything = call(make_context, user, "search_notes", query="")
    assert [n["title"] for n in everything.result["data"]] == ["My milk"]
    assert "Secret" not in everything.content


def test_search_matches_title_or_body_case_insensitively(make_context, user):
    ResourceFactory(owner=user, title="Groceries", data={"body": "Buy MILK"})
    ResourceFactory(owner=user, title="milk delivery", data={"body": ""})
    ResourceFactory(owner=user, title="Dentist", data={"body": "Tuesday"})
    result = call(make_context, user, "search_notes", query="Milk")
    assert {n["title"] for n in result.result["data"]} == {"Groceries", "milk delivery"}
    assert (
        result.result["message"] == 'Found 2 notes matching \'Milk\': "milk delivery"; "Groceries".'
    )


def test_search_truncates_itself_and_says_how_to_see_more(make_context, user):
    for i in range(15):
        ResourceFactory(owner=user, title=f"Note {i}", data={"body": "x" * 1000})
    result = call(make_context, user, "search_notes", query="note", limit=10)
    data = result.result
    assert (data["total_available"], data["returned"], data["truncated"]) == (15, 10, True)
    assert len(data["data"]) == 10
    assert data["message"] == (
        "Found 15 notes matching 'note'; showing the 10 most recent: "
        '"Note 14"; "Note 13"; "Note 12" and more.'
    )
    assert "limit=15" in data["hint"]
    assert all(n["body_truncated"] and len(n["body"]) <= 301 for n in data["data"])
    assert not result.truncated  # the tool kept itself under the safety limit


def test_search_with_no_match(make_context, user):
    result = call(make_context, user, "search_notes", query="nothing")
    assert result.status == "succeeded"
    assert result.result["returned"] == 0
    assert result.result["message"] == "No notes matching 'nothing'."


def test_search_limit_is_validated(make_context, user):
    result = call(make_context, user, "search_notes", query="x", limit=500)
    assert result.status == "failed"
    assert "limit" in json.loads(result.content)["error"]


def test_delete_notes_deletes_only_the_users_own_notes(make_context, user, other_user):
    mine = [ResourceFactory(owner=user, kind="note", title=f"mine {n}") for n in range(2)]
    theirs = ResourceFactory(owner=other_user, kind="note", title="theirs")
    ids = [str(note.pk) for note in mine] + [str(theirs.pk), "not-an-id"]

    result = call(make_context, user, "delete_notes", note_ids=ids)

    assert result.status == "succeeded", result.content
    assert sorted(d["title"] for d in result.result["data"]["deleted"]) == ["mine 0", "mine 1"]
    assert "2 of the ids matched no note of yours" in result.result["message"]
    assert list(Resource.objects.values_list("title", flat=True)) == ["theirs"]


def test_delete_notes_asks_for_approval_only_for_more_than_one_note():
    from tools.registry import registry

    spec = registry.get("delete_notes")
    assert spec.requires_approval  # the tool list says it may ask
    assert spec.needs_approval({"note_ids": ["a"]}) is False
    assert spec.needs_approval({"note_ids": ["a", "b"]}) is True
    # A call the tool would refuse never runs, so there is nothing to approve.
    assert spec.needs_approval({"note_ids": "a"}) is False
    assert spec.needs_approval({}) is False
    assert spec.needs_approval(None) is False
    assert spec.describe_call({"note_ids": ["a", "b", "c"]}) == "Delete 3 notes for good."
