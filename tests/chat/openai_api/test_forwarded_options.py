"""A /v1/chat/completions request's options reach the model as a proxy would pass them.

What the model's server was sent is read at the scripted server (tests/llm_server.py):
every sampling option of the request, on every model call of the turn; an option
the server refuses is left out for that server and remembered; the logprobs the
server gives come back to the client, streamed or not; and the options are kept
on the run.
"""

from __future__ import annotations

import json

import pytest
from openai import OpenAI
from rest_framework.authtoken.models import Token

from chat.models import Conversation, ModelCall, Run
from tests.factories import UserFactory
from tests.llm_server import error_reply, text_reply, tool_calls_reply

MODEL = "openai/test-model"
URL = "/v1/chat/completions"
LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look an order up in the client's own system.",
        "parameters": {"type": "object", "properties": {"order": {"type": "string"}}},
    },
}
# Every sampling option a client may set, as the openai SDK sends them.
SAMPLING = {
    "stop": ["\n\nUser:", "END"],
    "top_p": 0.9,
    "seed": 1234,
    "presence_penalty": 0.5,
    "frequency_penalty": -0.25,
    "logit_bias": {"50256": -100},
    "logprobs": True,
    "top_logprobs": 2,
    "parallel_tool_calls": False,
    "reasoning_effort": "low",
    "service_tier": "auto",
    "prompt_cache_key": "tenant-7",
    "safety_identifier": "user-hash-1",
    "user": "customer-7",
}
LOGPROBS = [
    {"token": "Six", "logprob": -0.01, "bytes": [83, 105, 120], "top_logprobs": []},
    {"token": " times", "logprob": -0.2, "bytes": None, "top_logprobs": []},
    {"token": " seven", "logprob": -0.03, "bytes": None, "top_logprobs": []},
]


def _sent(request: dict, names) -> dict:
    return {name: request[name] for name in names if name in request}


@pytest.fixture
def base_url_and_token(scripted_server):
    return f"{scripted_server}/v1", Token.objects.create(user=UserFactory()).key


@pytest.mark.postgres
def test_the_openai_sdks_options_reach_every_model_call_and_logprobs_come_back(
    base_url_and_token, llm_server
):
    base_url, token = base_url_and_token
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "6*7"}', "call_calc")]),
        text_reply("Six times seven", logprobs=LOGPROBS),
    )
    client = OpenAI(base_url=base_url, api_key=token, max_retries=0)
    answer = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is 6*7?"}],
        tools=[LOOKUP_TOOL],
        **SAMPLING,
    )
    choice = answer.choices[0]
    assert choice.message.content == "Six times seven"
    assert choice.logprobs is not None
    assert [(e.token, e.logprob) for e in choice.logprobs.content] == [
        (e["token"], e["logprob"]) for e in LOGPROBS
    ]
    # Both calls of the turn (its tool step and its answer) were sent every option.
    assert len(llm_server.requests) == 2
    for request in llm_server.requests:
        assert _sent(request, SAMPLING) == SAMPLING
    run = Run.objects.get(conversation__owner__auth_token__key=token)
    assert {name: run.client_options[name] for name in SAMPLING} == SAMPLING


@pytest.mark.postgres
def test_a_streamed_answer_carries_its_logprobs(base_url_and_token, llm_server):
    base_url, token = base_url_and_token
    llm_server.push(text_reply("Six times seven", logprobs=LOGPROBS))
    client = OpenAI(base_url=base_url, api_key=token, max_retries=0)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Say it."}],
        stream=True,
        logprobs=True,
        top_logprobs=1,
        seed=7,
    )
    text, tokens = [], []
    for part in stream:
        for choice in part.choices:
            text.append(choice.delta.content or "")
            if choice.logprobs is not None and choice.logprobs.content:
                tokens.extend(entry.token for entry in choice.logprobs.content)
    assert "".join(text) == "Six times seven"
    assert tokens == [entry["token"] for entry in LOGPROBS]
    (request,) = llm_server.requests
    assert _sent(request, ("logprobs", "top_logprobs", "seed")) == {
        "logprobs": True,
        "top_logprobs": 1,
        "seed": 7,
    }


