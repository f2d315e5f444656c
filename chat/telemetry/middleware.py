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

from chat.telemetry.propagation import caller_context

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
        with caller_context(request.headers):
            return self.get_response(request)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        with caller_context(request.headers):
            response: Awaitable[HttpResponseBase] = self.get_response(request)
            return await response
