"""Model providers: the Protocol (base.py), the configured endpoints (endpoints.py), a
provider built for one (provider_build.py), the OpenAI-compatible provider and the offline model."""

from __future__ import annotations

from chat.llm.base import ChatProvider
from chat.llm.endpoints import (
    ModelChoice,
    UnknownModel,
    default_model,
    endpoint,
    model_resolve,
)
from chat.llm.provider_build import provider_build


def get_provider(name: str | None = None) -> ChatProvider:
    """The provider named `name` (TOOLCHAT_PROVIDERS), or the default model's.

    Cheap to call for every model call: an OpenAI-compatible provider takes the
    process's cached SDK client for its endpoint (`openai_client.openai_client`).
    """
    found = endpoint(name or default_model().split("/", 1)[0])
    return provider_build(found)


def provider_for(model: str) -> tuple[ChatProvider, ModelChoice]:
    """The provider that serves the model named `model` ("" is the default), and the choice.

    Raises `endpoints.UnknownModel` when no configured provider offers it. The
    model is resolved first, then its endpoint's provider built (provider_build.py).
    """
    choice = model_resolve(model)
    found = endpoint(choice.provider)
    return provider_build(found), choice


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
