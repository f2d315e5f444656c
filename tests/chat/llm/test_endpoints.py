"""The providers file (TOOLCHAT_PROVIDERS): read, checked, and what a model's name means."""

from __future__ import annotations

import json
import logging
import re

import pytest
from django.core.exceptions import ImproperlyConfigured

from chat.llm import get_provider, provider_for
from chat.llm.endpoints import (
    UnknownModel,
    default_model,
    model_allowed,
    model_choices,
    model_id,
    model_resolve,
)
from chat.llm.providers_file import parse_providers
from tests.llm_server import ScriptedLLMServer

SECRET = "sk-very-secret-key-123"
ENVIRON = {"OPENAI_API_KEY": SECRET, "GROQ_KEY": "gsk-other-secret"}


def providers(**entries):
    return {"providers": entries}


def written(tmp_path, document) -> str:
    path = tmp_path / "providers.json"
    path.write_text(json.dumps(document))
    return str(path)


@pytest.fixture
def two_providers(tmp_path, settings):
    settings.TOOLCHAT_PROVIDERS = written(
        tmp_path,
        providers(
            openai={
                "baseUrl": "https://api.openai.com/v1",
                "apiKey": "sk-one",
                "models": ["gpt-4.1-mini", "gpt-4.1"],
            },
            groq={
                "baseUrl": "https://api.groq.com/openai/v1",
                "apiKey": "gsk-two",
                "models": ["openai/gpt-oss-120b"],
                "label": "Groq",
            },
        ),
    )
    settings.LLM_MODEL = "groq/openai/gpt-oss-120b"
    settings.LLM_COMPOSE_MODEL = ""


def test_a_file_names_each_provider_with_its_url_key_headers_and_limits():
    found = parse_providers(
        providers(
            openai={
                "baseUrl": "https://api.openai.com/v1",
                "apiKey": "${OPENAI_API_KEY}",
                "models": ["gpt-4.1-mini"],
            },
            local={
                "baseUrl": "http://127.0.0.1:8080/v1",
                "apiKey": "none",
                "headers": {"X-Team": "${GROQ_KEY}"},
                "streamTools": False,
                "maxTokensParam": "max_tokens",
                "parallelToolCalls": False,
                "streamUsage": False,
                "systemPrompt": "Be brief.",
            },
            demo={"type": "offline"},
        ),
        environ=ENVIRON,
    )
    assert list(found) == ["openai", "local", "demo"]
    assert found["openai"].api_key == SECRET
    assert found["openai"].models == ("gpt-4.1-mini",)
    local = found["local"]
    assert local.models is None  # listed from the server
    assert local.headers == {"X-Team": "gsk-other-secret"}
    assert (local.stream, local.stream_tools, local.stream_usage) == (True, False, False)
    assert (local.token_limit_param, local.parallel_tool_calls) == ("max_tokens", False)
    assert local.system_prompt == "Be brief."
    assert found["demo"].offline
    assert found["demo"].models == ("offline",)
    # A secret is in no representation of a provider.
    assert SECRET not in repr(found)
    assert "gsk-other-secret" not in repr(found)


BAD_FILES = [
    ([], "expected a JSON object"),
    ({"providers": {}}, "at least one provider"),
    (providers(**{"a/b": {"baseUrl": "http://x"}}), "no '/'"),
    (providers(p={"baseUrl": "ftp://x"}), "provider 'p': baseUrl must be an http"),
    (providers(p={"apiKey": "k"}), "provider 'p': baseUrl must be"),
    (providers(p={"baseUrl": "http://x", "apiKey": 3}), "provider 'p': apiKey must be a string"),
    (providers(p={"baseUrl": "http://x", "models": []}), "provider 'p': models must be"),
    (providers(p={"baseUrl": "http://x", "models": ["a", 3]}), "models must be"),
    (providers(p={"baseUrl": "http://x", "models": ["m" * 130]}), "longer than 128"),
    (providers(p={"baseUrl": "http://x", "stream": "no"}), "provider 'p': stream must be true"),
    (providers(p={"baseUrl": "http://x", "maxTokensParam": "tokens"}), "maxTokensParam must"),
    (providers(p={"baseUrl": "http://x", "headers": {"A": 1}}), "headers must be an object"),
    (providers(p={"baseUrl": "http://x", "base_url": "x"}), "unknown key(s) base_url"),
    (providers(p={"type": "anthropic"}), "type must be 'openai'"),
    (providers(p={"baseUrl": "http://x", "apiKey": "${NOT_SET}"}), "apiKey names the environment"),
]


