"""ToolContext: what a running tool knows about its call, and how it talks back.

A tool gets the user, the ids of the conversation, run and call, a helper for
the user's own Resources, and `emit_progress` / `emit` for live events. Events
go to a sink the caller passes in. When the executor runs the tool in a
thread, events are queued and handed to the sink on the caller's thread, in
the order the tool emitted them, and none after the executor stopped waiting.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db.models import Q

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser

    from tools.models import Resource

logger = logging.getLogger(__name__)

EventSink = Callable[[str, dict[str, Any]], None]
"""Receives ("tool.progress" | "tool.event", data); called on the executor's caller thread."""

PROGRESS_EVENT = "tool.progress"
CUSTOM_EVENT = "tool.event"

__all__ = [
    "CUSTOM_EVENT",
    "PROGRESS_EVENT",
    "EventSink",
    "ResourceNotFound",
    "ResourceSearch",
    "Resources",
    "ToolCancelled",
    "ToolContext",
]


class ToolCancelled(Exception):
    """The executor stopped waiting for this call; the tool should stop too."""


class ResourceNotFound(LookupError):
    """No resource with that id belongs to the user (whether or not it exists)."""


class ResourceSearch(NamedTuple):
    """One page of a resource search and how many matched in all."""

    items: list[Resource]
    total: int


@dataclass(eq=False)
class ToolContext:
    """The call a tool is running for: who, where, and how to report progress."""

    # None only outside a conversation (tests, scripts); the resource helper refuses it.
    user: AbstractBaseUser | None
    conversation_id: uuid.UUID | str | None = None
    run_id: uuid.UUID | str | None = None
    tool_call_id: str = ""
    execution_id: uuid.UUID | str | None = None
    sink: EventSink | None = None
    tool_name: str = ""
    resource_ids: list[str] = field(default_factory=list)
    # The rows behind resource_ids, so that the tool message can link one without a query.
    touched: dict[str, Any] = field(default_factory=dict, repr=False)
    # The W3C trace context of the call's span (`traceparent`), when traces are on:
    # a tool that calls another service passes it on (MCP calls send it in `_meta`).
    trace_headers: dict[str, str] = field(default_factory=dict, repr=False)
    # Told, in the tool's own thread, the result of a call the executor gave up on when
    # it was cancelled, if the tool ends after all (tools/running.py): what it did then.
    ended_after_cancel: Callable[[Any], None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._relay: queue.SimpleQueue[tuple[str, dict[str, Any]] | None] | None = None

    # --- Events --------------------------------------------------------------------

    def emit_progress(self, percent: float, message: str = "") -> None:
        """Report how far the tool has got (0-100), with a short message for people.

        Raises ToolCancelled once the call is no longer wanted (its run was
        cancelled, or the executor gave up on it): a tool that reports progress
        stops there, with nothing more to do.
        """
        self.raise_if_cancelled()
        if isinstance(percent, bool) or not isinstance(percent, int | float):
            raise TypeError(f"percent must be a number, got {type(percent).__name__}")
        if not math.isfinite(percent):
            raise ValueError("percent must be a finite number")
        value: float = min(100.0, max(0.0, float(percent)))
        self._deliver(
            PROGRESS_EVENT,
            {
                "tool_call_id": self.tool_call_id,
                "name": self.tool_name,
                "percent": int(value) if value.is_integer() else round(value, 1),
                "message": str(message),
            },
        )

    def emit(self, event_type: str, data: dict[str, Any] | None = None) -> None:
        """Send a custom live event; `data` must be JSON-serializable."""
        payload = data if data is not None else {}
        try:
            json.dumps(payload, allow_nan=False)
        except (TypeError, ValueError) as exc:
            # Fail in the tool, where the mistake is, not later in the sink.
            raise TypeError(
                f"event data for {event_type!r} is not JSON-serializable: {exc}"
            ) from exc
        self._deliver(
            CUSTOM_EVENT,
            {
                "tool_call_id": self.tool_call_id,
                "name": self.tool_name,
                "type": str(event_type),
                "data": payload,
            },
        )

    def _deliver(self, event_type: str, data: dict[str, Any]) -> None:
        with self._lock:
            if self._cancelled.is_set():
                logger.debug("dropped %s from %s after the call ended", event_type, self.tool_name)
                return
            relay = self._relay
            if relay is not None:
                relay.put((event_type, data))
                return
        if self.sink is not None:
            call_sink(self.sink, event_type, data)

    def _open_relay(self) -> queue.SimpleQueue[tuple[str, dict[str, Any]] | None]:
        # Used by the executor: from now on events wait in this queue for the caller.
        with self._lock:
            self._relay = queue.SimpleQueue()
            return self._relay

    # --- Cancellation --------------------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        """True once the call is not wanted any more (its run was cancelled, or it timed
        out); long loops should stop."""
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Mark the call abandoned: later events are dropped and resource writes refused."""
        with self._lock:
            self._cancelled.set()

    def raise_if_cancelled(self) -> None:
        """Raise ToolCancelled if the executor gave up on this call."""
        if self._cancelled.is_set():
            raise ToolCancelled(f"the call {self.tool_call_id or self.tool_name} was abandoned")

    # --- Resources -------------------------------------------------------------------------

    @cached_property
    def resources(self) -> Resources:
        """The user's own Resources: create, get and search."""
        return Resources(self)

    def _touch(self, resource: Resource) -> None:
        key = str(resource.pk)
        if key in self.resource_ids:
            self.resource_ids.remove(key)
        self.resource_ids.append(key)
        self.touched[key] = resource

    @property
    def last_resource_id(self) -> str | None:
        """The Resource the tool created or read last, if any."""
        return self.resource_ids[-1] if self.resource_ids else None

    @property
    def last_resource(self) -> Resource | None:
        """That Resource's row, as the tool had it."""
        key = self.last_resource_id
        return self.touched.get(key) if key else None


