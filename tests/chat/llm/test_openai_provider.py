"""The OpenAI provider against the scripted server, through the real openai SDK."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from chat.llm import get_provider
from chat.llm.base import (
    ChatRequest,
    Completion,
    Done,
    ProviderError,
    ProviderStopped,
    StreamRestart,
    TextDelta,
)
from chat.llm.openai_provider import OpenAIProvider
from chat.llm.request_body import Known
from chat.llm.tool_bounds import tools_for_model
from tests.assertions import wait_until
from tests.llm_server import ScriptedLLMServer, error_reply, text_reply, tool_calls_reply

USER = [{"role": "user", "content": "hello"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Arithmetic",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]


# The SDK's first backoff is 0.5s less up to 25% jitter: a wait of a second or
# more is the server's Retry-After.
FIRST_BACKOFF_MAX_S = 0.5


def complete(provider, request) -> Completion:
    """Run a streamed call to its end and return the completion."""
    events = list(provider.stream(request))
    done = events[-1]
    assert isinstance(done, Done)
    return done.completion


def timed_complete(provider, request) -> tuple[Completion, float]:
    started = time.monotonic()
    completion = complete(provider, request)
    return completion, time.monotonic() - started


@pytest.fixture
def server():
    server = ScriptedLLMServer().start()
    yield server
    server.stop()


@pytest.fixture
def provider(server):
    return OpenAIProvider(api_key="test", base_url=server.base_url, timeout_s=2, max_retries=3)


def test_streams_text_word_by_word_with_usage(server, provider):
    server.push(text_reply("The answer is 4."))
    events = list(provider.stream(ChatRequest(model="m", messages=USER)))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert deltas == ["The ", "answer ", "is ", "4."]
    done = events[-1]
    assert isinstance(done, Done)
    assert done.completion.content == "The answer is 4."
    assert done.completion.finish_reason == "stop"
    assert (done.completion.prompt_tokens, done.completion.completion_tokens) == (11, 7)
    assert done.completion.first_token_ms is not None
    assert done.completion.attempts == 1
    request = server.requests[0]
    assert request["stream"] is True
    assert request["stream_options"] == {"include_usage": True}
    assert "tools" not in request
    assert "tool_choice" not in request


def test_assembles_parallel_tool_calls_from_deltas(server, provider):
    server.push(
        tool_calls_reply(
            [
                ("calculator", '{"expression": "12*7"}', "call_a"),
                ("calculator", '{"expression": "1+1"}', "call_b"),
            ]
        )
    )
    completion = complete(
        provider, ChatRequest(model="m", messages=USER, tools=TOOLS, tool_choice="auto")
    )
    assert completion.content is None
    assert completion.finish_reason == "tool_calls"
    assert [(c.id, c.name, json.loads(c.arguments)) for c in completion.tool_calls] == [
        ("call_a", "calculator", {"expression": "12*7"}),
        ("call_b", "calculator", {"expression": "1+1"}),
    ]
    assert server.requests[0]["tools"] == TOOLS
    assert server.requests[0]["tool_choice"] == "auto"


@pytest.mark.parametrize(
    "headers", [{"Retry-After": "1.5"}, {"retry-after-ms": "1500"}], ids=["seconds", "ms"]
)
def test_429_is_retried_after_the_servers_retry_after(server, provider, headers):
    server.push(error_reply(429, "slow down", headers=headers), text_reply("ok"))
    completion, elapsed = timed_complete(provider, ChatRequest(model="m", messages=USER))
    assert completion.content == "ok"
    assert completion.attempts == 2
    assert 1.5 <= elapsed < 3
    assert len(server.requests) == 2


def test_500_twice_then_success(server, provider):
    server.push(error_reply(500), error_reply(503), text_reply("fine"))
    completion = complete(provider, ChatRequest(model="m", messages=USER))
    assert completion.content == "fine"
    assert completion.attempts == 3
    assert len(server.requests) == 3


def test_attempts_are_capped(server):
    provider = OpenAIProvider(api_key="t", base_url=server.base_url, max_retries=2)
    server.push(*[error_reply(500, "boom") for _ in range(5)])
    with pytest.raises(ProviderError) as caught:
        complete(provider, ChatRequest(model="m", messages=USER))
    assert caught.value.attempts == 3
    assert caught.value.status == 500
    assert "after 3 attempts" in str(caught.value)
    assert "boom" in str(caught.value)
    assert len(server.requests) == 3


def test_client_errors_are_not_retried(server, provider):
    server.push(error_reply(401, "bad key"))
    with pytest.raises(ProviderError) as caught:
        complete(provider, ChatRequest(model="m", messages=USER))
    assert caught.value.status == 401
    assert caught.value.attempts == 1
    assert "bad key" in str(caught.value)
    assert "after 1 attempt:" in str(caught.value)
    assert len(server.requests) == 1


def test_invalid_history_is_refused_like_the_real_api(server, provider):
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "x", "arguments": "{}"}}
            ],
        },
        {"role": "user", "content": "again"},
    ]
    with pytest.raises(ProviderError) as caught:
        complete(provider, ChatRequest(model="m", messages=messages))
    assert caught.value.status == 400
    assert "c1" in str(caught.value)


def test_timeout_is_retried_then_reported(server):
    provider = OpenAIProvider(api_key="t", base_url=server.base_url, timeout_s=0.3, max_retries=1)
    server.push(text_reply("late", delay_s=1.0), text_reply("late", delay_s=1.0))
    with pytest.raises(ProviderError) as caught:
        complete(provider, ChatRequest(model="m", messages=USER))
    assert "timed out" in str(caught.value)
    assert caught.value.attempts == 2


def test_stream_cut_mid_answer_is_retried_with_a_restart(server, provider):
    server.push(
        text_reply("one two three four five", cut_after_chunks=3), text_reply("whole answer")
    )
    events = list(provider.stream(ChatRequest(model="m", messages=USER)))
    restarts = [e for e in events if isinstance(e, StreamRestart)]
    assert len(restarts) == 1
    assert restarts[0].attempt == 2
    after_restart = events[events.index(restarts[0]) + 1 :]
    assert "".join(e.text for e in after_restart if isinstance(e, TextDelta)) == "whole answer"
    done = events[-1]
    assert isinstance(done, Done)
    assert done.completion.content == "whole answer"
    assert done.completion.attempts == 2


def test_a_stream_cut_every_time_fails_readably_within_the_budget(server):
    provider = OpenAIProvider(api_key="t", base_url=server.base_url, max_retries=1)
    server.push(*[text_reply("one two three", cut_after_chunks=2) for _ in range(3)])
    events = []
    with pytest.raises(ProviderError) as caught:
        events.extend(provider.stream(ChatRequest(model="m", messages=USER)))
    assert caught.value.attempts == 2
    assert "stream cut mid-answer" in str(caught.value)
    assert "after 2 attempts" in str(caught.value)
    assert len(server.requests) == 2
    assert [e.attempt for e in events if isinstance(e, StreamRestart)] == [2]


def test_a_cut_stream_and_failed_requests_share_one_budget(server):
    provider = OpenAIProvider(api_key="t", base_url=server.base_url, max_retries=2)
    server.push(
        error_reply(500, headers={"Retry-After": "0.01"}),
        text_reply("cut short", cut_after_chunks=2),
        error_reply(500, "still down"),
        text_reply("never asked for"),
    )
    with pytest.raises(ProviderError) as caught:
        complete(provider, ChatRequest(model="m", messages=USER))
    assert (caught.value.status, caught.value.attempts) == (500, 3)
    assert "still down" in str(caught.value)
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    "headers",
    [{"Retry-After": "garbage"}, {"Retry-After": "-5"}, {"Retry-After": "nan"}, {}],
    ids=["unreadable", "negative", "nan", "absent"],
)
def test_without_a_usable_retry_after_the_sdk_backs_off(server, provider, headers):
    server.push(error_reply(503, headers=headers), text_reply("ok"))
    completion, elapsed = timed_complete(provider, ChatRequest(model="m", messages=USER))
    assert completion.content == "ok"
    assert completion.attempts == 2
    assert elapsed < FIRST_BACKOFF_MAX_S + 0.5


def test_a_retry_after_beyond_two_minutes_is_not_waited_for(server, provider):
    server.push(error_reply(429, "come back tomorrow", headers={"Retry-After": "100000"}))
    with pytest.raises(ProviderError) as caught:
        complete(provider, ChatRequest(model="m", messages=USER))
    assert (caught.value.status, caught.value.attempts) == (429, 1)
    assert "come back tomorrow" in str(caught.value)
    assert len(server.requests) == 1


def test_the_client_is_made_once_per_process_and_settings(llm_server, settings):
    client = get_provider().client
    assert get_provider().client is client
    in_thread = []
    thread = threading.Thread(target=lambda: in_thread.append(get_provider().client))
    thread.start()
    thread.join()
    assert in_thread == [client]
    settings.LLM_TIMEOUT_S = 7
    assert get_provider().client is not client


def test_a_forked_child_makes_its_own_client(llm_server):
    client = get_provider().client
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer through the pipe, then leave without pytest's teardown
        try:
            os.write(write_end, b"shared" if get_provider().client is client else b"own")
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 16)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert answer == b"own"
    assert get_provider().client is client


# --- Deadlines, stop, and servers that do not stream ---------------------------------


def test_a_trickling_server_is_ended_at_the_calls_deadline(server):
    """SSE comments reset the read timeout at every byte; the call's deadline does not move."""
    provider = OpenAIProvider(
        api_key="t", base_url=server.base_url, timeout_s=1, max_retries=3, call_deadline_s=1.5
    )
    server.push(*[text_reply("never", trickle_s=0.2) for _ in range(4)])
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        complete(provider, ChatRequest(model="m", messages=USER))
    elapsed = time.monotonic() - started
    assert "deadline" in str(caught.value)
    assert "LLM_CALL_DEADLINE_S" in str(caught.value)
    assert elapsed < 1.5 + 0.2 + 1.0
    assert len(server.requests) == 1  # the whole call's deadline is not retried
    wait_until(lambda: server.open_streams == 0, what="the connection to be closed")


