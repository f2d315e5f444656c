"""Django's middleware whose hooks only set attributes and headers, run on the event loop.

Under ASGI, Django's `MiddlewareMixin` sends every `process_request` and
`process_response` of every middleware through `sync_to_async`: a hand-off
to the request's thread and back, about 0.13 ms of CPU each, and a wait for
the GIL each under load. The stack in MIDDLEWARE made thirteen of them a
request. The classes here run their hooks inline on the event loop, and
keep the hand-off where a hook may reach the database (messages added or
read are stored in the cookie or the session, which may load from the
database): five hand-offs fewer a request.

Django's security, session, CSRF and clickjacking middleware stay as they
are in settings.MIDDLEWARE: `manage.py check --deploy` looks for them under
their own dotted paths (and skips its HSTS, cookie and CSRF checks without
them), so naming a subclass there would silence the very checks that keep a
deployment safe. The `/v1/` API's chain (project/handler.py), built from
settings.MIDDLEWARE, runs the security and clickjacking middleware as the
inline subclasses below: their hooks only read settings and the request and
set headers (or answer the redirect to HTTPS).

Should an inline hook touch the database after all (a Django upgrade),
Django refuses it on the event loop (`SynchronousOnlyOperation`): a loud
error, never a silent block. Under WSGI and the test client the classes
behave exactly as Django's: `__acall__` is the async path only.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.http import HttpRequest, HttpResponseBase
from django.middleware import clickjacking, common, security
from django.utils.deprecation import MiddlewareMixin


class InlineHooks(MiddlewareMixin):
    """`process_request` and `process_response` run on the event loop (see `response_on_thread`)."""

    def response_on_thread(self, request: HttpRequest) -> bool:
        """Whether this request's `process_response` may reach the database."""
        return False

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        response = None
        process_request = getattr(self, "process_request", None)
        if process_request is not None:
            response = process_request(request)
        response = response or await self.get_response(request)  # type: ignore[misc]
        process_response = getattr(self, "process_response", None)
        if process_response is not None:
            if self.response_on_thread(request):
                response = await sync_to_async(process_response, thread_sensitive=True)(
                    request, response
                )
            else:
                response = process_response(request, response)
        answer: HttpResponseBase = response
        return answer


class CommonMiddleware(InlineHooks, common.CommonMiddleware):
    """Disallowed user agents, the trailing-slash redirect (the URL resolver: no I/O)."""


class AuthenticationMiddleware(InlineHooks, auth.AuthenticationMiddleware):
    """Sets `request.user` lazily: the user is read when first used, on the thread."""


class MessageMiddleware(InlineHooks, messages.MessageMiddleware):
    """The storage is made lazily; messages added or read are stored on the thread."""

    def response_on_thread(self, request: HttpRequest) -> bool:
        storage: Any = getattr(request, "_messages", None)
        return storage is not None and (storage.used or storage.added_new)


class SecurityMiddleware(InlineHooks, security.SecurityMiddleware):
    """The redirect to HTTPS, HSTS, nosniff, the referrer and opener policies (the `/v1/` chain)."""


class XFrameOptionsMiddleware(InlineHooks, clickjacking.XFrameOptionsMiddleware):
    """`X-Frame-Options` (the `/v1/` chain)."""
