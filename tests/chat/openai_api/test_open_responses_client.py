"""The AI SDK's Open Responses provider against /v1/responses on a real uvicorn.

`@ai-sdk/open-responses` is the Vercel AI SDK's client of the Open Responses
specification (openresponses.org), the contract vLLM, LM Studio, Ollama and
LiteLLM serve; its compliance suite is not published where this project can
install it, so this client stands in for it. tests/clients/open_responses.mjs
drives the cases with Node (installed by `make jscheck`, as the chat page's
type checks are); here the scripted model answers and the stored record is
checked: toolchat's own tool ran on the server, the client's ran in the
client, each case one stored conversation with a valid history.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

from chat.models import Conversation, ExecutionStatus, ToolExecution
from chat.selectors import history_for_model
from tests.assertions import assert_valid_history
from tests.factories import UserFactory
from tests.llm_server import text_reply, tool_calls_reply
from tests.plugins.services import service_unavailable

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tests" / "clients" / "open_responses.mjs"


def _client_run(base_url: str, token: str, model: str) -> dict[str, dict]:
    node = shutil.which("node")
    if node is None or not (ROOT / "node_modules" / "@ai-sdk" / "open-responses").is_dir():
        service_unavailable("node and the AI SDK (`make jscheck` installs it) are needed")
    done = subprocess.run(
        [node, str(SCRIPT)],
        env={**os.environ, "TOOLCHAT_URL": base_url, "TOOLCHAT_TOKEN": token, "MODEL": model},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {line.pop("case"): line for line in lines}


def test_the_ai_sdk_open_responses_provider_answers_streams_runs_tools_and_parses_objects(
    scripted_server, llm_server
):
    owner = UserFactory()
    token = Token.objects.create(user=owner).key
    llm_server.push(
        # plain: toolchat's own calculator runs on the server, then the answer
        tool_calls_reply([("calculator", '{"expression": "6*7"}', "call_calc")]),
        text_reply("6 times 7 is 42."),
        # stream
        text_reply("Here it comes in a few pieces."),
        # client_tool: the client's own tool, run by the SDK between two requests
        tool_calls_reply([("lookup_order", '{"order": "A-1"}', "call_lookup")]),
        text_reply("Order A-1 has shipped."),
        # object: the request's JSON schema reaches the model, whose JSON is the object
        text_reply('{"city": "Lisbon", "country": "Portugal"}'),
    )
    cases = _client_run(scripted_server, token, "openai/test-model")

    assert cases["plain"]["text"] == "6 times 7 is 42."
    assert cases["plain"]["finish"] == "stop"
    usage = cases["plain"]["usage"]
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"] > 0
    assert cases["stream"]["text"] == "Here it comes in a few pieces."
    assert len(cases["stream"]["pieces"]) > 1
    assert cases["client_tool"]["ran"] == ["A-1"]
    assert cases["client_tool"]["steps"] == [[["lookup_order", {"order": "A-1"}]], []]
    assert cases["client_tool"]["text"] == "Order A-1 has shipped."
    assert cases["object"]["output"] == {"city": "Lisbon", "country": "Portugal"}
    (schema_request,) = [r for r in llm_server.requests if r.get("response_format")]
    schema = schema_request["response_format"]["json_schema"]["schema"]
    assert set(schema["properties"]) == {"city", "country"}

    conversations = Conversation.objects.filter(owner=owner)
    assert conversations.count() == 4  # one a case: the client's tool loop is one
    ran = dict(
        ToolExecution.objects.filter(run__conversation__owner=owner).values_list("name", "status")
    )
    assert ran == {
        "calculator": ExecutionStatus.SUCCEEDED,
        "lookup_order": ExecutionStatus.SUCCEEDED,
    }
    for conversation in conversations:
        assert_valid_history(history_for_model(conversation=conversation))


def test_the_ai_sdk_open_responses_provider_with_the_embedded_offline_model(asgi_server):
    owner = UserFactory()
    cases = _client_run(asgi_server, Token.objects.create(user=owner).key, "offline/offline")
    assert "42" in cases["plain"]["text"]
    assert cases["stream"]["finish"] == "stop"
    assert cases["client_tool"]["ran"], cases["client_tool"]
    assert set(cases["object"]["output"]) == {"city", "country"}
