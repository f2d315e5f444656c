"""The staff audit pages: statistics for a period with its runs, a conversation's runs,
one run's waterfall and timeline, two runs compared, and the tool and model tables as CSV."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from chat.audit.formatting import pretty_json, shown_arguments, shown_tool_calls
from chat.audit.images import images_shown
from chat.audit.people import MAX_PEOPLE, person_stats
from chat.audit.period import PRESETS, Period, PeriodForm, period_errors, period_from_query
from chat.audit.plots import histogram_plot, timeseries_plot, width_text
from chat.audit.queries import (
    REPLAY_FILTERS,
    audit_conversation_get,
    audit_run_get,
    audit_run_page,
    run_failures,
    run_latency_breakdown,
    run_timeline,
)
from chat.audit.replays import ReplayStartForm, replay_rows, replays_running
from chat.audit.stats import audit_stats, model_stats, tool_stats
from chat.audit.tables import (
    decision_table,
    model_table,
    person_table,
    table_csv,
    tool_table,
)
from chat.audit.waterfall import run_waterfall
from chat.comparison import comparison
from chat.exceptions import Conflict, ConversationNotFound, InvalidInput, RunNotFound
from chat.llm.endpoints import prices_configured
from chat.models import RunStatus, model_steps
from chat.replay_report import report_csv, report_totals
from chat.selectors import runs_to_replay
from chat.services.replays import runs_replay

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


def _run_rows(runs: list[Any]) -> list[dict[str, Any]]:
    return [{"run": run, "failures": run_failures(run)} for run in runs]


# The query's choices that a change of period keeps (the period form, its presets).
_KEPT = ("include_replays", "status", "replays")


def _period_context(period: Period | None, form: PeriodForm) -> dict[str, Any]:
    """What a page of a period shows of it: the period, its form and presets, its errors."""
    return {"form": form, "presets": PRESETS, "period": period, "errors": period_errors(form)}


def _replays_counted(request: HttpRequest) -> bool:
    """Whether the statistics asked for count replays (`?include_replays=1`; docs/audit.md)."""
    return request.GET.get("include_replays") == "1"


@require_GET
@staff_required
def audit_overview(request: HttpRequest) -> HttpResponse:
    """Statistics for a period (tools, models, latency, volume, slowest runs), then its runs."""
    period, form = period_from_query(request.GET)
    context = _period_context(period, form)
    if period is None:
        return render(request, "audit/overview.html", context, status=400)
    status = request.GET.get("status", "")
    replays = request.GET.get("replays", "")
    counted = _replays_counted(request)
    stats = audit_stats(period, replays=counted)
    people = person_stats(period, limit=MAX_PEOPLE + 1, replays=counted)
    page = audit_run_page(
        page=request.GET.get("page"), status=status, period=period, replays=replays
    )
    stats_params = {**period.query(), **({"include_replays": "1"} if counted else {})}
    context.update(
        stats=stats,
        tools=tool_table(stats.tools),
        decisions=decision_table(stats.tools),
        models=model_table(stats.models),
        people=person_table(people[:MAX_PEOPLE]),
        people_cut=len(people) > MAX_PEOPLE,
        histogram=histogram_plot(stats.histogram),
        over_time=timeseries_plot(stats.over_time),
        over_time_width=width_text(stats.over_time.width_s),
        period_params=stats_params,
        period_query=urlencode(period.query()),
        stats_query=urlencode(stats_params),
        kept={name: request.GET[name] for name in _KEPT if request.GET.get(name)},
        page=page,
        rows=_run_rows(list(page.object_list)),
        status=status if status in RunStatus.values else "",
        statuses=RunStatus.choices,
        replays=replays if replays in REPLAY_FILTERS else "",
        replay_filters=REPLAY_FILTERS.items(),
    )
    return render(request, "audit/overview.html", context)


def _csv(request: HttpRequest, name: str, build: Callable[[Period, bool], str]) -> HttpResponse:
    """The CSV `build(period, replays counted)` writes for the query's period, as a download;
    400 for a bad period."""
    period, form = period_from_query(request.GET)
    if period is None:
        return HttpResponse(
            "\n".join(["Bad period.", *period_errors(form)]) + "\n",
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    content = build(period, _replays_counted(request))
    response = HttpResponse(content, content_type="text/csv; charset=utf-8")
    filename = f"toolchat-{name}-{period.start:%Y%m%dT%H%M}-{period.end:%Y%m%dT%H%M}.csv"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_GET
@staff_required
def audit_tools_csv(request: HttpRequest) -> HttpResponse:
    """The per-tool table of the overview, as CSV."""
    return _csv(
        request,
        "tools",
        lambda period, replays: table_csv(tool_table(tool_stats(period, replays=replays))),
    )


@require_GET
@staff_required
def audit_tool_decisions_csv(request: HttpRequest) -> HttpResponse:
    """The overview's table of what was decided of each tool's calls, as CSV."""
    return _csv(
        request,
        "tool-decisions",
        lambda period, replays: table_csv(decision_table(tool_stats(period, replays=replays))),
    )


@require_GET
@staff_required
def audit_models_csv(request: HttpRequest) -> HttpResponse:
    """The per-model table of the overview, as CSV."""
    return _csv(
        request,
        "models",
        lambda period, replays: table_csv(model_table(model_stats(period, replays=replays))),
    )


@require_GET
@staff_required
def audit_people_csv(request: HttpRequest) -> HttpResponse:
    """The overview's table of what each person used, as CSV."""
    return _csv(
        request,
        "people",
        lambda period, replays: table_csv(person_table(person_stats(period, replays=replays))),
    )


