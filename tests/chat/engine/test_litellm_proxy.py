"""Turns through the LiteLLM proxy, a gateway many teams put in front of their models.

toolchat's provider is pointed at a real proxy (tests/plugins/litellm.py),
with the proxy's master key as its API key, in front of the scripted server
and in front of a real local model. The proxy changes what a server's
failures look like: it retries a 5xx itself (twice, by default) before it
answers, relays an error in its own words, and relays llama-cpp-python's
refusal to stream a tool call (an empty event stream) as a clean, empty
answer with `finish_reason` "stop". Turns must complete as they do directly,
and a failing server must be heard of in a bounded time.
"""

from __future__ import annotations

import time

import pytest

from chat.llm.limits import server_limits, server_limits_reset
from chat.models import CallStatus, Mode, ModelCall, Role, RunStatus
from chat.selectors import history_for_model
from chat.services.runs import run_start
from tests.assertions import assert_valid_history
from tests.chat.engine.conftest import wait_for_run
from tests.chat.engine.test_llamacpp import LIMIT_WORDS, MODEL, PROMPTS
from tests.factories import ConversationFactory
from tests.llm_server import Reply, ScriptedLLMServer, error_reply, raw_reply, text_reply
from tests.llm_server import tool_calls_reply as calls

pytestmark = [pytest.mark.litellm, pytest.mark.django_db(transaction=True)]

SCRIPTED_MODEL = "test-model"
# The proxy's retries of a failed upstream request (its default `num_retries`).
PROXY_ATTEMPTS = 3
# What an upstream failure looks like once the proxy has relayed it.
PROXY_WORDS = ("InternalServerError", "APIConnectionError", "OpenAIException")


@pytest.fixture(scope="module")
def upstream():
    """One scripted server for the module: the proxy in front of it starts once."""
    server = ScriptedLLMServer().start()
    yield server
    server.stop()


@pytest.fixture
def proxied(upstream, litellm_proxy, settings):
    """The scripted server behind the proxy, with toolchat's provider pointed at the proxy."""
    proxy = litellm_proxy(upstream.base_url, SCRIPTED_MODEL)
    upstream.clear()
    upstream.responder = None
    settings.LLM_PROVIDER = "openai"
    settings.OPENAI_API_KEY = proxy.master_key
    settings.OPENAI_BASE_URL = proxy.base_url
    settings.LLM_MODEL = SCRIPTED_MODEL
    settings.LLM_COMPOSE_MODEL = ""
    settings.LLM_MAX_RETRIES = 2
    settings.LLM_TIMEOUT_S = 30
    yield upstream
    server_limits_reset()


def stored(conversation):
    return list(conversation.messages.order_by("position"))


def tool_messages(conversation):
    return [m for m in stored(conversation) if m.role == Role.TOOL]


# --- in front of the scripted server ------------------------------------------------------