def test_a_late_attempt_is_asked_again_within_the_calls_deadline(server):
    provider = OpenAIProvider(
        api_key="t",
        base_url=server.base_url,
        timeout_s=1,
        max_retries=2,
        attempt_deadline_s=0.6,
        call_deadline_s=10,
    )
    server.push(text_reply("never", trickle_s=0.1), text_reply("on time"))
    completion, elapsed = timed_complete(provider, ChatRequest(model="m", messages=USER))
    assert completion.content == "on time"
    assert completion.attempts == 2
    assert elapsed < 0.6 + 1.0


def test_a_late_attempt_every_time_fails_within_the_budget(server):
    provider = OpenAIProvider(
        api_key="t", base_url=server.base_url, timeout_s=1, max_retries=1, attempt_deadline_s=0.4
    )
    server.push(*[text_reply("never", trickle_s=0.1) for _ in range(3)])
    with pytest.raises(ProviderError) as caught:
        complete(provider, ChatRequest(model="m", messages=USER))
    assert caught.value.attempts == 2
    assert "LLM_ATTEMPT_DEADLINE_S" in str(caught.value)
    assert len(server.requests) == 2


# A stream that keeps producing is not a failure: a deadline ends it where it got to,
# and it is never asked again (the model would only write as much again).
STILL_WRITING = {
    "LLM_ATTEMPT_DEADLINE_S": {"attempt_deadline_s": 0.6, "call_deadline_s": 30},
    "LLM_CALL_DEADLINE_S": {"attempt_deadline_s": 30, "call_deadline_s": 0.6},
}