def post(client, **fields):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "What is 6*7?"}], **fields}
    return client.post(URL, body, format="json")


@pytest.mark.django_db(transaction=True)
def test_without_logprobs_asked_none_come_back_and_no_option_is_made_up(v1, llm_server):
    llm_server.push(text_reply("42", logprobs=LOGPROBS))
    response = post(v1)
    assert response.status_code == 200, response.json()
    assert response.json()["choices"][0]["logprobs"] is None
    (request,) = llm_server.requests
    assert not set(request) & set(SAMPLING)


@pytest.mark.django_db(transaction=True)
def test_a_compose_call_without_tools_is_sent_no_parallel_tool_calls(v1, llm_server):
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "6*7"}', "call_calc")]),
        text_reply("42"),
    )
    response = v1.post(
        URL,
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "What is 6*7?"}],
            "parallel_tool_calls": True,
            "stop": "END",
        },
        format="json",
        HTTP_X_TOOLCHAT_MODE="two_pass",
    )
    assert response.status_code == 200, response.json()
    tools_call, compose_call = llm_server.requests
    assert (tools_call["parallel_tool_calls"], tools_call["stop"]) == (True, "END")
    assert "tools" not in compose_call
    assert "parallel_tool_calls" not in compose_call  # OpenAI refuses it without tools
    assert compose_call["stop"] == "END"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("name", "refusal"),
    [
        ("seed", "Unrecognized request argument supplied: seed"),
        ("stop", "Unsupported parameter: 'stop' is not supported with this model."),
        ("top_k", "Unrecognized request argument supplied: top_k"),
        ("logit_bias", "logit_bias is not supported by this model"),
    ],
)
def test_an_option_the_server_refuses_is_left_out_and_remembered(v1, llm_server, name, refusal):
    value = {"seed": 3, "stop": "END", "top_k": 40, "logit_bias": {"1": 5}}[name]
    llm_server.push(error_reply(400, refusal), text_reply("42"), text_reply("Still 42."))
    first = post(v1, top_p=0.5, **{name: value})
    assert first.status_code == 200, first.json()
    assert first.json()["choices"][0]["message"]["content"] == "42"
    refused, asked_again = llm_server.requests
    assert refused[name] == value
    assert name not in asked_again
    assert asked_again["top_p"] == 0.5  # only the refused option is left out
    call = ModelCall.objects.get()
    assert f"{name} refused: left out" in call.note
    # The next turn asks that server without it at once.
    second = post(v1, top_p=0.5, **{name: value})
    assert second.status_code == 200, second.json()
    later = llm_server.requests[2]
    assert name not in later
    assert later["top_p"] == 0.5


@pytest.mark.django_db(transaction=True)
def test_an_error_that_says_a_word_like_stop_refuses_nothing(v1, llm_server, settings):
    settings.LLM_MAX_RETRIES = 0
    llm_server.push(error_reply(400, "The user asked the model to stop; messages[0] is invalid"))
    response = post(v1, stop="END", user="u-1")
    assert response.status_code == 502, response.json()
    assert len(llm_server.requests) == 1  # not asked again without `stop` or `user`


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": 3}, "stop"),
        ({"top_p": 1.5}, "top_p"),
        ({"seed": 1.5}, "seed"),
        ({"seed": True}, "seed"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"frequency_penalty": "high"}, "frequency_penalty"),
        ({"logit_bias": {"1": 200}}, "logit_bias"),
        ({"logit_bias": [1]}, "logit_bias"),
        ({"logprobs": "yes"}, "logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"parallel_tool_calls": "no"}, "parallel_tool_calls"),
        ({"reasoning_effort": 1}, "reasoning_effort"),
    ],
)
def test_a_bad_option_is_a_400_naming_it_and_stores_nothing(v1, llm_server, fields, param):
    response = v1.post(
        URL,
        json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **fields}),
        content_type="application/json",
    )
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["param"] == param
    assert not Conversation.objects.exists()
    assert not llm_server.requests
