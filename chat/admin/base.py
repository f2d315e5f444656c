"""Shared pieces of the admin: the read-only mixins and the escaped display helpers.

Messages, runs, model calls, tool executions and events are what happened; the
admin shows them and refuses to add, change or delete them (a conversation's
settings stay editable). Every value from a user, a model or a tool is escaped:
HTML is built with format_html / format_html_join only.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from chat.audit.formatting import pretty_json
from chat.models import ModelCall, Run, RunEvent, ToolExecution


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

    @admin.display(description="error")
    def error_text(self, obj: Run | ModelCall | ToolExecution) -> SafeString:
        return pre(obj.error)
