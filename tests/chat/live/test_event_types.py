"""Each event type is declared once, the docs list exactly its fields, and its data is what they list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chat.live.event_types import (
    EVENT_CLASSES,
    EVENT_FIELDS,
    EVENT_TYPES,
    MessageCreated,
    MessageDelta,
    RunCompleted,
    event_data,
    event_from,
)
from chat.live.events import event_publish, events_publish
from chat.models import RunEvent
from tests.factories import RunFactory

ROOT = Path(__file__).resolve().parents[3]
ROW = re.compile(r"^\| `([a-z_.]+)` \| ([^|]*) \|", re.MULTILINE)


def documented_fields() -> dict[str, tuple[set[str], set[str]]]:
    """docs/events.md's table of types: each type's field names, and those marked `?`."""
    text = (ROOT / "docs" / "events.md").read_text()
    table = text.split("## Types", 1)[1].split("\n## ", 1)[0]
    documented = {}
    for type, cell in ROW.findall(table):
        names = re.findall(r"`(\w+)(\??)`", cell)
        documented[type] = ({name for name, _ in names}, {name for name, mark in names if mark})
    return documented


def filled(type: str, *, optional: bool) -> dict[str, str]:
    """A placeholder for each required field of `type`, and each optional one if asked."""
    return {
        name: f"<{name}>"
        for name, required in EVENT_FIELDS[EVENT_CLASSES[type]]
        if required or optional
    }


def test_the_docs_list_every_event_type_and_only_those():
    assert set(documented_fields()) == EVENT_TYPES


@pytest.mark.parametrize("type", sorted(EVENT_TYPES))
def test_an_events_data_has_exactly_the_documented_fields(type):
    names, optional = documented_fields()[type]
    every = event_data(event_from(type, filled(type, optional=True)))
    assert set(every) == names, "the fields of an event with all of them"
    fewest = event_data(event_from(type, filled(type, optional=False)))
    assert set(fewest) == names - optional, "the fields of an event without those marked ?"


def test_an_events_class_says_its_type():
    assert {cls.TYPE for cls in EVENT_CLASSES.values()} == EVENT_TYPES
    assert all(EVENT_CLASSES[cls.TYPE] is cls for cls in EVENT_CLASSES.values())


def test_optional_fields_are_left_out_when_absent_and_required_ones_never():
    assert event_data(MessageCreated(message_id="m", role="assistant", purpose="direct")) == {
        "message_id": "m",
        "role": "assistant",
        "purpose": "direct",
    }
    # A required field is sent as null: a run's latency may be unknown.
    completed = RunCompleted(message_id="m", latency_ms=None, model_calls=1, steps=0)
    assert event_data(completed) == {
        "message_id": "m",
        "latency_ms": None,
        "model_calls": 1,
        "steps": 0,
    }
    # The data keeps the order it always had, as stored (SQLite keeps the text as written).
    reset = MessageDelta(message_id="m", reset=True, reason="retry", text="")
    assert list(event_data(reset)) == ["message_id", "reset", "reason", "text"]


def test_an_event_is_made_with_its_fields_only():
    with pytest.raises(TypeError, match="unexpected keyword argument 'stepz'"):
        RunCompleted(message_id="m", latency_ms=1, model_calls=1, steps=0, stepz=1)


@pytest.mark.parametrize(
    ("type", "data", "error"),
    [
        ("run.begun", {}, "unknown event type"),
        ("run.started", {}, "missing ['mode']"),
        ("run.started", {"mode": "loop", "steps": 1}, "undeclared ['steps']"),
        ("message.delta", {"message_id": "m", "reset": True}, "missing ['text']"),
    ],
)
def test_data_unlike_its_declaration_is_refused(type, data, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        event_from(type, data)


@pytest.mark.django_db
def test_published_events_are_stored_as_their_type_and_data():
    run = RunFactory()
    events_publish(
        run=run,
        events=[
            MessageDelta(message_id="m", text="Hi"),
            MessageDelta(message_id="m", reset=True, reason="retry", text=""),
        ],
    )
    event_publish(
        run=run, event=RunCompleted(message_id="m", latency_ms=None, model_calls=1, steps=0)
    )
    stored = [(e.type, e.data) for e in RunEvent.objects.filter(run=run).order_by("seq")]
    assert stored == [
        ("message.delta", {"message_id": "m", "text": "Hi"}),
        ("message.delta", {"message_id": "m", "reset": True, "reason": "retry", "text": ""}),
        ("run.completed", {"message_id": "m", "latency_ms": None, "model_calls": 1, "steps": 0}),
    ]