@pytest.mark.parametrize("deadline", list(STILL_WRITING))
def test_a_stream_still_writing_at_a_deadline_keeps_its_text_and_is_not_asked_again(
    server, deadline
):
    provider = OpenAIProvider(
        api_key="t", base_url=server.base_url, timeout_s=1, max_retries=3, **STILL_WRITING[deadline]
    )
    server.push(
        text_reply("tools, tools,", endless=True, chunk_delay_s=0.02), text_reply("never asked")
    )
    events = list(provider.stream(ChatRequest(model="m", messages=USER)))
    assert not [e for e in events if isinstance(e, StreamRestart)]
    completion = events[-1].completion
    shown = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert completion.content == shown
    assert shown.startswith("tools, tools, tools,")
    assert (completion.finish_reason, completion.attempts) == ("length", 1)
    assert "still writing" in completion.note
    assert deadline in completion.note
    assert "LLM_MAX_TOKENS" in completion.note
    assert len(server.requests) == 1
    wait_until(lambda: server.open_streams == 0, what="the connection to be closed")


def test_a_tool_call_still_being_written_at_the_deadline_fails_readably_once(server):
    provider = OpenAIProvider(
        api_key="t", base_url=server.base_url, timeout_s=1, max_retries=3, attempt_deadline_s=0.6
    )
    server.push(
        tool_calls_reply([("calculator", '{"expression": "1+1+1')], endless=True),
        text_reply("never asked"),
    )
    with pytest.raises(ProviderError) as caught:
        complete(provider, ChatRequest(model="m", messages=USER, tools=TOOLS))
    message = str(caught.value)
    assert "still writing" in message
    assert "calculator" in message
    assert "LLM_MAX_TOKENS" in message
    assert "LLM_ATTEMPT_DEADLINE_S" in message
    assert caught.value.attempts == 1
    assert len(server.requests) == 1


