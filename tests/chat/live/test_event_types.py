"""Each event type is declared once, the docs list exactly its fields, and publishing checks them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chat.live.event_types import EVENT_DATA, EVENT_TYPES, event_check
from chat.live.events import event_publish
from chat.models import RunEvent
from tests.factories import RunFactory

ROOT = Path(__file__).resolve().parents[3]
ROW = re.compile(r"^\| `([a-z_.]+)` \| ([^|]*) \|", re.MULTILINE)


def documented_fields() -> dict[str, tuple[set[str], set[str]]]:
    """docs/events.md's table of types: (required, optional) field names of each type."""
    text = (ROOT / "docs" / "events.md").read_text()
    table = text.split("## Types", 1)[1].split("\n## ", 1)[0]
    documented = {}
    for type, cell in ROW.findall(table):
        names = re.findall(r"`(\w+)(\??)`", cell)
        documented[type] = (
            {name for name, mark in names if not mark},
            {name for name, mark in names if mark},
        )
    return documented


def test_the_docs_list_every_event_type_and_only_those():
    assert set(documented_fields()) == EVENT_TYPES


@pytest.mark.parametrize("type", sorted(EVENT_TYPES))
def test_the_docs_list_exactly_the_declared_fields(type):
    declared = EVENT_DATA[type]
    required, optional = documented_fields()[type]
    assert required == set(declared.__required_keys__), "required fields"
    assert optional == set(declared.__optional_keys__), "fields marked ? in the docs"


@pytest.mark.parametrize(
    ("type", "data", "error"),
    [
        ("run.begun", {}, "unknown event type"),
        ("run.started", {}, "missing ['mode']"),
        ("run.started", {"mode": "loop", "steps": 1}, "undeclared ['steps']"),
        ("message.delta", {"message_id": "m", "reset": True}, "missing ['text']"),
    ],
)
def test_an_event_unlike_its_declaration_is_refused(type, data, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        event_check(type, data)


@pytest.mark.django_db
def test_publishing_refuses_an_undeclared_field_and_stores_nothing():
    run = RunFactory()
    with pytest.raises(ValueError, match="undeclared"):
        event_publish(run=run, type="run.failed", data={"error": "x", "trace": "..."})
    assert not RunEvent.objects.filter(run=run).exists()
    event_publish(run=run, type="message.delta", data={"message_id": "m", "text": "Hi"})
    assert RunEvent.objects.get(run=run).data == {"message_id": "m", "text": "Hi"}
