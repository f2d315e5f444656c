"""Traces of a turn, as a collector receives them: the real SDK exporting OTLP to loopback.

Each test runs a real turn (the openai SDK against the scripted model server,
in-process tasks) with `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at a receiver
that decodes the `ExportTraceServiceRequest`s, and checks the spans' names,
their parent/child structure and the GenAI attributes they carry.
"""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from chat.models import Mode, ModelCall, Run, RunStatus, ToolExecution
from chat.services.runs import run_start
from chat.telemetry.provider import tracing_reset
from tests.assertions import wait_until
from tests.chat.engine.conftest import wait_for_run
from tests.chat.telemetry.conftest import by_operation, turn_spans
from tests.factories import ConversationFactory
from tests.llm_server import error_reply, text_reply, tool_calls_reply
from tests.otlp_receiver import GrpcOTLPReceiver
from tools.context import ToolContext
from tools.registry import ToolRegistry
from tools.registry import registry as tool_registry

pytestmark = pytest.mark.django_db(transaction=True)

CLIENT, INTERNAL = 3, 1  # the OTLP span kinds
ERROR = 2  # the OTLP status code


def test_a_two_pass_turn_is_one_trace_of_the_turn_its_model_calls_and_its_tool(
    otlp, llm_server, user
):
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "12*7"}', "call_calc1")]),
        text_reply("Twelve times seven is 84."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="what is 12*7"))
    assert run.status == RunStatus.COMPLETED, run.error

    turn, *children = turn_spans(otlp, run, 4)
    assert turn.name == "invoke_agent toolchat"
    assert turn.parent_span_id == ""  # nobody's trace to continue: a root
    assert turn.resource["service.name"] == "toolchat-tests"
    assert turn.attributes == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "toolchat",
        "gen_ai.conversation.id": str(conversation.pk),
        "gen_ai.request.model": conversation.model,
        "toolchat.run.id": str(run.pk),
        "toolchat.run.mode": "two_pass",
        "toolchat.run.outcome": "completed",
        "toolchat.run.model_calls": 2,
        "toolchat.run.steps": 1,
    }
    assert turn.span_id == run.trace_parent.split("-")[2]
    assert all(child.parent_span_id == turn.span_id for child in children)
    assert turn.start_ns <= min(c.start_ns for c in children)
    assert turn.end_ns >= max(c.end_ns for c in children)

    ask, tool, compose = children
    assert [s.name for s in children] == [
        "chat test-model",
        "execute_tool calculator",
        "chat test-model",
    ]
    rows = list(ModelCall.objects.filter(run=run).order_by("started_at"))
    for span, row, finish in ((ask, rows[0], "tool_calls"), (compose, rows[1], "stop")):
        assert span.kind == CLIENT
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert span.attributes["gen_ai.provider.name"] == "openai"
        assert span.attributes["gen_ai.request.model"] == "test-model"
        assert span.attributes["gen_ai.response.model"] == "test-model"
        assert span.attributes["gen_ai.response.id"].startswith("chatcmpl-")
        assert span.attributes["gen_ai.response.finish_reasons"] == [finish]
        assert span.attributes["gen_ai.usage.input_tokens"] == row.prompt_tokens
        assert span.attributes["gen_ai.usage.output_tokens"] == row.completion_tokens
        assert span.attributes["gen_ai.response.time_to_first_chunk"] >= 0
        assert span.attributes["toolchat.model_call.id"] == str(row.pk)
        assert span.attributes["toolchat.model_call.attempts"] == 1
        assert "error.type" not in span.attributes
    assert (
        ask.attributes["toolchat.model_call.purpose"],
        compose.attributes["toolchat.model_call.purpose"],
    ) == ("tools", "compose")
    # Content is not exported unless asked for.
    assert not any(
        k.startswith("gen_ai.input") or k.startswith("gen_ai.output") for k in ask.attributes
    )

    execution = ToolExecution.objects.get(run=run)
    assert tool.kind == INTERNAL
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "calculator"
    assert tool.attributes["gen_ai.tool.call.id"] == "call_calc1"
    assert tool.attributes["gen_ai.tool.type"] == "function"
    assert tool.attributes["toolchat.tool.execution_id"] == str(execution.pk)
    assert tool.attributes["toolchat.tool.status"] == "succeeded"
    assert tool.attributes["toolchat.tool.truncated"] is False
    assert "gen_ai.tool.call.arguments" not in tool.attributes
    assert "toolchat.tool.approval_wait_ms" not in tool.attributes

    # Each model request carried its own call's span as W3C traceparent.
    sent = [headers["traceparent"] for headers in llm_server.request_headers]
    assert sent == [f"00-{turn.trace_id}-{s.span_id}-01" for s in (ask, compose)]


