"""get_current_time: the time now in a time zone, named the IANA way or by a city."""

from __future__ import annotations

import difflib
import functools
import re
import zoneinfo
from datetime import UTC, datetime, timedelta, tzinfo
from datetime import timezone as fixed_timezone
from typing import Any

from tools.context import ToolContext
from tools.registry import tool

# Abbreviations people use that are not IANA names; each maps to the zone
# most people mean by it.
ABBREVIATIONS = {
    "pst": "America/Los_Angeles",
    "pdt": "America/Los_Angeles",
    "pt": "America/Los_Angeles",
    "mdt": "America/Denver",
    "cst": "America/Chicago",
    "cdt": "America/Chicago",
    "edt": "America/New_York",
    "et": "America/New_York",
    "bst": "Europe/London",
    "cest": "Europe/Paris",
    "ist": "Asia/Kolkata",
    "jst": "Asia/Tokyo",
    "kst": "Asia/Seoul",
    "aest": "Australia/Sydney",
    "aedt": "Australia/Sydney",
    "z": "UTC",
    "zulu": "UTC",
}
_OFFSET_RE = re.compile(r"^(?:utc|gmt)?\s*([+-])\s*(\d{1,2})(?::?(\d{2}))?$", re.IGNORECASE)


class UnknownTimeZone(ValueError):
    """A time zone name that matches nothing; carries close suggestions."""

    def __init__(self, name: str, suggestions: list[str]) -> None:
        super().__init__(f"Unknown time zone {name!r}.")
        self.suggestions = suggestions


@tool(timeout=5)
def get_current_time(ctx: ToolContext, timezone: str = "UTC") -> dict[str, Any]:
    """Get the current date and time in a time zone.

    Args:
        timezone: An IANA time zone such as "Europe/Paris", a city such as "Tokyo",
            or an offset such as "UTC+2". Defaults to UTC.
    """
    try:
        zone, zone_name = resolve_timezone(timezone)
    except UnknownTimeZone as exc:
        hint = "Use an IANA name such as 'Europe/Paris' or a city such as 'Paris'."
        if exc.suggestions:
            hint = f"Did you mean {' or '.join(repr(s) for s in exc.suggestions)}? {hint}"
        return {
            "success": False,
            "error": str(exc),
            "suggestions": exc.suggestions,
            "message": f"{exc} {hint}",
        }
    now = datetime.now(UTC).astimezone(zone)
    offset = _format_offset(now.utcoffset() or timedelta(0))
    return {
        "success": True,
        "timezone": zone_name,
        "datetime": now.isoformat(timespec="seconds"),
        "date": now.date().isoformat(),
        "time": now.strftime("%H:%M:%S"),
        "weekday": now.strftime("%A"),
        "utc_offset": offset,
        "abbreviation": now.tzname() or "",
        "message": (
            f"It is {now:%H:%M} on {now:%A} {now.day} {now:%B %Y} in {zone_name} (UTC{offset})."
        ),
    }


def resolve_timezone(name: str) -> tuple[tzinfo, str]:
    """The zone for an IANA name, a city, an abbreviation or an offset; UnknownTimeZone if none."""
    text = name.strip()
    if not text:
        return UTC, "UTC"
    key = _key(text)
    by_key = _zones_by_key()
    if key in by_key:
        return zoneinfo.ZoneInfo(by_key[key]), by_key[key]
    if key in ABBREVIATIONS:
        zone_name = ABBREVIATIONS[key]
        return zoneinfo.ZoneInfo(zone_name), zone_name

    offset = _OFFSET_RE.match(text)
    if offset:
        sign, hours, minutes = offset.group(1), int(offset.group(2)), int(offset.group(3) or 0)
        if hours <= 14 and minutes < 60:
            delta = timedelta(hours=hours, minutes=minutes) * (-1 if sign == "-" else 1)
            label = f"UTC{_format_offset(delta)}"
            return fixed_timezone(delta, label), label

    # "Tokyo" or "new york": the last part of an IANA name (Asia/Tokyo, America/New_York).
    candidates = _zones_by_city().get(key.rsplit("/", 1)[-1], [])
    if candidates:
        best = min(candidates, key=lambda zone: (zone.count("/"), len(zone), zone))
        return zoneinfo.ZoneInfo(best), best

    raise UnknownTimeZone(text, suggest_timezones(text))


def suggest_timezones(name: str, limit: int = 3) -> list[str]:
    """IANA names close to what was asked, by city and by full name."""
    key = _key(name)
    cities = _zones_by_city()
    suggestions: list[str] = []
    for city in difflib.get_close_matches(key, list(cities), n=limit, cutoff=0.6):
        suggestions.extend(sorted(cities[city], key=lambda zone: (zone.count("/"), len(zone))))
    for full in difflib.get_close_matches(key, list(_zones_by_key()), n=limit, cutoff=0.6):
        suggestions.append(_zones_by_key()[full])
    return list(dict.fromkeys(suggestions))[:limit]


def _key(text: str) -> str:
    return re.sub(r"[\s-]+", "_", text.strip()).lower()


def _format_offset(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    hours, rest = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{rest:02d}"


@functools.cache
def _zones_by_key() -> dict[str, str]:
    return {_key(zone): zone for zone in zoneinfo.available_timezones()}


@functools.cache
def _zones_by_city() -> dict[str, list[str]]:
    cities: dict[str, list[str]] = {}
    for zone in zoneinfo.available_timezones():
        if "/" in zone and not zone.startswith(("Etc/", "SystemV/", "posix/", "right/")):
            cities.setdefault(_key(zone.rsplit("/", 1)[-1]), []).append(zone)
    return cities