@pytest.mark.parametrize(("document", "words"), BAD_FILES)
def test_a_mistake_in_the_file_names_the_provider_and_the_key(document, words):
    with pytest.raises(ImproperlyConfigured) as error:
        parse_providers(document, environ=ENVIRON)
    assert words in str(error.value)


def test_a_missing_or_broken_file_stops_the_start_with_its_name(tmp_path, settings):
    settings.TOOLCHAT_PROVIDERS = str(tmp_path / "nowhere.json")
    with pytest.raises(ImproperlyConfigured, match=r"nowhere\.json.*no such file"):
        default_model()
    (tmp_path / "broken.json").write_text("{")
    settings.TOOLCHAT_PROVIDERS = str(tmp_path / "broken.json")
    with pytest.raises(ImproperlyConfigured, match="not valid JSON"):
        default_model()


def test_an_unset_variable_is_named_and_its_neighbours_values_are_not_shown():
    document = providers(
        p={"baseUrl": "http://x", "apiKey": "${OPENAI_API_KEY}", "headers": {"B": "${NOT_SET}"}}
    )
    with pytest.raises(ImproperlyConfigured) as error:
        parse_providers(document, environ=ENVIRON)
    assert "${NOT_SET}" in str(error.value)
    assert SECRET not in str(error.value)


def test_models_are_named_provider_slash_model_and_the_model_may_hold_slashes(two_providers):
    assert default_model() == "groq/openai/gpt-oss-120b"
    assert [choice.id for choice in model_choices()] == [
        "openai/gpt-4.1-mini",
        "openai/gpt-4.1",
        "groq/openai/gpt-oss-120b",
    ]
    groq = model_resolve("groq/openai/gpt-oss-120b")
    assert (groq.provider, groq.model, groq.label) == (
        "groq",
        "openai/gpt-oss-120b",
        "openai/gpt-oss-120b · Groq",
    )
    # "" is the default model; a bare name is one of the default provider's.
    assert model_resolve("").id == "groq/openai/gpt-oss-120b"
    assert model_resolve("openai/gpt-oss-120b").provider == "groq"
    assert model_allowed("openai/gpt-4.1").id == "openai/gpt-4.1"
    for unknown in ("openai/gpt-5", "anthropic/claude", "gpt-4.1", ""):
        with pytest.raises(UnknownModel):
            model_allowed(unknown)


def test_each_model_reaches_its_own_provider(two_providers):
    provider, choice = provider_for("openai/gpt-4.1")
    assert (provider.name, choice.model) == ("openai", "gpt-4.1")
    assert get_provider().name == "groq"


def test_a_default_model_must_name_its_provider_when_there_are_several(tmp_path, settings):
    settings.TOOLCHAT_PROVIDERS = written(
        tmp_path,
        providers(
            a={"baseUrl": "http://a", "models": ["m"]}, b={"baseUrl": "http://b", "models": ["n"]}
        ),
    )
    settings.LLM_MODEL = "m"
    with pytest.raises(ImproperlyConfigured, match="LLM_MODEL='m': name the provider too"):
        default_model()
    settings.LLM_MODEL = ""  # the first model of the first provider
    assert default_model() == "a/m"


