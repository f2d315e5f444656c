"""The openai SDK's async clients the tests make leave nothing behind for a later test.

An `AsyncOpenAI` that is dropped with a connection still pooled closes it, when collected,
by scheduling `aclose()` on whatever event loop is running then (the SDK's `__del__`). A client
used under one loop (the agents SDK's `run_sync`, an `asyncio.run`) and collected while a later
test's loop runs so tries to close a socket of a loop long closed, and that later test fails
with "Event loop is closed" in a task it never made. The tests make their clients with
`tests.clients.sdk.async_openai`, which pools no idle connection.
"""

import ast
import asyncio
import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

from tests.clients.sdk import async_openai
from tests.llm_server import text_reply

TESTS = Path(__file__).resolve().parents[1]


def _troubles_of_a_client_used_under_one_loop_and_collected_under_another(
    make: Callable[..., Any], llm_server
) -> list[str]:
    llm_server.push(text_reply("once"))
    held = [make(base_url=llm_server.base_url, api_key="sk-test")]

    async def ask() -> None:
        await held[0].chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": "hi"}]
        )

    asyncio.run(ask())
    troubles: list[str] = []

    async def later() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: troubles.append(context["message"]))
        held.clear()
        gc.collect()  # the client goes, and schedules its pool's closing on this loop
        for _ in range(5):
            await asyncio.sleep(0)
        gc.collect()  # a failed closing is told when its task goes

    asyncio.run(later())
    return troubles


def test_a_plain_client_so_used_troubles_the_later_loop(llm_server):
    """The hazard is real: without this, the test below could pass for want of it."""
    troubles = _troubles_of_a_client_used_under_one_loop_and_collected_under_another(
        AsyncOpenAI, llm_server
    )
    assert troubles == ["Task exception was never retrieved"]


def test_a_client_of_the_tests_so_used_troubles_no_later_loop(llm_server):
    troubles = _troubles_of_a_client_used_under_one_loop_and_collected_under_another(
        async_openai, llm_server
    )
    assert troubles == []


def test_the_tests_make_their_async_sdk_clients_one_way():
    made_elsewhere = []
    for path in TESTS.rglob("*.py"):
        if path in (TESTS / "clients" / "sdk.py", Path(__file__).resolve()):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name == "AsyncOpenAI":
                    made_elsewhere.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    assert made_elsewhere == []
