"""The one place where errors become HTTP answers (STYLE.md rule 4).

Every error the API returns has one JSON shape, whatever raised it (a domain
error from chat/exceptions.py, a serializer, DRF's parsing, authentication or
throttling, a missing URL):

    {"code": "invalid", "message": "max_steps: Ensure this value is less than or equal to 50.",
     "field": "max_steps", "details": {"errors": {"max_steps": ["Ensure this value ..."]}}}

`code` is stable and machine-readable, `message` is for people, `field` names
the input at fault (a body field, a query parameter, or a dotted path into a
nested body) whenever there is one, and `details` carries what else is known:
every field error of a validation failure, the active run of a 409, the
seconds to wait of a 429 or of a 503 (the database cannot be reached: not a
bug, so not a 500).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import set_rollback

from chat.database import UNAVAILABLE_RETRY_S, database_unreachable, unavailable_body
from chat.exceptions import Conflict, InvalidInput, NotFound, RateLimited, ToolchatError
from chat.inputs import flatten_errors, validation_error_body

logger = logging.getLogger(__name__)

DOMAIN_STATUS: list[tuple[type[ToolchatError], int]] = [
    (InvalidInput, status.HTTP_400_BAD_REQUEST),
    (NotFound, status.HTTP_404_NOT_FOUND),
    (Conflict, status.HTTP_409_CONFLICT),
    (RateLimited, status.HTTP_429_TOO_MANY_REQUESTS),
]


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's EXCEPTION_HANDLER: domain and DRF errors as {"code", "message", "field"?, "details"?}."""
    if isinstance(exc, ToolchatError):
        set_rollback()
        code = next((c for kind, c in DOMAIN_STATUS if isinstance(exc, kind)), 400)
        wait = exc.details.get("retry_after")
        retry = {"Retry-After": str(int(wait))} if isinstance(wait, int) else None
        return Response(exc.as_dict(), status=code, headers=retry)
    if isinstance(exc, RequestDataTooBig):
        set_rollback()
        too_large: dict[str, Any] = {
            "code": "too_large",
            "message": f"The request body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes.",
        }
        return Response(too_large, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if database_unreachable(exc):
        # Not a bug, and not the request's fault: the database is down or restarting.
        logger.warning("API request refused, the database is unreachable: %s", exc)
        return Response(
            unavailable_body(),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(UNAVAILABLE_RETRY_S)},
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if not isinstance(exc, exceptions.APIException):
        return None  # a bug: let Django answer 500 and log it
    set_rollback()
    headers: dict[str, str] = {}
    auth_header = getattr(exc, "auth_header", None)
    if auth_header:
        headers["WWW-Authenticate"] = auth_header
    if isinstance(exc, exceptions.ValidationError):
        body = validation_error_body(exc.detail)
    else:
        body = {"code": _code(exc), "message": _text(exc.detail)}
        wait = getattr(exc, "wait", None)
        if wait is not None:
            headers["Retry-After"] = str(int(wait))
            body["details"] = {"retry_after": int(wait)}
    return Response(body, status=exc.status_code, headers=headers)


def _code(exc: exceptions.APIException) -> str:
    codes = exc.get_codes()
    return codes if isinstance(codes, str) else exc.default_code


def _text(detail: Any) -> str:
    if isinstance(detail, list | dict):
        return next((message for _, messages in flatten_errors(detail) for message in messages), "")
    return str(detail)


@csrf_exempt
def api_not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Any other path under /api/v1/ (a malformed id included): a JSON 404, not an HTML page."""
    return JsonResponse(
        {"code": "not_found", "message": "No such API endpoint or object."}, status=404
    )
