"""The data model of DESIGN.md section 3.

Messages are stored in the OpenAI Chat Completions shape, one column per field,
and the role rules are CheckConstraints so that the database itself refuses a
row the OpenAI API would refuse.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from tools.fields import StorableCharField, StorableJSONField, StorableTextField


class Mode(models.TextChoices):
    """How a run continues after its tools (chat/engine/continuation.py)."""

    TWO_PASS = "two_pass", "Two-pass composition"
    LOOP = "loop", "Agent loop"
    DIRECT = "direct", "Direct reply"
    LLM = "llm", "LLM decider (structured output, for models without tool calling)"


MAX_STEPS_LIMIT = 50


class Conversation(models.Model):
    """A chat between one user and the assistant."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = StorableCharField(max_length=200, blank=True)
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.TWO_PASS)
    max_steps = models.PositiveSmallIntegerField(default=5)
    model = StorableCharField(max_length=128, blank=True, help_text="Overrides LLM_MODEL.")
    system_prompt = StorableTextField(blank=True)
    # The last RunEvent.seq handed out in this conversation: events are numbered
    # by bumping it under the row lock (chat/live/events.py).
    last_event_seq = models.BigIntegerField(default=0, editable=False)
    # For a conversation held through /v1/chat/completions (chat/openai_api/): the digest
    # of the history its client saw last, which the client's next request begins with,
    # and the client's own name for the conversation (an X-OpenWebUI-Chat-Id), if any.
    client_digest = models.CharField(max_length=64, blank=True, default="", editable=False)
    client_ref = StorableCharField(max_length=200, blank=True, default="", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["owner", "-updated_at"], name="conversation_owner_recent"),
            # A /v1 request's history is found by its digest among its user's conversations.
            models.Index(
                fields=["owner", "client_digest"],
                condition=~Q(client_digest=""),
                name="conversation_client_digest",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "client_ref"],
                condition=~Q(client_ref=""),
                name="conversation_client_ref_unique",
            ),
            models.CheckConstraint(
                condition=Q(mode__in=Mode.values), name="conversation_mode_valid"
            ),
            models.CheckConstraint(
                condition=Q(max_steps__gte=1, max_steps__lte=MAX_STEPS_LIMIT),
                name="conversation_max_steps_range",
            ),
        ]

    def __str__(self) -> str:
        return self.title or f"Conversation {self.id}"


class Role(models.TextChoices):
    SYSTEM = "system", "System"
    USER = "user", "User"
    ASSISTANT = "assistant", "Assistant"
    TOOL = "tool", "Tool"


class Message(models.Model):
    """One message of a conversation, in OpenAI Chat Completions shape."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    run = models.ForeignKey(
        "Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="messages"
    )
    position = models.PositiveIntegerField()
    role = models.CharField(max_length=16, choices=Role.choices)
    content = StorableTextField(null=True, blank=True)
    tool_calls = StorableJSONField(null=True, blank=True)
    tool_call_id = StorableCharField(max_length=128, null=True, blank=True, db_index=True)
    name = StorableCharField(max_length=64, null=True, blank=True)
    resource = models.ForeignKey(
        "tools.Resource", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    model = StorableCharField(max_length=128, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    finish_reason = StorableCharField(max_length=32, blank=True)
    # Follow-up prompts offered after a final answer (from its tools' results and the model).
    suggestions = StorableJSONField(null=True, blank=True)
    # What the model wrote before its answer (`reasoning_content`, `reasoning`), assistant
    # only: shown and exported on request, never sent back to a model.
    # The database default keeps inserts of code that predates the column working.
    reasoning = StorableTextField(blank=True, default="", db_default="")
    # Set when a regenerated answer or an edited question replaced this message: it stays
    # in the record (and the audit) but leaves the conversation a model or a reader sees.
    superseded_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "position"], name="message_position_unique"
            ),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="message_role_valid"),
            # A tool message answers one call: it names the call and the tool.
            models.CheckConstraint(
                condition=~Q(role=Role.TOOL)
                | (
                    Q(tool_call_id__isnull=False, name__isnull=False)
                    & ~Q(tool_call_id="")
                    & ~Q(name="")
                ),
                name="message_tool_has_call_id_and_name",
            ),
            # ...and only a tool message does.
            models.CheckConstraint(
                condition=Q(role=Role.TOOL) | Q(tool_call_id__isnull=True, name__isnull=True),
                name="message_call_id_only_on_tool",
            ),
            # Only the assistant calls tools and has a latency.
            models.CheckConstraint(
                condition=Q(role=Role.ASSISTANT)
                | Q(tool_calls__isnull=True, latency_ms__isnull=True),
                name="message_tool_calls_only_on_assistant",
            ),
            # Only a model's answer has reasoning.
            models.CheckConstraint(
                condition=Q(role=Role.ASSISTANT) | Q(reasoning=""),
                name="message_reasoning_only_on_assistant",
            ),
            # Content may be missing only where tool_calls say what the message is.
            models.CheckConstraint(
                condition=Q(content__isnull=False)
                | Q(role=Role.ASSISTANT, tool_calls__isnull=False),
                name="message_content_null_only_with_tool_calls",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role} #{self.position}"


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


ACTIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL)


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
    error = StorableTextField(blank=True)
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
    # The turn's trace (chat/telemetry/tracing.py): the W3C traceparent of its
    # span, then the caller's span id when a request's traceparent was
    # continued; "" when tracing is off. Every step, in any worker, continues it.
    trace_parent = models.CharField(max_length=80, blank=True, default="", editable=False)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["conversation", "-created_at"], name="run_conversation_recent"),
            models.Index(fields=["status", "heartbeat_at"], name="run_status_heartbeat"),
            # The audit's reads by period: runs begun between two times, newest first
            # (chat/audit/). PostgreSQL counts and bins them from the index alone.
            models.Index(
                fields=["created_at"],
                include=["status", "latency_ms", "model_calls"],
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
    attempts = models.PositiveSmallIntegerField(default=0)
    # How a server's limit changed the call, when it did ("asked again without streaming: ...").
    note = StorableCharField(max_length=300, blank=True, default="")

    class Meta:
        ordering = ["run", "started_at"]
        indexes = [
            models.Index(fields=["run", "step"], name="modelcall_run_step"),
            # The audit's statistics per model for a period, from the index alone on PostgreSQL.
            models.Index(
                fields=["started_at"],
                include=[
                    "model",
                    "status",
                    "latency_ms",
                    "first_token_ms",
                    "prompt_tokens",
                    "completion_tokens",
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


FINISHED_EXECUTION_STATUSES = (
    ExecutionStatus.SUCCEEDED,
    ExecutionStatus.FAILED,
    ExecutionStatus.TIMED_OUT,
    ExecutionStatus.REJECTED,
    ExecutionStatus.INTERRUPTED,
    ExecutionStatus.CANCELLED,
    # Done as far as the run is concerned: it ends with the call for its client.
    ExecutionStatus.CLIENT,
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
                include=["name", "status", "duration_ms", "truncated"],
                name="toolexec_created_stats",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=ExecutionStatus.values), name="toolexec_status_valid"
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
    def decision(self) -> str:
        """What was decided, in words: "approved", "rejected", "expired" or ""."""
        if self.decided_at is None:
            return ""
        if self.status == ExecutionStatus.REJECTED:
            return "expired" if self.approved_by_id is None else "rejected"
        return "approved"


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
