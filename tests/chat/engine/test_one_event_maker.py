"""A run's events are made in two places only: the ledger (chat/engine/ledger/) and the live layer.

The ledger writes a turn's record and makes the event that tells of each
write; the live layer (chat/live/) declares the events, turns a tool's own
events into their classes (`event_from`) and publishes them. Every other
module under chat/ (migrations aside) is read as source, and any event it
makes is named. An event is made by a call of one of the classes of
chat/live/event_types.py (read off `EVENT_CLASSES`, so a new event type is
held without a change here) or of `event_from`, called:

- by its name (`RunStarted(...)`), or by the name it was imported as
  (`from chat.live.event_types import RunStarted as Started`);
- as an attribute (`event_types.RunStarted(...)`);
- out of the map of classes (`EVENT_CLASSES[kind](...)`).

A mention that makes nothing (an annotation, an `isinstance`, an import) is
not named.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from chat.live.event_types import EVENT_CLASSES
from tests.chat.engine.writers import ROOT, WriteFinder, name_of, writes_in

MAKERS = (ROOT / "chat" / "engine" / "ledger", ROOT / "chat" / "live")

EVENT_MAKERS = frozenset({cls.__name__ for cls in EVENT_CLASSES.values()} | {"event_from"})
_MODULE = "chat.live.event_types"


class _Finder(WriteFinder):
    """Calls that make an event; no store and no SQL text makes one."""

    SQL = re.compile(r"(?!)")  # matches nothing: SQL makes no event
    SQL_SAYS = ""

    def __init__(self) -> None:
        super().__init__()
        # The names each event maker is known by in this module: its own, and its aliases.
        self.aliases: dict[str, str] = {name: name for name in EVENT_MAKERS}

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == _MODULE:
            for alias in node.names:
                if alias.name in EVENT_MAKERS and alias.asname:
                    self.aliases[alias.asname] = alias.name

    def written(self, call: ast.Call) -> str | None:
        func = call.func
        if isinstance(func, ast.Name) and func.id in self.aliases:
            return f"{self.aliases[func.id]}(...)"
        if isinstance(func, ast.Attribute) and func.attr in EVENT_MAKERS:
            return f"….{func.attr}(...)"
        if isinstance(func, ast.Subscript) and name_of(func.value) == "EVENT_CLASSES":
            return "EVENT_CLASSES[...](...)"
        return None


def events_made(source: str) -> list[tuple[int, str]]:
    """Each event `source` makes: its line and how."""
    return writes_in(_Finder, source)


def _outside_makers() -> list[Path]:
    return [
        path
        for path in sorted((ROOT / "chat").rglob("*.py"))
        if "migrations" not in path.relative_to(ROOT).parts
        and not any(maker in path.parents for maker in MAKERS)
    ]


def test_only_the_ledger_and_the_live_layer_make_events():
    made = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in _outside_makers()
        for line, what in events_made(path.read_text())
    ]
    assert made == []


def test_the_ledger_makes_events():
    made = [path for path in sorted(MAKERS[0].rglob("*.py")) if events_made(path.read_text())]
    assert made, "the ledger makes no event: is it still their maker?"


def test_every_event_class_is_held():
    assert {"RunStarted", "MessageDelta", "RunCompleted", "event_from"} <= EVENT_MAKERS
    assert len(EVENT_MAKERS) == len(EVENT_CLASSES) + 1


@pytest.mark.parametrize(
    "source",
    [
        "RunStarted(mode='live')",
        "event = MessageDelta(message_id=m, text=t)",
        "events.append(RunCompleted(message_id=m, latency_ms=1, model_calls=1, steps=1))",
        "event_types.RunFailed(error='no')",
        "chat.live.event_types.ToolsEnded(message_id=m)",
        "event_from(kind, data)",
        "from chat.live.event_types import RunCancelled as Cancelled\n"
        "Cancelled(cancelled_tool_calls=[])",
        "EVENT_CLASSES[kind](**data)",
        "return [BudgetWarning(limit=limit, message=text)]",
    ],
)
def test_an_event_made_is_named(source):
    assert events_made(source)


@pytest.mark.parametrize(
    "source",
    [
        "from chat.live.event_types import RunStarted, Event",
        "def f(event: RunStarted) -> list[Event]:\n    return []",
        "isinstance(event, MessageDelta)",
        "kind = RunCompleted.TYPE",
        "events_publish(run, events)",
        "run_started(run=run, mode='live')",
        "from chat.live.event_types import event_data\nevent_data(event)",
    ],
)
def test_a_mention_that_makes_nothing_is_not_named(source):
    assert events_made(source) == []
