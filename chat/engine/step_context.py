"""What one model step reads before its call, read once at its start and carried to its end.

A step, once opened (chat/engine/model_step.py `step_open`: the id its
answer will have, its purpose, its model, its number), reads its inputs here,
once (`step_context`): the provider and model its model name resolves to, the policies of the run's
owner, the names of a /v1 client's own tools, and the request (the kept history with the run's system prompt, the
step's instruction, the tools it offers), with what the answer will need of
them: the tools' follow-ups for a final answer, and whether the model's own
follow-ups are asked before the run ends. Nothing is written here. The step
(chat/engine/model_step.py) makes its call with the context, and its answer is
stored from it (chat/engine/answer_store.py); nothing downstream resolves the
model or reads the policies again.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

from chat.engine.request import client_tool_names, request_build
from chat.engine.suggestions import model_suggestions_wanted, tool_suggestions
from chat.history import RunHistory
from chat.llm import provider_for
from chat.llm.base import ChatProvider, ChatRequest
from chat.models import Run
from chat.policies import ToolPolicies, run_policies


@dataclasses.dataclass(frozen=True)
class StepContext:
    """A model step's inputs, read once at its start: what it asks, of whom, and under which rules."""

    run: Run
    token: uuid.UUID
    provider: ChatProvider  # the endpoint that serves the step's model
    request: ChatRequest  # what the model is sent
    policies: ToolPolicies  # the run owner's: what the answer's calls may do
    theirs: frozenset[str]  # the names of a /v1 client's own tools: it runs their calls
    position: int  # where the answer goes
    hasher: Callable[[ChatRequest], str]  # the run's `RequestHasher`
    suggestions: list[str]  # the turn's tools' follow-ups, kept with a final answer
    suggestions_wanted: bool  # the model's follow-ups are asked before the run ends


def step_context(
    run: Run,
    token: uuid.UUID,
    *,
    purpose: str,
    model: str,
    history: RunHistory,
    instruction: str | None,
    position: int,
    hasher: Callable[[ChatRequest], str],
) -> StepContext:
    """Read the inputs of a step of `purpose` asking `model`: the model resolved, the policies, the request.

    Raises `UnknownModel` (chat/llm/endpoints.py) when no configured provider
    offers the model; nothing is read then.
    """
    provider, choice = provider_for(model)
    policies = run_policies(run)
    theirs = client_tool_names(run)
    request = request_build(
        run,
        history,
        purpose=purpose,
        model=choice.model,
        instruction=instruction,
        policies=policies,
        theirs=theirs,
    )
    return StepContext(
        run=run,
        token=token,
        provider=provider,
        request=request,
        policies=policies,
        theirs=theirs,
        position=position,
        hasher=hasher,
        suggestions=tool_suggestions(request.messages),
        suggestions_wanted=model_suggestions_wanted(run),
    )
