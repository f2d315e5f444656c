"""HTML pages: the chat UI, and the health (liveness) and readiness checks."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.views import defaults
from django.views.decorators.http import require_GET

from chat.database import UNAVAILABLE_RETRY_S, database_unreachable
from chat.llm.endpoints import endpoint, model_choices, model_resolve
from chat.models import Mode
from chat.prompts import default_system_prompt

logger = logging.getLogger(__name__)
# How long each readiness check may take: a load balancer polls it.
READY_TIMEOUT_S = 2

# Short labels for the mode selector of the chat page (the model's are long),
# and what each mode does, shown where it is chosen.
MODE_LABELS = {
    Mode.TWO_PASS: "Two-pass",
    Mode.LOOP: "Agent loop",
    Mode.DIRECT: "Direct",
    Mode.LLM: "LLM decider",
}
MODE_HELP = {
    Mode.TWO_PASS: "The model calls tools, then writes one answer from their results "
    "(two model calls at most).",
    Mode.LOOP: "The model may call tools again after each result, up to the step limit, "
    "then answers.",
    Mode.DIRECT: "The tools' own messages are the answer: one model call, no second pass.",
    Mode.LLM: "For models without native tool calling: the model picks each step as JSON.",
}


@login_required
def index(request: HttpRequest) -> HttpResponse:
    """The chat page: static/js/ (chat.js and its modules) drives it over the REST API and the WebSocket."""
    default = model_resolve("")
    return render(
        request,
        "chat/index.html",
        {
            "provider": default.provider,
            "model": default.model,
            # A provider's `label` in the providers file names it wherever it is named
            # (as the picker does: "qwen3 · My server", an offline one's label alone).
            "provider_label": default.label if endpoint(default.provider).label else "",
            "default_model": default.id,
            # Each with the prompt a conversation on it is told without its own.
            "models": [
                (choice, default_system_prompt(choice.id) or "None") for choice in model_choices()
            ],
            "modes": [
                (mode.value, MODE_LABELS.get(mode, mode.label), MODE_HELP.get(mode, ""))
                for mode in Mode
            ],
            "max_message_chars": settings.MAX_MESSAGE_CHARS,
            "max_image_bytes": settings.TOOLCHAT_IMAGE_MAX_BYTES,
            "max_images": settings.TOOLCHAT_IMAGE_MAX_COUNT,
            # What a conversation without its own prompt is told (its settings show it).
            "default_system_prompt": default_system_prompt(""),
            "max_system_prompt_chars": settings.MAX_SYSTEM_PROMPT_CHARS,
        },
    )


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: a page that says the database is unavailable (503) when that is why.

    Pages need the database before their view runs (the session, the user), so
    during an outage they fail where no view can catch it; the API says the same
    in its own shape (chat/api/errors.py). The page is drawn without the request:
    its context processors would ask the database again.
    """
    failure = sys.exc_info()[1]
    if failure is None or not database_unreachable(failure):
        return defaults.server_error(request)
    logger.warning("page refused, the database is unreachable: %s", failure)
    response = HttpResponse(render_to_string("503.html"), status=503)
    response["Retry-After"] = str(UNAVAILABLE_RETRY_S)
    return response


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness and database reachability, for load balancers and compose healthchecks.

    503 while the database cannot be reached (an outage is not a bug: no 500).
    """
    try:
        _database_ready()
    except Exception as exc:
        if not database_unreachable(exc):
            raise
        logger.warning("health: the database is unreachable: %s", exc)
        return JsonResponse({"status": "unavailable"}, status=503)
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: the database, the task broker and the live-events layer each answer.

    503 when one does not, naming which (the details go to the log, not to an
    anonymous caller). Without Redis, tasks run in this process and events go
    through its memory: nothing to reach.
    """
    checks: dict[str, Callable[[], str]] = {
        "database": _database_ready,
        "broker": _broker_ready,
        "events": _events_ready,
    }
    results: dict[str, dict[str, object]] = {}
    for name, check in checks.items():
        try:
            results[name] = {"ok": True, "detail": check()}
        except Exception as exc:
            logger.warning("readiness: %s is not ready: %s", name, exc)
            results[name] = {"ok": False, "detail": f"unreachable ({type(exc).__name__})"}
    ready = all(result["ok"] for result in results.values())
    return JsonResponse(
        {"status": "ready" if ready else "unavailable", "checks": results},
        status=200 if ready else 503,
    )


def _database_ready() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return connection.vendor


def _broker_ready() -> str:
    if settings.TOOLCHAT_TASKS_IN_PROCESS:
        return "in-process tasks"
    from celery import current_app

    with current_app.connection_for_write() as broker:
        broker.ensure_connection(max_retries=1, interval_start=0, timeout=READY_TIMEOUT_S)
    return "celery"


def _events_ready() -> str:
    layer: dict[str, Any] = settings.CHANNEL_LAYERS["default"]
    if "Redis" not in layer["BACKEND"]:
        return "in-process"
    import redis

    for host in layer["CONFIG"]["hosts"]:
        address = host["address"] if isinstance(host, dict) else host
        client = redis.Redis.from_url(
            address, socket_connect_timeout=READY_TIMEOUT_S, socket_timeout=READY_TIMEOUT_S
        )
        try:
            client.ping()
        finally:
            client.close()
    return "redis"
