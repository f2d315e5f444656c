"""project/handler.py: a /v1/ request's shorter middleware chain, and the protections it keeps.

Driven through the real ASGI application (the handler, the kept request
threads), as uvicorn serves it. A bearer-token API request goes without the
session, CSRF, user and messages middleware and hands nothing to its thread
for the rest; its answers carry the same security headers as a page's, and
a browser's session does not sign it in (which is why it needs no CSRF
check). Every other path keeps Django's whole chain.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from asgiref.sync import markcoroutinefunction
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponseBase
from django.test import Client
from rest_framework.authtoken.models import Token

from project.handler import API_PREFIX, get_asgi_application
from project.request_threads import KeptRequestThreads
from tests.factories import ConversationFactory, UserFactory
from tests.project.test_settings import PRODUCTION_ENV, run

pytestmark = pytest.mark.django_db(transaction=True)

SECURITY_HEADERS = (
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "Referrer-Policy",
    "Cross-Origin-Opener-Policy",
    "X-Frame-Options",
)
HTTPS = {"X-Forwarded-Proto": "https"}


def serve(steps: Callable[[httpx.AsyncClient], Awaitable[Any]]) -> Any:
    """Run `steps` with one client on the application, made now (after the test's settings)."""

    async def go() -> Any:
        transport = httpx.ASGITransport(app=KeptRequestThreads(get_asgi_application()))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            return await steps(http)

    return asyncio.run(go())


@pytest.fixture
def deployed(settings):
    """What the production settings turn on (project/settings/base.py, DEBUG off)."""
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_HSTS_SECONDS = 3600
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.SESSION_COOKIE_SECURE = True
    settings.CSRF_COOKIE_SECURE = True
    return settings


def bearer(user: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {Token.objects.create(user=user).key}"}


def test_the_api_is_mounted_where_the_handler_looks_for_it():
    from django.urls import reverse

    assert reverse("openai:models").startswith(API_PREFIX)
    assert reverse("openai:chat-completions").startswith(API_PREFIX)


def test_a_v1_request_hands_none_of_its_middleware_to_its_thread(handoffs):
    headers = bearer(UserFactory())

    async def steps(http: httpx.AsyncClient) -> tuple[httpx.Response, list[str], httpx.Response]:
        listed = await http.get("/v1/models", headers=headers)
        on_v1 = [c for c in handoffs if ".process_" in c]
        handoffs.clear()
        return listed, on_v1, await http.get("/api/v1/models/", headers={"Authorization": "x"})

    listed, on_v1, other = serve(steps)
    assert listed.status_code == 200, listed.text
    assert listed.json()["object"] == "list"
    assert on_v1 == []
    # Any other path still goes through Django's chain: security (2), session (2),
    # CSRF (3, with its check), clickjacking (1).
    assert other.status_code == 401
    assert len([c for c in handoffs if ".process_" in c]) == 8, handoffs


def test_a_v1_answer_carries_the_security_headers_a_page_does(deployed):
    headers = {**bearer(UserFactory()), **HTTPS}

    async def steps(http: httpx.AsyncClient) -> list[httpx.Response]:
        return [
            await http.get("/login/", headers=HTTPS),
            await http.get("/v1/models", headers=headers),
            await http.post("/v1/chat/completions", headers=HTTPS, json={}),
            await http.get("/v1/no-such-thing", headers=headers),
        ]

    page, listed, refused, missing = serve(steps)
    assert page.status_code == 200
    assert page.headers["Strict-Transport-Security"] == "max-age=3600; includeSubDomains"
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    # The page still sets its CSRF cookie, secure, and asks for the token on its form.
    assert "csrftoken=" in page.headers["Set-Cookie"]
    assert "Secure" in page.headers["Set-Cookie"]
    assert 'name="csrfmiddlewaretoken"' in page.text
    assert (listed.status_code, refused.status_code, missing.status_code) == (200, 401, 404)
    for answer in (listed, refused, missing):
        for name in SECURITY_HEADERS:
            assert answer.headers.get(name) == page.headers[name], (answer.url, name)
        # No cookie, set or read: nothing varies with one.
        assert "Set-Cookie" not in answer.headers
        assert "Cookie" not in answer.headers.get("Vary", "")


def test_plain_http_is_sent_to_https_on_v1_as_on_a_page(deployed):
    async def steps(http: httpx.AsyncClient) -> list[httpx.Response]:
        return [await http.get("/v1/models?x=1"), await http.get("/login/")]

    on_v1, page = serve(steps)
    assert (on_v1.status_code, on_v1.headers["Location"]) == (
        301,
        "https://testserver/v1/models?x=1",
    )
    assert (page.status_code, page.headers["Location"]) == (301, "https://testserver/login/")


def test_a_browsers_session_does_not_sign_in_a_v1_request_but_still_does_the_api_with_csrf():
    user = UserFactory()
    browser = Client()
    browser.force_login(user)
    cookie = {"Cookie": f"sessionid={browser.cookies['sessionid'].value}"}
    conversation = ConversationFactory(owner=user)

    async def steps(http: httpx.AsyncClient) -> list[httpx.Response]:
        return [
            await http.post("/v1/chat/completions", headers=cookie, json={"messages": []}),
            await http.get("/v1/models", headers=cookie),
            await http.get(f"/api/v1/conversations/{conversation.pk}/", headers=cookie),
            await http.post(
                f"/api/v1/conversations/{conversation.pk}/messages/",
                headers=cookie,
                json={"content": "hi"},
            ),
        ]

    posted, listed, read, unchecked = serve(steps)
    # /v1 knows bearer tokens only: a cookie riding along from a browser is no key.
    assert posted.status_code == 401, posted.text
    assert posted.json()["error"]["code"] == "invalid_api_key"
    assert listed.status_code == 401
    # The browser's own API signs it in with the session, and a post without the
    # CSRF token is refused.
    assert read.status_code == 200, read.text
    assert unchecked.status_code == 403, unchecked.text
    assert "CSRF" in unchecked.text
    assert not conversation.messages.exists()


class Marked:
    """A middleware added to settings.MIDDLEWARE: it marks every answer."""

    sync_capable = False
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]]):
        self.get_response = get_response
        markcoroutinefunction(self)

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = await self.get_response(request)
        response["X-Marked"] = "yes"
        return response


