"""The audit rows of a run, as the API shows them: its model calls and its tool executions.

`RunSerializer` (chat/api/serializers.py) nests them; `/api/v1/tool-executions/`
lists the executions alone (chat/api/tools.py).
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from chat.api.run_data import CALL_FIELDS, CALL_FIGURES
from chat.models import ExecutionStatus, ModelCall, PolicyDecision, ToolExecution


class ModelCallSerializer(serializers.ModelSerializer[ModelCall]):
    """One request to a model: its purpose, timing and usage."""

    response_message_id = serializers.UUIDField(read_only=True, allow_null=True)
    tools_offered = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="Names of the tools sent."
    )
    cost_usd = serializers.FloatField(
        read_only=True,
        allow_null=True,
        help_text="US dollars, from the provider's prices; null when its model has no price "
        "or the server reported no usage.",
    )
    forced_answer = serializers.JSONField(
        read_only=True,
        allow_null=True,
        help_text="A forced replay's call: what the model answered at the original's step, "
        "`{content, tool_calls}` (nothing ran); null for every other call.",
    )

    class Meta:
        model = ModelCall
        fields = [
            "id",
            *CALL_FIELDS,
            "tools_offered",
            "response_message_id",
            "started_at",
            *CALL_FIGURES,
            "cost_usd",
            "forced_answer",
        ]
        read_only_fields = fields


class PolicyVerdictSerializer(serializers.Serializer[Any]):
    """A tool call's policy decision: allow, ask or deny, and the deciding rule's id."""

    decision = serializers.ChoiceField(choices=PolicyDecision.choices)
    rule = serializers.IntegerField(allow_null=True, help_text="A rule of /api/v1/tool-policies/.")


class ToolExecutionSerializer(serializers.ModelSerializer[ToolExecution]):
    """The audit row of one tool call: what the model asked, what ran, what it was sent back."""

    run_id = serializers.UUIDField(read_only=True)
    conversation_id = serializers.UUIDField(read_only=True)
    message_id = serializers.UUIDField(
        read_only=True, help_text="The assistant message whose tool_calls asked for this call."
    )
    approved_by_id = serializers.IntegerField(read_only=True, allow_null=True)
    arguments = serializers.JSONField(
        read_only=True,
        allow_null=True,
        help_text="The arguments as received (sensitive ones masked); null when not valid JSON.",
    )
    result = serializers.JSONField(
        read_only=True, allow_null=True, help_text="The tool's raw result, before truncation."
    )
    status = serializers.ChoiceField(choices=ExecutionStatus.choices, read_only=True)
    replayed_from = serializers.UUIDField(
        source="replayed_from_id",
        read_only=True,
        allow_null=True,
        help_text="A `replayed` call of a replay: the original's call whose recorded result it "
        "was served. Null otherwise.",
    )
    approved_arguments = serializers.JSONField(
        read_only=True,
        allow_null=True,
        help_text="Approved with other arguments than the model's: those the call ran with "
        "(sensitive ones masked); null otherwise. `arguments` stays what the model sent.",
    )
    standing_approval = serializers.IntegerField(
        source="standing_approval_id",
        read_only=True,
        allow_null=True,
        help_text="The standing approval (for the conversation) that let it run without asking.",
    )
    policy = PolicyVerdictSerializer(
        read_only=True,
        allow_null=True,
        help_text="What the tool policies decided when the call was asked for, and the rule "
        "that decided it (null: no rule covered it). Null for a /v1 client's own tool and for "
        "calls recorded before policies existed.",
    )

    class Meta:
        model = ToolExecution
        fields = [
            "id",
            "run_id",
            "conversation_id",
            "message_id",
            "step",
            "tool_call_id",
            "name",
            "arguments",
            "arguments_raw",
            "status",
            "approved_by_id",
            "decided_at",
            "decision_reason",
            "result",
            "content",
            "result_chars",
            "truncated",
            "error",
            "created_at",
            "started_at",
            "finished_at",
            "duration_ms",
            "attempts",
            "replayed_from",
            "policy",
            "approved_arguments",
            "standing_approval",
        ]
        read_only_fields = fields
