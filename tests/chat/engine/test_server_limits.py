"""Turns against servers that cannot do all the API asks: their limits are absorbed.

Each scripted server here behaves as a real one was seen to: llama-cpp-python's
server refuses to stream an answer that calls tools (an error, or a dropped
stream), LiteLLM relays that refusal as an empty answer, other servers refuse
parameters they do not know. The turn must still complete with the tool's
result and a valid stored history, and the call's row says what was done.
"""

from __future__ import annotations

import logging

import pytest

from chat.audit.queries import audit_run_get, run_latency_breakdown
from chat.history import message_to_api
from chat.models import Mode, ModelCall, Role, RunStatus
from chat.selectors import history_for_model
from chat.services.runs import run_start
from tests.assertions import assert_valid_history
from tests.chat.engine.conftest import wait_for_run
from tests.factories import ConversationFactory
from tests.llm_server import (
    Reply,
    error_reply,
    raw_reply,
    sse,
    text_reply,
    tool_calls_reply,
)

pytestmark = pytest.mark.django_db(transaction=True)

REFUSAL = "Automatic streaming tool choice is not supported"


def _role_chunk() -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "test-model",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
    }


# The ways a streamed request with tools was seen to fail on servers that cannot stream them.
STREAM_REFUSALS = {
    "500 refusal": lambda: error_reply(500, REFUSAL),
    "503 then reset": lambda: error_reply(503, "upstream error"),
    "empty 200, reset": lambda: raw_reply(b"", reset=True),
    "reset before any answer": lambda: Reply(drop=True),
    "broken before content": lambda: raw_reply(sse(_role_chunk()), reset=True),
    "empty answer (LiteLLM)": lambda: text_reply(""),
}


def stored(conversation):
    return list(conversation.messages.order_by("position"))


