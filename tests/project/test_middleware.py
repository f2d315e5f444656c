"""project/middleware.py: Django's middleware whose header-only hooks run on the event loop.

Driven through the real ASGI application (Django's handler, the kept request
threads), as uvicorn serves it: the session, the CSRF cookie, the user and
the messages still work, and an API request hands off to its thread less.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from django.contrib.sessions.models import Session
from rest_framework.authtoken.models import Token

from project.handler import get_asgi_application
from project.request_threads import KeptRequestThreads
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "a-long-test-password-1"


def browse(steps: Callable[[httpx.AsyncClient], Awaitable[Any]]) -> Any:
    """Run `steps` with one client (its cookies kept) on the ASGI application."""

    async def go() -> Any:
        transport = httpx.ASGITransport(app=KeptRequestThreads(get_asgi_application()))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            return await steps(http)

    return asyncio.run(go())


def form_token(page: httpx.Response) -> str:
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert match, page.text[:500]
    return match[1]


def test_a_login_keeps_its_session_and_the_next_page_knows_the_user():
    user = UserFactory(username="ada")
    user.set_password(PASSWORD)
    user.save()

    async def steps(http: httpx.AsyncClient) -> tuple[httpx.Response, httpx.Response]:
        form = await http.get("/login/")
        assert "csrftoken" in http.cookies  # set by process_response, inline
        login = await http.post(
            "/login/",
            data={"username": "ada", "password": PASSWORD, "csrfmiddlewaretoken": form_token(form)},
        )
        return login, await http.get("/")

    login, page = browse(steps)
    assert login.status_code == 302, login.text[:500]
    assert Session.objects.count() == 1  # saved, on the thread (it was modified)
    assert page.status_code == 200
    assert "ada" in page.text


def test_a_form_without_its_csrf_token_is_refused():
    async def steps(http: httpx.AsyncClient) -> httpx.Response:
        await http.get("/login/")
        return await http.post("/login/", data={"username": "x", "password": "y"})

    assert browse(steps).status_code == 403


def test_a_message_added_by_one_page_is_shown_on_the_next():
    admin = UserFactory(username="root", is_staff=True, is_superuser=True)
    admin.set_password(PASSWORD)
    admin.save()

    async def steps(http: httpx.AsyncClient) -> httpx.Response:
        form = await http.get("/admin/login/")
        await http.post(
            "/admin/login/",
            data={
                "username": "root",
                "password": PASSWORD,
                "csrfmiddlewaretoken": form_token(form),
                "next": "/admin/",
            },
        )
        form = await http.get("/admin/auth/user/add/")
        added = await http.post(
            "/admin/auth/user/add/",
            data={
                "username": "grace",
                "usable_password": "true",
                "password1": PASSWORD,
                "password2": PASSWORD,
                "csrfmiddlewaretoken": form_token(form),
            },
        )
        assert added.status_code == 302, added.text[:2000]
        shown = await http.get(added.headers["location"])
        again = await http.get(added.headers["location"])
        assert "was added successfully" not in again.text  # shown once, then gone
        return shown

    shown = browse(steps)
    assert "was added successfully" in shown.text


def test_an_api_request_hands_off_to_its_thread_only_where_it_must(handoffs):
    token = Token.objects.create(user=UserFactory()).key

    async def steps(http: httpx.AsyncClient) -> httpx.Response:
        return await http.get("/api/v1/conversations/", headers={"Authorization": f"Token {token}"})

    answer = browse(steps)
    assert answer.status_code == 200
    hooks = [c for c in handoffs if ".process_" in c]
    # Django's own middleware made thirteen hand-offs a request; the three made
    # inline here make none.
    assert not [
        c
        for c in hooks
        if c.split(".")[0] in ("CommonMiddleware", "AuthenticationMiddleware", "MessageMiddleware")
    ], hooks
    # Left: security (2), session (2), CSRF (3, with its check), clickjacking (1).
    assert len(hooks) == 8, hooks
