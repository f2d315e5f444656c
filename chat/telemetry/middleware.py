"""A request's W3C `traceparent`, continued: a turn it starts is part of the caller's trace.

Every door that starts a run over HTTP (the REST API, its SSE stream, and any
later one) goes through here, so none of them reads the header itself. With
tracing off, or no `traceparent`, a request passes through untouched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from chat.telemetry.tracing import context_extract

Handler = Callable[[HttpRequest], Any]


class TraceContextMiddleware:
    """Make the caller's trace context current while the request is handled."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        token = _attach(request)
        try:
            return self.get_response(request)
        finally:
            _detach(token)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        token = _attach(request)
        try:
            response: Awaitable[HttpResponseBase] = self.get_response(request)
            return await response
        finally:
            _detach(token)


def _attach(request: HttpRequest) -> object | None:
    if "traceparent" not in request.headers:
        return None
    context = context_extract(request.headers)
    if context is None:
        return None
    from opentelemetry import context as otel_context

    return otel_context.attach(context)


def _detach(token: object | None) -> None:
    if token is not None:
        from opentelemetry import context as otel_context

        otel_context.detach(token)  # type: ignore[arg-type]
