"""Model providers: the Protocol (base.py), the configured endpoints (endpoints.py), the
OpenAI-compatible provider and the offline model."""

from __future__ import annotations

from django.conf import settings

from chat.llm.base import ChatProvider
from chat.llm.endpoints import (
    ModelChoice,
    UnknownModel,
    default_model,
    endpoint,
    model_resolve,
)
from chat.llm.offline import OfflineProvider
from chat.llm.providers_file import Endpoint


def get_provider(name: str | None = None) -> ChatProvider:
    """The provider named `name` (TOOLCHAT_PROVIDERS), or the default model's.

    Cheap to call for every model call: an OpenAI-compatible provider takes the
    process's cached SDK client for its endpoint (`openai_client.openai_client`).
    """
    return _provider(endpoint(name or default_model().split("/", 1)[0]))


def provider_for(model: str) -> tuple[ChatProvider, ModelChoice]:
    """The provider that serves the model named `model` ("" is the default), and the choice.

    Raises `endpoints.UnknownModel` when no configured provider offers it.
    """
    choice = model_resolve(model)
    found = endpoint(choice.provider)
    return _provider(found), choice


def _provider(found: Endpoint) -> ChatProvider:
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


def model_refuses_images(model: str) -> bool:
    """Whether the model (`<provider>/<model>`) has refused images in this process."""
    from chat.llm.limits import server_limits

    try:
        provider, choice = provider_for(model)
    except UnknownModel:
        return False
    base_url = getattr(provider, "base_url", None)
    return base_url is not None and not server_limits(base_url, choice.model).images


def model_images_refused(model: str, why: str) -> None:
    """Remember in this process that the model refused images (a run's worker learned it)."""
    from chat.llm.limits import images_refused

    try:
        provider, choice = provider_for(model)
    except UnknownModel:
        return
    base_url = getattr(provider, "base_url", None)
    if base_url is not None:
        images_refused(base_url, choice.model, why)
