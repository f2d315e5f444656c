"""Views for tests/project/test_request_threads.py: sync code that reports its thread."""

from __future__ import annotations

import threading
import time

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.urls import path

from chat.models import Conversation


def where(request: HttpRequest) -> JsonResponse:
    """The thread this request's sync code runs on, after a query and an optional wait."""
    connection.ensure_connection()
    raw = connection.connection
    if connection.vendor == "sqlite":
        in_transaction = raw.in_transaction
    else:
        in_transaction = raw.info.transaction_status != raw.info.transaction_status.IDLE
    Conversation.objects.exists()
    started = time.monotonic()
    time.sleep(float(request.GET.get("sleep", "0")))
    return JsonResponse(
        {
            "thread": threading.get_ident(),
            "in_transaction": in_transaction,
            "name": threading.current_thread().name,
            "started": started,
            "ended": time.monotonic(),
        }
    )


def begin(request: HttpRequest) -> JsonResponse:
    """Leaves the connection inside a raw transaction, as a careless view could."""
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
    return JsonResponse({"thread": threading.get_ident()})


urlpatterns = [path("where/", where), path("begin/", begin)]