@pytest.mark.parametrize("mode", [Mode.TWO_PASS, Mode.LOOP, Mode.DIRECT])
def test_every_mode_completes_through_the_proxy_with_the_tools_result(proxied, user, mode):
    conversation = ConversationFactory(owner=user, mode=mode, max_steps=3)
    proxied.push(calls([("calculator", '{"expression": "12*7"}', "call_proxy1")]))
    if mode != Mode.DIRECT:  # the direct mode answers with the tool's message
        proxied.push(text_reply("Twelve times seven is 84."))
    run = wait_for_run(run_start(conversation=conversation, content="what is 12*7"))
    assert run.status == RunStatus.COMPLETED, run.error
    (tool,) = tool_messages(conversation)
    assert "84" in tool.content
    assert "84" in stored(conversation)[-1].content
    assert_valid_history(history_for_model(conversation=conversation))
    # The proxy relays the call's id both ways: stored as the server sent it, and
    # the tool's answer reaches the server under it.
    assert stored(conversation)[1].tool_calls[0]["id"] == "call_proxy1"
    if mode != Mode.DIRECT:
        sent = proxied.requests[1]["messages"]
        assert sent[-2 if mode == Mode.TWO_PASS else -1]["tool_call_id"] == "call_proxy1"
    for call in ModelCall.objects.filter(run=run):
        assert call.status == CallStatus.SUCCEEDED
        assert call.latency_ms is not None
        assert call.prompt_tokens == 11  # the server's usage, relayed by the proxy

    # A second turn on the same history: the proxy takes the stored tool calls back.
    proxied.push(text_reply("Still 84."))
    run = wait_for_run(run_start(conversation=conversation, content="and again?"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert stored(conversation)[-1].content == "Still 84."
    assert not proxied.rejected


def llama_refusal(body) -> Reply:
    """llama-cpp-python's server: a streamed request with tools gets an empty event stream
    (its handler raises "Automatic streaming tool choice is not supported" after the
    headers); unstreamed, it calls the tool."""
    if body.get("stream") and body.get("tools"):
        return raw_reply(b"")
    if body.get("tools") and not any(m["role"] == "tool" for m in body["messages"]):
        return calls([("calculator", '{"expression": "6*7"}')])
    return text_reply("It is 42.")


@pytest.mark.parametrize("mode", [Mode.TWO_PASS, Mode.LOOP, Mode.DIRECT])
def test_a_refused_streamed_tool_call_arrives_empty_and_is_asked_unstreamed(proxied, user, mode):
    proxied.responder = llama_refusal
    conversation = ConversationFactory(owner=user, mode=mode, max_steps=3)
    run = wait_for_run(run_start(conversation=conversation, content="what is 6*7"), timeout=60)
    assert run.status == RunStatus.COMPLETED, run.error
    assert "42" in stored(conversation)[-1].content
    assert "42" in tool_messages(conversation)[0].content
    assert_valid_history(history_for_model(conversation=conversation))
    first = ModelCall.objects.filter(run=run, step=1).order_by("pk").first()
    assert first is not None
    # Through the proxy the refusal is no error: a clean answer that says nothing.
    assert "asked again without streaming: the streamed answer was empty" in first.note
    assert [(r.get("stream", False), "tools" in r) for r in proxied.requests[:2]] == [
        (True, True),
        (False, True),
    ]

    # Learned: the next turn asks for tools unstreamed at once.
    before = len(proxied.requests)
    run = wait_for_run(run_start(conversation=conversation, content="and 6*7 again"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert not any(r.get("stream") and r.get("tools") for r in proxied.requests[before:])
    assert_valid_history(history_for_model(conversation=conversation))


def template_reads_content(body) -> Reply:
    """llama-cpp-python, whose chat template reads every message's `content`: missing, it
    fails; streamed, after the headers (an empty event stream), else with a 500."""
    if any(m["role"] == "assistant" and "content" not in m for m in body["messages"]):
        if body.get("stream"):
            return raw_reply(b"")
        return error_reply(500, "'dict object' has no attribute 'content'")
    if body.get("tools") and not any(m["role"] == "tool" for m in body["messages"]):
        return calls([("calculator", '{"expression": "6*7"}')])
    return text_reply("It is 42.")


@pytest.mark.parametrize("mode", [Mode.TWO_PASS, Mode.LOOP])
def test_a_server_whose_template_needs_content_completes_though_the_proxy_drops_a_null_one(
    proxied, user, mode
):
    # The proxy leaves out an assistant message's null `content` (beside its tool calls).
    conversation = ConversationFactory(owner=user, mode=mode, max_steps=3)
    proxied.responder = template_reads_content
    run = wait_for_run(run_start(conversation=conversation, content="what is 6*7"), timeout=60)
    assert run.status == RunStatus.COMPLETED, run.error
    assert stored(conversation)[-1].content == "It is 42."
    assert_valid_history(history_for_model(conversation=conversation))
    assert ModelCall.objects.filter(
        run=run, note__contains='null assistant content refused: sent as ""'
    ).exists()
    # The empty stream, then the proxy's own tries of the request asked unstreamed: the
    # template's error will not change on a retry, and toolchat does not retry it.
    missing = [
        r
        for r in proxied.requests
        if any(m["role"] == "assistant" and "content" not in m for m in r["messages"])
    ]
    assert [r.get("stream", False) for r in missing] == [True] + [False] * PROXY_ATTEMPTS


def failing_turn(proxied, user, settings, retries: int) -> tuple[object, int, float]:
    """A turn against a server that answers every request with a 500: the failed run, the
    requests the server got, and the seconds the user waited for the error."""
    settings.LLM_MAX_RETRIES = retries
    proxied.responder = lambda body: error_reply(500, "the model is down")
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    began = time.monotonic()
    run = wait_for_run(run_start(conversation=conversation, content="hi"), timeout=120)
    waited = time.monotonic() - began
    assert run.status == RunStatus.FAILED
    assert_valid_history(history_for_model(conversation=conversation))
    return run, len(proxied.requests), waited


@pytest.mark.parametrize("retries", [3, 1, 0], ids=["default", "advised", "none"])
def test_a_server_error_through_the_proxy_is_heard_of_within_the_retries_advised(
    proxied, user, settings, retries, record_property
):
    run, requests, waited = failing_turn(proxied, user, settings, retries)
    record_property("upstream_requests", requests)
    record_property("seconds_to_error", round(waited, 1))
    print(f"LLM_MAX_RETRIES={retries}: {requests} upstream requests, {waited:.1f} s to the error")
    # The server's words, as the proxy relayed them, not "connection error".
    assert "the model is down" in run.error
    assert "connection error" not in run.error
    # The proxy tries each of toolchat's requests three times. The first request offers
    # tools and is streamed: its failure is asked again unstreamed, as one of the
    # LLM_MAX_RETRIES retries (and once even when there are none).
    assert requests == PROXY_ATTEMPTS * max(retries + 1, 2)
    if retries <= 1:
        # What docs/providers.md promises behind a gateway: the user hears of it soon.
        assert waited < 30, waited


def test_an_error_the_server_means_is_not_retried_through_the_proxy(proxied, user, settings):
    settings.LLM_MAX_RETRIES = 3
    refusal = "Automatic streaming tool choice is not supported"
    proxied.responder = lambda body: error_reply(500, refusal)
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    run = wait_for_run(run_start(conversation=conversation, content="hi"), timeout=120)
    assert run.status == RunStatus.FAILED
    assert refusal in run.error
    # The proxy's own three tries of the streamed request, and of the one asked
    # unstreamed; toolchat retries neither.
    assert len(proxied.requests) == PROXY_ATTEMPTS * 2


# --- in front of a real local model -------------------------------------------------------


@pytest.fixture
def llama_proxied(llama_server, litellm_proxy, settings):
    proxy = litellm_proxy(llama_server, MODEL)
    settings.LLM_PROVIDER = "openai"
    settings.OPENAI_API_KEY = proxy.master_key
    settings.OPENAI_BASE_URL = proxy.base_url
    settings.LLM_MODEL = MODEL
    settings.LLM_COMPOSE_MODEL = ""
    settings.LLM_MAX_RETRIES = 1  # behind a gateway, as docs/providers.md advises
    settings.LLM_MAX_TOKENS = 128
    settings.LLM_TIMEOUT_S = 120
    settings.LLM_CALL_DEADLINE_S = 300
    yield proxy
    server_limits_reset()


def assert_ended_well_through_the_proxy(run, conversation) -> None:
    assert run.status in (RunStatus.COMPLETED, RunStatus.FAILED), run.status
    words = LIMIT_WORDS + PROXY_WORDS
    if run.status == RunStatus.FAILED:
        assert not any(w in run.error for w in words), run.error
    assert_valid_history(history_for_model(conversation=conversation))
    model_calls = list(ModelCall.objects.filter(run=run))
    assert model_calls
    for call in model_calls:
        assert call.latency_ms is not None
        if call.status == CallStatus.FAILED:
            assert not any(w in call.error for w in words), call.error
        elif call.prompt_tokens is not None:
            # Usage is the server's, or the proxy's count: never a made-up 0.
            assert call.prompt_tokens > 0


@pytest.mark.llamacpp
@pytest.mark.parametrize("mode", [Mode.TWO_PASS, Mode.LOOP, Mode.DIRECT])
def test_every_mode_ends_well_on_a_real_local_model_through_the_proxy(llama_proxied, user, mode):
    # One turn per mode (tests/chat/engine/test_llamacpp.py drives more, directly): each
    # takes a minute or more of the small model's time on two cores.
    conversation = ConversationFactory(owner=user, mode=mode, max_steps=2)
    run = wait_for_run(run_start(conversation=conversation, content=PROMPTS[0]), timeout=600)
    assert_ended_well_through_the_proxy(run, conversation)


@pytest.mark.llamacpp
def test_the_real_model_picks_a_tool_through_the_proxy_and_the_turn_completes(llama_proxied, user):
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    picked = False
    for prompt in PROMPTS * 2:
        run = wait_for_run(run_start(conversation=conversation, content=prompt), timeout=600)
        assert_ended_well_through_the_proxy(run, conversation)
        if run.steps:
            picked = True
            assert run.status == RunStatus.COMPLETED, run.error
            assert tool_messages(conversation)
            break
    assert picked, "the model never picked a tool"
    # The refusal to stream a tool call, relayed as an empty answer, was learned once.
    assert not server_limits(llama_proxied.base_url.rstrip("/") + "/", MODEL).stream_tools