def test_a_stream_that_goes_silent_mid_answer_is_asked_again(server):
    provider = OpenAIProvider(api_key="t", base_url=server.base_url, timeout_s=0.5, max_retries=2)
    server.push(
        text_reply("first words then nothing", silent_after_chunks=3, silence_s=3),
        text_reply("whole answer"),
    )
    events = list(provider.stream(ChatRequest(model="m", messages=USER)))
    assert [e.attempt for e in events if isinstance(e, StreamRestart)] == [2]
    assert (events[-1].completion.content, events[-1].completion.attempts) == ("whole answer", 2)
    assert len(server.requests) == 2


def test_a_stream_silent_every_time_fails_naming_the_read_timeout(server):
    provider = OpenAIProvider(api_key="t", base_url=server.base_url, timeout_s=0.4, max_retries=1)
    server.push(*[text_reply("first words then nothing", silent_after_chunks=3, silence_s=3)] * 2)
    with pytest.raises(ProviderError) as caught:
        complete(provider, ChatRequest(model="m", messages=USER))
    assert caught.value.attempts == 2
    assert "no chunk for 0.4 s (LLM_TIMEOUT_S)" in str(caught.value)


def test_an_unstreamed_request_that_times_out_is_not_asked_again(server):
    """Its answer comes whole: a model still writing is as silent as a server that hung."""
    provider = OpenAIProvider(
        api_key="t",
        base_url=server.base_url,
        timeout_s=0.4,
        max_retries=3,
        known=Known(stream=False),
    )
    server.push(*[text_reply("late", delay_s=1.0)] * 4)
    with pytest.raises(ProviderError) as caught:
        complete(provider, ChatRequest(model="m", messages=USER))
    message = str(caught.value)
    assert "timed out" in message
    assert "no answer within 0.4 s (LLM_TIMEOUT_S)" in message
    assert "LLM_MAX_TOKENS" in message
    assert caught.value.attempts == 1
    assert len(server.requests) == 1


def test_stop_ends_a_streaming_call_and_closes_its_connection(server, provider):
    server.push(text_reply("never", trickle_s=0.1))
    stop = threading.Event()
    threading.Timer(0.4, stop.set).start()
    started = time.monotonic()
    with pytest.raises(ProviderStopped):
        list(provider.stream(ChatRequest(model="m", messages=USER), stop=stop))
    assert time.monotonic() - started < 0.4 + 1.0
    assert len(server.requests) == 1
    wait_until(lambda: server.open_streams == 0, what="the connection to be closed")


def test_stop_is_checked_before_a_retry(server, provider):
    server.push(error_reply(500, headers={"Retry-After": "0.3"}), text_reply("never asked for"))
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    with pytest.raises(ProviderStopped):
        list(provider.stream(ChatRequest(model="m", messages=USER), stop=stop))
    assert len(server.requests) == 1


def test_a_stop_never_set_changes_nothing(server, provider):
    server.push(text_reply("all there"))
    events = list(provider.stream(ChatRequest(model="m", messages=USER), stop=threading.Event()))
    assert events[-1].completion.content == "all there"


def test_a_server_that_ignores_stream_true_is_read_as_one_completion(server, provider):
    server.push(
        text_reply("Plain JSON.", unstreamed="json", prompt_tokens=5, completion_tokens=2),
        tool_calls_reply([("calculator", '{"expression": "2+2"}')], unstreamed="json"),
    )
    events = list(provider.stream(ChatRequest(model="m", messages=USER)))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Plain JSON."]
    completion = events[-1].completion
    assert (completion.content, completion.finish_reason) == ("Plain JSON.", "stop")
    assert (completion.prompt_tokens, completion.completion_tokens) == (5, 2)
    calls = complete(provider, ChatRequest(model="m", messages=USER, tools=TOOLS)).tool_calls
    assert [(c.name, c.arguments) for c in calls] == [("calculator", '{"expression": "2+2"}')]


@pytest.mark.parametrize("kind", ["text/html", "text/plain"])
def test_a_server_that_answers_a_page_says_what_came_back(server, provider, kind):
    server.push(text_reply("never", unstreamed=kind))
    with pytest.raises(ProviderError) as caught:
        complete(provider, ChatRequest(model="m", messages=USER))
    message = str(caught.value)
    assert "stream ended" not in message
    assert f"the server sent a {kind} body" in message
    assert "Welcome to nginx!" in message
    assert len(server.requests) == 1


