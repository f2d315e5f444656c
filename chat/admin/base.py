"""Shared pieces of the admin: the read-only mixins and the escaped display helpers.

Messages, runs, model calls, tool executions and events are what happened; the
admin shows them and refuses to add, change or delete them (a conversation's
settings stay editable). Every value from a user, a model or a tool is escaped:
HTML is built with format_html / format_html_join only.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString

from chat.audit.formatting import figure_text, pretty_json
from chat.models import ModelCall, Run, RunEvent, ToolExecution, model_step_count


def pre(text: str | None) -> SafeString:
    """Text kept exactly as stored (whitespace too) in a <pre>, escaped."""
    if text is None or text == "":
        return format_html('<span class="quiet">{}</span>', "—")
    return format_html('<pre style="{}">{}</pre>', PRE_STYLE, text)


def json_pre(value: Any) -> SafeString:
    """A JSON value indented in a <pre>, escaped."""
    return pre(pretty_json(value))


# The admin's own CSS has no style for long preformatted values: wrap them and cap the height.
PRE_STYLE = (
    "white-space: pre-wrap; overflow-wrap: anywhere; max-height: 28rem; overflow: auto; margin: 0;"
)


def admin_link(route: str, pk: Any, label: Any) -> SafeString:
    """A link to an object's admin change page."""
    if pk is None:
        return format_html("{}", "—")
    return format_html('<a href="{}">{}</a>', reverse(f"admin:{route}", args=[pk]), label)


def listed_time(value: datetime | None) -> SafeString:
    """A time in a list: the admin's one format (project/formats/en/), free to wrap.

    Django keeps a date field's cell on one line; at 1280 px two such columns
    pushed the last one out of the window. The date, the time and the zone
    wrap onto lines of their own instead.
    """
    if value is None:
        return format_html("{}", "—")
    shown = date_format(timezone.localtime(value), "DATETIME_FORMAT")
    return format_html('<time datetime="{}">{}</time>', value.isoformat(), shown)


def long_word(text: str | None, *, quiet: bool = False) -> SafeString:
    """A value with no spaces (a call id: 29 characters from OpenAI) that may wrap anywhere.

    Unbroken, it widens its column until the list scrolls sideways at 1280 px.
    """
    return format_html(
        '<span class="{}" style="overflow-wrap: anywhere">{}</span>',
        "quiet" if quiet else "",
        "—" if text is None else text,
    )


def clipped(text: str) -> SafeString:
    """A long value on one line, cut with an ellipsis, the whole of it in the tooltip.

    A conversation's title, on one line, pushed the run list past 1280 px.
    """
    return format_html('<span class="clipped" title="{}">{}</span>', text, text)


def tokens_shown(prompt: int | None, completion: int | None) -> str:
    """Tokens in and out, as a model call reported them ("not reported" where it did not)."""
    return " / ".join("not reported" if n is None else figure_text(n) for n in (prompt, completion))


def truncated_flag(execution: ToolExecution) -> str:
    """The word where a result was cut for the model, nothing where it was not.

    Django's boolean icons would put a red "no" on nearly every row, which reads as an
    error.
    """
    return "truncated" if execution.truncated else ""


def runs_with_steps(runs: QuerySet[Run]) -> QuerySet[Run]:
    """The runs, each annotated with its `model_steps`."""
    return runs.annotate(model_steps=model_step_count())


def milliseconds(value: int | None) -> str:
    """A duration as every staff page writes it: "1,234 ms" ("—" for none)."""
    return "—" if value is None else f"{figure_text(value)} ms"


def figure_field(field: str, description: str, unit: str = "") -> Callable[[Any, Any], str]:
    """A display of a stored figure as every staff page writes it ("13,672", "1,234 ms").

    Django writes a read-only integer field bare ("13672"); a list's column, an
    inline's cell or a change page's row named by this method writes it as the audit does.
    """

    @admin.display(description=description, ordering=field)
    def shown(self: Any, obj: Any) -> str:
        value = getattr(obj, field)
        return "—" if value is None else f"{figure_text(value)}{unit}"

    return shown


class FiguresAdminMixin:
    """The figures a record's rows share, as the audit writes them, thousands separated."""

    latency = figure_field("latency_ms", "latency", " ms")
    first_token = figure_field("first_token_ms", "first token", " ms")
    duration = figure_field("duration_ms", "duration", " ms")
    prompt_tokens_shown = figure_field("prompt_tokens", "prompt tokens")
    completion_tokens_shown = figure_field("completion_tokens", "completion tokens")
    result_chars_shown = figure_field("result_chars", "result chars")


def short_id(pk: Any) -> str:
    return str(pk)[:8]


class ReadOnlyAdminMixin:
    """The rows are a record of what happened: viewable, never added, changed or deleted here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class RunRecordAdminMixin(ReadOnlyAdminMixin):
    """A run or a row of its audit trail: read-only, with the columns they share."""

    @admin.display(description="run", ordering="run_id")
    def run_link(self, obj: ModelCall | ToolExecution | RunEvent) -> SafeString:
        return admin_link("chat_run_change", obj.run_id, short_id(obj.run_id))

    @admin.display(description="steps", ordering="model_steps")
    def model_steps(self, obj: Run) -> int:
        # Model steps, the answer's included, as the audit counts them (docs/audit.md);
        # the queryset annotates them (runs_with_steps).
        return int(getattr(obj, "model_steps", 0))

    @admin.display(description="error")
    def error_text(self, obj: Run | ModelCall | ToolExecution) -> SafeString:
        return pre(obj.error)
