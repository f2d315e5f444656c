"""The web process's kept request threads (project/request_threads.py), on Django's real handler."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest
from django.core.asgi import get_asgi_application
from django.db import connection
from django.db.backends.signals import connection_created

from project.request_threads import KeptRequestThreads
from tests.assertions import wait_until_async

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def thread_urls(settings):
    settings.ROOT_URLCONF = "tests.project.request_thread_urls"


@pytest.fixture
def opened():
    """The database connections opened meanwhile, by thread."""
    seen: list[int] = []

    def count(sender: Any, connection: Any, **kwargs: Any) -> None:
        seen.append(threading.get_ident())

    connection_created.connect(count, weak=False)
    yield seen
    connection_created.disconnect(count)


def requests(app: Any, *paths: str) -> list[dict[str, Any]]:
    """GET every path at once through `app`; their JSON answers."""

    async def go() -> list[dict[str, Any]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            answers = await asyncio.gather(*(http.get(p) for p in paths))
        for answer in answers:
            assert answer.status_code == 200, answer.text
        return [answer.json() for answer in answers]

    return asyncio.run(go())


def test_requests_one_after_another_share_one_kept_thread(thread_urls, opened):
    app = KeptRequestThreads(get_asgi_application())
    answers = [requests(app, "/where/")[0] for _ in range(8)]
    assert len({a["thread"] for a in answers}) == 1, answers
    assert answers[0]["name"].startswith("toolchat-request")
    if connection.vendor == "sqlite":
        # The connection stays with its thread: opened once, not at every request.
        assert len(opened) == 1, opened
    else:
        # A pooled PostgreSQL connection goes back to the pool after each request.
        stats = connection.pool.get_stats()
        assert stats["pool_size"] - stats["pool_available"] <= 1  # this test's own


def test_without_the_wrapper_every_request_has_a_new_thread(thread_urls, opened):
    # What Django does alone: the figure the wrapper improves on.
    app = get_asgi_application()
    answers = [requests(app, "/where/")[0] for _ in range(4)]
    assert len({a["name"] for a in answers}) == 4  # an executor (and a thread) each
    if connection.vendor == "sqlite":
        assert len(opened) == 4, opened


def test_requests_at_once_each_run_on_a_thread_of_their_own(thread_urls, opened):
    app = KeptRequestThreads(get_asgi_application(), keep=3, keep_connected=2)
    answers = requests(app, *["/where/?sleep=0.3"] * 5)
    assert len({a["thread"] for a in answers}) == 5
    # They overlapped: none waited for another's thread.
    assert max(a["started"] for a in answers) < min(a["ended"] for a in answers)
    # Three are kept for the next requests; the burst's other two threads end.
    assert app.kept() == 3

    def alive() -> int:
        return len({a["thread"] for a in answers} & {t.ident for t in threading.enumerate()})

    for _ in range(100):
        if alive() <= 3:
            break
        threading.Event().wait(0.02)
    assert alive() == 3
    opened.clear()
    again = requests(app, *["/where/?sleep=0.1"] * 3)
    assert {a["thread"] for a in again} <= {a["thread"] for a in answers}
    if connection.vendor == "sqlite":
        # Two kept their connection; the third (a spare) closed its own.
        assert len(opened) == 1, opened


def test_a_connection_left_inside_a_transaction_is_not_kept(thread_urls, opened):
    app = KeptRequestThreads(get_asgi_application())
    first = requests(app, "/begin/")[0]
    second = requests(app, "/where/")[0]
    assert first["thread"] == second["thread"]
    assert second["in_transaction"] is False
    if connection.vendor == "sqlite":
        assert len(opened) == 2  # a new connection, not the one left in its transaction


def test_a_thread_left_busy_by_its_request_is_not_lent_to_the_next():
    # A request that started a sync call and answered without waiting for it:
    # the next request must not queue behind that call on the same thread.
    from asgiref.sync import sync_to_async

    seen: list[int] = []
    left: list[asyncio.Future[None]] = []

    def slow() -> None:
        seen.append(threading.get_ident())
        threading.Event().wait(0.5)

    def quick() -> None:
        seen.append(threading.get_ident())

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] == "/leave-busy/":
            left.append(asyncio.ensure_future(sync_to_async(slow)()))
            await wait_until_async(lambda: seen, what="the slow call to be running")
        else:
            await sync_to_async(quick)()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    kept = KeptRequestThreads(app)

    async def go() -> float:
        transport = httpx.ASGITransport(app=kept)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            await http.get("/leave-busy/")
            started = asyncio.get_running_loop().time()
            await http.get("/next/")
            return asyncio.get_running_loop().time() - started

    took = asyncio.run(go())
    assert len(seen) == 2
    assert seen[0] != seen[1]
    assert took < 0.3  # it did not wait behind the busy thread's call