def long_history(turns: int) -> list[dict]:
    """A stored conversation's history in OpenAI's shape: questions, tool calls, results, answers."""
    messages: list[dict] = [{"role": "system", "content": "Be brief."}]
    for turn in range(turns):
        call = {
            "id": f"call_{turn}",
            "type": "function",
            "function": {"name": "calculator", "arguments": '{"expression": "1+1"}'},
        }
        messages += [
            {"role": "user", "content": f"question {turn}"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": "2"},
            {"role": "assistant", "content": f"answer {turn}"},
        ]
    return [*messages, {"role": "user", "content": "and now?"}]


@pytest.mark.parametrize("stream", [True, False])
def test_the_history_goes_into_the_body_without_the_sdks_walk_over_it(server, monkeypatch, stream):
    # The SDK's transform checks every message against each TypedDict of its
    # unions, about 0.25 ms a message with the GIL held: 100 ms for a request
    # of 400 messages, twice a turn. The history is already in OpenAI's shape.
    from openai.resources.chat.completions import completions as sdk_completions

    walked: list[int] = []
    transform = sdk_completions.maybe_transform

    def counting(data, *args, **kwargs):
        if isinstance(data, dict):  # the messages and the tools' schemas it would walk
            walked.append(len(data.get("messages") or ()) + len(data.get("tools") or ()))
        return transform(data, *args, **kwargs)

    monkeypatch.setattr(sdk_completions, "maybe_transform", counting)
    provider = OpenAIProvider(
        api_key="test", base_url=server.base_url, timeout_s=2, known=Known(stream=stream)
    )
    history = long_history(50)
    server.push(text_reply("ok"))
    assert complete(provider, ChatRequest(model="m", messages=history, tools=TOOLS)).content == "ok"
    assert walked
    assert max(walked) == 0
    request = server.requests[0]
    assert request["messages"] == history
    assert request["tools"] == tools_for_model(TOOLS)
    # Where the SDK puts them, as it did when it transformed them itself.
    assert list(request) == ["model", "stream", "messages", *["stream_options"] * stream, "tools"]


def test_streamed_calls_share_one_connection(server, provider):
    """The SDK stops reading at `[DONE]`; the rest of the body is read so the connection is kept."""
    for number in range(5):
        server.push(text_reply(f"answer {number}"))
        assert complete(provider, ChatRequest(model="m", messages=USER)).content == (
            f"answer {number}"
        )
    assert server.connections == 1


def test_a_server_that_holds_the_body_open_after_done_still_answers(server):
    provider = OpenAIProvider(api_key="test", base_url=server.base_url, timeout_s=1, max_retries=0)
    server.push(text_reply("all there", hold_after_done_s=3))
    completion, took = timed_complete(provider, ChatRequest(model="m", messages=USER))
    # The read after [DONE] timed out: the answer was complete, so it is not an error.
    assert completion.content == "all there"
    assert took < 2.5


def test_done_written_inside_the_answer_does_not_end_the_stream(server, provider):
    text = "say data: [DONE]\n\ndata: [DONE] now"
    server.push(text_reply(text, chunk_delay_s=0.1))
    started = time.monotonic()
    arrivals = [
        (event.text, time.monotonic() - started)
        for event in provider.stream(ChatRequest(model="m", messages=USER))
        if isinstance(event, TextDelta)
    ]
    assert "".join(piece for piece, _ in arrivals) == text
    # Word by word as they were sent, not all at the end.
    assert arrivals[-1][1] - arrivals[0][1] > 0.3


def test_a_server_with_nothing_listening_fails_after_the_attempts_the_settings_give():
    from tests.plugins.services import free_port

    nobody = f"http://127.0.0.1:{free_port()}/v1"
    provider = OpenAIProvider(api_key="t", base_url=nobody, timeout_s=2, max_retries=3)
    # With tools too: a streamed request with tools that fails is asked unstreamed, and
    # a refused connection taught nothing about streaming, so that is one of the retries.
    for tools in (None, TOOLS):
        with pytest.raises(ProviderError) as caught:
            complete(provider, ChatRequest(model="m", messages=USER, tools=tools))
        assert caught.value.attempts == 4  # LLM_MAX_RETRIES=3: the request and 3 retries
        assert "connection error" in str(caught.value)
        assert "after 4 attempts" in str(caught.value)
