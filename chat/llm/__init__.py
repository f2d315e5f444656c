"""Model providers: the Protocol (base.py), the OpenAI-compatible one, and the offline model."""

from __future__ import annotations

from django.conf import settings

from chat.llm.base import ChatProvider
from chat.llm.offline import OfflineProvider


def get_provider(name: str | None = None) -> ChatProvider:
    """The provider chosen by LLM_PROVIDER (offline when no OPENAI_API_KEY is set).

    Cheap to call for every model call: the openai provider takes the process's
    cached SDK client for the current settings (`openai_provider.openai_client`).
    """
    name = name or settings.LLM_PROVIDER
    if name == "openai":
        # Imported here so that the offline default never loads the SDK.
        from chat.llm.openai_provider import OpenAIProvider

        return OpenAIProvider(
            api_key=settings.OPENAI_API_KEY,
            base_url=settings.OPENAI_BASE_URL or None,
            timeout_s=settings.LLM_TIMEOUT_S,
            max_retries=settings.LLM_MAX_RETRIES,
            call_deadline_s=settings.LLM_CALL_DEADLINE_S,
            attempt_deadline_s=settings.LLM_ATTEMPT_DEADLINE_S,
        )
    return OfflineProvider(word_delay_s=settings.TOOLCHAT_OFFLINE_WORD_DELAY_MS / 1000)
