"""Replay many stored runs on one or more models and write a report (docs/replay.md).

The replays go through the normal queue (Celery workers with Redis, the
in-process threads without), at most `--concurrency` at a time; a progress
bar on stderr counts them; the report is printed as a table and saved as CSV
(chat/replay_report.py). Only completed runs that are not replays themselves
are replayed.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from chat.exceptions import Conflict, InvalidInput
from chat.models import ACTIVE_RUN_STATUSES, ReplayMode, ReplayTools, Run
from chat.replay_report import ReportRow, report_csv, report_row, report_table, report_totals
from chat.selectors import runs_to_replay
from chat.services.conversations import model_chosen
from chat.services.replays import run_replay
from chat.services.runs import run_cancel

POLL_S = 0.2


@dataclasses.dataclass
class _Job:
    original: Run
    model: str
    replica: Run | None = None
    started: float = 0.0


class Command(BaseCommand):
    help = "Replay stored runs on one or more models and report what changes (docs/replay.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        """The runs to replay, the models, and how."""
        parser.add_argument("--run", action="append", default=[], help="A run's id (repeatable).")
        parser.add_argument(
            "--conversation",
            action="append",
            default=[],
            help="A conversation's runs (repeatable).",
        )
        parser.add_argument("--since", help="Runs created since this time (ISO 8601).")
        parser.add_argument("--limit", type=int, default=100, help="At most this many runs (100).")
        parser.add_argument(
            "--model", action="append", required=True, help="A model id (repeatable)."
        )
        parser.add_argument("--tools", choices=ReplayTools.values, default=ReplayTools.RECORDED)
        parser.add_argument("--replay", choices=ReplayMode.values, default=ReplayMode.FREE)
        parser.add_argument("--concurrency", type=int, default=4, help="Replays at once (4).")
        parser.add_argument(
            "--timeout", type=float, default=300.0, help="Seconds a replay may take (300)."
        )
        parser.add_argument(
            "--csv", help="Where to save the CSV (default: replay-report-<time>.csv)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Select the runs, replay them, report."""
        try:
            models = [model_chosen(model) or "" for model in options["model"]]
        except InvalidInput as exc:
            raise CommandError(exc.message) from None
        runs = _runs(options)
        if not runs:
            raise CommandError("No completed run matches: nothing to replay.")
        jobs = [_Job(run, model) for run in runs for model in models]
        self.stderr.write(f"Replaying {len(runs)} run(s) on {len(models)} model(s).")
        rows = self._replay_all(jobs, options)
        table = report_table(rows, report_totals(rows))
        self.stdout.write(table, ending="")
        path = Path(options["csv"] or f"replay-report-{timezone.now():%Y%m%dT%H%M%S}.csv")
        path.write_text(report_csv(rows), encoding="utf-8")
        self.stdout.write(f"CSV: {path}")

    def _replay_all(self, jobs: list[_Job], options: dict[str, Any]) -> list[ReportRow]:
        """Run the jobs through the queue, `--concurrency` at a time; a row for each."""
        waiting, active = list(jobs), list[_Job]()
        rows: list[ReportRow] = []
        concurrency = max(1, int(options["concurrency"]))
        while waiting or active:
            while waiting and len(active) < concurrency:
                job = waiting.pop(0)
                try:
                    job.replica = run_replay(
                        run=job.original,
                        model=job.model,
                        tools=options["tools"],
                        replay=options["replay"],
                    )
                except (InvalidInput, Conflict) as exc:
                    raise CommandError(f"run {job.original.pk}: {exc.message}") from None
                job.started = time.monotonic()
                active.append(job)
            time.sleep(POLL_S)
            for job in list(active):
                assert job.replica is not None
                job.replica.refresh_from_db()
                if job.replica.status in ACTIVE_RUN_STATUSES:
                    if time.monotonic() - job.started < options["timeout"]:
                        continue
                    job.replica = run_cancel(run=job.replica)
                active.remove(job)
                rows.append(report_row(job.original, job.replica, model=job.model))
            self._progress(len(rows), len(jobs))
        self.stderr.write("")
        return rows

    def _progress(self, done: int, total: int) -> None:
        width = 30
        filled = width * done // total
        bar = "#" * filled + "-" * (width - filled)
        self.stderr.write(f"\r[{bar}] {done}/{total}", ending="")
        if hasattr(sys.stderr, "flush"):
            self.stderr.flush()


def _runs(options: dict[str, Any]) -> list[Run]:
    """The completed runs the options select (no replays), newest first, at most `--limit`."""
    since: datetime | None = None
    if options["since"]:
        since = parse_datetime(options["since"])
        if since is None:
            raise CommandError(f"--since {options['since']!r} is not an ISO 8601 time.")
        if timezone.is_naive(since):
            since = timezone.make_aware(since)
    try:
        return runs_to_replay(
            run_ids=options["run"],
            conversation_ids=options["conversation"],
            since=since,
            limit=options["limit"],
        )
    except (ValidationError, ValueError) as exc:  # a malformed id
        raise CommandError(f"Bad --run or --conversation: {exc}") from None
