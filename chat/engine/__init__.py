"""The turn engine: from a user message to model calls, tool calls and a final answer.

Every step is persisted before the next one starts, so the database always
says what comes next:

- no assistant message in the run yet: call the model with the tools;
- the last assistant message has tool calls that are not all answered: the
  tools are running. A single call runs in the run's own worker, which keeps
  the lease; several run as tasks, and the last one to finish queues the run
  again (a latch in the database: the count of unfinished executions, read
  under the run's row lock);
- all answered: the continuation policy chooses a model call with tools, a
  composing call without tools, or a direct reply;
- the last assistant message has no tool calls: the run is complete.

The worker holding a run keeps what it stored (the history, its last answer,
its calls) in memory while it loops, and asks the database only when it takes
a run over or is woken by its tools.

A run is worked on by whoever holds its lease, taken with a compare-and-set
and renewed by heartbeats. A redelivered task whose run has a live lease does
nothing; one whose lease went stale (its worker died) takes over and resumes
from the rows. A finished tool call is never run again, and one that was
in flight when its worker died is run again only if its tool is idempotent;
otherwise the model is told it was interrupted.

The modules, in the order a run meets them:

- `dispatch`: hands a run step or a tool call to Celery, or to in-process threads;
- `lease`: claiming a run, its heartbeat, the row locks every write takes;
- `run`: the loop that finds where a run stands and does what comes next;
- `request`: what a model call sends (the history, the step's instruction and tools);
- `model_step`: one model call, streamed to live events, and its stored answer;
- `model_calls`: a model call's audit row (failed, or recorded on takeover);
- `deltas`: the answer's text as `message.delta` events (the first at once, then coalesced);
- `answer`: what a model answered, made storable (a decision as a call, calls repaired);
- `tool_calls`: running one call, storing its result, the latch, parking;
- `approvals`: which calls wait for a person, and storing the decision (or its expiry);
- `continuation`: the policies that choose what follows a step of tools;
- `finish`: ending a run (completed, failed, cancelled) with every call answered;
- `recovery`: finding runs whose worker died, and queuing them again.
"""
