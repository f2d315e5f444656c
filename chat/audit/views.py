"""The staff audit pages: recent runs with their latency, and one run's timeline."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from chat.audit.formatting import pretty_json, shown_tool_calls
from chat.audit.queries import (
    audit_run_get,
    audit_run_page,
    latency_summary,
    run_failures,
    run_latency_breakdown,
    run_timeline,
)
from chat.exceptions import RunNotFound
from chat.models import RunStatus

View = Callable[..., HttpResponse]


def staff_required(view: View) -> View:
    """Anonymous users go to the login page; signed-in users who are not staff get 403."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not request.user.is_staff:
            raise PermissionDenied("The audit pages are for staff.")
        return view(request, *args, **kwargs)

    return wrapper


@require_GET
@staff_required
def audit_run_list(request: HttpRequest) -> HttpResponse:
    """Recent runs of every user, with latency percentiles over the page."""
    status = request.GET.get("status", "")
    page = audit_run_page(page=request.GET.get("page"), status=status)
    runs = list(page.object_list)
    rows = [{"run": run, "failures": run_failures(run)} for run in runs]
    return render(
        request,
        "audit/run_list.html",
        {
            "page": page,
            "rows": rows,
            "summary": latency_summary(runs),
            "status": status if status in RunStatus.values else "",
            "statuses": RunStatus.choices,
        },
    )


@require_GET
@staff_required
def audit_run_detail(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """One run as an auditor reads it: the messages in order, each tool call's audit row."""
    try:
        run = audit_run_get(run_id=run_id)
    except RunNotFound:
        raise Http404("Run not found.") from None
    timeline = run_timeline(run)
    breakdown = run_latency_breakdown(run)
    executions: list[dict[str, Any]] = [
        {
            "row": execution,
            "arguments": pretty_json(execution.arguments),
            "result": pretty_json(execution.result),
        }
        for execution in run.tool_executions.all()
    ]
    by_call_id = {item["row"].tool_call_id: item for item in executions}
    entries = [
        {
            "message": entry.message,
            "model_call": entry.model_call,
            "execution": by_call_id.get(entry.execution.tool_call_id) if entry.execution else None,
            "tool_calls": [
                {
                    "id": call.get("id", ""),
                    "name": (call.get("function") or {}).get("name", ""),
                    "arguments": (call.get("function") or {}).get("arguments", ""),
                }
                for call in shown_tool_calls(entry.message)
            ],
        }
        for entry in timeline.entries
    ]
    return render(
        request,
        "audit/run_detail.html",
        {
            "run": run,
            "conversation": run.conversation,
            "entries": entries,
            "breakdown": breakdown,
            "unreported": [by_call_id[e.tool_call_id] for e in timeline.unreported_executions],
            "unanswered": timeline.unanswered_model_calls,
            "tool_calls": len(executions),
            "failures": sum(1 for line in breakdown if line.failed),
        },
    )
