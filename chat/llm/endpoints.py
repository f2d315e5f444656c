"""The model servers toolchat may call, and the models a conversation may choose.

`TOOLCHAT_PROVIDERS` names a JSON file of OpenAI-compatible endpoints, each
with its key and models, in the spirit of the `mcpServers` file
(docs/providers.md):

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
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from project.config_file import EnvironmentFiller, json_file_read, redacted, url_without_secrets

logger = logging.getLogger(__name__)

PROVIDER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
PROVIDER_NAME_MAX = 32  # ModelCall.provider
MODEL_ID_MAX = 128  # Conversation.model
OFFLINE = "offline"
# A server's model list (`GET /models`) is asked again after this long; a list that
# could not be read is asked again sooner.
LISTED_FOR_S = 300.0
UNLISTED_FOR_S = 30.0
LIST_TIMEOUT_S = 10.0

_KEYS = frozenset(
    {"type", "baseUrl", "apiKey", "models", "headers", "label", "systemPrompt"}
    | {"stream", "streamTools", "streamUsage", "maxTokensParam", "parallelToolCalls"}
)
_TOKEN_LIMIT_NAMES = ("max_tokens", "max_completion_tokens")
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
class Endpoint:
    """One provider: a server, its key, its models and what it is known not to do."""

    name: str
    offline: bool = False
    base_url: str = ""
    api_key: str = field(default="", repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    # None: listed from the server's `GET /models`.
    models: tuple[str, ...] | None = ()
    label: str = ""
    system_prompt: str | None = None
    stream: bool = True
    stream_tools: bool = True
    stream_usage: bool = True
    token_limit_param: str | None = None
    parallel_tool_calls: bool | None = None
    # The values `${NAME}` filled in, and header values: never shown.
    secrets: frozenset[str] = field(default=frozenset(), repr=False)

    def redact(self, text: str) -> str:
        """A message without this provider's key, filled-in values and URL credentials."""
        return redacted(text, self.secrets | {self.api_key})

    @property
    def where(self) -> str:
        """The server's URL as shown in logs and the admin: no credentials, no query."""
        return "embedded" if self.offline else url_without_secrets(self.base_url)


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
    if provider.offline:
        return "Offline demo model"
    return f"{model} · {provider.label or provider.name}"


def _models_of(provider: Endpoint) -> tuple[str, ...]:
    if provider.models is not None:
        return provider.models
    now = time.monotonic()
    cached = _listed.get(provider.name)
    if cached is not None and cached[0] > now:
        return cached[1]
    from chat.llm.openai_provider import server_models  # the SDK only when wanted

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


def parse_providers(
    document: Any, *, label: str = "TOOLCHAT_PROVIDERS", environ: Mapping[str, str]
) -> dict[str, Endpoint]:
    """The providers of a `{"providers": {...}}` document, checked, `${NAME}` filled."""
    if not isinstance(document, dict) or not isinstance(document.get("providers"), dict):
        raise ImproperlyConfigured(
            f'{label}: expected a JSON object {{"providers": {{"<name>": {{...}}}}}}.'
        )
    if not document["providers"]:
        raise ImproperlyConfigured(f"{label}: name at least one provider.")
    return {
        name: _provider(name, entry, f"{label}: provider {name!r}", environ)
        for name, entry in document["providers"].items()
    }


def _provider(name: str, entry: Any, where: str, environ: Mapping[str, str]) -> Endpoint:
    if not (PROVIDER_NAME_RE.match(name) and len(name) <= PROVIDER_NAME_MAX):
        raise ImproperlyConfigured(
            f"{where}: a provider's name is letters, digits, '.', '_' and '-' (no '/', "
            f"which separates it from the model's), at most {PROVIDER_NAME_MAX} characters."
        )
    if not isinstance(entry, dict):
        raise ImproperlyConfigured(f"{where}: expected an object with baseUrl and apiKey.")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise ImproperlyConfigured(
            f"{where}: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(sorted(_KEYS))}."
        )
    kind = entry.get("type", "openai")
    if kind == OFFLINE:
        return Endpoint(name, offline=True, models=(OFFLINE,), label=_text(entry, "label", where))
    if kind != "openai":
        raise ImproperlyConfigured(f"{where}: type must be 'openai' (the default) or 'offline'.")
    filler = EnvironmentFiller(where, environ)
    base_url = entry.get("baseUrl")
    if not isinstance(base_url, str) or not re.match(
        r"^https?://[^\s/]+", filler.fill(base_url, "baseUrl")
    ):
        raise ImproperlyConfigured(f"{where}: baseUrl must be an http:// or https:// URL.")
    api_key = entry.get("apiKey", "")
    if not isinstance(api_key, str):
        raise ImproperlyConfigured(f'{where}: apiKey must be a string ("${{NAME}}" reads NAME).')
    headers = filler.strings(entry, "headers")
    filler.secrets.update(value.split(" ", 1)[-1] for value in headers.values())
    return Endpoint(
        name,
        base_url=filler.fill(base_url, "baseUrl"),
        api_key=filler.fill(api_key, "apiKey"),
        headers=headers,
        models=_models(entry, where, name),
        label=_text(entry, "label", where),
        system_prompt=_text(entry, "systemPrompt", where) if "systemPrompt" in entry else None,
        **_limits(entry, where),
        secrets=frozenset(filler.secrets - {""}),
    )


def _models(entry: Mapping[str, Any], where: str, name: str) -> tuple[str, ...] | None:
    if "models" not in entry:
        return None
    models = entry["models"]
    if (
        not isinstance(models, list)
        or not models
        or not all(isinstance(m, str) and m.strip() == m and m for m in models)
    ):
        raise ImproperlyConfigured(
            f"{where}: models must be a non-empty list of model names (or left out, to list "
            "them from the server's GET /models)."
        )
    too_long = [m for m in models if len(f"{name}/{m}") > MODEL_ID_MAX]
    if too_long:
        raise ImproperlyConfigured(
            f"{where}: '{name}/{too_long[0]}' is longer than {MODEL_ID_MAX} characters."
        )
    return tuple(dict.fromkeys(models))


def _text(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key, "")
    if not isinstance(value, str):
        raise ImproperlyConfigured(f"{where}: {key} must be a string.")
    return value


def _limits(entry: Mapping[str, Any], where: str) -> dict[str, Any]:
    def flag(key: str, default: bool | None) -> bool | None:
        value = entry.get(key, default)
        if value is not None and not isinstance(value, bool):
            raise ImproperlyConfigured(f"{where}: {key} must be true or false.")
        return value

    token_limit = entry.get("maxTokensParam")
    if token_limit is not None and token_limit not in _TOKEN_LIMIT_NAMES:
        raise ImproperlyConfigured(
            f"{where}: maxTokensParam must be {' or '.join(map(repr, _TOKEN_LIMIT_NAMES))}."
        )
    return {
        "stream": flag("stream", True),
        "stream_tools": flag("streamTools", True),
        "stream_usage": flag("streamUsage", True),
        "token_limit_param": token_limit,
        "parallel_tool_calls": flag("parallelToolCalls", None),
    }


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