@require_GET
@staff_required
def audit_conversation(request: HttpRequest, conversation_id: uuid.UUID) -> HttpResponse:
    """A conversation's runs, oldest first, each with the message that began it."""
    try:
        conversation = audit_conversation_get(conversation_id=conversation_id)
    except ConversationNotFound:
        raise Http404("Conversation not found.") from None
    page = audit_run_page(
        page=request.GET.get("page"), conversation_id=conversation.pk, oldest_first=True
    )
    return render(
        request,
        "audit/conversation.html",
        {
            "conversation": conversation,
            "page": page,
            "rows": _run_rows(list(page.object_list)),
            "own": conversation.owner_id == request.user.pk,
        },
    )


@require_GET
@staff_required
def audit_run_detail(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """One run as an auditor reads it: its waterfall, its steps, its messages in order."""
    try:
        run = audit_run_get(run_id=run_id)
    except RunNotFound:
        raise Http404("Run not found.") from None
    timeline = run_timeline(run)
    breakdown = run_latency_breakdown(run)
    executions: list[dict[str, Any]] = []
    for execution in run.tool_executions.all():
        arguments, arguments_raw = shown_arguments(execution)
        executions.append(
            {
                "row": execution,
                "arguments": pretty_json(arguments),
                "arguments_raw": arguments_raw,
                "result": pretty_json(execution.result),
            }
        )
    by_call_id = {item["row"].tool_call_id: item for item in executions}
    images = images_shown(entry.message for entry in timeline.entries)
    entries = [
        {
            "message": entry.message,
            "images": images.get(entry.message.pk, []),
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
    trigger = next(
        (e.message for e in timeline.entries if e.message.pk == run.trigger_message_id), None
    )
    return render(
        request,
        "audit/run_detail.html",
        {
            "run": run,
            "conversation": run.conversation,
            "trigger": trigger,
            "entries": entries,
            "breakdown": breakdown,
            "waterfall": run_waterfall(run),
            "unreported": [by_call_id[e.tool_call_id] for e in timeline.unreported_executions],
            "unanswered": timeline.unanswered_model_calls,
            # The header counts what the step table lists, so the two agree.
            "steps": model_steps(run.model_call_rows.all()),
            "model_calls": sum(1 for line in breakdown if line.kind == "model"),
            "tool_calls": len(executions),
            "failures": sum(1 for line in breakdown if line.failed),
            "client_options_json": pretty_json(run.client_options),
            "replays": list(run.replays.select_related("conversation").order_by("created_at")),
            "prices_configured": prices_configured(),
        },
    )


@require_GET
@staff_required
def audit_run_compare(request: HttpRequest, run_id: uuid.UUID, other_id: uuid.UUID) -> HttpResponse:
    """Two runs side by side (a replay and its original): figures, answers, calls, waterfalls."""
    try:
        first, second = audit_run_get(run_id=run_id), audit_run_get(run_id=other_id)
    except RunNotFound:
        raise Http404("Run not found.") from None
    compared = comparison(first, second)
    for step in compared["steps"]:
        for call in (call for calls in step["calls"] for call in calls):
            call["arguments_json"] = json.dumps(call["arguments"], ensure_ascii=False)
    # One time axis for both, so that the longer run looks longer.
    axis = float(max(first.latency_ms or 0, second.latency_ms or 0))
    sides = [
        {
            "run": run,
            "side": side,
            "waterfall": run_waterfall(run, axis_ms=axis),
            "uid": run.pk.hex[:8],
        }
        for run, side in zip((first, second), compared["runs"], strict=True)
    ]
    return render(
        request,
        "audit/run_compare.html",
        {"sides": sides, "compared": compared, "first": first, "second": second},
    )


@require_GET
@staff_required
def audit_replays(request: HttpRequest) -> HttpResponse:
    """The replays of a period as `manage.py replay` reports them: per replay, then per model."""
    period, form = period_from_query(request.GET)
    context = _period_context(period, form)
    if period is None:
        return render(request, "audit/replays.html", context, status=400)
    rows, total = replay_rows(period)
    context.update(
        rows=rows,
        totals=report_totals(rows),
        total=total,
        shown=len(rows),
        period_query=urlencode(period.query()),
        running=replays_running(period),
        start_form=ReplayStartForm(),
        started=request.GET.get("started", ""),
        # Replays begun now are outside a period that ended before: say where they are.
        ended_before_now=period.end <= timezone.now(),
    )
    return render(request, "audit/replays.html", context)


@require_POST
@staff_required
def audit_replays_start(request: HttpRequest) -> HttpResponse:
    """Replay the period's newest completed runs on the models chosen; back to the report."""
    period, period_form = period_from_query(request.GET)
    form = ReplayStartForm(request.POST)
    if period is None or not form.is_valid():
        return _start_refused(request, period, period_form, form)
    runs = runs_to_replay(since=period.start, until=period.end, limit=form.cleaned_data["limit"])
    try:
        started = runs_replay(
            runs=runs,
            models=form.cleaned_data["models"],
            tools=form.cleaned_data["tools"],
            replay=form.cleaned_data["replay"],
        )
    except (InvalidInput, Conflict) as exc:
        form.add_error(None, exc.message)  # nothing was started
        return _start_refused(request, period, period_form, form)
    # Back to the period they were started from (a preset ends now, so it lists them).
    query = urlencode({**period.query(), "started": len(started)})
    return redirect(f"{reverse('chat:audit_replays')}?{query}")


def _start_refused(
    request: HttpRequest, period: Period | None, period_form: PeriodForm, form: ReplayStartForm
) -> HttpResponse:
    """The report page again, the start form saying why nothing was started (a 400)."""
    context = _period_context(period, period_form)
    context.update(start_form=form, period_query=urlencode(period.query()) if period else "")
    return render(request, "audit/replays.html", context, status=400)


@require_GET
@staff_required
def audit_replays_csv(request: HttpRequest) -> HttpResponse:
    """The replays of a period as CSV (as `manage.py replay` saves it)."""
    return _csv(request, "replays", lambda period, _: report_csv(replay_rows(period)[0]))
