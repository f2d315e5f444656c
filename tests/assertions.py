"""Assertions shared across the suite, and waiting for a state instead of sleeping."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

# How often a wait looks again: short, since each look is one cheap query.
POLL_S = 0.02


def assert_paired(messages: list[dict[str, Any]]) -> None:
    """Every assistant tool call is answered right after it, and no tool message is stray."""
    pending: list[str] = []
    for message in messages:
        if pending:
            assert message["role"] == "tool", f"unanswered calls {pending} before {message}"
            pending.remove(message["tool_call_id"])
            continue
        assert message["role"] != "tool", f"stray tool message {message}"
        pending = [call["id"] for call in message.get("tool_calls") or []]
    assert not pending, f"unanswered calls {pending}"


def assert_valid_history(messages: list[dict[str, Any]]) -> None:
    """Valid for the OpenAI API: the openai package's own types accept it, and calls pair up."""
    from openai.types.chat import ChatCompletionMessageParam
    from pydantic import TypeAdapter

    TypeAdapter(list[ChatCompletionMessageParam]).validate_python(messages)
    assert_paired(messages)


def wait_until(predicate: Callable[[], object], timeout: float = 15.0, what: str = "") -> None:
    """Poll until `predicate()` is true; fail naming `what` if it is not within `timeout` s.

    The timeout is a deadline for a stuck test, not a guess at how long the
    thing takes: on a loaded machine the wait is longer, and the test still passes.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(POLL_S)


class _Page(Protocol):
    def wait_for_timeout(self, timeout: float) -> None: ...


def wait_until_on_page(
    page: _Page, predicate: Callable[[], object], timeout: float = 15.0, what: str = ""
) -> None:
    """`wait_until` for what a Playwright page's handlers record (a held route, a frame).

    The sync API runs those handlers only while it is called: the poll waits
    in the page (`wait_for_timeout`), not in `time.sleep`, so that they run.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        page.wait_for_timeout(POLL_S * 1000)


async def wait_until_async(
    predicate: Callable[[], object], timeout: float = 15.0, what: str = ""
) -> None:
    """`wait_until` for async tests; `predicate` may be a coroutine function (a database check)."""
    deadline = time.monotonic() + timeout
    while not await _truth(predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        await asyncio.sleep(POLL_S)


def tool_stopped(name: str) -> Callable[[], bool]:
    """For `wait_until`: no call of this tool is still running in this process.

    The executor runs each call in a thread named `tool-<name>-<call id>`
    (tools/running.py), and gives up on one it no longer wants without
    stopping it: the thread's end is the tool's own, even when abandoned.
    """
    prefix = f"tool-{name}-"
    return lambda: not any(t.name.startswith(prefix) for t in threading.enumerate())


async def _truth(value: object) -> object:
    return await value if inspect.isawaitable(value) else value
