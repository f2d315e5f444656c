"""The audit's replays of a period (docs/replay.md): their report, and the form that starts more."""

from __future__ import annotations

from typing import Any

from django import forms

from chat.audit.period import Period
from chat.comparison import run_records
from chat.llm.endpoints import model_choices
from chat.models import ACTIVE_RUN_STATUSES, ReplayMode, ReplayTools, Run
from chat.replay_report import ReportRow, report_row

MAX_BATCH_RUNS = 200
# The most replays the report page compares.
MAX_REPORTED_REPLAYS = 100


def replay_rows(period: Period) -> tuple[list[ReportRow], int]:
    """The ended replays begun in the period, newest first, each against its original
    (at most MAX_REPORTED_REPLAYS), and how many there are: five queries, however many."""
    ended = (
        Run.objects.filter(
            replay_of__isnull=False, created_at__gte=period.start, created_at__lt=period.end
        )
        .exclude(status__in=ACTIVE_RUN_STATUSES)
        .select_related("replay_of", "conversation")
        .order_by("-created_at")
    )
    replays = list(ended[:MAX_REPORTED_REPLAYS])
    total = len(replays) if len(replays) < MAX_REPORTED_REPLAYS else ended.count()
    pairs = [(run.replay_of, run) for run in replays if run.replay_of is not None]
    records = run_records({run.pk: run for pair in pairs for run in pair}.values())
    rows = [
        report_row(original, run, model=run.conversation.model, records=records)
        for original, run in pairs
    ]
    return rows, total


def replays_running(period: Period) -> int:
    """How many replays begun since the period's start have not ended."""
    return Run.objects.filter(
        replay_of__isnull=False, created_at__gte=period.start, status__in=ACTIVE_RUN_STATUSES
    ).count()


class ReplayStartForm(forms.Form):
    """Which models to replay the period's newest runs on, how many runs, and how.

    Tools are the recorded ones only: a batch replays other users' runs, and
    live tools would run as each run's owner (notes made, approvals asked in
    their name) on a staff member's say. A run's owner may replay it live
    through the API.
    """

    models = forms.MultipleChoiceField(
        choices=(), widget=forms.CheckboxSelectMultiple, help_text="One replay per run and model."
    )
    limit = forms.IntegerField(
        min_value=1, max_value=MAX_BATCH_RUNS, initial=20, help_text="The newest completed runs."
    )
    tools = forms.ChoiceField(
        choices=[(ReplayTools.RECORDED, ReplayTools.RECORDED.label)],
        initial=ReplayTools.RECORDED,
        widget=forms.HiddenInput,
        error_messages={
            "invalid_choice": "A batch replays with recorded tools only: live tools would run "
            "as each run's owner. The owner can replay a run live through the API."
        },
    )
    replay = forms.ChoiceField(choices=ReplayMode.choices, initial=ReplayMode.FREE)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read per form: a providers file may list its server's models as they come and go.
        models = self.fields["models"]
        assert isinstance(models, forms.MultipleChoiceField)
        models.choices = [(choice.id, choice.label) for choice in model_choices()]
