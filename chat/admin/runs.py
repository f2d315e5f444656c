"""The admin for runs, read-only: each with its latency by step, waterfall and calls.

The rows of their audit trail (model calls, tool executions, events) have
theirs in chat/admin/trail.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet, prefetch_related_objects
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from chat.admin.base import (
    FiguresAdminMixin,
    ReadOnlyAdminMixin,
    RunRecordAdminMixin,
    admin_link,
    clipped,
    listed_time,
    milliseconds,
    pre,
    runs_with_steps,
    short_id,
    truncated_flag,
)
from chat.audit.queries import run_calls_prefetch, run_latency_breakdown
from chat.audit.waterfall import run_waterfall
from chat.models import ModelCall, ReplayMode, Run, ToolExecution

if TYPE_CHECKING:
    # django-stubs makes these generic; at runtime Django's classes are not subscriptable.
    RunAdminBase = admin.ModelAdmin[Run]
    ModelCallInlineBase = admin.TabularInline[ModelCall, Run]
    ToolExecutionInlineBase = admin.TabularInline[ToolExecution, Run]
else:
    RunAdminBase = admin.ModelAdmin
    ModelCallInlineBase = ToolExecutionInlineBase = admin.TabularInline


class ModelCallInline(FiguresAdminMixin, ReadOnlyAdminMixin, ModelCallInlineBase):
    model = ModelCall
    extra = 0
    can_delete = False
    show_change_link = True
    fields = (
        "step",
        "purpose",
        "model",
        "status",
        "first_token",
        "latency",
        "prompt_tokens_shown",
        "completion_tokens_shown",
        "attempts",
        "started_at",
    )
    readonly_fields = fields
    ordering = ("step", "started_at")


class ToolExecutionInline(FiguresAdminMixin, ReadOnlyAdminMixin, ToolExecutionInlineBase):
    model = ToolExecution
    extra = 0
    can_delete = False
    show_change_link = True
    fields = (
        "step",
        "name",
        "tool_call_id",
        "status",
        "duration",
        "result_chars_shown",
        "truncated_flag",
        "attempts",
        "created_at",
    )
    readonly_fields = fields
    ordering = ("step", "created_at")

    @admin.display(description="truncated")
    def truncated_flag(self, obj: ToolExecution) -> str:
        return truncated_flag(obj)


class ReplayFilter(admin.SimpleListFilter):
    """Replays (docs/replay.md) apart from the runs of real traffic."""

    title = "replay"
    parameter_name = "replay"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "Not a replay"), ("free", "Free replays"), ("forced", "Forced replays")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        value = self.value()
        if value == "no":
            return queryset.filter(replay_of__isnull=True)
        if value in ReplayMode.values:
            return queryset.filter(replay_mode=value)
        return queryset


@admin.register(Run)
class RunAdmin(FiguresAdminMixin, RunRecordAdminMixin, RunAdminBase):
    list_display = (
        "short_id",
        "conversation_title",
        "owner",
        "status",
        "mode",
        "model_steps",
        "model_calls",
        "latency",
        "started",
        "finished",
    )
    list_filter = ("status", "mode", ReplayFilter)
    list_select_related = ("conversation__owner",)
    search_fields = ("conversation__title", "conversation__owner__username", "error")
    date_hierarchy = "created_at"
    fields = (
        "id",
        "audit_link",
        "conversation",
        "trigger_message",
        "status",
        "mode",
        "model_steps",
        "model_calls",
        "latency",
        "waterfall",
        "latency_breakdown",
        "created_at",
        "started_at",
        "finished_at",
        "heartbeat_at",
        "replay_of",
        "replay_tools",
        "replay_mode",
        "system_prompt_text",
        "error_text",
    )
    readonly_fields = (
        "model_steps",
        "latency",
        "audit_link",
        "replay_of",
        "replay_tools",
        "replay_mode",
        "waterfall",
        "latency_breakdown",
        "system_prompt_text",
        "error_text",
    )
    inlines = (ModelCallInline, ToolExecutionInline)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        return runs_with_steps(super().get_queryset(request))

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Run | None:
        run = super().get_object(request, object_id, from_field)
        if run is not None:
            # The waterfall and the breakdown read the same rows: fetch them once.
            prefetch_related_objects([run], *run_calls_prefetch())
        return run

    @admin.display(description="run", ordering="created_at")
    def short_id(self, obj: Run) -> str:
        return short_id(obj.pk)

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: Run) -> SafeString:
        return listed_time(obj.started_at)

    @admin.display(description="finished", ordering="finished_at")
    def finished(self, obj: Run) -> SafeString:
        return listed_time(obj.finished_at)

    @admin.display(description="conversation", ordering="conversation__title")
    def conversation_title(self, obj: Run) -> SafeString:
        return clipped(str(obj.conversation))

    @admin.display(description="owner", ordering="conversation__owner__username")
    def owner(self, obj: Run) -> str:
        return obj.conversation.owner.get_username()

    @admin.display(description="system prompt")
    def system_prompt_text(self, obj: Run) -> SafeString:
        if obj.system_prompt is None:
            # A run made before runs kept their prompt.
            return format_html('<span class="quiet">{}</span>', "not recorded")
        return pre(obj.system_prompt) if obj.system_prompt else format_html("{}", "none")

    @admin.display(description="audit page")
    def audit_link(self, obj: Run) -> SafeString:
        return format_html(
            '<a href="{}">{}</a>', reverse("chat:audit_run", args=[obj.pk]), "Open the timeline"
        )

    @admin.display(description="waterfall")
    def waterfall(self, obj: Run) -> SafeString:
        # The audit page's own template: the same picture, escaped the same way.
        html = render_to_string(
            "audit/_waterfall.html", {"waterfall": run_waterfall(obj), "uid": obj.pk.hex[:8]}
        )
        return format_html("{}", html)  # a rendered template is safe already: kept as it is

    @admin.display(description="latency by step")
    def latency_breakdown(self, obj: Run) -> SafeString:
        lines = run_latency_breakdown(obj)
        if not lines:
            return format_html("{}", "No model call or tool execution recorded.")
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    line.step,
                    line.kind,
                    admin_link(
                        "chat_modelcall_change"
                        if line.kind == "model"
                        else "chat_toolexecution_change",
                        line.object_id,
                        line.label,
                    ),
                    line.status,
                    "" if line.first_token_ms is None else milliseconds(line.first_token_ms),
                    milliseconds(line.duration_ms),
                    line.detail,
                )
                for line in lines
            ),
        )
        return format_html(
            "<table><thead><tr><th>step</th><th>kind</th><th>what</th><th>status</th>"
            "<th>first token</th><th>duration</th><th>notes</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            rows,
        )
