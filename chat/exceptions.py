"""Domain errors of toolchat.

Services and selectors raise these; the REST API, the WebSocket consumer and
the task layer each translate them in exactly one place (STYLE.md rule 4),
using `code` as the machine-readable reason and `message` as the text a person
reads. `field` names the input field at fault where there is one, so that a
400 answer can point at it.
"""

from __future__ import annotations

from typing import Any


class ToolchatError(Exception):
    """Base class of every domain error: a stable `code` and a readable message."""

    code = "error"

    def __init__(
        self, message: str, *, field: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.details: dict[str, Any] = dict(details or {})

    def as_dict(self) -> dict[str, Any]:
        """The error as a JSON-ready body: code, message, and field/details when known."""
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        if self.details:
            body["details"] = self.details
        return body


class InvalidInput(ToolchatError):
    """The caller sent something that cannot be accepted (an HTTP 400)."""

    code = "invalid"

    def as_dict(self) -> dict[str, Any]:
        """As a serializer's error reads: the field's message also in `details.errors`."""
        body = super().as_dict()
        if self.field is not None:
            details = dict(body.get("details") or {})
            details.setdefault("errors", {self.field: [self.message]})
            body["details"] = details
        return body


class ImagesRefused(InvalidInput):
    """A message with images for a model known to refuse them (an HTTP 400)."""

    code = "model_refuses_images"


class NotFound(ToolchatError):
    """No such object, or it belongs to someone else (both answer 404)."""

    code = "not_found"


class ConversationNotFound(NotFound):
    """No such conversation, or it belongs to someone else (both answer 404)."""


class RunNotFound(NotFound):
    """No such run, or it is in someone else's conversation (both answer 404)."""


class ToolExecutionNotFound(NotFound):
    """No such tool call, or it is in someone else's conversation (both answer 404)."""


class ResourceNotFound(NotFound):
    """No such resource, or it belongs to someone else (both answer 404)."""


class RateLimited(ToolchatError):
    """Too many requests of this kind; `details["retry_after"]` says when to try again."""

    code = "throttled"


class BudgetExceeded(RateLimited):
    """A hard budget limit is reached (chat/budgets.py): `details` has the limit and the wait."""

    code = "budget_exceeded"


class Conflict(ToolchatError):
    """The request clashes with the current state, e.g. a run is still active (an HTTP 409)."""

    code = "conflict"
