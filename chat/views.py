"""HTML pages: the chat UI and the health check."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET


@login_required
def index(request: HttpRequest) -> HttpResponse:
    """The chat page (the live UI arrives with the chat UI issue)."""
    return render(
        request,
        "chat/index.html",
        {"provider": settings.LLM_PROVIDER, "model": settings.LLM_MODEL},
    )


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness and database reachability, for load balancers and compose healthchecks."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})
