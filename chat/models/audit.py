"""The audit rows of a run: each model call it made and each tool call it ran."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Count, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce

from chat.models.conversations import Message
from chat.models.policies import PolicyDecision
from chat.models.runs import Run
from tools.fields import StorableCharField, StorableJSONField, StorableTextField


class ModelCallPurpose(models.TextChoices):
    TOOLS = "tools", "With tools"
    COMPOSE = "compose", "Compose the answer"
    DECIDE = "decide", "Decide the next step"
    SUGGEST = "suggest", "Suggest follow-ups"


class CallStatus(models.TextChoices):
    """How a model call ended; a call is stored once, when it has (chat/engine/model_step.py)."""

    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class ModelCall(models.Model):
    """One request to a model, with its timing and usage."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="model_call_rows")
    step = models.PositiveSmallIntegerField()
    purpose = models.CharField(max_length=16, choices=ModelCallPurpose.choices)
    model = StorableCharField(max_length=128)
    provider = models.CharField(max_length=32)
    message_count = models.PositiveIntegerField(default=0)
    request_hash = models.CharField(max_length=64, blank=True)
    tools_offered = models.JSONField(default=list, blank=True)
    response_message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=16, choices=CallStatus.choices)
    error = StorableTextField(blank=True)
    finish_reason = StorableCharField(max_length=32, blank=True)
    started_at = models.DateTimeField()
    first_token_ms = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    # Of the prompt's tokens, those the server read from its cache (priced lower).
    cached_tokens = models.PositiveIntegerField(null=True, blank=True)
    # US dollars, from the provider's prices (the providers file); NULL when its model has
    # no price or the server reported no usage: never a made-up 0.
    cost_usd = models.DecimalField(max_digits=16, decimal_places=8, null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    # How a server's limit changed the call, when it did ("asked again without streaming: ...").
    note = StorableCharField(max_length=300, blank=True, default="")
    # A teacher-forced replay's call (chat/engine/forced_replay.py): what the model answered
    # at the original's step, `{"content", "tool_calls"}`, stored here because none of it
    # joins the history. NULL for every other call.
    forced_answer = StorableJSONField(null=True, blank=True, editable=False)
    # The answer's token log probabilities (OpenAI's `logprobs.content`), when a /v1 client
    # asked for them and the server gave them: what that client is answered. NULL otherwise.
    logprobs = StorableJSONField(null=True, blank=True, editable=False)
    # A call of a replay (its run's `replay_of` is set), fixed when the row is made: the
    # audit's statistics leave replays out of real traffic reading the index alone.
    replay = models.BooleanField(default=False, editable=False)

    class Meta:
        ordering = ["run", "started_at"]
        indexes = [
            models.Index(fields=["run", "step"], name="modelcall_run_step"),
            # The audit's statistics per model for a period, from the index alone on PostgreSQL
            # (chat/audit/stats.py reads every column included, and no other).
            models.Index(
                fields=["started_at"],
                include=[
                    "provider",
                    "model",
                    "status",
                    "latency_ms",
                    "first_token_ms",
                    "prompt_tokens",
                    "completion_tokens",
                    "replay",
                    "cost_usd",
                ],
                name="modelcall_started_stats",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.purpose} call to {self.provider_model} (step {self.step})"

    @property
    def provider_model(self) -> str:
        """`<provider>/<model>`, as a conversation names it (the model alone on older rows)."""
        return f"{self.provider}/{self.model}" if self.provider else self.model


# A run's Steps, the one definition every page and answer uses (docs/audit.md): the
# distinct steps of its model calls, the answer's included (two for a two-pass run).
# `Run.steps`, what max_steps bounds, counts only the steps that ran tools.


def model_steps(calls: Iterable[ModelCall]) -> int:
    """A run's Steps, from its model calls (rows already read)."""
    return len({call.step for call in calls})


def model_step_count() -> Coalesce:
    """A run's Steps as a queryset annotation: the same count, in one subquery."""
    counted = (
        ModelCall.objects.filter(run_id=OuterRef("pk"))
        .order_by()
        .values("run_id")
        .annotate(n=Count("step", distinct=True))
        .values("n")
    )
    return Coalesce(Subquery(counted, output_field=models.IntegerField()), 0)


class ExecutionStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    TIMED_OUT = "timed_out", "Timed out"
    REJECTED = "rejected", "Rejected"
    INTERRUPTED = "interrupted", "Interrupted"
    CANCELLED = "cancelled", "Cancelled"
    # A call of a tool the /v1 client declared: returned to the client, which runs it
    # and sends the result with its next request (then `succeeded`).
    CLIENT = "client", "Returned to the client"
    # A replay's call with recorded tools (chat/engine/replay_tools.py): served the
    # result of the original's matching call (`replayed_from`), or, with no match, told
    # that none exists. Neither ran.
    REPLAYED = "replayed", "Replayed from the record"
    UNMATCHED = "unmatched", "No recorded result"


FINISHED_EXECUTION_STATUSES = (
    ExecutionStatus.SUCCEEDED,
    ExecutionStatus.FAILED,
    ExecutionStatus.TIMED_OUT,
    ExecutionStatus.REJECTED,
    ExecutionStatus.INTERRUPTED,
    ExecutionStatus.CANCELLED,
    # Done as far as the run is concerned: it ends with the call for its client.
    ExecutionStatus.CLIENT,
    ExecutionStatus.REPLAYED,
    ExecutionStatus.UNMATCHED,
)


class ToolExecution(models.Model):
    """The audit row of one tool call: what was asked, what ran, what the model was sent."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tool_executions")
    message = models.ForeignKey(
        Message,
        on_delete=models.CASCADE,
        related_name="tool_executions",
        help_text="The assistant message whose tool_calls asked for this call.",
    )
    step = models.PositiveSmallIntegerField(default=0)
    tool_call_id = StorableCharField(max_length=128, unique=True)
    name = StorableCharField(max_length=64)
    arguments = StorableJSONField(null=True, blank=True, help_text="As received, when valid JSON.")
    arguments_raw = StorableTextField(
        blank=True, help_text="The exact string the model sent, kept when it was not valid JSON."
    )
    status = models.CharField(
        max_length=24, choices=ExecutionStatus.choices, default=ExecutionStatus.PENDING
    )
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = StorableTextField(blank=True)
    result = StorableJSONField(null=True, blank=True, help_text="The tool's raw result.")
    content = StorableTextField(null=True, blank=True, help_text="What the model was sent.")
    result_chars = models.PositiveIntegerField(null=True, blank=True)
    truncated = models.BooleanField(default=False)
    error = StorableTextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Renewed while the call runs: a stale one died with its worker.",
    )
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    worker = models.CharField(max_length=255, blank=True)
    # A `replayed` call: the original run's call whose recorded result it was served.
    replayed_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # A call of a replay (its run's `replay_of` is set), fixed when the row is made: the
    # audit's statistics leave replays out of real traffic reading the index alone.
    replay = models.BooleanField(default=False, editable=False)
    # What the tool policies decided for the call when it was asked for (chat/policies.py):
    # allow, ask or deny, and the rule that decided it (its id, kept if the rule is deleted;
    # NULL when no rule covered the call). Blank for a /v1 client's own tool.
    policy_decision = models.CharField(max_length=8, blank=True, default="", editable=False)
    policy_rule = models.PositiveIntegerField(null=True, blank=True, editable=False)
    # Approved with other arguments than the model's: those the tool ran with (masked as
    # `arguments` is). The history the model reads has the call as it ran.
    approved_arguments = StorableJSONField(null=True, blank=True, editable=False)
    # A call that ran without asking because its owner had said yes to the tool in this
    # conversation (chat/models/policies.py StandingApproval).
    standing_approval = models.ForeignKey(
        "chat.StandingApproval",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="calls",
        editable=False,
    )

    class Meta:
        ordering = ["created_at"]
        indexes = [
            models.Index(fields=["run", "step"], name="toolexec_run_step"),
            models.Index(fields=["name", "-created_at"], name="toolexec_name_recent"),
            models.Index(fields=["status"], name="toolexec_status"),
            # The audit's statistics per tool for a period, from the index alone on PostgreSQL
            # (the rows themselves hold results and are wide).
            models.Index(
                fields=["created_at"],
                include=[
                    "name",
                    "status",
                    "duration_ms",
                    "truncated",
                    "replay",
                    "policy_decision",
                    "approved_by",
                    "decided_at",
                ],
                name="toolexec_created_stats",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=ExecutionStatus.values), name="toolexec_status_valid"
            ),
            # A recorded call is served once per replay, even to equal calls running at
            # once (chat/engine/replay_tools.py).
            models.UniqueConstraint(
                fields=["run", "replayed_from"],
                condition=Q(replayed_from__isnull=False),
                name="toolexec_replayed_once",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.tool_call_id}, {self.status})"

    @property
    def approval_wait_ms(self) -> int | None:
        """How long the call waited for its decision (None if it needed none, or waits)."""
        if self.decided_at is None or self.created_at is None:
            return None
        return max(0, int((self.decided_at - self.created_at).total_seconds() * 1000))

    @property
    def undecided_wait_end(self) -> datetime | None:
        """When a call that waited for a person stopped waiting with no decision made.

        That is its run's end (a cancel answered it): the wait was people's time
        all the same. None for a call that was decided, needed no decision, or waits.
        """
        if self.decided_at is not None or self.started_at is not None:
            return None
        if self.policy_decision != PolicyDecision.ASK or self.finished_at is None:
            return None
        # The run's end is when the wait stopped (Run.approval_wait_ms counts to it);
        # the row's answer is written a moment later in the same transaction.
        run = self.run if type(self).run.is_cached(self) else None
        if run is not None and run.finished_at is not None:
            return min(self.finished_at, run.finished_at)
        return self.finished_at

    @property
    def undecided_wait_ms(self) -> int | None:
        """How long a call waited for a person before its run ended undecided (a cancel)."""
        ended = self.undecided_wait_end
        if ended is None or self.created_at is None:
            return None
        return max(0, int((ended - self.created_at).total_seconds() * 1000))

    @property
    def policy(self) -> dict[str, Any] | None:
        """What the tool policies decided: `{"decision", "rule"}` (None for a client's tool)."""
        if not self.policy_decision:
            return None
        return {"decision": self.policy_decision, "rule": self.policy_rule}

    @property
    def decision(self) -> str:
        """What was decided, in words: "approved", "rejected", "expired", "denied" or ""."""
        if self.policy_decision == "deny":
            return "denied"
        if self.decided_at is None:
            return ""
        if self.status == ExecutionStatus.REJECTED:
            return "expired" if self.approved_by_id is None else "rejected"
        return "approved"
