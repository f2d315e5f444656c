"""What a client sends, checked by the same rules whichever door it comes through.

The REST API (chat/api/) and the WebSocket (chat/live/consumers.py) both take
user messages; both validate them with `MessageInput` and report a failure
in the one shape `validation_error_body` gives (docs/api.md, "Errors"), so an
edit sent over the socket is an edit, and an unknown field an error, on both.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from decimal import Decimal
from typing import Any, ClassVar

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.settings import api_settings

from chat.exceptions import InvalidInput
from chat.images import ImageInput, image_read, images_checked
from chat.models.budgets import LIMIT_FIGURES, RUN_ONLY_FIGURES, BudgetPeriod
from chat.models.policies import MAX_PATTERN_CHARS, MAX_RULE_PATTERNS, PolicyDecision


class TextField(serializers.CharField):
    """A JSON string, nothing else (DRF would take 12 for "12"), that the database can store."""

    default_error_messages = {
        "not_a_string": "Must be a string.",
        "surrogates": "Must be valid Unicode text (it has a lone surrogate).",
    }

    def to_internal_value(self, data: Any) -> str:
        """The string, or a validation error naming what is wrong with it."""
        if not isinstance(data, str):
            self.fail("not_a_string")
        value = super().to_internal_value(data)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            self.fail("surrogates")
        return value


class StrictBooleanField(serializers.BooleanField):
    """A JSON true or false, nothing else (DRF would take "yes", "on" and 1)."""

    default_error_messages = {"not_a_boolean": "Must be true or false."}

    def to_internal_value(self, data: Any) -> bool:
        """The boolean, or a validation error."""
        if not isinstance(data, bool):
            self.fail("not_a_boolean")
        return data


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer, nothing else (DRF would take "5" and 5.0 for 5)."""

    default_error_messages = {"not_an_integer": "Must be an integer."}

    def to_internal_value(self, data: Any) -> int:
        """The integer, or a validation error."""
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("not_an_integer")
        value: int = super().to_internal_value(data)
        return value


class StrictInputSerializer(serializers.Serializer[Any]):
    """Input that refuses keys it does not know (a typo is an error, not a silent default)."""

    unknown_field_message: ClassVar[str] = "Unknown field."

    def validate(self, attrs: Any) -> Any:
        """Refuse unknown keys, naming the first."""
        initial = self.initial_data if isinstance(self.initial_data, Mapping) else {}
        unknown = _unknown_fields(initial, self.fields)
        if unknown:
            raise serializers.ValidationError(unknown)
        return attrs


def _unknown_fields(data: Mapping[str, Any], known: Collection[str]) -> dict[str, list[str]]:
    """Each key of `data` outside `known`, with its error."""
    # A key is echoed back: one that is not valid Unicode is shown escaped.
    message = StrictInputSerializer.unknown_field_message
    return {_printable(key): [message] for key in data if key not in known}


def unknown_fields_body(data: Mapping[str, Any], known: Collection[str]) -> dict[str, Any] | None:
    """The error body for the keys of `data` outside `known`, as a strict input gives it; or None."""
    unknown = _unknown_fields(data, known)
    return validation_error_body(unknown) if unknown else None


@extend_schema_field(
    {
        "type": "array",
        "items": {
            "oneOf": [
                {"type": "string", "description": "A data: or https: URL."},
                {
                    "type": "object",
                    "properties": {
                        "url": {"type": "string"},
                        "detail": {"type": "string", "enum": ["auto", "low", "high"]},
                    },
                    "required": ["url"],
                },
            ]
        },
    }
)
class ImagesField(serializers.Field):  # type: ignore[type-arg]
    """A user message's images: each a data: or https: URL, or `{"url", "detail"}` (chat/images.py)."""

    def to_internal_value(self, data: Any) -> list[ImageInput]:
        """The images, checked; a validation error names the one at fault."""
        if not isinstance(data, list):
            raise serializers.ValidationError("Must be an array of images.")
        images = []
        try:
            for index, item in enumerate(data):
                where = f"images[{index}]"
                if isinstance(item, dict):
                    images.append(image_read(item.get("url"), item.get("detail"), f"{where}.url"))
                else:
                    images.append(image_read(item, None, where))
            images_checked(images, "images")
        except InvalidInput as error:
            raise serializers.ValidationError(error.message) from None
        return images

    def to_representation(self, value: Any) -> Any:
        return value


