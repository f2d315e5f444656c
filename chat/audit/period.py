"""The period the audit statistics cover: the last hour, day or 7 days, or two given times.

Read from the query string by a form, so that bad input (a malformed time, an
end before its start, a span too long) becomes a message on the page and a
400, never a 500. Custom times are `datetime-local` values in the site's time
zone (TIME_ZONE, UTC by default), as the browser's picker sends them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django import forms
from django.utils import timezone

PRESETS: dict[str, tuple[str, timedelta]] = {
    "hour": ("Last hour", timedelta(hours=1)),
    "day": ("Last day", timedelta(days=1)),
    "week": ("Last 7 days", timedelta(days=7)),
}
DEFAULT_PERIOD = "day"
CUSTOM = "custom"
MAX_SPAN = timedelta(days=366)
# Times a period may start and end within: the bins past its end must still be dates.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9998, 12, 31, tzinfo=UTC)
LOCAL_FORMAT = "%Y-%m-%dT%H:%M"


@dataclass(frozen=True)
class Period:
    """[start, end) and how to name it."""

    key: str
    start: datetime
    end: datetime

    @property
    def label(self) -> str:
        if self.key in PRESETS:
            return PRESETS[self.key][0]
        return f"{self.start:%Y-%m-%d %H:%M} to {self.end:%Y-%m-%d %H:%M}"

    @property
    def span_s(self) -> float:
        return (self.end - self.start).total_seconds()

    def query(self) -> dict[str, str]:
        """The query-string parameters that name this period again."""
        if self.key in PRESETS:
            return {"period": self.key}
        local = {
            name: timezone.localtime(value)
            for name, value in (("start", self.start), ("end", self.end))
        }
        return {"period": CUSTOM, **{k: v.strftime(LOCAL_FORMAT) for k, v in local.items()}}


def period_preset(key: str, *, now: datetime | None = None) -> Period:
    """One of the PRESETS, ending now."""
    end = now or timezone.now()
    return Period(key=key, start=end - PRESETS[key][1], end=end)


class LocalDateTimeInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs=attrs, format=LOCAL_FORMAT)


class PeriodForm(forms.Form):
    """?period=hour|day|week|custom, and for custom, ?start= and ?end= (datetime-local)."""

    period = forms.ChoiceField(
        choices=[*((key, label) for key, (label, _) in PRESETS.items()), (CUSTOM, "Custom")],
        required=False,
    )
    start = forms.DateTimeField(
        label="From",
        required=False,
        input_formats=[LOCAL_FORMAT, "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"],
        widget=LocalDateTimeInput(),
    )
    end = forms.DateTimeField(
        label="To",
        required=False,
        input_formats=[LOCAL_FORMAT, "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"],
        widget=LocalDateTimeInput(),
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        start, end = cleaned.get("start"), cleaned.get("end")
        key = cleaned.get("period") or (
            CUSTOM
            if start or end or self.has_error("start") or self.has_error("end")
            else DEFAULT_PERIOD
        )
        cleaned["period"] = key
        if key != CUSTOM or self.has_error("start") or self.has_error("end"):
            return cleaned
        if start is None or end is None:
            raise forms.ValidationError("A custom period needs both a start and an end time.")
        if start < EARLIEST or end > LATEST:
            raise forms.ValidationError("Times must be between 1970 and the year 9998.")
        if end <= start:
            raise forms.ValidationError("The end of the period must come after its start.")
        if end - start > MAX_SPAN:
            raise forms.ValidationError(f"A period may span at most {MAX_SPAN.days} days.")
        return cleaned

    def chosen(self, *, now: datetime | None = None) -> Period:
        """The period asked for (call after is_valid())."""
        key = self.cleaned_data["period"]
        if key == CUSTOM:
            return Period(
                key=CUSTOM, start=self.cleaned_data["start"], end=self.cleaned_data["end"]
            )
        return period_preset(key, now=now)


def period_errors(form: PeriodForm) -> list[str]:
    """What is wrong with the period asked for, each error a sentence naming its field."""
    errors = [str(error) for error in form.non_field_errors()]
    for field in form:
        errors.extend(f"{field.label}: {error}" for error in field.errors)
    return errors


def period_from_query(
    data: Any, *, now: datetime | None = None
) -> tuple[Period | None, PeriodForm]:
    """(the period, the bound form) from a query string; the period is None when it is invalid."""
    form = PeriodForm(data)
    if not form.is_valid():
        return None, form
    return form.chosen(now=now), form
