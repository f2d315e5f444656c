"""Runs: one processing of one user message, and the live events it publishes."""

from __future__ import annotations

import dataclasses
import enum
import uuid
from functools import cached_property

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce

from chat.models.conversations import Conversation, Message, Mode
from tools.fields import StorableJSONField, StorableTextField


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


ACTIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL)

# A run's own latency, toolchat's time: its latency less the time it waited for a person's
# decision on a call, which is people's time. The database's form, for the statistics'
# reads (chat/audit/stats.py); `Run.own_latency_ms` is the same figure of one row.
OWN_LATENCY_MS = F("latency_ms") - Coalesce("approval_wait_ms", 0)


class ReplayTools(models.TextChoices):
    """What a replay's tool calls get (docs/replay.md)."""

    RECORDED = "recorded", "The original run's recorded results; nothing runs"
    LIVE = "live", "The tools run for real, approval rules included"


class ReplayMode(models.TextChoices):
    """How a replay follows the original run (docs/replay.md)."""

    FREE = "free", "The new model runs the turn its own way"
    FORCED = "forced", "At each of the original's steps, the original's history (teacher-forced)"


class ToolSource(enum.Enum):
    """Where a run's tool calls get their results."""

    RUN = "run"  # each call runs its tool (its policy and approvals included)
    RECORDED = "recorded"  # each is served the original run's recorded result: nothing runs


class StepSource(enum.Enum):
    """Where a run's steps come from."""

    OWN = "own"  # the model decides each step, as the turn goes
    FORCED = (
        "forced"  # the original run's steps, the model asked at each (chat/engine/forced_replay.py)
    )


@dataclasses.dataclass(frozen=True)
class RunSources:
    """Where a run gets what its steps need: read once from the run, as it is claimed.

    A turn of its own runs its tools and follows its model; a replay
    (chat/services/replays.py) may take its tools' results from the original's
    record and follow the original's steps. The engine asks these, and reads
    none of a run's replay fields: a replay is a source, not a branch.
    """

    tools: ToolSource = ToolSource.RUN
    steps: StepSource = StepSource.OWN
    one_model: bool = False  # the conversation's model writes every step (no LLM_COMPOSE_MODEL)
    replay: bool = False  # the run's rows are marked a replay's (left out of the statistics)

    @property
    def tools_run(self) -> bool:
        """Whether a call does anything: runs a tool, so may ask a person and not be repeated."""
        return self.tools is ToolSource.RUN


class Run(models.Model):
    """One processing of one user message: model calls, tools, and the answer."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="runs")
    trigger_message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=24, choices=RunStatus.choices, default=RunStatus.QUEUED)
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.TWO_PASS)
    steps = models.PositiveSmallIntegerField(default=0)
    model_calls = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    # Of latency_ms, the time the run waited for a person's decision on a call (the
    # approvals: chat/engine/approvals.py), added each time it goes on or ends; NULL
    # when it never waited. People's time: the audit and the metrics keep it apart.
    approval_wait_ms = models.PositiveIntegerField(null=True, blank=True, editable=False)
    # US dollars: the sum of its model calls' costs (chat/engine/finish.py), at its end;
    # NULL when no call of it has a price.
    cost_usd = models.DecimalField(
        max_digits=16, decimal_places=8, null=True, blank=True, editable=False
    )
    error = StorableTextField(blank=True)
    # The budget it started under (chat/budgets.py): the per-run limits that covered its
    # owner then, what it reserved of their day's and month's, and the soft limits it was
    # warned of: `{"limits": [...], "reserved": {"tokens", "cost_usd"}, "warned": [...]}`.
    # NULL when no limit covered its owner.
    budget = StorableJSONField(null=True, blank=True, editable=False)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # What every model call of the run was told first, fixed when the run is made
    # (chat/prompts.py): "" for none, NULL for a run made before runs kept it.
    system_prompt = StorableTextField(null=True, blank=True, editable=False)
    # Who is working on the run now: set by a claim (a compare-and-set), cleared
    # while the run waits for its tools. A worker that finds another lease on
    # the row has been superseded and stops.
    lease = models.UUIDField(null=True, blank=True, editable=False)
    # A run asked for through /v1/chat/completions (chat/openai_api/): the tools its
    # client declared (OpenAI shape: the client runs them), and the request's options
    # (temperature, max_tokens, tool_choice, response_format, user, metadata, stream).
    # NULL for a run of the REST API or the chat page.
    client_tools = StorableJSONField(null=True, blank=True, editable=False)
    client_options = StorableJSONField(null=True, blank=True, editable=False)
    # A /v1/responses request's echoed fields (chat/openai_api/response_input.py); None
    # when the run is no stored response (not one, `store: false`, or deleted).
    response = StorableJSONField(null=True, blank=True, editable=False)
    # The turn's trace (chat/telemetry/tracing.py): the W3C traceparent of its
    # span, then the caller's span id when a request's traceparent was
    # continued; "" when tracing is off. Every step, in any worker, continues it.
    trace_parent = models.CharField(max_length=80, blank=True, default="", editable=False)
    # A replay of another run (chat/services/replays.py): the run it replays, what its
    # tool calls get and how it follows the original; "" for a run that is no replay.
    replay_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="replays"
    )
    replay_tools = models.CharField(
        max_length=16, choices=ReplayTools.choices, blank=True, default="", editable=False
    )
    replay_mode = models.CharField(
        max_length=16, choices=ReplayMode.choices, blank=True, default="", editable=False
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["conversation", "-created_at"], name="run_conversation_recent"),
            models.Index(fields=["status", "heartbeat_at"], name="run_status_heartbeat"),
            # The audit's reads by period: runs begun between two times, newest first
            # (chat/audit/). PostgreSQL counts and bins them, with or without the
            # replays, and picks the slowest, from the index alone.
            models.Index(
                fields=["created_at"],
                include=[
                    "status",
                    "latency_ms",
                    "approval_wait_ms",
                    "model_calls",
                    "replay_of",
                    "id",
                ],
                name="run_created_stats",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=RunStatus.values), name="run_status_valid"
            ),
            # One conversation processes one message at a time: the database
            # refuses a second active run, whatever the race.
            models.UniqueConstraint(
                fields=["conversation"],
                condition=Q(status__in=ACTIVE_RUN_STATUSES),
                name="run_one_active_per_conversation",
            ),
        ]

    def __str__(self) -> str:
        return f"Run {self.id} ({self.status})"

    @cached_property
    def sources(self) -> RunSources:
        """Where this run's steps get their tools' results and their steps (`RunSources`).

        Read once from the replay fields, which never change after the run is made.
        """
        if self.replay_of_id is None:
            return RunSources()
        return RunSources(
            tools=ToolSource.RECORDED
            if self.replay_tools == ReplayTools.RECORDED
            else ToolSource.RUN,
            steps=StepSource.FORCED if self.replay_mode == ReplayMode.FORCED else StepSource.OWN,
            one_model=True,  # a replay tries its one model on the whole turn
            replay=True,
        )

    @property
    def own_latency_ms(self) -> int | None:
        """Its latency less its wait for people (OWN_LATENCY_MS); None until it has ended."""
        if self.latency_ms is None:
            return None
        return self.latency_ms - (self.approval_wait_ms or 0)


class RunEvent(models.Model):
    """One live event of a run, numbered per conversation so that clients can resume."""

    id = models.BigAutoField(primary_key=True)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="events")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.BigIntegerField()
    type = models.CharField(max_length=64)
    data = StorableJSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "seq"]
        indexes = [models.Index(fields=["run", "seq"], name="runevent_run_seq")]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "seq"], name="runevent_seq_unique"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.type}"
