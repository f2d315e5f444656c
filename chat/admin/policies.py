"""The tool policies and budget limits in the admin: staff add, change and remove them.

docs/governance.md says what they do.

The patterns are typed one per line; they pass the same checks as the REST
API's and the policies file's (`chat.inputs.ToolPolicyInput`).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from rest_framework import serializers

from chat.inputs import BudgetLimitInput, ToolPolicyInput
from chat.models import BudgetLimit, ToolPolicy
from chat.models.budgets import LIMIT_FIGURES


class ToolPolicyForm(forms.ModelForm):  # type: ignore[type-arg]
    """A rule, its patterns one per line."""

    tools = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="Tool name patterns, one per line: shell-style globs such as delete_*, "
        "tracker__* (an MCP server's tools) or calculator.",
    )

    class Meta:
        model = ToolPolicy
        fields = ("tools", "decision", "users", "groups", "note")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["tools"] = "\n".join(self.instance.tools or [])

    def clean_tools(self) -> list[str]:
        """The patterns, one per line (commas too), checked as the API checks them."""
        text = self.cleaned_data["tools"]
        patterns = [part.strip() for line in text.splitlines() for part in line.split(",")]
        field = ToolPolicyInput().fields["tools"]
        try:
            checked = field.run_validation([pattern for pattern in patterns if pattern])
            return list(ToolPolicyInput().validate_tools(checked))
        except serializers.ValidationError as exc:
            raise forms.ValidationError(_messages(exc.detail)) from None


def _messages(detail: Any) -> list[str]:
    if isinstance(detail, dict):
        return [message for value in detail.values() for message in _messages(value)]
    if isinstance(detail, list):
        return [message for value in detail for message in _messages(value)]
    return [str(detail)]


@admin.register(ToolPolicy)
class ToolPolicyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = ToolPolicyForm
    list_display = ("id", "decision", "patterns", "who", "note", "updated_at")
    list_filter = ("decision",)
    search_fields = ("note",)
    filter_horizontal = ("users", "groups")
    ordering = ("id",)

    def get_queryset(self, request: Any) -> Any:
        return super().get_queryset(request).prefetch_related("users", "groups")

    @admin.display(description="tools")
    def patterns(self, obj: ToolPolicy) -> str:
        return ", ".join(obj.tools or [])

    @admin.display(description="covers")
    def who(self, obj: ToolPolicy) -> str:
        return _covered(obj)


def _covered(obj: ToolPolicy | BudgetLimit) -> str:
    people = [user.get_username() for user in obj.users.all()]
    groups = [f"group {group.name}" for group in obj.groups.all()]
    return ", ".join(people + groups) or "everyone"


class BudgetLimitForm(forms.ModelForm):  # type: ignore[type-arg]
    """A limit, checked as the REST API and the policies file check it."""

    class Meta:
        model = BudgetLimit
        fields = (
            "period",
            "tokens",
            "cost_usd",
            "model_calls",
            "tool_calls",
            "seconds",
            "hard",
            "users",
            "groups",
            "note",
        )

    def clean(self) -> dict[str, Any]:
        """A limit caps something, and only a run's limit caps a run's own figures."""
        cleaned: dict[str, Any] = super().clean() or {}
        figures = {name: cleaned.get(name) for name in ("period", *LIMIT_FIGURES)}
        try:
            BudgetLimitInput(data={}, context={"stored": figures}).validate({})
        except serializers.ValidationError as exc:
            detail = exc.detail if isinstance(exc.detail, dict) else {}
            for name, messages in detail.items():
                self.add_error(name if name in self.fields else None, _messages(messages))
        return cleaned


@admin.register(BudgetLimit)
class BudgetLimitAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = BudgetLimitForm
    list_display = ("id", "period", "caps", "hard", "who", "note", "updated_at")
    list_filter = ("period", "hard")
    search_fields = ("note",)
    filter_horizontal = ("users", "groups")
    ordering = ("id",)

    def get_queryset(self, request: Any) -> Any:
        return super().get_queryset(request).prefetch_related("users", "groups")

    @admin.display(description="caps")
    def caps(self, obj: BudgetLimit) -> str:
        return ", ".join(
            f"{name.replace('_', ' ')} {getattr(obj, name):,}"
            for name in LIMIT_FIGURES
            if getattr(obj, name) is not None
        )

    @admin.display(description="covers")
    def who(self, obj: BudgetLimit) -> str:
        return _covered(obj)
