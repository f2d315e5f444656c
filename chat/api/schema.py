"""How drf-spectacular describes the API: component names, strict inputs, routed URLs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema

from chat.inputs import StrictInputSerializer, TextField

Direction = Literal["request", "response"]


class ApiSchema(AutoSchema):
    """AutoSchema that names nested serializers after their API and marks strict inputs."""

    def get_serializer_name(self, serializer: Any, direction: Direction) -> str:
        """`ConversationCreateApi.InputSerializer` is `ConversationCreateRequest`, and so on."""
        qualname: str = type(serializer).__qualname__
        if "." in qualname:
            outer, inner = qualname.split(".")[-2:]
            # drf-spectacular appends "Request" to request components itself.
            suffix = {"InputSerializer": "", "OutputSerializer": "Response"}.get(inner)
            return outer.removesuffix("Api") + (
                inner.removesuffix("Serializer") if suffix is None else suffix
            )
        return str(super().get_serializer_name(serializer, direction))

    def _map_basic_serializer(self, serializer: Any, direction: Direction) -> dict[str, Any]:
        schema: dict[str, Any] = super()._map_basic_serializer(serializer, direction)  # type: ignore[no-untyped-call]
        if direction == "request" and isinstance(serializer, StrictInputSerializer):
            # The API refuses unknown keys (a typo is a 400), and says so.
            schema["additionalProperties"] = False
        return schema


def expand_routes(endpoints: list[tuple[str, str, str, Any]]) -> list[tuple[str, str, str, Any]]:
    """Preprocessing hook: each method of a `route` URL described by its own operation's view."""
    expanded = []
    for path, path_regex, method, callback in endpoints:
        views: Mapping[str, Any] | None = getattr(callback, "views_by_method", None)
        view = views.get(method, callback) if views else callback
        expanded.append((path, path_regex, method, view))
    return expanded


class TextFieldSchema(OpenApiSerializerFieldExtension):
    """A TextField is a string without NUL characters (PostgreSQL cannot store them)."""

    target_class = TextField

    def map_serializer_field(self, auto_schema: AutoSchema, direction: Direction) -> Any:
        """The usual string schema, plus the pattern."""
        schema: dict[str, Any] = auto_schema._map_serializer_field(  # type: ignore[no-untyped-call]
            self.target, direction, bypass_extensions=True
        )
        schema["pattern"] = "^[^\\u0000]*$"
        return schema