def test_parallel_calls_of_a_loop_are_sibling_spans_of_one_trace(otlp, llm_server, user):
    conversation = ConversationFactory(owner=user, mode=Mode.LOOP)
    llm_server.push(
        tool_calls_reply(
            [
                ("calculator", '{"expression": "2+2"}', "call_a"),
                ("calculator", '{"expression": "3*3"}', "call_b"),
            ]
        ),
        text_reply("4 and 9."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="both"))
    assert run.status == RunStatus.COMPLETED, run.error

    turn, *children = turn_spans(otlp, run, 5)
    assert turn.attributes["toolchat.run.mode"] == "loop"
    tools = by_operation(children, "execute_tool")
    assert sorted(s.attributes["gen_ai.tool.call.id"] for s in tools) == ["call_a", "call_b"]
    assert len(by_operation(children, "chat")) == 2
    assert {s.parent_span_id for s in children} == {turn.span_id}


def test_a_failed_model_call_is_an_error_span_and_the_turn_failed(otlp, llm_server, user):
    conversation = ConversationFactory(owner=user)
    llm_server.push(error_reply(400, "the model refuses"))
    run = wait_for_run(run_start(conversation=conversation, content="hello"))
    assert run.status == RunStatus.FAILED

    turn, call = turn_spans(otlp, run, 2)
    assert call.status_code == ERROR
    assert call.attributes["error.type"] == "provider_error"
    assert call.parent_span_id == turn.span_id
    assert turn.status_code == ERROR
    assert turn.attributes["toolchat.run.outcome"] == "failed"
    assert turn.attributes["error.type"] == "run_failed"


