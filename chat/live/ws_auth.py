"""Who is on the other end of a WebSocket, and may they be there.

Two ways in:

- a browser, with the session cookie: the Origin header must name one of
  ALLOWED_HOSTS (channels' AllowedHostsOriginValidator), which stops another
  site's page from opening a socket with the user's cookie;
- any other client, with an `Authorization: Token <key>` header (DRF's
  tokens): no cookie is involved, so a missing Origin is fine, but one that is
  sent must still be allowed.

Sockets that fail the origin check are refused at the handshake (HTTP 403);
unauthenticated ones (a wrong token, an expired session, or no credentials at
all, with or without an Origin) reach the consumer with an anonymous user,
which closes them with code 4401.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import ParseResult

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from channels.security.websocket import AllowedHostsOriginValidator, OriginValidator
from django.conf import settings
from django.contrib.auth.models import AnonymousUser

Scope = dict[str, Any]
ASGIApp = Any


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


class OptionalOriginValidator(OriginValidator):
    """Like AllowedHostsOriginValidator, but a client that sends no Origin may pass."""

    def valid_origin(self, parsed_origin: ParseResult | None) -> bool:
        if parsed_origin is None:
            return True
        return bool(super().valid_origin(parsed_origin))


def _allowed_hosts() -> list[str]:
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:
        hosts = ["localhost", "127.0.0.1", "[::1]"]
    return hosts


def websocket_application(inner: ASGIApp) -> ASGIApp:
    """The WebSocket stack: token clients one way, browser (cookie) clients the other."""
    with_session = AllowedHostsOriginValidator(AuthMiddlewareStack(inner))
    with_token = OptionalOriginValidator(TokenAuthMiddleware(inner), _allowed_hosts())

    async def application(scope: Scope, receive: Any, send: Any) -> Any:
        if _header(scope, b"authorization"):
            return await with_token(scope, receive, send)
        if _header(scope, b"cookie"):
            return await with_session(scope, receive, send)
        # No credentials at all: nothing a foreign page could borrow, so no origin
        # check to fail; the consumer closes the anonymous socket with 4401.
        return await with_token(scope, receive, send)

    return application
