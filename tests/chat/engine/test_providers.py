"""Several providers in one file: each conversation's turns reach its own server.

Two scripted OpenAI-compatible servers stand for two providers, each with its
own key, headers and model names; the REST API picks a model per
conversation, as a user or the chat page does.
"""

from __future__ import annotations

import json

import pytest

from chat.models import Message, ModelCall, Role, RunStatus
from chat.selectors import history_for_model
from chat.services.conversations import conversation_create
from chat.services.runs import run_start
from tests.assertions import assert_valid_history
from tests.chat.api.conftest import token_client
from tests.chat.engine.conftest import wait_for_run
from tests.llm_server import ScriptedLLMServer, text_reply, tool_calls_reply

pytestmark = pytest.mark.django_db(transaction=True)

KEYS = {"cloud": "sk-cloud-secret-1", "local": "sk-local-secret-2"}


@pytest.fixture
def two_servers(tmp_path, settings):
    cloud, local = ScriptedLLMServer().start(), ScriptedLLMServer().start()
    path = tmp_path / "providers.json"
    path.write_text(
        json.dumps(
            {
                "providers": {
                    "cloud": {
                        "baseUrl": cloud.base_url,
                        "apiKey": "${CLOUD_KEY}",
                        "models": ["big-model", "small-model"],
                        "headers": {"X-Project": "toolchat-tests"},
                    },
                    "local": {
                        "baseUrl": local.base_url,
                        "apiKey": KEYS["local"],
                        "models": ["qwen3"],
                        "streamTools": False,
                        "systemPrompt": "You are the local model. Answer in one line.",
                    },
                }
            }
        )
    )
    settings.TOOLCHAT_PROVIDERS = str(path)
    settings.LLM_MODEL = "cloud/big-model"
    settings.LLM_COMPOSE_MODEL = ""
    settings.LLM_MAX_RETRIES = 1
    settings.LLM_TIMEOUT_S = 5
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CLOUD_KEY", KEYS["cloud"])
        yield cloud, local
    cloud.stop()
    local.stop()


def test_two_providers_each_turn_reaches_its_own_server_with_its_key_and_model(
    two_servers, user, settings
):
    cloud, local = two_servers
    cloud.push(tool_calls_reply([("calculator", '{"expression": "6*7"}')]), text_reply("42."))
    local.push(tool_calls_reply([("calculator", '{"expression": "2+3"}')]), text_reply("5."))
    on_cloud = conversation_create(owner=user)  # the default model
    on_local = conversation_create(owner=user, model="local/qwen3")

    for conversation, prompt in ((on_cloud, "What is 6*7?"), (on_local, "What is 2+3?")):
        run = wait_for_run(run_start(conversation=conversation, content=prompt))
        assert run.status == RunStatus.COMPLETED, run.error
        assert_valid_history(history_for_model(conversation=conversation))

    assert [r["model"] for r in cloud.requests] == ["big-model", "big-model"]
    assert [r["model"] for r in local.requests] == ["qwen3", "qwen3"]
    assert {h["authorization"] for h in cloud.request_headers} == {f"Bearer {KEYS['cloud']}"}
    assert {h["authorization"] for h in local.request_headers} == {f"Bearer {KEYS['local']}"}
    assert {h.get("x-project") for h in cloud.request_headers} == {"toolchat-tests"}
    # Without a prompt of its own, a conversation is told its provider's, else the server's.
    assert local.requests[0]["messages"][0] == {
        "role": "system",
        "content": "You are the local model. Answer in one line.",
    }
    assert cloud.requests[0]["messages"][0] == {
        "role": "system",
        "content": settings.TOOLCHAT_SYSTEM_PROMPT,
    }
    # The local provider's file says it cannot stream tools: asked unstreamed at once.
    assert local.requests[0]["stream"] is False
    assert cloud.requests[0]["stream"] is True

    calls = ModelCall.objects.order_by("started_at")
    assert {(c.run.conversation_id, c.provider, c.model) for c in calls} == {
        (on_cloud.pk, "cloud", "big-model"),
        (on_local.pk, "local", "qwen3"),
    }
    answers = Message.objects.filter(role=Role.ASSISTANT, content__isnull=False).exclude(content="")
    assert sorted(m.content for m in answers) == ["42.", "5."]
    # Keys are in no stored row.
    for row in ModelCall.objects.values():
        assert not any(key in str(row) for key in KEYS.values())


def test_the_api_lists_the_models_and_a_conversation_takes_only_those(two_servers, user):
    api = token_client(user)
    listed = api.get("/api/v1/models/").json()["results"]
    assert [(m["id"], m["default"]) for m in listed] == [
        ("cloud/big-model", True),
        ("cloud/small-model", False),
        ("local/qwen3", False),
    ]
    assert not any(key in json.dumps(listed) for key in KEYS.values())

    created = api.post("/api/v1/conversations/", {"model": "local/qwen3"}, format="json")
    assert created.status_code == 201
    assert created.json()["model"] == "local/qwen3"
    url = f"/api/v1/conversations/{created.json()['id']}/"
    assert api.patch(url, {"model": "cloud/small-model"}, format="json").json()["model"] == (
        "cloud/small-model"
    )

    refused = api.post("/api/v1/conversations/", {"model": "local/gpt-5"}, format="json")
    assert refused.status_code == 400
    body = refused.json()
    assert body["field"] == "model"
    assert body["details"]["allowed"] == [m["id"] for m in listed]
    assert api.patch(url, {"model": "cloud/huge"}, format="json").status_code == 400
    assert api.get(url).json()["model"] == "cloud/small-model"  # nothing half-stored


def test_a_conversation_whose_model_left_the_file_fails_its_turn_clearly(
    two_servers, user, settings, tmp_path
):
    conversation = conversation_create(owner=user, model="local/qwen3")
    path = tmp_path / "fewer.json"
    path.write_text(
        json.dumps({"providers": {"cloud": {"baseUrl": two_servers[0].base_url, "models": ["m"]}}})
    )
    settings.TOOLCHAT_PROVIDERS = str(path)
    settings.LLM_MODEL = "cloud/m"
    run = wait_for_run(run_start(conversation=conversation, content="Hello"))
    assert run.status == RunStatus.FAILED
    assert "local/qwen3" in run.error
    assert "Choose another model" in run.error
