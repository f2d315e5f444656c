"""What every API view shares: async views, one URL for several operations, paging, SSE.

- `AsyncApiView`: a DRF APIView whose handlers may await. Under ASGI, Django
  runs a request's sync code in a thread (the request's own while it lasts,
  in asgiref's thread-sensitive mode; project/request_threads.py keeps these
  threads between requests), so a sync view that waits for a run to end would
  hold a thread for minutes. This view authenticates, checks permissions and
  throttles exactly as DRF does (in that thread, briefly), then awaits its
  handler on the event loop.
- `route`: the public paths of DESIGN.md section 7 put several operations on
  one URL (`GET, POST /conversations/`), while each operation is its own
  APIView with its own serializers (STYLE.md). `route` dispatches by method;
  chat/api/schema.py shows drf-spectacular each operation's own view.
- `CursorPage`: cursor pagination whose bad cursor is a 400 naming `cursor`.
- `EventStreamNegotiation`: lets `Accept: text/event-stream` through to the
  views that stream, while their error answers stay JSON.
"""

from __future__ import annotations

import inspect
from base64 import b64decode
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any
from urllib import parse

from asgiref.sync import sync_to_async
from django.core.exceptions import FieldDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, serializers
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.api.negotiation import AuthFirstNegotiation
from chat.api.renderers import JSONRenderer

EVENT_STREAM = "text/event-stream"


