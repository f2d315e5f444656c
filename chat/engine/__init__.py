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

The modules (all of them), in the order a run meets them:

- `dispatch`: hands a run step or a tool call to Celery, or to in-process threads;
- `ledger` (a package): the one writer of a run's row (its claim, the writes under its lease,
  its status: `ledger.runs`), of each tool call's outcome (`ledger.calls`), of the assistant
  and tool messages a run stores and their later updates (`ledger.messages`) and of each
  model call's audit row (`ledger.model_calls`); and the only maker of a run's events,
  each where the write it tells of is made;
- `lease`: the heartbeat that renews a run's lease, when a lease is stale, the row locks;
- `claim_read`: the claimed run as the loop reads it (with its claim, on PostgreSQL);
- `states`: the turn's named states, the table of what moves a run, the status each stores;
- `run`: the loop that does the work of the run's state until the worker lets go;
- `moves`: what each state's work hands the loop: the trigger, and what the next state works on;
- `run_limits`: a run's per-run budget limits, checked before each of its model calls after the first;
- `forced_replay`: a forced replay's turn: the new model asked at each of the original's steps;
- `request`: what a model call sends (the history, the step's instruction and tools), its hash;
- `model_step`: one model step, top to bottom: its inputs read, its call streamed, its answer stored;
- `step_context`: what a model step reads once at its start: its model resolved, the policies, the request;
- `model_calls`: every model call, made and streamed, its audit row recorded by the ledger;
- `deltas`: the answer's text as `message.delta` events (the first at once, then coalesced);
- `call_repair`: what a model answered, made storable (a decision as a call, calls repaired);
- `answer_plan`: what an answer asks for: whose calls, the policies' verdicts, who runs them;
- `answer_store`: a step's answer stored (its message through the ledger), its calls' audit
  rows, the run's counters;
- `tool_calls`: running one call, storing its result, the latch, parking;
- `call_records`: a call's audit row as asked, and where its tool message goes;
- `call_liveness`: whether a running call is alive (its heartbeat), and when it is presumed dead;
- `replay_tools`: a replay's calls with recorded tools, served from the original's record;
- `approvals`: which calls wait for a person, and storing the decision (or its expiry);
- `continuation`: the policies that choose what follows a step of tools;
- `after_tools`: what follows a step's answered calls: the policy asked, the next model step opened;
- `suggestions`: the follow-up prompts after a final answer, from its tools and the model;
- `turn_complete`: how the loop completes a turn: after its answer, or with a direct reply;
- `finish`: ending a run (completed, failed, cancelled) with every call answered;
- `recovery`: finding runs whose worker died, and queuing them again; expiring approvals.
"""