def call_sink(sink: EventSink, event_type: str, data: dict[str, Any]) -> None:
    """Hand one event to a sink; a failing sink is logged, never raised into a tool."""
    try:
        sink(event_type, data)
    except Exception:
        logger.exception("the event sink failed on %s for call %s", event_type, data.get("name"))


class Resources:
    """The context user's Resources. Every query is scoped to that user."""

    def __init__(self, context: ToolContext) -> None:
        self._context = context

    def _owner_id(self) -> Any:
        user = self._context.user
        owner_id = getattr(user, "pk", None)
        if owner_id is None:
            raise PermissionError("This tool needs a signed-in user to read or write resources.")
        return owner_id

    def create(self, kind: str, title: str = "", data: dict[str, Any] | None = None) -> Resource:
        """Create a Resource owned by the user and linked to this tool execution."""
        from tools.models import Resource

        self._context.raise_if_cancelled()
        resource = Resource.objects.create(
            kind=kind,
            owner_id=self._owner_id(),
            title=title,
            data=data if data is not None else {},
            created_by_execution_id=self._context.execution_id,
        )
        self._context._touch(resource)
        return resource

    def get(self, resource_id: uuid.UUID | str, *, kind: str | None = None) -> Resource:
        """The user's Resource with that id; ResourceNotFound for anyone else's or none."""
        from tools.models import Resource

        described = f"{kind} {resource_id}" if kind else f"resource {resource_id}"
        key = _resource_key(resource_id)
        if key is None:
            raise ResourceNotFound(f"{resource_id!r} is not a resource id.")
        queryset = Resource.objects.filter(pk=key, owner_id=self._owner_id())
        if kind is not None:
            queryset = queryset.filter(kind=kind)
        resource = queryset.first()
        if resource is None:
            # Same answer whether it is missing or someone else's: ids reveal nothing.
            raise ResourceNotFound(f"No {described} belongs to this user.")
        self._context._touch(resource)
        return resource

    def delete(self, resource_ids: Sequence[uuid.UUID | str], *, kind: str) -> list[Resource]:
        """Delete the user's Resources of a kind with these ids; returns those deleted.

        Ids that are not the user's (or not resources at all) are left out of
        the answer, as `get` does: ids reveal nothing. The tool messages that
        linked to a deleted resource keep their text; the link is cleared.
        """
        from tools.models import Resource

        self._context.raise_if_cancelled()
        keys = [key for key in map(_resource_key, resource_ids) if key is not None]
        found = list(Resource.objects.filter(pk__in=keys, owner_id=self._owner_id(), kind=kind))
        Resource.objects.filter(pk__in=[resource.pk for resource in found]).delete()
        return found

    def search(
        self,
        kind: str,
        query: str = "",
        limit: int = 10,
        *,
        data_keys: Sequence[str] = (),
    ) -> ResourceSearch:
        """The user's Resources of a kind whose title (or data keys) contain the query."""
        from tools.models import Resource

        queryset = Resource.objects.filter(owner_id=self._owner_id(), kind=kind)
        words = query.strip()
        if words:
            match = Q(title__icontains=words)
            for key in data_keys:
                match |= Q(**{f"data__{key}__icontains": words})
            queryset = queryset.filter(match)
        queryset = queryset.order_by("-created_at", "-pk")
        total = queryset.count()
        items = list(queryset[: max(0, int(limit))]) if total else []
        return ResourceSearch(items=items, total=total)


def _resource_key(resource_id: Any) -> uuid.UUID | None:
    """A resource id as a UUID, or None when it is not one."""
    if isinstance(resource_id, uuid.UUID):
        return resource_id
    try:
        return uuid.UUID(str(resource_id))
    except ValueError:
        return None
