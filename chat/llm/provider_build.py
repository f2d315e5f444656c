"""A provider built for a configured endpoint: the offline model, or an OpenAI-compatible server.

Built after the model was resolved (chat/llm/endpoints.py), from what its
endpoint says; nothing here resolves a name.
"""

from __future__ import annotations

from django.conf import settings

from chat.llm.base import ChatProvider
from chat.llm.offline import OfflineProvider
from chat.llm.providers_file import Endpoint


def provider_build(found: Endpoint) -> ChatProvider:
    """The provider that serves the configured endpoint `found` (chat/llm/endpoints.py resolved it)."""
    if found.offline:
        return OfflineProvider(
            word_delay_s=settings.TOOLCHAT_OFFLINE_WORD_DELAY_MS / 1000, name=found.name
        )
    # Imported here so that the offline default never loads the SDK.
    from chat.llm.limits import local_server
    from chat.llm.openai_provider import OpenAIProvider
    from chat.llm.request_body import Known

    return OpenAIProvider(
        api_key=found.api_key,
        base_url=found.base_url or None,
        timeout_s=settings.LLM_TIMEOUT_S,
        max_retries=settings.LLM_MAX_RETRIES,
        call_deadline_s=settings.LLM_CALL_DEADLINE_S,
        attempt_deadline_s=settings.LLM_ATTEMPT_DEADLINE_S,
        token_limit_param=found.token_limit_param,
        name=found.name,
        headers=found.headers,
        known=Known(
            stream=found.stream,
            stream_tools=found.stream_tools,
            stream_usage=found.stream_usage,
            parallel_tool_calls=found.parallel_tool_calls,
            # A local server may let a model write until its context is full, or for ever.
            max_tokens=settings.LLM_LOCAL_MAX_TOKENS if local_server(found.base_url) else None,
        ),
    )
