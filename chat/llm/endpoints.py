"""The model servers toolchat may call, and the models a conversation may choose.

`TOOLCHAT_PROVIDERS` names a JSON file of OpenAI-compatible endpoints, each
with its key and models, in the spirit of the `mcpServers` file
(docs/providers.md; read and checked by chat/llm/providers_file.py):

    {"providers": {
       "openai": {"baseUrl": "https://api.openai.com/v1", "apiKey": "${OPENAI_API_KEY}",
                  "models": ["gpt-4.1-mini"]},
       "local":  {"baseUrl": "http://127.0.0.1:8080/v1", "apiKey": "none"}
    }}

`${NAME}` is filled from the environment; keys and header values never reach a
log, the API, the admin or an error. `models` may be left out: they are then
listed from the server's `GET /models` when first wanted (and again every
`LISTED_FOR_S`). A provider may state the limits it is known to have
(`stream`, `streamTools`, `streamUsage`, `maxTokensParam`,
`parallelToolCalls`) so that they need not be learned, and a `systemPrompt` of
its own. `{"type": "offline"}` adds the embedded offline model.

Without the file, the variables of a single server (`OPENAI_API_KEY`,
`OPENAI_BASE_URL`, `LLM_MODEL`, `LLM_COMPOSE_MODEL`, `LLM_ALLOWED_MODELS`)
make one provider named `openai`, or, with no key, the offline model.

A model is named `<provider>/<model>` (`local/qwen3`, `offline/offline`); the
model part may hold slashes of its own (`openrouter/meta-llama/llama-3.3-70b`).
A name without a provider (what conversations stored before providers had
names, `gpt-4o-mini`) is a model of the default provider.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from chat.llm.providers_file import OFFLINE, Endpoint, parse_providers
from project.config_file import json_file_read

logger = logging.getLogger(__name__)

# A server's model list (`GET /models`) is asked again after this long; a list that
# could not be read is asked again sooner.
LISTED_FOR_S = 300.0
UNLISTED_FOR_S = 30.0
LIST_TIMEOUT_S = 10.0

_SETTINGS = frozenset(
    {
        "TOOLCHAT_PROVIDERS",
        "LLM_PROVIDER",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "LLM_MODEL",
        "LLM_COMPOSE_MODEL",
        "LLM_ALLOWED_MODELS",
    }
)


@dataclass(frozen=True)
class ModelChoice:
    """A model a conversation may choose: `id` is `<provider>/<model>`."""

    provider: str
    model: str
    label: str

    @property
    def id(self) -> str:
        return f"{self.provider}/{self.model}"


class UnknownModel(ValueError):
    """A model name no configured provider offers."""


@dataclass
class _Configured:
    endpoints: dict[str, Endpoint]
    default: str  # a model id
    compose: str  # a model id, or "" (the conversation's model composes)


_configured: _Configured | None = None
_lock = threading.Lock()
_listed: dict[str, tuple[float, tuple[str, ...]]] = {}


def configured() -> _Configured:
    """The providers and default models, read once per process (and per settings change)."""
    global _configured
    with _lock:
        if _configured is None:
            _configured = _configure()
        return _configured


def endpoints() -> dict[str, Endpoint]:
    """Every provider, by name, in the file's order."""
    return configured().endpoints


def endpoint(name: str) -> Endpoint:
    found = endpoints().get(name)
    if found is None:
        raise UnknownModel(f"There is no provider named {name!r}.")
    return found


def prices_configured() -> bool:
    """Whether any provider prices a model: without, no cost is computed or summed."""
    return any(provider.prices for provider in endpoints().values())


def call_cost(
    *,
    provider: str,
    models: Iterable[str],
    prompt: int | None,
    completion: int | None,
    cached: int | None = None,
) -> Decimal | None:
    """A call's cost in US dollars from its provider's prices; None without a price or usage.

    The first of `models` (the name asked for, then the one the server answered
    with) that the provider prices is the price used.
    """
    prices = endpoints().get(provider)
    if prices is None or not prices.prices or prompt is None or completion is None:
        return None
    price = next((prices.prices[name] for name in models if name in prices.prices), None)
    if price is None:
        return None
    return price.cost(prompt=prompt, completion=completion, cached=cached)


def default_model() -> str:
    """The id of the model a conversation without one of its own talks to (LLM_MODEL)."""
    return configured().default


def compose_model_default() -> str:
    """The id of the model that writes final answers for every conversation, or ""."""
    return configured().compose


def model_resolve(name: str) -> ModelChoice:
    """The provider and model a stored model name means ("" is the default model).

    Asks no server: a name that was valid when it was stored resolves, even if
    the provider no longer lists its model (the server then says so).
    """
    found = _resolve(name or default_model())
    if found is None:
        raise UnknownModel(f"No provider offers the model {name!r}.")
    return found


def model_id(name: str) -> str:
    """The id (`<provider>/<model>`) a stored model name means; unchanged if none offers it."""
    try:
        return model_resolve(name).id
    except UnknownModel:
        return name


