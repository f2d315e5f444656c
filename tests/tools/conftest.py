"""Fixtures for the tool framework: contexts whose events land in a list, private registries."""

from __future__ import annotations

import threading
import uuid

import pytest

from tools.context import ToolContext
from tools.registry import ToolRegistry


class Events(list):
    """The (type, data) pairs a sink received, with the thread each arrived on."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def __call__(self, event_type: str, data: dict) -> None:
        self.append((event_type, data))
        self.threads.append(threading.get_ident())

    def of_type(self, event_type: str) -> list[dict]:
        return [data for kind, data in self if kind == event_type]


@pytest.fixture
def events() -> Events:
    return Events()


@pytest.fixture
def make_context(events):
    """Build a ToolContext for a user (None by default) whose sink is `events`."""

    def make(user=None, **fields) -> ToolContext:
        fields.setdefault("conversation_id", uuid.uuid4())
        fields.setdefault("run_id", uuid.uuid4())
        fields.setdefault("tool_call_id", f"call_{uuid.uuid4().hex[:8]}")
        fields.setdefault("sink", events)
        return ToolContext(user=user, **fields)

    return make


@pytest.fixture
def reg() -> ToolRegistry:
    return ToolRegistry()


@pytest.fixture
def release():
    """An Event that hanging test tools wait on; set at teardown so no thread lingers."""
    gate = threading.Event()
    yield gate
    gate.set()
