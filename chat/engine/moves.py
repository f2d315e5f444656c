"""What the work of a turn state hands the run loop: the trigger that moves the run, and its data.

Each state's work (chat/engine/run.py) returns one of these, as pydantic-ai's
graph nodes return the next node and the openai-agents SDK's steps return
`NextStepFinalOutput | NextStepRunAgain | NextStepInterruption`: the trigger
names the move in the table (chat/engine/states.py `transition`), and the
value carries what the next state works on, so the loop hands it on and no
state reads what another left on the turn.

- `Ask`: a model step next (ASKING, COMPOSING): where its answer goes, the
  calls it follows, its opening and instruction when the policy chose them;
- `RunTools`: an answer's calls, to run here or wait for (RUNNING_TOOLS);
- `Final`: the final answer stored, the run still open (ANSWERED);
- `Direct`: the tools' own messages answer (DIRECT);
- `Moved`: the trigger alone (an end, a park, a wait for a person, a forced replay).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from chat.engine.model_step import StepOpening
from chat.engine.states import Trigger
from chat.live.event_types import Event
from chat.models import Message, ToolExecution


@dataclasses.dataclass(frozen=True)
class StepCalls:
    """An answer with tool calls, and its calls' audit rows."""

    answer: Message
    executions: list[ToolExecution]
    inline: list[ToolExecution] = dataclasses.field(default_factory=list)  # to run here, now

    @property
    def position(self) -> int:
        """Where the next answer goes: after the answer and the answers to its calls."""
        return self.answer.position + len(self.answer.tool_calls or []) + 1


@dataclasses.dataclass(frozen=True)
class Moved:
    """The trigger alone: nothing for the next state to work on."""

    trigger: Trigger


@dataclasses.dataclass(frozen=True)
class Ask:
    """A model step next: its answer at `position`, after the calls of `after` (None: the first)."""

    trigger: Trigger
    position: int
    after: StepCalls | None = None
    opening: StepOpening | None = None  # chosen by the policy after calls; None: opened when asked
    instruction: str | None = None  # the policy's, for the step
    announce: Sequence[Event] | None = ()  # before its message.created; None: published already
    empty: int = 0  # answers with no text in a row before this step (one is asked again)


@dataclasses.dataclass(frozen=True)
class RunTools:
    """An answer's calls: one to run here, or calls running elsewhere to wait for."""

    trigger: Trigger
    calls: StepCalls


@dataclasses.dataclass(frozen=True)
class Final:
    """The final answer, stored; the run completes after the follow-ups."""

    trigger: Trigger
    answer: Message


@dataclasses.dataclass(frozen=True)
class Direct:
    """The turn ends with the tools' own messages, after the calls of `calls`."""

    trigger: Trigger
    calls: StepCalls


Move = Moved | Ask | RunTools | Final | Direct