def test_an_approved_call_is_in_the_turns_trace_with_its_wait(
    otlp, llm_server, user, monkeypatch, tmp_path
):
    from chat.services.approvals import tool_call_decide

    monkeypatch.setenv("TOOLCHAT_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    conversation = ConversationFactory(owner=user)
    llm_server.push(
        tool_calls_reply([("launch_rocket", '{"target": "the moon"}')]),
        text_reply("On its way."),
    )
    run = run_start(conversation=conversation, content="launch it")
    wait_until(
        lambda: Run.objects.get(pk=run.pk).status == RunStatus.AWAITING_APPROVAL,
        what="the run to wait for approval",
    )
    execution = ToolExecution.objects.get(run=run)
    tool_call_decide(execution_id=execution.pk, user=user, approve=True)
    run = wait_for_run(run)
    assert run.status == RunStatus.COMPLETED, run.error

    turn, *children = turn_spans(otlp, run, 4)
    (tool,) = by_operation(children, "execute_tool")
    execution.refresh_from_db()
    assert tool.attributes["gen_ai.tool.name"] == "launch_rocket"
    assert tool.attributes["toolchat.tool.approval_wait_ms"] == execution.approval_wait_ms
    assert {s.parent_span_id for s in children} == {turn.span_id}


def test_a_posted_traceparent_makes_the_turn_part_of_the_callers_trace(otlp, llm_server, user):
    conversation = ConversationFactory(owner=user)
    llm_server.push(text_reply("Hello."))
    client = APIClient()
    client.force_authenticate(user)
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    response = client.post(
        f"/api/v1/conversations/{conversation.pk}/messages/",
        {"content": "hi"},
        format="json",
        HTTP_TRACEPARENT=f"00-{caller_trace}-{caller_span}-01",
    )
    assert response.status_code == 202, response.content
    run = wait_for_run(Run.objects.get(conversation=conversation))

    turn, call = turn_spans(otlp, run, 2)
    assert (turn.trace_id, turn.parent_span_id) == (caller_trace, caller_span)
    assert call.trace_id == caller_trace
    assert call.parent_span_id == turn.span_id


def sign_in(ctx: ToolContext, username: str, password: str) -> str:
    """Sign in to the example service."""
    return f"signed in as {username}"


def test_content_is_exported_on_opt_in_with_sensitive_arguments_masked(
    capture, llm_server, user, monkeypatch
):
    spec = ToolRegistry().register(sign_in, sensitive=["password"])
    monkeypatch.setitem(tool_registry._specs, spec.name, spec)
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    llm_server.push(
        tool_calls_reply([("sign_in", '{"username": "ada", "password": "hunter2"}', "call_s")]),
        text_reply("You are signed in."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="sign me in"))
    assert run.status == RunStatus.COMPLETED, run.error

    _, ask, tool, compose = turn_spans(capture, run, 4)
    sent = json.loads(ask.attributes["gen_ai.input.messages"])
    assert sent[-1] == {"role": "user", "parts": [{"type": "text", "content": "sign me in"}]}
    assert "sign_in" in ask.attributes["gen_ai.tool.definitions"]
    answered = json.loads(ask.attributes["gen_ai.output.messages"])
    assert answered == [
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "call_s",
                    "name": "sign_in",
                    "arguments": {"username": "ada", "password": "***"},
                }
            ],
            "finish_reason": "tool_calls",
        }
    ]
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {
        "username": "ada",
        "password": "***",
    }
    assert "signed in as ada" in tool.attributes["gen_ai.tool.call.result"]
    history = json.loads(compose.attributes["gen_ai.input.messages"])
    call_turn = next(m for m in history if m["role"] == "assistant")
    assert call_turn["parts"][0]["arguments"] == {"username": "ada", "password": "***"}
    assert next(m for m in history if m["role"] == "tool")["parts"][0]["id"] == "call_s"
    everything = json.dumps([s.attributes for s in capture.spans])
    assert "hunter2" not in everything


def test_spans_go_over_grpc_when_the_protocol_says_so(llm_server, user, monkeypatch):
    receiver = GrpcOTLPReceiver().start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
        tracing_reset()
        llm_server.push(text_reply("Hello."))
        run = wait_for_run(run_start(conversation=ConversationFactory(owner=user), content="hi"))
        turn, call = turn_spans(receiver, run, 2)
    finally:
        tracing_reset()
        receiver.stop()
    assert turn.name == "invoke_agent toolchat"
    assert (call.name, call.parent_span_id) == ("chat test-model", turn.span_id)


def test_a_collector_that_is_down_costs_the_turn_nothing_but_its_spans(
    llm_server, user, monkeypatch
):
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    tracing_reset()
    try:
        llm_server.push(text_reply("Hello."))
        run = wait_for_run(run_start(conversation=ConversationFactory(owner=user), content="hi"))
        assert run.status == RunStatus.COMPLETED, run.error
        assert run.trace_parent
        assert (
            llm_server.request_headers[0]["traceparent"].split("-")[1]
            == (run.trace_parent.split("-")[1])
        )
    finally:
        tracing_reset()