def model_choices() -> list[ModelChoice]:
    """The models a user may choose, provider by provider (listed servers are asked)."""
    choices = []
    for provider in endpoints().values():
        for model in _models_of(provider):
            choices.append(ModelChoice(provider.name, model, _label(provider, model)))
    return choices


def model_allowed(name: str) -> ModelChoice:
    """The choice `name` names, if a user may choose it; else UnknownModel saying what may be."""
    found = _resolve(name)
    if found is not None and found.model in _models_of(endpoint(found.provider)):
        return found
    raise UnknownModel(
        f"{name!r} is not a model you can choose; GET /api/v1/models/ lists those you can."
    )


def _resolve(name: str) -> ModelChoice | None:
    providers = endpoints()
    default = providers[default_model().split("/", 1)[0]]
    prefix, _, rest = name.partition("/")
    known = providers.get(prefix)
    if known is not None and rest and (known.models is None or rest in known.models):
        return ModelChoice(known.name, rest, _label(known, rest))
    if default.models is None or name in default.models:
        return ModelChoice(default.name, name, _label(default, name))
    if known is not None and rest:
        return ModelChoice(known.name, rest, _label(known, rest))
    return None


def _label(provider: Endpoint, model: str) -> str:
    """What the picker shows: the file's `label`, or the model and its provider's name.

    Two offline providers are told apart: by their labels, else by their names.
    """
    if provider.offline:
        if provider.label:
            return provider.label if model == OFFLINE else f"{model} · {provider.label}"
        named = [part for part in (model, provider.name) if part != OFFLINE]
        return " · ".join(["Offline demo model", *named])
    return f"{model} · {provider.label or provider.name}"


def _models_of(provider: Endpoint) -> tuple[str, ...]:
    if provider.models is not None:
        return provider.models
    now = time.monotonic()
    cached = _listed.get(provider.name)
    if cached is not None and cached[0] > now:
        return cached[1]
    from chat.llm.openai_client import server_models  # the SDK only when wanted

    try:
        models = server_models(
            api_key=provider.api_key,
            base_url=provider.base_url,
            headers=provider.headers,
            timeout_s=LIST_TIMEOUT_S,
        )
    except Exception as exc:  # any failure: no list, and the log says why
        logger.warning(
            "provider %r: its models could not be listed from %s/models (%s)",
            provider.name,
            provider.where,
            provider.redact(f"{type(exc).__name__}: {exc}"),
        )
        _listed[provider.name] = (now + UNLISTED_FOR_S, ())
        return ()
    _listed[provider.name] = (now + LISTED_FOR_S, models)
    return models


# --- reading the configuration ------------------------------------------------------


def _configure() -> _Configured:
    path = getattr(settings, "TOOLCHAT_PROVIDERS", "")
    if path:
        label = f"TOOLCHAT_PROVIDERS={str(path)!r}"
        providers = parse_providers(json_file_read(path, label), label=label, environ=os.environ)
    else:
        providers = _from_variables()
    default = _default(providers, settings.LLM_MODEL, "LLM_MODEL")
    compose = (
        _default(providers, settings.LLM_COMPOSE_MODEL, "LLM_COMPOSE_MODEL")
        if settings.LLM_COMPOSE_MODEL
        else ""
    )
    return _Configured(providers, default, compose)


def _from_variables() -> dict[str, Endpoint]:
    # LLM_ALLOWED_MODELS lists more names the one server answers to (the offline
    # model answers to any name alike).
    models = [*settings.LLM_ALLOWED_MODELS, settings.LLM_MODEL, settings.LLM_COMPOSE_MODEL]
    if settings.LLM_PROVIDER == OFFLINE:
        listed = tuple(dict.fromkeys(name for name in [OFFLINE, *models] if name))
        return {OFFLINE: Endpoint(OFFLINE, offline=True, models=listed)}
    models = list(dict.fromkeys(name for name in models if name))
    return {
        "openai": Endpoint(
            "openai",
            base_url=settings.OPENAI_BASE_URL,
            api_key=settings.OPENAI_API_KEY,
            models=tuple(models),
            secrets=frozenset({settings.OPENAI_API_KEY} - {""}),
        )
    }


def _default(providers: dict[str, Endpoint], name: str, variable: str) -> str:
    """The id `name` (LLM_MODEL, LLM_COMPOSE_MODEL) means; unset: the first model offered."""
    if not name:
        for provider in providers.values():
            if provider.models:
                return f"{provider.name}/{provider.models[0]}"
        raise ImproperlyConfigured(
            f"{variable} is not set and no provider lists its models: set {variable} to "
            "'<provider>/<model>'."
        )
    prefix, _, rest = name.partition("/")
    if prefix in providers and rest:
        return name
    first = next(iter(providers.values()))
    if len(providers) == 1:
        return f"{first.name}/{name}"
    raise ImproperlyConfigured(
        f"{variable}={name!r}: name the provider too, '<provider>/<model>' "
        f"(the providers are {', '.join(providers)})."
    )


def providers_reset() -> None:
    """Read the configuration again when next wanted (tests, a settings change)."""
    global _configured
    with _lock:
        _configured = None
        _listed.clear()


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in _SETTINGS:
        providers_reset()
