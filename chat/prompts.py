"""The system prompt that begins every model call of a run: whose it is, decided in one place.

A conversation's own prompt wins; without one (blank), its provider's
`systemPrompt` in TOOLCHAT_PROVIDERS when the file gives one, else the
server's default, TOOLCHAT_SYSTEM_PROMPT (on unless set to "none"). A run stores the prompt it
started with (`Run.system_prompt`) and each of its model calls sends that one
first, so that the audit shows what the model was told even after the
setting or the conversation changed. The prompt is never a Message row: the
history stays the user's conversation (DESIGN.md sections 3 and 6).
"""

from __future__ import annotations

from django.conf import settings

from chat.llm.endpoints import UnknownModel, endpoint, model_resolve
from chat.models import Conversation, Run


def system_prompt_for(conversation: Conversation) -> str:
    """The system prompt a new run of this conversation sends ("" for none)."""
    own = str(conversation.system_prompt)
    if own.strip():
        return own
    return default_system_prompt(str(conversation.model))


def default_system_prompt(model: str) -> str:
    """What a conversation talking to `model` ("" the default) is told without a prompt of its own.

    Its provider's `systemPrompt` (more particular than the server's), else
    TOOLCHAT_SYSTEM_PROMPT.
    """
    try:
        provider = endpoint(model_resolve(model).provider)
    except UnknownModel:
        provider = None  # its turn fails, saying so; the prompt does not matter
    if provider is not None and provider.system_prompt is not None:
        return provider.system_prompt
    return str(settings.TOOLCHAT_SYSTEM_PROMPT)


def run_system_prompt(run: Run) -> str:
    """The system prompt every model call of the run sends: the one it started with."""
    if run.system_prompt is not None:
        return str(run.system_prompt)
    # A run queued before runs stored their prompt: what a new run would be told.
    return system_prompt_for(run.conversation)
