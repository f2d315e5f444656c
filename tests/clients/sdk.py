"""The openai SDK's async client, made the one way the tests make it.

The SDK's own connection pool keeps a connection open after each request, bound to the event
loop that made it, and a dropped client closes its pool by scheduling that on whatever loop runs
when it is collected: a later test's, which then fails with "Event loop is closed" in a task of
no code of its own (tests/project/test_sdk_clients.py). The tests run a client under loops that
come and go (`asyncio.run`, the agents SDK's `run_sync`), so theirs keeps no idle connection:
each request opens its own, which costs a loopback connect and nothing a test measures.
"""

from typing import Any

import httpx2
from openai import AsyncOpenAI, DefaultAsyncHttpxClient


def async_openai(**kwargs: Any) -> AsyncOpenAI:
    """An `AsyncOpenAI` (the SDK's arguments) whose pool keeps no connection between requests.

    An `http_client` given is used as it is: its caller closes it under its own loop.
    """
    if "http_client" not in kwargs:
        kwargs["http_client"] = DefaultAsyncHttpxClient(
            limits=httpx2.Limits(max_keepalive_connections=0)
        )
    return AsyncOpenAI(**kwargs)
