"""ToolContext: events to the sink, cancellation, and the user's own resources."""

from __future__ import annotations

import uuid

import pytest

from tests.factories import ResourceFactory, UserFactory
from tools.context import ResourceNotFound, ToolCancelled
from tools.models import Resource


def test_progress_and_custom_events_go_to_the_sink(make_context, events):
    ctx = make_context(tool_name="demo")
    ctx.emit_progress(12.34, "working")
    ctx.emit_progress(150, "over")
    ctx.emit("chart", {"points": [1, 2]})
    assert events == [
        (
            "tool.progress",
            {
                "tool_call_id": ctx.tool_call_id,
                "name": "demo",
                "percent": 12.3,
                "message": "working",
            },
        ),
        (
            "tool.progress",
            {"tool_call_id": ctx.tool_call_id, "name": "demo", "percent": 100, "message": "over"},
        ),
        (
            "tool.event",
            {
                "tool_call_id": ctx.tool_call_id,
                "name": "demo",
                "type": "chart",
                "data": {"points": [1, 2]},
            },
        ),
    ]


@pytest.mark.parametrize("percent", ["50", None, float("nan"), True])
def test_progress_must_be_a_number(make_context, percent):
    with pytest.raises((TypeError, ValueError)):
        make_context().emit_progress(percent, "x")


def test_event_data_must_be_json(make_context, events):
    with pytest.raises(TypeError, match="not JSON-serializable"):
        make_context().emit("bad", {"when": object()})
    assert events == []


def test_a_failing_sink_is_logged_not_raised(make_context, caplog):
    def sink(event_type, data):
        raise RuntimeError("socket gone")

    make_context(sink=sink).emit_progress(10, "x")
    assert "the event sink failed" in caplog.text


def test_without_a_sink_events_are_dropped(make_context):
    make_context(sink=None).emit_progress(10, "nobody listens")


def test_after_cancel_progress_stops_the_tool_and_events_are_dropped(make_context, events):
    ctx = make_context()
    ctx.cancel()
    with pytest.raises(ToolCancelled):
        ctx.emit_progress(10, "late")
    ctx.emit("tool.note", {"late": True})
    assert ctx.cancelled
    assert events == []
    with pytest.raises(ToolCancelled):
        ctx.raise_if_cancelled()


# --- Resources ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_create_sets_owner_and_execution_and_records_the_id(make_context, user):
    ctx = make_context(user=user)
    note = ctx.resources.create("note", "Milk", {"body": "2 litres"})
    note.refresh_from_db()
    assert (note.owner, note.kind, note.title, note.data) == (
        user,
        "note",
        "Milk",
        {"body": "2 litres"},
    )
    assert note.created_by_execution_id is None
    assert ctx.last_resource_id == str(note.pk)


@pytest.mark.django_db
def test_create_is_refused_after_cancel(make_context, user):
    ctx = make_context(user=user)
    ctx.cancel()
    with pytest.raises(ToolCancelled):
        ctx.resources.create("note", "late")
    assert not Resource.objects.exists()


@pytest.mark.django_db
def test_get_returns_only_the_users_own(make_context, user, other_user):
    mine = ResourceFactory(owner=user)
    theirs = ResourceFactory(owner=other_user)
    ctx = make_context(user=user)
    assert ctx.resources.get(mine.pk) == mine
    assert ctx.resources.get(str(mine.pk), kind="note") == mine
    assert ctx.last_resource_id == str(mine.pk)
    for missing in (theirs.pk, uuid.uuid4(), "not-a-uuid"):
        with pytest.raises(ResourceNotFound, match=r"belongs to this user|not a resource id"):
            ctx.resources.get(missing)
    with pytest.raises(ResourceNotFound):
        ctx.resources.get(mine.pk, kind="dataset")


@pytest.mark.django_db
def test_the_last_resource_touched_wins(make_context, user):
    first, second = ResourceFactory(owner=user), ResourceFactory(owner=user)
    ctx = make_context(user=user)
    ctx.resources.get(first.pk)
    ctx.resources.get(second.pk)
    ctx.resources.get(first.pk)
    assert ctx.resource_ids == [str(second.pk), str(first.pk)]
    assert ctx.last_resource_id == str(first.pk)


@pytest.mark.django_db
def test_search_is_scoped_case_insensitive_and_counts(make_context, user, other_user):
    for i in range(5):
        ResourceFactory(owner=user, title=f"Milk {i}", data={"body": ""})
    ResourceFactory(owner=user, title="Shopping", data={"body": "buy MILK"})
    ResourceFactory(owner=user, kind="dataset", title="milk data")
    ResourceFactory(owner=other_user, title="milk (theirs)")
    ctx = make_context(user=user)

    found = ctx.resources.search("note", "milk", 3, data_keys=("body",))
    assert found.total == 6
    assert len(found.items) == 3
    assert all(r.owner_id == user.pk and r.kind == "note" for r in found.items)

    assert ctx.resources.search("note", "milk", 10).total == 5  # title only
    assert ctx.resources.search("note", "", 10).total == 6
    assert ctx.resources.search("note", "nothing", 10) == ([], 0)
    assert ctx.resource_ids == []  # a list is not one resource to link to


def test_resources_need_a_user(make_context):
    with pytest.raises(PermissionError, match="signed-in user"):
        make_context(user=None).resources.search("note", "x")


@pytest.mark.django_db
def test_an_unsaved_user_has_no_resources(make_context):
    with pytest.raises(PermissionError):
        make_context(user=UserFactory.build()).resources.create("note", "x")