class SyncOnly:
    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        return self.get_response(request)


def test_a_middleware_added_to_the_settings_runs_for_v1_too(settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, f"{__name__}.Marked"]
    headers = bearer(UserFactory())

    async def steps(http: httpx.AsyncClient) -> list[httpx.Response]:
        return [await http.get("/v1/models", headers=headers), await http.get("/login/")]

    for answer in serve(steps):
        assert answer.headers["X-Marked"] == "yes", answer.url


def test_a_middleware_that_cannot_run_async_stops_the_start_with_its_name(settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, f"{__name__}.SyncOnly"]
    with pytest.raises(ImproperlyConfigured, match=r"test_handler\.SyncOnly is not async-capable"):
        get_asgi_application()


# Serves two requests with the production settings (DEBUG off), no database needed.
DEPLOYED_REQUESTS = """
import asyncio, json
import httpx
from project.handler import get_asgi_application

async def go():
    transport = httpx.ASGITransport(app=get_asgi_application())
    async with httpx.AsyncClient(transport=transport, base_url="http://example.com") as http:
        plain = await http.get("/v1/models")
        secure = await http.get("/v1/models", headers={"X-Forwarded-Proto": "https"})
    print(json.dumps([[plain.status_code, dict(plain.headers)], [secure.status_code, dict(secure.headers)]]))

asyncio.run(go())
"""


def test_under_the_production_settings_v1_is_sent_to_https_and_told_to_stay():
    result = run(["-c", DEPLOYED_REQUESTS], **PRODUCTION_ENV)
    assert result.returncode == 0, result.stderr
    (plain, plain_headers), (secure, headers) = json.loads(result.stdout.strip().splitlines()[-1])
    assert (plain, plain_headers["location"]) == (301, "https://example.com/v1/models")
    assert secure == 401  # no key: refused, with the headers all the same
    assert headers["strict-transport-security"] == "max-age=2592000; includeSubDomains"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "same-origin"