class AsyncApiView(APIView):
    """An APIView with `async def` handlers (the sync parts of DRF run in a thread).

    Every hand-off to the request's thread and back costs a wake of that thread
    and of the event loop (and, under load, a wait for the GIL each), so the
    view makes as few as it can:

    - An async handler's first sync part (the reads and writes that start its
      work) may be a method of its own, `<handler>_first(request, *args,
      **kwargs)`: it runs on the request's thread right after authentication,
      permissions and throttles, in the same hand-off, and what it returns is
      the handler's `first` argument (HEAD, which Django routes to `get`,
      takes `get_first`). Its errors are answered as the handler's.
    - The answer is rendered on the event loop and handed to Django as a
      plain `HttpResponse` (with the DRF response's `data` and `exception`,
      for in-process callers): Django's async handler sends a response that
      still has a `render` method through the request's thread to render it.
      A waited answer is a few KB (the run, the answer and its HTML); JSON of
      100 KB renders in about 0.13 ms.
    """

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        """Django calls this; for an async view it must return an awaitable."""
        return self._dispatch(request, *args, **kwargs)

    async def _dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        self.args = args
        self.kwargs = kwargs
        drf_request = self.initialize_request(request, *args, **kwargs)
        self.request = drf_request
        self.headers = self.default_response_headers
        try:
            method = (drf_request.method or "").lower()
            handler = (
                getattr(self, method, self.http_method_not_allowed)
                if method in self.http_method_names
                else self.http_method_not_allowed
            )
            first = getattr(self, handler.__name__ + "_first", None)
            if not inspect.iscoroutinefunction(handler):
                # OPTIONS and 405 (Django makes a view's other handlers all async or all sync).
                response = await sync_to_async(self._initial_then)(
                    handler, drf_request, args, kwargs
                )
            elif first is None:
                # Authentication, permissions and throttles may query the database.
                await sync_to_async(self.initial)(drf_request, *args, **kwargs)
                response = await handler(drf_request, *args, **kwargs)
            else:
                began = await sync_to_async(self._initial_then)(first, drf_request, args, kwargs)
                response = await handler(drf_request, began, *args, **kwargs)
        except Exception as exc:
            response = self.handle_exception(exc)
        self.response = self.finalize_response(drf_request, response, *args, **kwargs)
        return rendered(self.response)

    def _initial_then(
        self,
        first: Callable[..., Any],
        request: Request,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Authentication, permissions and throttles, then a sync handler or a handler's first part."""
        self.initial(request, *args, **kwargs)
        return first(request, *args, **kwargs)


def rendered(response: HttpResponseBase) -> HttpResponseBase:
    """A DRF `Response` rendered here, as the plain `HttpResponse` it then is; others as they are."""
    if not isinstance(response, Response):
        return response
    response.render()
    plain = HttpResponse(
        response.content,
        status=response.status_code,
        reason=response.reason_phrase,
        headers=dict(response.items()),
    )
    if "Content-Type" not in response:
        del plain["Content-Type"]  # DRF leaves an empty body without one; so does the copy
    plain.cookies = response.cookies
    plain.data = response.data  # type: ignore[attr-defined]
    plain.exception = response.exception  # type: ignore[attr-defined]
    return plain


ViewFunction = Callable[..., Any]


def _placeholder(*args: Any, **kwargs: Any) -> None:
    """Stands for a routed view's handler in `route`'s schema-only class."""


def route(**views: ViewFunction) -> ViewFunction:
    """One URL served by one APIView per HTTP method: `route(get=ListApi.as_view(), ...)`."""
    by_method = {method.upper(): view for method, view in views.items()}
    if "GET" in by_method:
        by_method.setdefault("HEAD", by_method["GET"])
    fallback = next(iter(by_method.values()))
    allow = ", ".join([*by_method, "OPTIONS"])

    def pick(request: HttpRequest) -> ViewFunction:
        return by_method.get(request.method or "", fallback)

    def finish(response: HttpResponseBase) -> HttpResponseBase:
        if response.status_code == 405:
            # The view that answered knows only its own method.
            response["Allow"] = allow
        return response

    async def dispatch(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        view = pick(request)
        if inspect.iscoroutinefunction(view):
            return finish(await view(request, *args, **kwargs))
        return finish(await sync_to_async(view)(request, *args, **kwargs))

    def dispatch_sync(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        return finish(pick(request)(request, *args, **kwargs))

    # All-sync routes stay sync, so that Django calls them without a detour.
    any_async = any(inspect.iscoroutinefunction(view) for view in by_method.values())
    routed: Any = csrf_exempt(dispatch if any_async else dispatch_sync)
    # DRF views are CSRF-exempt because SessionAuthentication checks CSRF itself.
    routed.views_by_method = by_method
    # For drf-spectacular's endpoint discovery (expand_routes swaps in the real views).
    # Only its allowed methods matter there: they are computed from the handlers it has.
    routed.cls = type(
        "RoutedOperations", (APIView,), {method.lower(): _placeholder for method in by_method}
    )
    routed.initkwargs = {}
    return routed  # type: ignore[no-any-return]


class CursorPage(CursorPagination):
    """Cursor pagination: stable pages while rows are added; `?page_size=` up to 200."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200
    ordering: Any = "-created_at"

    model: Any = None  # the model being paged, set by paginate_queryset

    def paginate_queryset(
        self, queryset: Any, request: Request, view: APIView | None = None
    ) -> list[Any] | None:
        """DRF's paging; the model is kept, so that a cursor's position can be checked."""
        self.model = queryset.model
        page: list[Any] | None = super().paginate_queryset(queryset, request, view)
        return page

    def decode_cursor(self, request: Request) -> Cursor | None:
        """The `?cursor=`, or None; anything but a cursor this class wrote is a 400 naming it.

        DRF answers a cursor it cannot decode with 404, and lets one that decodes
        to nonsense (a position that is no date, an out-of-range number, a NUL)
        through to the database query, where it is a 500. Every part is checked
        here: the base64, the query string's keys, the offset, the direction, and
        the position against the model field it is compared with.
        """
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        try:
            querystring = b64decode(encoded.encode("ascii"), validate=True).decode("ascii")
            tokens = parse.parse_qs(querystring, keep_blank_values=True, strict_parsing=True)
            if set(tokens) - {"o", "r", "p"} or any(len(v) != 1 for v in tokens.values()):
                raise ValueError("unknown or repeated cursor parts")
            offset = int(tokens.get("o", ["0"])[0])
            reverse = tokens.get("r", ["0"])[0]
            position: Any = tokens.get("p", [None])[0]  # a str (the stubs say int)
            if offset < 0 or reverse not in ("0", "1"):
                raise ValueError("offset or direction out of range")
            if position is not None:
                self._check_position(position)
        except (ValueError, TypeError, OverflowError, DjangoValidationError):
            raise exceptions.ValidationError(
                {self.cursor_query_param: ["Invalid cursor."]}
            ) from None
        if self.offset_cutoff:
            offset = min(offset, self.offset_cutoff)
        return Cursor(offset=offset, reverse=reverse == "1", position=position)

    def _check_position(self, position: str) -> None:
        """Raise unless `position` is a value of the ordering field the database can compare."""
        if "\x00" in position:
            raise ValueError("NUL in the position")
        try:
            field = self.model._meta.get_field(self.ordering[0].lstrip("-"))
        except (AttributeError, FieldDoesNotExist):
            return  # not a plain model field: nothing known to check against
        value = field.clean(position, None)  # parses, and checks the database's integer range
        if isinstance(value, datetime):
            if timezone.is_naive(value):
                raise ValueError("a position without a time zone")
            value.astimezone(UTC)  # OverflowError near year 1 or 9999


def paginate(
    paginator: CursorPage,
    queryset: Any,
    request: Request,
    view: APIView,
    serialize: Callable[[list[Any]], Any],
) -> Response:
    """One page of `queryset` in the {"next", "previous", "results"} envelope."""
    page = paginator.paginate_queryset(queryset, request, view=view) or []
    response: Response = paginator.get_paginated_response(serialize(page))
    return response


def page_serializer(name: str, item: type[serializers.BaseSerializer[Any]]) -> type[Any]:
    """The schema of one page of `item`s (what `paginate` answers)."""
    return type(
        name,
        (serializers.Serializer,),
        {
            "next": serializers.URLField(allow_null=True, help_text="The next page, or null."),
            "previous": serializers.URLField(
                allow_null=True, help_text="The previous page, or null."
            ),
            "results": item(many=True),
            "__doc__": f"One page of {item.__name__.removesuffix('Serializer')} items.",
        },
    )


def accepts_event_stream(request: Request | HttpRequest) -> bool:
    """Whether the client asked for Server-Sent Events (Accept: text/event-stream)."""
    accept = request.META.get("HTTP_ACCEPT", "")
    return any(part.split(";")[0].strip() == EVENT_STREAM for part in accept.split(","))


class EventStreamNegotiation(AuthFirstNegotiation):
    """Pick JSON for a client that accepts only text/event-stream: the view streams, errors are JSON."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        """JSON for an event-stream client (its errors), else DRF's usual choice."""
        if accepts_event_stream(request):
            renderer = JSONRenderer()
            return renderer, str(renderer.media_type)
        chosen: tuple[BaseRenderer, str] = super().select_renderer(
            request, list(renderers), format_suffix
        )
        return chosen