class MessageInput(StrictInputSerializer):
    """A user message to post: its text, its images, and the question it edits, if any."""

    content = TextField(
        trim_whitespace=False,
        allow_blank=True,
        help_text="The user's message: not blank (unless it has images), at most "
        "MAX_MESSAGE_CHARS (default 32,000).",
    )
    images = ImagesField(
        required=False,
        help_text="Images the message carries, after its text: each a `data:image/...;base64,` "
        "URL (PNG, JPEG, GIF or WebP, at most TOOLCHAT_IMAGE_MAX_BYTES) or an https URL "
        "(never fetched by toolchat), or `{url, detail}`; at most TOOLCHAT_IMAGE_MAX_COUNT.",
    )

    def validate(self, attrs: Any) -> Any:
        """A message of no text carries images."""
        attrs = super().validate(attrs)
        if attrs.get("content") == "" and not attrs.get("images"):
            blank = self.fields["content"].error_messages["blank"]
            raise serializers.ValidationError({"content": [blank]})
        return attrs

    replaces = serializers.UUIDField(
        required=False,
        help_text="Edit and resend: the id of the conversation's last user message. It and "
        "its answer are superseded (kept in the record, left out of the history); 409 if it "
        "is not the last user message.",
    )


def validation_error_body(detail: Any) -> dict[str, Any]:
    """A serializer's errors in the common shape: the first one named, all of them in details."""
    errors = dict(flatten_errors(detail))
    body: dict[str, Any] = {"code": InvalidInput.code}
    first_field, first_messages = next(iter(errors.items()), ("", ["Invalid input."]))
    if first_field and first_field != api_settings.NON_FIELD_ERRORS_KEY:
        body["message"] = f"{first_field}: {first_messages[0]}"
        body["field"] = first_field
    else:
        body["message"] = first_messages[0]
    body["details"] = {"errors": errors}
    return body