@pytest.mark.parametrize("failure", list(STREAM_REFUSALS), ids=list(STREAM_REFUSALS))
def test_a_server_that_cannot_stream_tool_calls_is_asked_without_streaming_and_remembered(
    llm_server, user, failure, caplog
):
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    llm_server.push(
        STREAM_REFUSALS[failure](),
        tool_calls_reply([("calculator", '{"expression": "1+2"}', "call_a")]),
        text_reply("It is 3."),
    )
    with caplog.at_level(logging.INFO):
        run = wait_for_run(run_start(conversation=conversation, content="what is 1+2"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert stored(conversation)[-1].content == "It is 3."
    tool_message = next(m for m in stored(conversation) if m.role == Role.TOOL)
    assert "3" in tool_message.content
    assert_valid_history(history_for_model(conversation=conversation))
    assert [r.get("stream", False) for r in llm_server.requests] == [True, False, True]
    assert "stream_options" not in llm_server.requests[1]
    tools_call = ModelCall.objects.get(run=run, step=1)
    assert "asked again without streaming" in tools_call.note
    assert ModelCall.objects.get(run=run, step=2).note == ""

    # The next turn asks for tools without streaming at once; the limit is logged once.
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "2+2"}', "call_b")]),
        text_reply("It is 4."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="and 2+2"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert [r.get("stream", False) for r in llm_server.requests[3:]] == [False, True]
    assert "not streamed" in ModelCall.objects.get(run=run, step=1).note
    assert caplog.text.count("cannot stream tool calls") == 1
    assert_valid_history(history_for_model(conversation=conversation))


@pytest.mark.parametrize("mode", [Mode.LOOP, Mode.DIRECT])
def test_every_mode_completes_on_a_server_that_cannot_stream_tool_calls(llm_server, user, mode):
    conversation = ConversationFactory(owner=user, mode=mode, max_steps=3)

    def llama_like(body) -> Reply:
        if body.get("stream") and body.get("tools"):
            return error_reply(500, REFUSAL)
        if body.get("tools") and not any(m["role"] == "tool" for m in body["messages"]):
            return tool_calls_reply([("calculator", '{"expression": "6*7"}')])
        return text_reply("It is 42.")

    llm_server.responder = llama_like
    run = wait_for_run(run_start(conversation=conversation, content="what is 6*7"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert "42" in stored(conversation)[-1].content
    assert_valid_history(history_for_model(conversation=conversation))
    streamed_with_tools = [r for r in llm_server.requests if r.get("stream") and r.get("tools")]
    assert len(streamed_with_tools) == 1


def test_a_transient_server_error_on_a_text_answer_is_not_remembered(llm_server, user):
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    llm_server.push(error_reply(500, "hiccup"), text_reply("Hello."), text_reply("Again."))
    run = wait_for_run(run_start(conversation=conversation, content="hi"))
    assert run.status == RunStatus.COMPLETED, run.error
    run = wait_for_run(run_start(conversation=conversation, content="hi again"))
    assert run.status == RunStatus.COMPLETED, run.error
    # The unstreamed answer had no tool calls: the server is not taken for one that
    # cannot stream them, and the next request with tools is streamed again.
    assert [r.get("stream", False) for r in llm_server.requests] == [True, False, True]


def test_a_stream_without_usage_is_stored_and_shown_as_not_reported(llm_server, user):
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "test-model"}
    llm_server.push(
        raw_reply(
            sse(
                {**chunk, "choices": [{"index": 0, "delta": {"content": "Hello there."}}]},
                {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                "[DONE]",
            )
        )
    )
    run = wait_for_run(run_start(conversation=conversation, content="hi"))
    assert run.status == RunStatus.COMPLETED, run.error
    answer = stored(conversation)[-1]
    assert (answer.prompt_tokens, answer.completion_tokens) == (None, None)
    assert message_to_api(answer)["usage"] is None
    model_call = ModelCall.objects.get(run=run)
    assert (model_call.prompt_tokens, model_call.completion_tokens) == (None, None)
    assert model_call.latency_ms is not None
    timing = run_latency_breakdown(audit_run_get(run_id=run.pk))
    assert timing[0].detail == "tokens not reported"


def test_a_tool_named_in_the_text_is_asked_for_by_name(llm_server, user):
    # llama-cpp-python's chatml-function-calling: its "message" branch can only say
    # `functions.NAME:`; asked with tool_choice naming that tool, it writes the call.
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)

    def llama_like(body) -> Reply:
        choice = body.get("tool_choice")
        if isinstance(choice, dict):
            return tool_calls_reply([(choice["function"]["name"], '{"expression": "6*7"}')])
        if body.get("tools"):
            return text_reply("functions.calculator:")
        return text_reply("It is 42.")

    llm_server.responder = llama_like
    run = wait_for_run(run_start(conversation=conversation, content="what is 6*7"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert stored(conversation)[-1].content == "It is 42."
    assert not any("functions." in (m.content or "") for m in stored(conversation))
    assert_valid_history(history_for_model(conversation=conversation))
    assert "named a tool" in ModelCall.objects.get(run=run, step=1).note


def test_a_server_that_refuses_a_null_assistant_content_gets_an_empty_one(llm_server, user):
    # llama-cpp-python validates an assistant message's content as a string (a 500).
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    refusal = (
        "7 validation errors: {'type': 'string_type', 'loc': ('body', 'messages', 1, "
        "'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid "
        "string', 'input': None}"
    )

    def llama_like(body) -> Reply:
        if any(m["role"] == "assistant" and m.get("content") is None for m in body["messages"]):
            return error_reply(500, refusal)
        if body.get("tools"):
            return tool_calls_reply([("calculator", '{"expression": "6*7"}')])
        return text_reply("It is 42.")

    llm_server.responder = llama_like
    run = wait_for_run(run_start(conversation=conversation, content="what is 6*7"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert stored(conversation)[-1].content == "It is 42."
    assert len(llm_server.requests) == 3  # the refusal is not retried as it was
    assert_valid_history(history_for_model(conversation=conversation))


def test_limits_learned_in_one_call_spend_none_of_its_retries(llm_server, user, settings):
    """llama-cpp-python in a loop, as seen: the second step's history holds a null content
    (a 500); once that is mended, the streamed request with tools ends with nothing said
    (its refusal), and the request asked without streaming meets the connection the
    server dropped after that stream. Only that last one is a failure worth a retry."""
    settings.LLM_MAX_RETRIES = 2  # 3 attempts: the two lessons must not use them up
    conversation = ConversationFactory(owner=user, mode=Mode.LOOP, max_steps=3)
    refusal = (
        "7 validation errors: {'type': 'string_type', 'loc': ('body', 'messages', 1, "
        "'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid "
        "string', 'input': None}"
    )
    steps = iter(["calculator", None])
    dropped = []

    def llama_like(body) -> Reply:
        if any(m["role"] == "assistant" and m.get("content") is None for m in body["messages"]):
            return error_reply(500, refusal)
        if body.get("tools") and body.get("stream"):
            return raw_reply(sse(_role_chunk(), "[DONE]"))
        if body.get("tools") and len(dropped) < 2:
            dropped.append(True)
            return Reply(drop=True)  # once per step: the connection the stream left
        if isinstance(body.get("tool_choice"), dict):  # asked again naming the tool
            return tool_calls_reply([("calculator", '{"expression": "6*7"}')])
        if body.get("tools"):
            tool = next(steps)
            # Its message branch can only name a tool.
            return text_reply(f"functions.{tool}:" if tool else "It is 42.")
        return text_reply("It is 42.")

    llm_server.responder = llama_like
    run = wait_for_run(run_start(conversation=conversation, content="what is 6*7"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert stored(conversation)[-1].content == "It is 42."
    assert_valid_history(history_for_model(conversation=conversation))
    second = ModelCall.objects.get(run=run, step=2)
    assert "null assistant content" in second.note


def test_a_server_error_to_a_streamed_request_with_tools_spends_a_retry(llm_server, user, settings):
    """A 5xx that does not say it refuses may be a server that is down: asking again
    unstreamed is then one of the call's retries, not a free lesson. Behind a gateway
    that retries each request itself, a free one would cost several more."""
    settings.LLM_MAX_RETRIES = 2
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    llm_server.responder = lambda body: error_reply(500, "the model is down")
    run = wait_for_run(run_start(conversation=conversation, content="hi"), timeout=30)
    assert run.status == RunStatus.FAILED
    assert "the model is down" in run.error
    assert "3 attempts" in run.error
    assert [r.get("stream", False) for r in llm_server.requests] == [True, False, False]
    assert_valid_history(history_for_model(conversation=conversation))


# --- A small model that writes until its context is full ------------------------------
# (llama-cpp-python with SmolLM2-135M, loop mode, "Write a haiku about tools."): a call
# that is still writing is not a transient failure, and is never asked again.

HAIKU = "Write a haiku about tools."


def test_a_model_that_writes_without_end_is_stopped_by_the_default_bound(
    llm_server, user, settings
):
    settings.LLM_LOCAL_MAX_TOKENS = 40
    settings.LLM_CALL_DEADLINE_S = 5  # without a bound, the call would end only here
    conversation = ConversationFactory(owner=user, mode=Mode.LOOP)
    llm_server.push(text_reply("Tools, tools, tools,", endless=True))
    run = wait_for_run(run_start(conversation=conversation, content=HAIKU))
    assert run.status == RunStatus.COMPLETED, run.error
    assert llm_server.requests[0]["max_tokens"] == 40  # the scripted server is on loopback
    answer = stored(conversation)[-1]
    assert answer.content.startswith("Tools, tools, tools, tools,")
    assert answer.finish_reason == "length"
    assert len(llm_server.requests) == 1


def test_a_model_still_writing_at_the_deadline_ends_the_turn_with_what_it_wrote(
    llm_server, user, settings
):
    settings.LLM_LOCAL_MAX_TOKENS = 0  # a server that heeds no bound
    settings.LLM_ATTEMPT_DEADLINE_S = 1
    conversation = ConversationFactory(owner=user, mode=Mode.LOOP)
    llm_server.push(text_reply("Tools, tools, tools,", endless=True, chunk_delay_s=0.01))
    run = wait_for_run(run_start(conversation=conversation, content=HAIKU))
    assert run.status == RunStatus.COMPLETED, run.error
    assert "max_tokens" not in llm_server.requests[0]
    assert len(llm_server.requests) == 1  # not asked again
    answer = stored(conversation)[-1]
    assert answer.content.startswith("Tools, tools, tools, tools,")
    assert answer.finish_reason == "length"
    call = ModelCall.objects.get(run=run)
    assert (call.attempts, call.finish_reason) == (1, "length")
    assert "still writing" in call.note
    assert "LLM_ATTEMPT_DEADLINE_S" in call.note
    assert "LLM_MAX_TOKENS" in call.note
    assert_valid_history(history_for_model(conversation=conversation))


def test_a_tool_step_asked_without_streaming_that_times_out_is_not_asked_again(
    llm_server, user, settings
):
    """llama-cpp-python cannot stream tool calls, and heeds no token limit when tools are
    offered: asked unstreamed, a small model writes until its context is full, sending
    nothing until it ends. Each retry would only write as much again."""
    settings.LLM_TIMEOUT_S = 0.5
    settings.LLM_MAX_RETRIES = 3
    conversation = ConversationFactory(owner=user, mode=Mode.LOOP)
    llm_server.push(error_reply(500, REFUSAL), *[text_reply("late", delay_s=2.0)] * 4)
    run = wait_for_run(run_start(conversation=conversation, content=HAIKU), timeout=30)
    assert run.status == RunStatus.FAILED
    assert [r.get("stream", False) for r in llm_server.requests] == [True, False]
    assert "no answer within 0.5 s (LLM_TIMEOUT_S)" in run.error
    assert "not asked again" in run.error
    assert "LLM_MAX_TOKENS" in run.error
