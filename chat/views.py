"""HTML pages: the chat UI and the health check."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from chat.models import Mode

# Short labels for the mode selector of the chat page (the model's are long).
MODE_LABELS = {
    Mode.TWO_PASS: "Two-pass",
    Mode.LOOP: "Agent loop",
    Mode.DIRECT: "Direct",
    Mode.LLM: "LLM decider",
}


@login_required
def index(request: HttpRequest) -> HttpResponse:
    """The chat page: static/js/chat.js drives it over the REST API and the WebSocket."""
    return render(
        request,
        "chat/index.html",
        {
            "provider": settings.LLM_PROVIDER,
            "model": settings.LLM_MODEL,
            "modes": [(mode.value, MODE_LABELS.get(mode, mode.label)) for mode in Mode],
            "max_message_chars": settings.MAX_MESSAGE_CHARS,
        },
    )


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness and database reachability, for load balancers and compose healthchecks."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})
