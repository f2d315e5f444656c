"""The data model of DESIGN.md section 3, one module per part of the record.

- conversations.py: conversations and their messages (the OpenAI shape);
- runs.py: runs, and the events they publish;
- audit.py: each model call and each tool execution of a run;
- policies.py: the rules that decide which tool calls run, wait for a person, or are refused;
- budgets.py: the limits on what a person may spend.

Everything is importable from `chat.models`, as Django and the code expect.
"""

from chat.models.audit import (
    FINISHED_EXECUTION_STATUSES,
    CallStatus,
    ExecutionStatus,
    ModelCall,
    ModelCallPurpose,
    ToolExecution,
    model_step_count,
    model_steps,
)
from chat.models.budgets import BudgetLimit, BudgetPeriod
from chat.models.conversations import (
    MAX_STEPS_LIMIT,
    Conversation,
    Message,
    Mode,
    Role,
    Source,
)
from chat.models.policies import PolicyDecision, StandingApproval, ToolPolicy
from chat.models.runs import (
    ACTIVE_RUN_STATUSES,
    OWN_LATENCY_MS,
    ReplayMode,
    ReplayTools,
    Run,
    RunEvent,
    RunSources,
    RunStatus,
    StepSource,
    ToolSource,
)

__all__ = [
    "ACTIVE_RUN_STATUSES",
    "FINISHED_EXECUTION_STATUSES",
    "MAX_STEPS_LIMIT",
    "OWN_LATENCY_MS",
    "BudgetLimit",
    "BudgetPeriod",
    "CallStatus",
    "Conversation",
    "ExecutionStatus",
    "Message",
    "Mode",
    "ModelCall",
    "ModelCallPurpose",
    "PolicyDecision",
    "ReplayMode",
    "ReplayTools",
    "Role",
    "Run",
    "RunEvent",
    "RunSources",
    "RunStatus",
    "Source",
    "StandingApproval",
    "StepSource",
    "ToolExecution",
    "ToolPolicy",
    "ToolSource",
    "model_step_count",
    "model_steps",
]
