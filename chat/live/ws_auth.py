"""Who is on the other end of a WebSocket, and may they be there.

Two ways in:

- a browser, with the session cookie: the Origin must be the site's own,
  scheme, host and port (the socket's scheme, with SECURE_PROXY_SSL_HEADER
  behind a TLS proxy, and its Host, which must be one of ALLOWED_HOSTS), or
  one of CSRF_TRUSTED_ORIGINS: the rule of Django's CSRF check for posts. It
  stops another site's page, or a page served over plain HTTP or from another
  port of the same host, from opening a socket with the user's cookie;
- any other client, with an `Authorization: Token <key>` header (DRF's
  tokens): no cookie is involved, so a missing Origin is fine, but one that is
  sent must pass the same rule (scheme, host and port, or a trusted origin).

Sockets that fail the origin check are refused at the handshake (HTTP 403);
unauthenticated ones (a wrong token, an expired session, or no credentials at
all, with or without an Origin) reach the consumer with an anonymous user,
which closes them with code 4401.

Both ways in read the database before the consumer runs (the token's user, the
session's), and the consumer reads the conversation before it accepts. While
the database cannot be reached, the handshake is refused as the API refuses a
request: HTTP 503 with Retry-After and the API's error body (`OutageRefusal`).
A socket already open that meets the outage, or a handshake on a server that
cannot answer it with a status (Daphne), is closed with 4503 (4000 and the
API's 503, as 4401 and 4404 follow 401 and 404), which clients, the chat
page's among them, take as a cue to reconnect.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import urlsplit

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.db import InterfaceError, OperationalError
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

from chat.database import UNAVAILABLE_RETRY_S, database_unreachable, unavailable_body

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
ASGIApp = Any
# "The server cannot serve you now; come back". Not RFC 6455's registered 1013 (try
# again later): Daphne's WebSocket library sends no code but 1000 and 3000-4999, and
# raised on it, so the socket ended with 1011 (internal error) and a traceback.
CLOSE_TRY_AGAIN_LATER = 4503


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin1")
    return None


@database_sync_to_async
def _token_user(key: str) -> Any:
    from rest_framework.authtoken.models import Token

    token = Token.objects.select_related("user").filter(key=key).first()
    if token is None or not token.user.is_active:
        return AnonymousUser()
    return token.user


class TokenAuthMiddleware(BaseMiddleware):
    """Sets scope['user'] from an `Authorization: Token <key>` header."""

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> Any:
        header = _header(scope, b"authorization") or ""
        scheme, _, key = header.partition(" ")
        user = (
            await _token_user(key.strip())
            if scheme.lower() == "token" and key.strip()
            else AnonymousUser()
        )
        return await super().__call__(dict(scope, user=user), receive, send)


class OptionalOriginValidator(BaseMiddleware):
    """A token client may send no Origin; one it sends must pass the cookie's rule."""

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> Any:
        origin = _header(scope, b"origin")
        if origin is not None and not origin_allowed(scope, origin):
            denier = WebsocketDenier()
            return await denier(scope, receive, send)
        return await super().__call__(scope, receive, send)


def _secure(scope: Scope) -> bool:
    """Whether the socket came over TLS, as Django's request.is_secure() decides it."""
    if scope.get("scheme") == "wss":
        return True
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        name, secure_value = proxy
        header = name.removeprefix("HTTP_").lower().replace("_", "-").encode()
        value = _header(scope, header)
        if value is not None:
            return bool(value.split(",", 1)[0].strip() == secure_value)
    return False


def origin_allowed(scope: Scope, origin: str) -> bool:
    """Whether a cookie-carrying socket from `origin` may open, by Django's CSRF rule."""
    trusted = settings.CSRF_TRUSTED_ORIGINS
    if origin in trusted:
        return True
    parsed = urlsplit(origin)
    if not parsed.scheme or not parsed.netloc:
        return False
    # "https://*.example.com" trusts its subdomains, as CsrfViewMiddleware reads it.
    if any(
        "*" in entry
        and urlsplit(entry).scheme == parsed.scheme
        and is_same_domain(parsed.netloc, urlsplit(entry).netloc.lstrip("*"))
        for entry in trusted
    ):
        return True
    host = _header(scope, b"host")
    if not host:
        return False
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, _allowed_hosts()):
        return False
    expected = f"{'https' if _secure(scope) else 'http'}://{host}"
    return origin.lower() == expected.lower()


class SameOriginValidator(BaseMiddleware):
    """Refuses (HTTP 403) a socket whose Origin is missing or not the site's own."""

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> Any:
        origin = _header(scope, b"origin")
        if origin is None or not origin_allowed(scope, origin):
            denier = WebsocketDenier()
            return await denier(scope, receive, send)
        return await super().__call__(scope, receive, send)


def _allowed_hosts() -> list[str]:
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:
        hosts = ["localhost", "127.0.0.1", "[::1]"]
    return hosts


class OutageRefusal(BaseMiddleware):
    """Refuses a socket that meets an unreachable database: 503 at the handshake, 4503 after it."""

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> Any:
        accepted = False

        async def watched(message: dict[str, Any]) -> None:
            nonlocal accepted
            accepted = accepted or message["type"] == "websocket.accept"
            await send(message)

        try:
            return await self.inner(scope, receive, watched)
        except (OperationalError, InterfaceError) as exc:
            if not database_unreachable(exc):
                raise
            logger.warning("socket refused, the database is unreachable: %s", exc)
            await _unavailable(scope, send, accepted=accepted)
        return None


async def _unavailable(scope: Scope, send: Any, *, accepted: bool) -> None:
    """Tell the client the database is unavailable, the way its socket's state allows."""
    if not accepted and "websocket.http.response" in scope.get("extensions", {}):
        body = json.dumps(unavailable_body()).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"retry-after", str(UNAVAILABLE_RETRY_S).encode()),
        ]
        await send({"type": "websocket.http.response.start", "status": 503, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
        return
    if not accepted:  # a server without the denial response: a close code still says why
        await send({"type": "websocket.accept"})
    await send({"type": "websocket.close", "code": CLOSE_TRY_AGAIN_LATER})


def websocket_application(inner: ASGIApp) -> ASGIApp:
    """The WebSocket stack: token clients one way, browser (cookie) clients the other."""
    with_session = SameOriginValidator(AuthMiddlewareStack(inner))
    token_auth = TokenAuthMiddleware(inner)
    with_token = OptionalOriginValidator(token_auth)

    async def application(scope: Scope, receive: Any, send: Any) -> Any:
        if _header(scope, b"authorization"):
            return await with_token(scope, receive, send)
        if _header(scope, b"cookie"):
            return await with_session(scope, receive, send)
        # No credentials at all: nothing a foreign page could borrow, so no origin
        # check to fail; the consumer closes the anonymous socket with 4401.
        return await token_auth(scope, receive, send)

    return OutageRefusal(application)
