"""The HTTP handler: Django's, with a shorter middleware chain for the OpenAI-compatible /v1/.

A `/v1/` request is a bearer-token API call (chat/openai_api/views.py
`OpenAIView`): it reads no session, sets no cookie and is exempt from CSRF,
so Django's session, CSRF, authentication and messages middleware do nothing
for it. Under ASGI the security, session, CSRF and clickjacking middleware
handed it to its thread eight times a request (`MiddlewareMixin.__acall__`,
and CSRF's `process_view`): about a tenth of the web process's samples under
load (docs/gateway.md, round sixteen).

`ToolchatHandler` keeps Django's chain, loaded from `settings.MIDDLEWARE` as
it is, for every other path (the pages, the admin, `/api/v1/`, which the
browser calls with its session), and sends a request whose path starts with
`/v1/` through a second chain built from the same list (`api_middleware`):
less the entries in `API_SKIPS`, and with the security and clickjacking
middleware as their inline subclasses (project/middleware.py: the same
headers and the same redirect to HTTPS, set on the event loop). An entry
added to `settings.MIDDLEWARE` later runs for `/v1/` too, as named.

`settings.MIDDLEWARE` itself is not changed: `manage.py check --deploy`
finds Django's middleware under their own dotted paths and keeps checking
the settings they read (HSTS, SSL redirect, secure cookies, CSRF).
"""

from __future__ import annotations

from typing import Any

import django
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, MiddlewareNotUsed
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.core.handlers.exception import convert_exception_to_response
from django.http import HttpRequest, HttpResponseBase
from django.utils.module_loading import import_string

# Where the OpenAI-compatible API is mounted (project/urls.py).
API_PREFIX = "/v1/"

# What a bearer-token request goes without: it has no session, no CSRF token
# to check (its views are exempt) and no cookie-borne user or messages (DRF
# authenticates the token and sets the request's user).
API_SKIPS = frozenset(
    {
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "project.middleware.AuthenticationMiddleware",
        "project.middleware.MessageMiddleware",
    }
)

# Header-only middleware, run with their hooks on the event loop.
API_INLINE = {
    "django.middleware.security.SecurityMiddleware": "project.middleware.SecurityMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware": (
        "project.middleware.XFrameOptionsMiddleware"
    ),
}


def api_middleware() -> list[str]:
    """The `/v1/` chain: settings.MIDDLEWARE in its order, less `API_SKIPS`, inline where it can."""
    return [API_INLINE.get(path, path) for path in settings.MIDDLEWARE if path not in API_SKIPS]


class ApiChain(BaseHandler):
    """Django's request handling over the `api_middleware()` chain, on the event loop only."""

    def __init__(self) -> None:
        self.chain_load()

    def chain_load(self) -> None:
        """`BaseHandler.load_middleware(is_async=True)` over `api_middleware()`.

        Each entry must be async-capable (all of settings.MIDDLEWARE is:
        settings/base.py), so that no hand-off is added between them.
        """
        # The lists and the innermost step Django's own request handling reads
        # (private to Django, not in its type stubs).
        self._view_middleware: list[Any] = []
        self._template_response_middleware: list[Any] = []
        self._exception_middleware: list[Any] = []
        handler = convert_exception_to_response(self._get_response_async)  # type: ignore[attr-defined]
        for path in reversed(api_middleware()):
            middleware = import_string(path)
            if not getattr(middleware, "async_capable", False):
                raise ImproperlyConfigured(
                    f"{path} is not async-capable: the {API_PREFIX} chain is"
                )
            try:
                instance = middleware(handler)
            except MiddlewareNotUsed:
                continue
            if hasattr(instance, "process_view"):
                self._view_middleware.insert(0, self.adapt_method_mode(True, instance.process_view))
            if hasattr(instance, "process_template_response"):
                self._template_response_middleware.append(
                    self.adapt_method_mode(True, instance.process_template_response)
                )
            if hasattr(instance, "process_exception"):
                # Django's exception hooks run sync, as in its own chain.
                self._exception_middleware.append(
                    self.adapt_method_mode(False, instance.process_exception)
                )
            handler = convert_exception_to_response(instance)
        self._middleware_chain = handler


class ToolchatHandler(ASGIHandler):
    """Django's ASGI handler; a `/v1/` request goes through `ApiChain`'s middleware instead."""

    def __init__(self) -> None:
        super().__init__()
        self.api = ApiChain()

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        """The response, from the chain for the request's path (`path_info`: after any prefix)."""
        if request.path_info.startswith(API_PREFIX):
            response: HttpResponseBase = await self.api.get_response_async(request)
        else:
            response = await super().get_response_async(request)
        return response


def get_asgi_application() -> ToolchatHandler:
    """Django's `get_asgi_application()`, with the `/v1/` chain: Django set up, then the handler."""
    django.setup(set_prefix=False)
    return ToolchatHandler()