def test_without_the_file_the_old_variables_make_one_provider(settings):
    settings.TOOLCHAT_PROVIDERS = ""
    settings.LLM_PROVIDER = "openai"
    settings.OPENAI_API_KEY = "sk-x"
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    settings.LLM_MODEL = "gpt-4o-mini"
    settings.LLM_COMPOSE_MODEL = "gpt-4o-nano"
    settings.LLM_ALLOWED_MODELS = ["gpt-4o"]
    assert default_model() == "openai/gpt-4o-mini"
    assert {choice.id for choice in model_choices()} == {
        "openai/gpt-4o",
        "openai/gpt-4o-mini",
        "openai/gpt-4o-nano",
    }
    # What conversations stored before providers had names still means the same model.
    assert model_id("gpt-4o") == "openai/gpt-4o"
    settings.LLM_PROVIDER = "offline"
    assert next(choice.id for choice in model_choices()) == "offline/offline"


def test_models_left_out_are_listed_from_the_server_and_a_silent_one_lists_none(
    tmp_path, settings, caplog
):
    server = ScriptedLLMServer().start()
    try:
        server.models = ["qwen3", "llama3.2"]
        settings.TOOLCHAT_PROVIDERS = written(
            tmp_path,
            providers(
                local={"baseUrl": server.base_url, "apiKey": SECRET},
                down={"baseUrl": "http://127.0.0.1:9/v1", "apiKey": SECRET},
            ),
        )
        settings.LLM_MODEL = "local/qwen3"
        with caplog.at_level(logging.WARNING):
            assert [choice.id for choice in model_choices()] == ["local/qwen3", "local/llama3.2"]
        assert server.request_headers[-1]["authorization"] == f"Bearer {SECRET}"
        assert "provider 'down': its models could not be listed" in caplog.text
        assert SECRET not in caplog.text
        assert model_allowed("local/llama3.2").model == "llama3.2"
        with pytest.raises(UnknownModel):
            model_allowed("local/mistral")
        # Asked once, then cached: the page and the API do not ask the server each time.
        asked = len(server.request_headers)
        model_choices()
        assert len(server.request_headers) == asked
    finally:
        server.stop()


# --- prices ---------------------------------------------------------------------------------


def test_a_call_costs_its_tokens_at_its_models_price_and_nothing_without_one(tmp_path, settings):
    from decimal import Decimal

    from chat.llm.endpoints import call_cost, prices_configured

    settings.TOOLCHAT_PROVIDERS = written(
        tmp_path,
        providers(
            cloud={
                "baseUrl": "https://api.example.com/v1",
                "apiKey": "sk-one",
                "models": ["mini", "big"],
                "prices": {"mini": {"input": 0.15, "cached_input": 0.075, "output": 0.6}},
            },
            other={"baseUrl": "https://other.example.com/v1", "apiKey": "sk-two"},
        ),
    )
    settings.LLM_MODEL = "cloud/mini"
    assert prices_configured()
    cost = call_cost(provider="cloud", models=("mini",), prompt=1000, completion=500, cached=400)
    # 600 input at 0.15, 400 cached at 0.075, 500 output at 0.6 (US dollars per million)
    assert cost == Decimal("0.00009") + Decimal("0.00003") + Decimal("0.0003")
    # the name the server answered with is tried after the one asked for
    assert call_cost(provider="cloud", models=("alias", "mini"), prompt=10, completion=0) == (
        Decimal("0.0000015")
    )
    # no price for the model or the provider, or no usage reported: no cost, never 0
    assert call_cost(provider="cloud", models=("big",), prompt=10, completion=10) is None
    assert call_cost(provider="other", models=("x",), prompt=10, completion=10) is None
    assert call_cost(provider="cloud", models=("mini",), prompt=None, completion=None) is None


@pytest.mark.parametrize(
    ("prices", "words"),
    [
        ([], "prices must map model names"),
        ({"m": {"input": 1}}, "give input and output"),
        ({"m": {"input": -1, "output": 1}}, "prices['m'].input"),
        ({"m": {"input": "1", "output": 1}}, "prices['m'].input"),
        ({"m": {"input": 1, "output": 1, "cache": 1}}, "unknown key(s) cache"),
    ],
)
def test_a_bad_price_names_the_provider_the_model_and_the_key(prices, words):
    document = providers(
        cloud={"baseUrl": "https://api.example.com/v1", "apiKey": "k", "prices": prices}
    )
    with pytest.raises(ImproperlyConfigured, match=re.escape(words)):
        parse_providers(document, environ=ENVIRON)
