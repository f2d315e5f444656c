"""What a client sends the socket, read: one JSON object a frame, with only its type's fields.

A frame is refused, with the error frame the socket sends (`FrameRefused`),
when it is over `TOOLCHAT_WS_MAX_MESSAGE_BYTES`, is not UTF-8 (a binary frame
is read as the text it must be, nothing repaired), is not JSON or nests too
deeply for the parser, is not an object, or has a field its type does not
name (as the REST API refuses one; a `message` is checked by the REST post's
own serializer, in the consumer).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from django.conf import settings

from chat.inputs import unknown_fields_body

# The fields each kind of client message may have: any other is refused, as the REST
# API refuses one (a `message` is checked by the REST post's own serializer).
FRAME_FIELDS = {
    "resume": frozenset({"type", "after"}),
    "cancel": frozenset({"type", "run_id"}),
    "approve": frozenset(
        {"type", "execution_id", "reason", "arguments", "scope", "match_arguments"}
    ),
    "reject": frozenset({"type", "execution_id", "reason"}),
}
# What an approve frame may say besides its call, as the REST approval does (docs/events.md).
APPROVAL_CHOICES = ("arguments", "scope", "match_arguments")


@dataclasses.dataclass(frozen=True)
class FrameRefused:
    """Why a frame was not read: the socket's error frame says it."""

    code: str
    message: str
    field: str | None = None
    details: dict[str, Any] | None = None


def frame_read(text_data: str | None, bytes_data: bytes | None) -> dict[str, Any] | FrameRefused:
    """The frame's JSON object, checked against its type's fields; or why it is refused."""
    raw = text_data.encode() if text_data is not None else bytes_data or b""
    if len(raw) > settings.TOOLCHAT_WS_MAX_MESSAGE_BYTES:
        return FrameRefused(
            "too_large",
            f"Messages to this socket are limited to "
            f"{settings.TOOLCHAT_WS_MAX_MESSAGE_BYTES:,} bytes.",
        )
    try:
        # A binary frame is read as the text it must be: UTF-8, nothing repaired.
        message = json.loads(raw.decode("utf-8") if text_data is None else text_data)
    except UnicodeDecodeError as exc:
        return FrameRefused(
            "invalid_json", f"Send JSON text in UTF-8 (byte {exc.start:,} of this frame is not)."
        )
    except (ValueError, RecursionError) as exc:
        nested = " (this one is nested too deeply)" if isinstance(exc, RecursionError) else ""
        return FrameRefused(
            "invalid_json", f'Send JSON objects, e.g. {{"type": "resume", "after": 0}}{nested}.'
        )
    if not isinstance(message, dict):
        return FrameRefused("invalid_message", "Send a JSON object with a `type`.")
    kind = message.get("type")
    known = FRAME_FIELDS.get(kind) if isinstance(kind, str) else None
    unknown = unknown_fields_body(message, known) if known is not None else None
    if unknown is not None:
        return FrameRefused(
            unknown["code"], unknown["message"], unknown.get("field"), unknown["details"]
        )
    return message