def test_with_no_endpoint_nothing_is_traced_or_sent(llm_server, user, monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    tracing_reset()
    llm_server.push(text_reply("Hello."))
    run = wait_for_run(run_start(conversation=ConversationFactory(owner=user), content="hi"))
    assert run.status == RunStatus.COMPLETED
    assert run.trace_parent == ""
    assert "traceparent" not in llm_server.request_headers[0]


def test_runs_from_before_tracing_are_exported_with_their_recorded_times(
    llm_server, user, monkeypatch, otlp
):
    from django.core.management import call_command

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    tracing_reset()  # tracing off while the turn runs
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "2+3"}', "call_old")]),
        text_reply("Five."),
    )
    run = wait_for_run(run_start(conversation=ConversationFactory(owner=user), content="2+3?"))
    assert (run.status, run.trace_parent) == (RunStatus.COMPLETED, "")

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)
    tracing_reset()
    call_command("export_traces", since=run.created_at.date().isoformat())

    turn, ask, tool, compose = turn_spans(otlp, run, 4)
    assert turn.attributes["toolchat.run.outcome"] == "completed"
    assert turn.start_ns == int(run.created_at.timestamp() * 1e9)
    assert turn.end_ns == int(run.finished_at.timestamp() * 1e9)
    rows = list(ModelCall.objects.filter(run=run).order_by("started_at"))
    for span, row in ((ask, rows[0]), (compose, rows[1])):
        assert span.parent_span_id == turn.span_id
        assert span.start_ns == int(row.started_at.timestamp() * 1e9)
        assert span.attributes["gen_ai.usage.input_tokens"] == row.prompt_tokens
        assert span.attributes["gen_ai.response.finish_reasons"] == [row.finish_reason]
    execution = ToolExecution.objects.get(run=run)
    assert tool.attributes["gen_ai.tool.call.id"] == "call_old"
    assert tool.end_ns == int(execution.finished_at.timestamp() * 1e9)


def test_an_mcp_tool_call_carries_its_span_as_traceparent_in_its_meta(
    otlp, llm_server, user, mcp_servers
):
    from tests.tools.mcp.servers import stdio_server

    mcp_servers({"t": stdio_server()})
    llm_server.push(tool_calls_reply([("t__traceparent", "{}", "call_mcp")]), text_reply("Traced."))
    run = wait_for_run(run_start(conversation=ConversationFactory(owner=user), content="go"), 30)
    assert run.status == RunStatus.COMPLETED, run.error

    turn, *children = turn_spans(otlp, run, 4)
    (tool,) = by_operation(children, "execute_tool")
    assert tool.attributes["gen_ai.tool.type"] == "extension"
    received = ToolExecution.objects.get(run=run).content
    assert f"00-{turn.trace_id}-{tool.span_id}-01" in received


def test_an_openai_compatible_request_continues_the_callers_trace_with_its_parameters(
    otlp, llm_server, user
):
    from tests.chat.openai_api.conftest import bearer_client

    llm_server.push(text_reply("Hello."))
    caller_trace, caller_span = "5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8"
    response = bearer_client(user).post(
        "/v1/chat/completions",
        {
            "model": "openai/test-model",
            "messages": [{"role": "user", "content": "hi"}],
            "temperature": 0.2,
            "max_tokens": 300,
        },
        format="json",
        HTTP_TRACEPARENT=f"00-{caller_trace}-{caller_span}-01",
    )
    assert response.status_code == 200, response.content
    run = wait_for_run(Run.objects.get(conversation__owner=user))

    turn, call = turn_spans(otlp, run, 2)
    assert (turn.trace_id, turn.parent_span_id) == (caller_trace, caller_span)
    assert call.parent_span_id == turn.span_id
    assert call.attributes["gen_ai.request.temperature"] == 0.2
    assert call.attributes["gen_ai.request.max_tokens"] == 300


def test_threads_asking_for_the_tracer_while_it_is_made_all_get_it(otlp):
    # The first span of a process may be asked for by several threads at once (a run's
    # worker thread ending its turn, a request starting another): none may be told
    # that tracing is off while the provider is still being made.
    import threading

    from chat.telemetry.provider import current_tracer

    for _ in range(20):
        tracing_reset()
        start = threading.Barrier(4)
        got: list[object] = []

        def ask(start: threading.Barrier, got: list[object]) -> None:
            start.wait()
            got.append(current_tracer())

        threads = [threading.Thread(target=ask, args=(start, got)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert None not in got, got
