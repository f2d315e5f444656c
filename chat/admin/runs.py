"""The admin for runs (with their latency by step) and their audit trail, read-only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.db.models import prefetch_related_objects
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from chat.admin.base import (
    ReadOnlyAdminMixin,
    RunRecordAdminMixin,
    admin_link,
    json_pre,
    listed_time,
    long_word,
    pre,
    short_id,
    tokens_shown,
)
from chat.audit.formatting import shown_arguments, shown_event_data
from chat.audit.queries import run_calls_prefetch, run_latency_breakdown
from chat.audit.waterfall import run_waterfall
from chat.models import ModelCall, Run, RunEvent, ToolExecution

if TYPE_CHECKING:
    # django-stubs makes these generic; at runtime Django's classes are not subscriptable.
    RunAdminBase = admin.ModelAdmin[Run]
    ModelCallAdminBase = admin.ModelAdmin[ModelCall]
    ToolExecutionAdminBase = admin.ModelAdmin[ToolExecution]
    RunEventAdminBase = admin.ModelAdmin[RunEvent]
    ModelCallInlineBase = admin.TabularInline[ModelCall, Run]
    ToolExecutionInlineBase = admin.TabularInline[ToolExecution, Run]
else:
    RunAdminBase = ModelCallAdminBase = ToolExecutionAdminBase = admin.ModelAdmin
    RunEventAdminBase = admin.ModelAdmin
    ModelCallInlineBase = ToolExecutionInlineBase = admin.TabularInline


class ModelCallInline(ReadOnlyAdminMixin, ModelCallInlineBase):
    model = ModelCall
    extra = 0
    can_delete = False
    show_change_link = True
    fields = (
        "step",
        "purpose",
        "model",
        "status",
        "first_token_ms",
        "latency_ms",
        "prompt_tokens",
        "completion_tokens",
        "attempts",
        "started_at",
    )
    readonly_fields = fields
    ordering = ("step", "started_at")


def truncated_flag(execution: ToolExecution) -> str:
    """The word where a result was cut for the model, nothing where it was not.

    Django's boolean icons would put a red "no" on nearly every row, which reads as an
    error.
    """
    return "truncated" if execution.truncated else ""


class ToolExecutionInline(ReadOnlyAdminMixin, ToolExecutionInlineBase):
    model = ToolExecution
    extra = 0
    can_delete = False
    show_change_link = True
    fields = (
        "step",
        "name",
        "tool_call_id",
        "status",
        "duration_ms",
        "result_chars",
        "truncated_flag",
        "attempts",
        "created_at",
    )
    readonly_fields = fields
    ordering = ("step", "created_at")

    @admin.display(description="truncated")
    def truncated_flag(self, obj: ToolExecution) -> str:
        return truncated_flag(obj)


@admin.register(Run)
class RunAdmin(RunRecordAdminMixin, RunAdminBase):
    list_display = (
        "short_id",
        "conversation",
        "owner",
        "status",
        "mode",
        "tool_steps",
        "model_calls",
        "latency_ms",
        "started",
        "finished",
    )
    list_filter = ("status", "mode")
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
        "tool_steps",
        "model_calls",
        "latency_ms",
        "waterfall",
        "latency_breakdown",
        "created_at",
        "started_at",
        "finished_at",
        "heartbeat_at",
        "system_prompt_text",
        "error_text",
    )
    readonly_fields = (
        "tool_steps",
        "audit_link",
        "waterfall",
        "latency_breakdown",
        "system_prompt_text",
        "error_text",
    )
    inlines = (ModelCallInline, ToolExecutionInline)

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
                    "" if line.first_token_ms is None else f"{line.first_token_ms} ms",
                    "—" if line.duration_ms is None else f"{line.duration_ms} ms",
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


# --- The audit trail ------------------------------------------------------------------


@admin.register(ModelCall)
class ModelCallAdmin(RunRecordAdminMixin, ModelCallAdminBase):
    # Its name says the purpose, provider/model and step (and the filters pick them):
    # the figures have the room.
    list_display = (
        "__str__",
        "run_link",
        "status",
        "first_token_ms",
        "latency_ms",
        "tokens",
        "attempts",
        "started",
    )
    list_filter = ("status", "purpose", "provider", "model")
    search_fields = ("model", "request_hash", "error")
    raw_id_fields = ("run", "response_message")
    ordering = ("-started_at",)
    fields = (
        "id",
        "run",
        "step",
        "purpose",
        "model",
        "provider",
        "status",
        "message_count",
        "request_hash",
        "tools_offered_pretty",
        "response_message",
        "finish_reason",
        "started_at",
        "first_token_ms",
        "latency_ms",
        "prompt_tokens",
        "completion_tokens",
        "attempts",
        "note",
        "error_text",
    )
    readonly_fields = ("tools_offered_pretty", "error_text")

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: ModelCall) -> SafeString:
        return listed_time(obj.started_at)

    @admin.display(description="tokens (in / out)")
    def tokens(self, obj: ModelCall) -> str:
        return tokens_shown(obj.prompt_tokens, obj.completion_tokens)

    @admin.display(description="tools offered")
    def tools_offered_pretty(self, obj: ModelCall) -> SafeString:
        return json_pre(obj.tools_offered)


@admin.register(ToolExecution)
class ToolExecutionAdmin(RunRecordAdminMixin, ToolExecutionAdminBase):
    list_display = (
        "name",
        "status",
        "duration_ms",
        "result_chars",
        "truncated_flag",
        "attempts",
        "call_id",
        "run_link",
        "created",
    )
    list_filter = ("status", "name", "truncated")

    @admin.display(description="truncated", ordering="truncated")
    def truncated_flag(self, obj: ToolExecution) -> str:
        return truncated_flag(obj)

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: ToolExecution) -> SafeString:
        return listed_time(obj.created_at)

    @admin.display(description="tool call id", ordering="tool_call_id")
    def call_id(self, obj: ToolExecution) -> SafeString:
        return long_word(obj.tool_call_id)

    search_fields = ("tool_call_id", "name", "error")
    raw_id_fields = ("run", "message", "approved_by")
    ordering = ("-created_at",)
    date_hierarchy = "created_at"
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "run",
                    "message",
                    "step",
                    "tool_call_id",
                    "name",
                    "status",
                    "attempts",
                    "worker",
                )
            },
        ),
        ("Arguments", {"fields": ("arguments_pretty", "arguments_raw_text")}),
        (
            "Result",
            {
                "description": "The tool's raw result, and the exact text the model was sent.",
                "fields": ("result_pretty", "content_sent", "result_chars", "truncated"),
            },
        ),
        ("Error", {"fields": ("error_text",)}),
        (
            "Approval",
            {
                "fields": (
                    "decision",
                    "approved_by",
                    "decided_at",
                    "approval_wait",
                    "decision_reason",
                )
            },
        ),
        ("Timing", {"fields": ("created_at", "started_at", "finished_at", "duration_ms")}),
    )
    readonly_fields = (
        "decision",
        "approval_wait",
        "arguments_pretty",
        "arguments_raw_text",
        "result_pretty",
        "content_sent",
        "error_text",
    )

    @admin.display(description="arguments")
    def arguments_pretty(self, obj: ToolExecution) -> SafeString:
        # Masked like every other place that shows arguments: see tools/audit.py.
        return json_pre(shown_arguments(obj)[0])

    @admin.display(description="arguments as sent (when not valid JSON)")
    def arguments_raw_text(self, obj: ToolExecution) -> SafeString:
        return pre(shown_arguments(obj)[1])

    @admin.display(description="raw result")
    def result_pretty(self, obj: ToolExecution) -> SafeString:
        return json_pre(obj.result)

    @admin.display(description="content sent to the model")
    def content_sent(self, obj: ToolExecution) -> SafeString:
        return pre(obj.content)

    @admin.display(description="decision")
    def decision(self, obj: ToolExecution) -> str:
        return obj.decision or ("awaiting" if obj.status == "awaiting_approval" else "—")

    @admin.display(description="waited for the decision")
    def approval_wait(self, obj: ToolExecution) -> str:
        wait = obj.approval_wait_ms
        return "—" if wait is None else f"{wait:,} ms"


@admin.register(RunEvent)
class RunEventAdmin(RunRecordAdminMixin, RunEventAdminBase):
    list_display = ("seq", "type", "run_link", "conversation", "created")
    list_filter = ("type",)
    list_select_related = ("conversation",)
    search_fields = ("type",)
    raw_id_fields = ("conversation", "run")
    ordering = ("-id",)
    fields = ("id", "conversation", "run", "seq", "type", "data_pretty", "created_at")
    readonly_fields = ("data_pretty",)

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: RunEvent) -> SafeString:
        return listed_time(obj.created_at)

    @admin.display(description="data")
    def data_pretty(self, obj: RunEvent) -> SafeString:
        return json_pre(shown_event_data(obj.data))
