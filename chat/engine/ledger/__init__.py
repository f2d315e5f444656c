"""The ledger: the one writer of a turn's record: a run's status, its messages, calls and model calls.

- chat/engine/ledger/runs.py: a run's row, its claim, the writes fenced by
  its lease, and the only writes of `Run.status`, each a move of the turn's
  table (tests/chat/engine/test_one_status_writer.py holds it).
- chat/engine/ledger/calls.py: what became of each tool call (a
  ToolExecution's status, result, decision, timings): the only writes of a
  call's outcome (tests/chat/engine/test_one_outcome_writer.py holds it), each
  with its `tool_call.*` event; the step's `tools.ended`, and what a running
  tool reports, as its event.
- chat/engine/ledger/model_calls.py: each model call's audit row, built,
  filled in and stored once: the only creation or update of a ModelCall
  (tests/chat/engine/test_one_model_call_writer.py holds it).

- chat/engine/ledger/messages.py: the assistant and tool messages a run
  stores and their later updates (an approver's arguments, the follow-ups, a
  late result): the only writes of a turn's Messages
  (tests/chat/engine/test_one_message_writer.py holds it), and every event
  that tells of a message: stored, streamed, superseded, a user's.

Callers import from `chat.engine.ledger`.
"""

from chat.engine.ledger.calls import (
    call_answer_store,
    call_decided,
    call_denied,
    call_for_client,
    call_held,
    call_replay_link,
    call_reported,
    call_standing_approved,
    call_start,
    call_start_write,
    late_result_store,
    tools_ended,
)
from chat.engine.ledger.messages import (
    answer_opened,
    answer_restarted,
    answer_streamed,
    assistant_message_create,
    direct_answer_create,
    message_calls_rewrite,
    message_suggestions_write,
    messages_superseded,
    tool_message_build,
    tool_message_correct,
    tool_message_create,
    tool_message_store,
    user_message_created,
)
from chat.engine.ledger.model_calls import (
    model_call_answer_store,
    model_call_answered,
    model_call_asked,
    model_call_failed,
    model_call_figures,
    model_call_forced,
    model_call_forced_store,
    model_call_row,
    model_call_stopped,
    model_call_suggest_store,
    model_call_unreadable,
)
from chat.engine.ledger.runs import (
    Claim,
    budget_warnings,
    run_approval_wait,
    run_budget_warned,
    run_claim,
    run_decided,
    run_ended,
    run_ended_event,
    run_started,
    run_write,
)

__all__ = [
    "Claim",
    "answer_opened",
    "answer_restarted",
    "answer_streamed",
    "assistant_message_create",
    "budget_warnings",
    "call_answer_store",
    "call_decided",
    "call_denied",
    "call_for_client",
    "call_held",
    "call_replay_link",
    "call_reported",
    "call_standing_approved",
    "call_start",
    "call_start_write",
    "direct_answer_create",
    "late_result_store",
    "message_calls_rewrite",
    "message_suggestions_write",
    "messages_superseded",
    "model_call_answer_store",
    "model_call_answered",
    "model_call_asked",
    "model_call_failed",
    "model_call_figures",
    "model_call_forced",
    "model_call_forced_store",
    "model_call_row",
    "model_call_stopped",
    "model_call_suggest_store",
    "model_call_unreadable",
    "run_approval_wait",
    "run_budget_warned",
    "run_claim",
    "run_decided",
    "run_ended",
    "run_ended_event",
    "run_started",
    "run_write",
    "tool_message_build",
    "tool_message_correct",
    "tool_message_create",
    "tool_message_store",
    "tools_ended",
    "user_message_created",
]
