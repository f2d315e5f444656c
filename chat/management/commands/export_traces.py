"""Send stored runs to the trace collector, as spans with their recorded times.

For the runs from before tracing was turned on, or whose spans a collector
lost: each ended run becomes its `invoke_agent` span with its model calls and
tool executions under it (chat/telemetry/tracing.py `run_export`), with no
message content. Needs the OTLP variables, as the server does.
"""

from __future__ import annotations

from datetime import datetime, time
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from chat.models import Run, RunStatus
from chat.telemetry.provider import tracing_configured, tracing_flush
from chat.telemetry.tracing import run_export


def _moment(text: str) -> datetime:
    """A date (its midnight) or a date and time, in the server's time zone unless it says."""
    moment = parse_datetime(text)
    if moment is None:
        day = parse_date(text)
        if day is None:
            raise CommandError(f"Not a date or a date and time: {text!r} (e.g. 2026-11-01).")
        moment = datetime.combine(day, time())
    return timezone.make_aware(moment) if timezone.is_naive(moment) else moment


class Command(BaseCommand):
    help = "Send the runs that ended since a date to the OTLP trace collector."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--since", required=True, help="e.g. 2026-11-01 or 2026-11-01T12:00")
        parser.add_argument("--until", help="the end of the period (default: now)")

    def handle(self, *args: Any, since: str, until: str | None = None, **options: Any) -> None:
        if not tracing_configured():
            raise CommandError("Set OTEL_EXPORTER_OTLP_ENDPOINT (docs/observability.md).")
        runs = Run.objects.filter(
            finished_at__gte=_moment(since),
            status__in=[RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED],
        ).select_related("conversation")
        if until:
            runs = runs.filter(finished_at__lt=_moment(until))
        sent = sum(run_export(run) for run in runs.order_by("finished_at").iterator())
        tracing_flush()
        self.stdout.write(f"Sent {sent} run(s) as traces.")