def flatten_errors(detail: Any, prefix: str = "") -> Iterator[tuple[str, list[str]]]:
    """Nested DRF error details as (dotted field path, messages) pairs, in order."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            yield from flatten_errors(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(detail, list) and detail and not all(isinstance(d, str) for d in detail):
        for index, value in enumerate(detail):
            if value:
                yield from flatten_errors(value, f"{prefix}[{index}]" if prefix else f"[{index}]")
    elif isinstance(detail, list):
        yield prefix, [str(d) for d in detail]
    else:
        yield prefix, [str(detail)]


def _printable(key: str) -> str:
    """The key as sent, with what has no UTF-8 form (lone surrogates) escaped."""
    return key.encode("utf-8", "backslashreplace").decode("utf-8")


class _CoveringInput(StrictInputSerializer):
    """Whom a rule or a limit covers: `users` and `groups` that must exist; neither, everyone."""

    users = serializers.ListField(
        child=TextField(max_length=150), required=False, max_length=1000, default=list
    )
    groups = serializers.ListField(
        child=TextField(max_length=150), required=False, max_length=1000, default=list
    )

    def validate_users(self, value: list[str]) -> list[Any]:
        """The named people, who must exist."""
        return _named(get_user_model().objects.filter(username__in=value), "username", value)

    def validate_groups(self, value: list[str]) -> list[Any]:
        """The named groups, which must exist."""
        return _named(Group.objects.filter(name__in=value), "name", value)


class ToolPolicyInput(_CoveringInput):
    """One tool policy rule, as the REST API and the policies file both give it.

    `users` and `groups` name people and groups that must exist; a rule with
    neither covers everyone (docs/governance.md).
    """

    tools = serializers.ListField(
        child=TextField(max_length=MAX_PATTERN_CHARS, trim_whitespace=False),
        allow_empty=False,
        max_length=MAX_RULE_PATTERNS,
        help_text="Tool name patterns, shell-style globs over the registered names: "
        '"delete_*", "tracker__*" (an MCP server\'s tools), "calculator".',
    )
    decision = serializers.ChoiceField(
        choices=PolicyDecision.choices,
        help_text="allow (run without asking), ask (wait for the owner's approval) or deny "
        "(never offered; a call is refused). deny wins over ask, ask over allow.",
    )
    note = TextField(
        required=False,
        allow_blank=True,
        max_length=500,
        default="",
        help_text="Why the rule exists; the model reads it in a refusal.",
    )

    def validate_tools(self, value: list[str]) -> list[str]:
        """Patterns that can match a tool name: not blank, no whitespace, no NUL."""
        for pattern in value:
            if not pattern or any(ch.isspace() or ch == "\x00" for ch in pattern):
                raise serializers.ValidationError(
                    f"{pattern!r} is not a tool name pattern (no blanks, spaces or NUL)."
                )
        return list(dict.fromkeys(value))


# The largest count a limit may cap (a PostgreSQL integer).
_MAX_COUNT = 2**31 - 1


class BudgetLimitInput(_CoveringInput):
    """One budget limit, as the REST API and the policies file both give it (docs/governance.md).

    A limit caps at least one figure; `model_calls`, `tool_calls` and
    `seconds` are a run's own, so only a `run` limit caps them. A partial
    update is checked with the limit's stored figures (`context["stored"]`).
    """

    period = serializers.ChoiceField(
        choices=BudgetPeriod.choices,
        help_text="day or month (UTC calendar: what the person's model calls used in it), or run.",
    )
    tokens = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=2**62,
        default=None,
        help_text="Tokens in and out, summed over the model calls.",
    )
    cost_usd = serializers.DecimalField(
        max_digits=14,
        decimal_places=6,
        required=False,
        allow_null=True,
        default=None,
        min_value=Decimal("0.000001"),
        coerce_to_string=False,
        help_text="US dollars, from the providers' prices (a model with no price costs nothing).",
    )
    model_calls = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=_MAX_COUNT,
        default=None,
        help_text="A run's model calls (per run only).",
    )
    tool_calls = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=_MAX_COUNT,
        default=None,
        help_text="A run's tool calls (per run only).",
    )
    seconds = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=_MAX_COUNT,
        default=None,
        help_text="A run's wall-clock seconds, checked before each model call (per run only).",
    )
    hard = StrictBooleanField(
        required=False,
        default=True,
        help_text="true: refuse a post (or end a run) once reached; false: warn and go on.",
    )
    note = TextField(
        required=False,
        allow_blank=True,
        max_length=500,
        default="",
        help_text="Why the limit exists; a refusal names it.",
    )

    def validate(self, attrs: Any) -> Any:
        """A limit caps something, and only a run's limit caps a run's own figures."""
        attrs = super().validate(attrs)
        stored = dict(self.context.get("stored") or {})
        figures = {**stored, **attrs}
        if not any(figures.get(name) is not None for name in LIMIT_FIGURES):
            raise serializers.ValidationError(
                {"tokens": ["A limit caps one of: " + ", ".join(LIMIT_FIGURES) + "."]}
            )
        if figures.get("period") != BudgetPeriod.RUN:
            for name in RUN_ONLY_FIGURES:
                if figures.get(name) is not None:
                    raise serializers.ValidationError(
                        {
                            name: [
                                f"Only a run's limit caps {name.replace('_', ' ')}: use period run."
                            ]
                        }
                    )
        return attrs


def _named(rows: Any, key: str, names: list[str]) -> list[Any]:
    found = {getattr(row, key): row for row in rows}
    missing = [name for name in dict.fromkeys(names) if name not in found]
    if missing:
        raise serializers.ValidationError(
            f"No such {'user' if key == 'username' else 'group'}: {', '.join(map(repr, missing))}."
        )
    return [found[name] for name in dict.fromkeys(names)]
