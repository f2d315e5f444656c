"""The providers file, `TOOLCHAT_PROVIDERS`: read, checked, and its `${NAME}`s filled.

Each provider of `{"providers": {NAME: {...}}}` becomes an `Endpoint`; a
mistake is an ImproperlyConfigured naming the provider and the key, never a
secret's value. docs/providers.md lists the keys; chat/llm/endpoints.py holds
what the providers are used for (which model a name means, the model lists).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from project.config_file import EnvironmentFiller, redacted, url_without_secrets

PROVIDER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
PROVIDER_NAME_MAX = 32  # ModelCall.provider
MODEL_ID_MAX = 128  # Conversation.model
OFFLINE = "offline"
_KEYS = frozenset(
    {"type", "baseUrl", "apiKey", "models", "headers", "label", "systemPrompt", "prices"}
    | {"stream", "streamTools", "streamUsage", "maxTokensParam", "parallelToolCalls"}
)
_TOKEN_LIMIT_NAMES = ("max_tokens", "max_completion_tokens")


@dataclass(frozen=True)
class Price:
    """What a model's tokens cost, in US dollars per million (docs/governance.md, "Prices")."""

    input: Decimal
    output: Decimal
    cached_input: Decimal  # the input price where the provider names none

    def cost(self, *, prompt: int, completion: int, cached: int | None) -> Decimal:
        """The cost of one call's tokens; cached input tokens at their own price."""
        cached = min(cached or 0, prompt)
        per_million = (
            (prompt - cached) * self.input + cached * self.cached_input + completion * self.output
        )
        return per_million / _MILLION


_MILLION = Decimal(1_000_000)
_PRICE_KEYS = ("input", "cached_input", "output")


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
    # Per model name (as the provider's `models` or the server names it): its price.
    prices: Mapping[str, Price] = field(default_factory=dict)
    # The values `${NAME}` filled in, and header values: never shown.
    secrets: frozenset[str] = field(default=frozenset(), repr=False)

    def redact(self, text: str) -> str:
        """A message without this provider's key, filled-in values and URL credentials."""
        return redacted(text, self.secrets | {self.api_key})

    @property
    def where(self) -> str:
        """The server's URL as shown in logs and the admin: no credentials, no query."""
        return "embedded" if self.offline else url_without_secrets(self.base_url)


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
        return Endpoint(
            name,
            offline=True,
            models=(OFFLINE,),
            label=_text(entry, "label", where),
            prices=_prices(entry, where),
        )
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
        prices=_prices(entry, where),
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


def _prices(entry: Mapping[str, Any], where: str) -> dict[str, Price]:
    """`"prices": {"<model>": {"input": 0.15, "cached_input": 0.075, "output": 0.6}}`."""
    prices = entry.get("prices", {})
    if not isinstance(prices, dict):
        raise ImproperlyConfigured(f"{where}: prices must map model names to their prices.")
    return {
        str(model): _price(price, f"{where}: prices[{model!r}]") for model, price in prices.items()
    }


def _price(price: Any, where: str) -> Price:
    if not isinstance(price, dict) or not {"input", "output"} <= set(price):
        raise ImproperlyConfigured(
            f"{where}: give input and output (and optionally cached_input), US dollars per "
            "million tokens."
        )
    unknown = sorted(set(price) - set(_PRICE_KEYS))
    if unknown:
        raise ImproperlyConfigured(f"{where}: unknown key(s) {', '.join(unknown)}.")
    values: dict[str, Decimal] = {}
    for key in _PRICE_KEYS:
        value = price.get(key, price["input"])
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ImproperlyConfigured(f"{where}.{key}: a number of US dollars, 0 or more.")
        values[key] = Decimal(str(value))
    return Price(**values)


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
