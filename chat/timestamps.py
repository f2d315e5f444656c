"""How every answer writes a time: ISO 8601 in the current time zone, UTC as "Z".

DRF's own way (its DateTimeField), kept for the times toolchat writes itself
(the run and its calls, messages, events, a decision's 409), so that one
client reads one form: "2026-12-02T01:12:54.896026Z", never "+00:00" in one
answer and "Z" in another.
"""

from __future__ import annotations

import datetime

from django.utils import timezone


def iso_time(value: datetime.datetime | None) -> str | None:
    """A time as the API writes it (None stays None)."""
    if value is None:
        return None
    text = value.astimezone(timezone.get_current_timezone()).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text
