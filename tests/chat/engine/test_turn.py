"""The turn engine end to end: real openai SDK against the scripted server, in-process tasks.

Each test posts a message through `run_start`, lets the background tasks run
the turn, and checks what a user and an auditor would see: the requests the
model received, the stored messages, the audit rows and the event stream.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.db.models import F
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

from chat.engine.continuation import COMPOSE_INSTRUCTION, STEP_LIMIT_INSTRUCTION
from chat.models import (
    ExecutionStatus,
    Message,
    Mode,
    ModelCall,
    Role,
    Run,
    RunEvent,
    RunStatus,
    ToolExecution,
)
from chat.selectors import history_for_model
from chat.services.runs import run_start
from tests.assertions import assert_valid_history, tool_stopped, wait_until
from tests.chat.engine.conftest import wait_for_run
from tests.factories import ConversationFactory
from tests.llm_server import error_reply, text_reply, tool_calls_reply

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])


def event_types(run):
    events = list(RunEvent.objects.filter(run=run).order_by("seq"))
    seqs = [e.seq for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"gap in seq: {seqs}"
    # Coalesced deltas collapse to one name, so the sequence reads like a story.
    collapsed: list[str] = []
    for event in events:
        if event.type == "message.delta" and collapsed and collapsed[-1] == "message.delta":
            continue
        collapsed.append(event.type)
    return collapsed


def stored(conversation):
    return list(Message.objects.filter(conversation=conversation).order_by("position"))


def test_two_pass_calls_tools_then_composes_without_tools(llm_server, user):
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS, system_prompt="Be brief.")
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "12*7"}', "call_calc1")]),
        text_reply("Twelve times seven is 84."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="what is 12*7"))

    assert run.status == RunStatus.COMPLETED, run.error
    assert (run.model_calls, run.steps) == (2, 1)
    assert run.latency_ms is not None
    first, second = llm_server.requests
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}
    assert first["tool_choice"] == "auto"
    assert {t["function"]["name"] for t in first["tools"]} >= {"calculator", "record_note"}
    assert "tools" not in second
    assert "tool_choice" not in second
    assert second["messages"][-1] == {"role": "system", "content": COMPOSE_INSTRUCTION}
    assistant, tool = second["messages"][-3], second["messages"][-2]
    assert assistant["tool_calls"][0]["id"] == "call_calc1"
    assert tool["tool_call_id"] == "call_calc1"
    assert json.loads(tool["content"])["result"] == 84
    assert_valid_history(second["messages"][:-1])

    rows = stored(conversation)
    assert [m.role for m in rows] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert rows[1].tool_calls[0]["function"]["name"] == "calculator"
    assert rows[1].latency_ms is not None
    assert rows[1].prompt_tokens == 11
    assert (rows[2].tool_call_id, rows[2].name) == ("call_calc1", "calculator")
    assert rows[3].content == "Twelve times seven is 84."
    assert rows[3].latency_ms is not None
    assert rows[3].finish_reason == "stop"

    calls = list(ModelCall.objects.filter(run=run).order_by("started_at"))
    assert [c.purpose for c in calls] == ["tools", "compose"]
    assert all(c.status == "succeeded" and c.latency_ms is not None for c in calls)
    assert calls[0].tools_offered
    assert calls[1].tools_offered == []
    execution = ToolExecution.objects.get(run=run)
    assert execution.status == ExecutionStatus.SUCCEEDED
    assert execution.arguments == {"expression": "12*7"}
    assert execution.result["result"] == 84
    assert execution.content == rows[2].content
    assert execution.duration_ms is not None

    assert event_types(run) == [
        "message.created",  # the user's message, published with it
        "run.started",
        "message.created",
        "message.completed",
        "tool_call.started",
        "tool_call.completed",
        "tools.ended",
        "message.created",
        "message.delta",
        "message.completed",
        "run.completed",
    ]
    deltas = RunEvent.objects.filter(run=run, type="message.delta")
    assert "".join(e.data["text"] for e in deltas) == "Twelve times seven is 84."
    assert_valid_history(history_for_model(conversation=conversation))


def test_the_compose_call_is_bounded_and_tempered_and_a_local_server_bounded_by_default(
    llm_server, user, settings
):
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "2+2"}')]), text_reply("It is 4.")
    )
    run = wait_for_run(run_start(conversation=conversation, content="what is 2+2"))

    assert run.status == RunStatus.COMPLETED, run.error
    first, compose = llm_server.requests
    assert "tools" in first
    # LLM_MAX_TOKENS is unset, but the scripted server is on loopback: a local server
    # (llama.cpp, Ollama) would write until its context is full, or without end.
    assert first["max_tokens"] == settings.LLM_LOCAL_MAX_TOKENS == 4096
    assert "temperature" not in first
    # A server other than OpenAI's takes the limit as `max_tokens`.
    assert compose["max_tokens"] == settings.LLM_COMPOSE_MAX_TOKENS == 600
    assert "max_completion_tokens" not in compose
    assert compose["temperature"] == settings.LLM_COMPOSE_TEMPERATURE == 0.7


def test_a_direct_answer_needs_one_call(llm_server, conversation):
    llm_server.push(text_reply("Hello!"))
    run = wait_for_run(run_start(conversation=conversation, content="hi"))
    assert run.status == RunStatus.COMPLETED
    assert len(llm_server.requests) == 1
    assert [m.role for m in stored(conversation)] == [Role.USER, Role.ASSISTANT]
    assert event_types(run) == [
        "message.created",  # the user's message, published with it
        "run.started",
        "message.created",
        "message.delta",
        "message.completed",
        "run.completed",
    ]


def test_loop_calls_again_with_tools_until_the_model_stops(llm_server, user):
    conversation = ConversationFactory(owner=user, mode=Mode.LOOP, max_steps=5)
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "2+2"}')]),
        tool_calls_reply([("calculator", '{"expression": "4*10"}')]),
        text_reply("It is 40."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="what is (2+2)*10"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert (run.model_calls, run.steps) == (3, 2)
    assert all("tools" in request for request in llm_server.requests)
    roles = [m.role for m in stored(conversation)]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]


def test_loop_stops_at_max_steps_and_still_answers(llm_server, user):
    conversation = ConversationFactory(owner=user, mode=Mode.LOOP, max_steps=3)
    llm_server.push(
        *[tool_calls_reply([("calculator", '{"expression": "1+1"}')]) for _ in range(3)],
        text_reply("I stopped after three tries: 2."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="keep adding"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert (run.model_calls, run.steps) == (4, 3)
    last = llm_server.requests[-1]
    assert "tools" not in last
    assert last["messages"][-1] == {"role": "system", "content": STEP_LIMIT_INSTRUCTION}
    assert stored(conversation)[-1].content == "I stopped after three tries: 2."
    assert_valid_history(history_for_model(conversation=conversation))


def test_direct_mode_replies_with_the_tools_messages(llm_server, user):
    conversation = ConversationFactory(owner=user, mode=Mode.DIRECT)
    llm_server.push(tool_calls_reply([("calculator", '{"expression": "12*7"}')]))
    run = wait_for_run(run_start(conversation=conversation, content="what is 12*7"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert len(llm_server.requests) == 1
    final = stored(conversation)[-1]
    assert final.role == Role.ASSISTANT
    assert final.content == "12*7 = 84"
    assert run.model_calls == 1


def test_parallel_calls_in_one_step_continue_exactly_once(llm_server, conversation):
    llm_server.push(
        tool_calls_reply(
            [
                ("calculator", '{"expression": "1+1"}', "call_p1"),
                ("calculator", '{"expression": "2+2"}', "call_p2"),
                ("calculator", '{"expression": "3+3"}', "call_p3"),
            ]
        ),
        text_reply("2, 4 and 6."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="add three things"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert len(llm_server.requests) == 2
    compose = llm_server.requests[1]["messages"]
    answered = {m["tool_call_id"] for m in compose if m["role"] == "tool"}
    assert answered == {"call_p1", "call_p2", "call_p3"}
    assert RunEvent.objects.filter(run=run, type="tools.ended").count() == 1
    assert_valid_history(compose[:-1])


@pytest.mark.parametrize(
    ("call", "error_fragment"),
    [
        (("no_such_tool", "{}"), "no tool called"),
        (("calculator", '{"expression": '), "JSON"),
        (("calculator", '{"expr": "1+1"}'), "expression"),
        (("calculator", '{"expression": "1/0"}'), "zero"),
    ],
    ids=["unknown tool", "malformed arguments", "invalid arguments", "tool error"],
)
def test_tool_failures_reach_the_model_as_results(llm_server, conversation, call, error_fragment):
    llm_server.push(tool_calls_reply([call]), text_reply("Sorry, that did not work."))
    run = wait_for_run(run_start(conversation=conversation, content="do it"))
    assert run.status == RunStatus.COMPLETED, run.error
    tool_message = next(m for m in llm_server.requests[1]["messages"] if m["role"] == "tool")
    result = json.loads(tool_message["content"])
    assert result["success"] is False
    assert error_fragment.lower() in json.dumps(result).lower()
    execution = ToolExecution.objects.get(run=run)
    assert execution.status == ExecutionStatus.FAILED
    assert execution.error


def test_malformed_arguments_are_kept_raw_for_the_audit(llm_server, conversation):
    llm_server.push(tool_calls_reply([("calculator", '{"expression": ')]), text_reply("Oops."))
    run = wait_for_run(run_start(conversation=conversation, content="do it"))
    execution = ToolExecution.objects.get(run=run)
    assert execution.arguments is None
    assert execution.arguments_raw == '{"expression": '


def test_a_model_failure_fails_the_run_readably_and_keeps_history_valid(llm_server, conversation):
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "2+2"}')]),
        *[error_reply(500, "the model is down") for _ in range(3)],
    )
    run = wait_for_run(run_start(conversation=conversation, content="what is 2+2"))
    assert run.status == RunStatus.FAILED
    assert "the model is down" in run.error
    assert "3 attempts" in run.error
    assert event_types(run)[-1] == "run.failed"
    assert_valid_history(history_for_model(conversation=conversation))
    failed = ModelCall.objects.get(run=run, purpose="compose")
    assert (failed.status, failed.attempts) == ("failed", 3)


def test_retries_are_invisible_to_the_user(llm_server, conversation):
    llm_server.push(
        error_reply(429, headers={"Retry-After": "0"}),
        text_reply("partial answer that breaks", cut_after_chunks=3),
        text_reply("The whole answer."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="hello"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert stored(conversation)[-1].content == "The whole answer."
    assert ModelCall.objects.get(run=run).attempts == 3
    resets = RunEvent.objects.filter(run=run, type="message.delta", data__reset=True)
    assert resets.count() == 1


def test_the_offline_model_runs_the_demo_sentences(settings, conversation):
    settings.LLM_PROVIDER = "offline"
    settings.LLM_MODEL = "offline"
    run = wait_for_run(run_start(conversation=conversation, content="what is 12*7"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert "84" in stored(conversation)[-1].content
    run = wait_for_run(
        run_start(conversation=conversation, content="note that the boiler was serviced today")
    )
    assert run.status == RunStatus.COMPLETED, run.error
    note_message = stored(conversation)[-2]
    assert note_message.role == Role.TOOL
    assert note_message.resource is not None
    assert "boiler" in note_message.resource.title.lower()
    run = wait_for_run(run_start(conversation=conversation, content="find my notes about boiler"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert "boiler" in stored(conversation)[-1].content.lower()
    run = wait_for_run(run_start(conversation=conversation, content="what time is it in Tokyo"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert "Tokyo" in stored(conversation)[-1].content
    assert_valid_history(history_for_model(conversation=conversation))


def test_the_offline_model_asks_two_tools_at_once_and_follows_up(settings, conversation):
    settings.LLM_PROVIDER = "offline"
    settings.LLM_MODEL = "offline"
    run = wait_for_run(
        run_start(conversation=conversation, content="what is 2**10 and what time is it in London")
    )
    assert run.status == RunStatus.COMPLETED, run.error
    rows = stored(conversation)
    calls = [call["function"]["name"] for call in rows[1].tool_calls]
    assert calls == ["calculator", "get_current_time"]  # one step, two calls
    answer = rows[-1].content
    assert answer.startswith("`2**10` = **1024**. It is ")
    assert "Europe/London" in answer
    run = wait_for_run(run_start(conversation=conversation, content="multiply that by 3"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert stored(conversation)[-1].content == "`1024*3` = **3072**."
    assert_valid_history(history_for_model(conversation=conversation))


def test_a_tool_that_raises_is_reported_to_the_model(llm_server, conversation):
    llm_server.push(
        tool_calls_reply([("explode", '{"reason": "disk on fire"}')]), text_reply("It broke.")
    )
    run = wait_for_run(run_start(conversation=conversation, content="break it"))
    assert run.status == RunStatus.COMPLETED, run.error
    tool_message = next(m for m in llm_server.requests[1]["messages"] if m["role"] == "tool")
    result = json.loads(tool_message["content"])
    assert result["success"] is False
    assert "RuntimeError" in json.dumps(result)
    assert "disk on fire" in json.dumps(result)
    assert "Traceback" not in tool_message["content"]
    execution = ToolExecution.objects.get(run=run)
    assert execution.status == ExecutionStatus.FAILED
    assert "Traceback" in execution.error


def test_a_return_direct_tool_ends_the_turn_in_any_mode(llm_server, conversation):
    llm_server.push(tool_calls_reply([("final_word", '{"text": "That is final."}')]))
    run = wait_for_run(run_start(conversation=conversation, content="say it"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert len(llm_server.requests) == 1
    assert stored(conversation)[-1].content == "That is final."


@pytest.mark.parametrize("mode", [Mode.TWO_PASS, Mode.LOOP])
@pytest.mark.parametrize("alone", [True, False], ids=["alone", "beside-another-call"])
def test_a_failed_return_direct_call_goes_back_to_the_model_which_answers(
    llm_server, conversation, mode, alone
):
    """The user never reads a model-facing error as the answer; the model explains."""
    conversation.mode = mode
    conversation.save(update_fields=["mode"])
    calls = [("final_word", '{"text": 5}', "call_bad")]  # text must be a string: it fails
    if not alone:
        calls.append(("calculator", '{"expression": "1+2"}', "call_calc"))
    llm_server.push(tool_calls_reply(calls), text_reply("The final word could not be said."))
    run = wait_for_run(run_start(conversation=conversation, content="say it"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert ToolExecution.objects.get(tool_call_id="call_bad").status == ExecutionStatus.FAILED
    assert len(llm_server.requests) == 2  # the model was asked again, with the error
    assert stored(conversation)[-1].content == "The final word could not be said."
    assert_valid_history(history_for_model(conversation=conversation))


def test_a_tool_call_without_an_id_gets_one(llm_server, conversation, caplog):
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "1+2"}', "")]), text_reply("3")
    )
    run = wait_for_run(run_start(conversation=conversation, content="1+2"))
    assert run.status == RunStatus.COMPLETED, run.error
    assistant = stored(conversation)[1]
    call_id = assistant.tool_calls[0]["id"]
    assert call_id.startswith("call_")
    assert ToolExecution.objects.get(run=run).tool_call_id == call_id
    assert stored(conversation)[2].tool_call_id == call_id
    assert "assigned" in caplog.text


@pytest.mark.parametrize("ids", [["call_0"], ["call_0", "call_1"]], ids=["one call", "two calls"])
def test_call_ids_a_model_numbers_per_answer_are_made_unique_across_conversations(
    llm_server, conversation, other_user, ids, caplog
):
    # Some models number their calls per answer: "call_0" in every turn of every
    # conversation. The ids are unique in the audit, so a reused one is renamed.
    elsewhere = ConversationFactory(owner=other_user)
    answers = [str(2 * (n + 1)) for n in range(len(ids))]
    calls = [("calculator", f'{{"expression": "{n + 1}*2"}}', i) for n, i in enumerate(ids)]
    for target in (elsewhere, conversation, conversation):
        llm_server.push(tool_calls_reply(calls), text_reply(" and ".join(answers)))
        run = wait_for_run(run_start(conversation=target, content="double 1 and 2"))
        assert run.status == RunStatus.COMPLETED, run.error

    owners = ToolExecution.objects.filter(tool_call_id__in=ids).values_list(
        "run__conversation", flat=True
    )
    assert list(owners) == [elsewhere.pk] * len(ids)  # the first use keeps its ids
    rows = stored(conversation)
    assistants = [m for m in rows if m.role == Role.ASSISTANT and m.tool_calls]
    assert len(assistants) == 2
    seen = set()
    for assistant in assistants:
        call_ids = [call["id"] for call in assistant.tool_calls]
        assert not set(call_ids) & set(ids)
        assert not set(call_ids) & seen
        seen |= set(call_ids)
        answered = [m for m in rows if m.role == Role.TOOL and m.tool_call_id in call_ids]
        assert sorted(m.tool_call_id for m in answered) == sorted(call_ids)
        assert [json.loads(m.content)["result"] for m in answered] == [2, 4][: len(ids)]
    assert_valid_history(history_for_model(conversation=conversation))
    assert "a duplicate id" in caplog.text
    # Each compose call was sent a valid history, the renamed ids with their answers.
    assert llm_server.rejected == []


@pytest.mark.postgres
def test_runs_waiting_on_their_model_hold_no_database_connection(llm_server, user, settings):
    from django.db import connection

    settings.TOOLCHAT_HEARTBEAT_S = 0.2  # beats (each a query) while the models think
    llm_server.push(*[text_reply("Done thinking.", delay_s=4) for _ in range(4)])
    runs = [run_start(conversation=ConversationFactory(owner=user), content="hi") for _ in range(4)]
    wait_until(lambda: len(llm_server.requests) == 4, what="four model calls in flight")
    wait_until(
        lambda: all(
            Run.objects.filter(pk=run.pk, heartbeat_at__gt=F("started_at") + timedelta(seconds=0.5))
            for run in runs
        ),
        what="every run's heartbeat to beat during its model call",
    )
    # Four runs in flight, each with a heartbeat. The beats' thread takes a pooled
    # connection for a few milliseconds each beat (longer on a loaded machine), so
    # the samples are spread over several beats: between beats, the connections
    # taken from the pool are this test's own.
    in_use = []
    for _ in range(20):
        stats = connection.pool.get_stats()
        in_use.append(stats["pool_size"] - stats["pool_available"])
        time.sleep(0.037)  # not a multiple of the beats' 0.2 s
    # Still waiting on their models while sampled: an ended run holds nothing anyway.
    assert Run.objects.filter(pk__in=[r.pk for r in runs], status=RunStatus.RUNNING).count() == 4
    assert min(in_use) <= 1, in_use
    assert all(wait_for_run(run).status == RunStatus.COMPLETED for run in runs)


def test_the_first_words_of_an_answer_are_published_at_once(llm_server, conversation, settings):
    settings.TOOLCHAT_DELTA_INTERVAL_S = 60  # later words wait for the interval (or the end)
    llm_server.push(text_reply("First words, then a long pause.", chunk_delay_s=1.0))
    run = run_start(conversation=conversation, content="say something slowly")
    wait_until(
        RunEvent.objects.filter(run=run, type="message.delta").exists,
        what="the first delta",
    )
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING  # the answer is still streaming
    first = RunEvent.objects.get(run=run, type="message.delta")
    assert first.data["text"].strip() == "First"
    run = wait_for_run(run)
    deltas = RunEvent.objects.filter(run=run, type="message.delta").order_by("seq")
    assert "".join(d.data["text"] for d in deltas) == "First words, then a long pause."
    assert deltas.count() == 2  # the first word alone, the rest with the answer


def test_the_compose_model_writes_the_final_answer(llm_server, conversation, settings):
    settings.LLM_COMPOSE_MODEL = "cheap-model"
    llm_server.push(tool_calls_reply([("calculator", '{"expression": "2*3"}')]), text_reply("6"))
    run = wait_for_run(run_start(conversation=conversation, content="2*3"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert [r["model"] for r in llm_server.requests] == ["test-model", "cheap-model"]
    assert list(
        ModelCall.objects.filter(run=run).order_by("started_at").values_list("model", flat=True)
    ) == [
        "test-model",
        "cheap-model",
    ]


def test_the_llm_decider_runs_tools_from_structured_decisions(llm_server, user):
    conversation = ConversationFactory(owner=user, mode=Mode.LLM, max_steps=3)
    llm_server.push(
        text_reply(
            json.dumps(
                {
                    "done": False,
                    "next_tool": "calculator",
                    "arguments": {"expression": "6*7"},
                    "final_output": None,
                }
            )
        ),
        text_reply(
            json.dumps(
                {
                    "done": True,
                    "next_tool": None,
                    "arguments": {},
                    "final_output": "Six times seven is 42.",
                }
            )
        ),
    )
    run = wait_for_run(run_start(conversation=conversation, content="what is 6*7"))
    assert run.status == RunStatus.COMPLETED, run.error
    for request in llm_server.requests:
        assert "tools" not in request
        assert request["response_format"]["type"] == "json_schema"
        assert "<tools>" in request["messages"][-1]["content"]
    rows = stored(conversation)
    assert [m.role for m in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[1].tool_calls[0]["function"] == {
        "name": "calculator",
        "arguments": '{"expression": "6*7"}',
    }
    assert json.loads(rows[2].content)["result"] == 42
    assert rows[3].content == "Six times seven is 42."
    assert [c.purpose for c in ModelCall.objects.filter(run=run).order_by("started_at")] == [
        "decide",
        "decide",
    ]
    deltas = RunEvent.objects.filter(run=run, type="message.delta")
    assert "".join(e.data["text"] for e in deltas) == "Six times seven is 42."
    assert_valid_history(history_for_model(conversation=conversation))


def test_the_llm_decider_with_the_offline_model(settings, user):
    settings.LLM_PROVIDER = "offline"
    conversation = ConversationFactory(owner=user, mode=Mode.LLM)
    run = wait_for_run(run_start(conversation=conversation, content="what is 12*7"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert "84" in stored(conversation)[-1].content


def test_cancel_fills_unanswered_calls_and_stops_the_run(llm_server, conversation):
    from chat.services.runs import run_cancel

    llm_server.push(
        tool_calls_reply([("slow_step", '{"label": "long", "seconds": 2}')]), text_reply("never")
    )
    run = run_start(conversation=conversation, content="take your time")
    wait_until(
        ToolExecution.objects.filter(run=run, status=ExecutionStatus.RUNNING).exists,
        what="the tool to start",
    )
    run = run_cancel(run=run)
    assert run.status == RunStatus.CANCELLED
    execution = ToolExecution.objects.get(run=run)
    assert execution.status == ExecutionStatus.CANCELLED
    answer = Message.objects.get(run=run, role=Role.TOOL)
    assert "was running when its run was cancelled" in answer.content
    assert "may or may not have taken effect" in answer.content
    assert event_types(run)[-1] == "run.cancelled"
    assert_valid_history(history_for_model(conversation=conversation))
    # The tool (which does not look at its context) is abandoned, not waited for. It
    # finished after all: its row and the tool message say what it did, and the run
    # does not go on.
    wait_until(tool_stopped("slow_step"), what="the abandoned tool to finish its 2 s")
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.SUCCEEDED
    assert execution.result == {"success": True, "label": "long", "message": "long done"}
    assert "finished after its run was cancelled" in execution.error
    answer.refresh_from_db()
    assert json.loads(answer.content)["message"] == "long done"
    assert_valid_history(history_for_model(conversation=conversation))
    assert len(llm_server.requests) == 1
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert event_types(run)[-1] == "run.cancelled"


def test_cancel_reaches_a_tool_that_reports_progress(llm_server, conversation):
    """The built-in dataset tool stops at its next progress report once its run is cancelled."""
    from chat.services.runs import run_cancel

    llm_server.push(
        tool_calls_reply([("generate_dataset", '{"rows": 10000, "limit": 5}')]),
        text_reply("never"),
    )
    run = run_start(conversation=conversation, content="make me a big dataset")
    wait_until(
        lambda: RunEvent.objects.filter(run=run, type="tool.progress").count() >= 3,
        what="the dataset to be under way",
    )
    run_cancel(run=run)
    cancelled_at = time.monotonic()
    # The tool's call heartbeat looks every second; the tool stops at its next report.
    wait_until(tool_stopped("generate_dataset"), what="the dataset tool to stop")
    last_progress = RunEvent.objects.filter(run=run, type="tool.progress").order_by("-seq").first()
    assert last_progress.data["percent"] < 60  # 10,000 rows take about 10 s
    execution = ToolExecution.objects.get(run=run)
    assert execution.status == ExecutionStatus.CANCELLED
    assert "finished after" not in execution.error
    assert execution.error.count("cancelled") == 1
    assert time.monotonic() - cancelled_at < 10


def test_cancel_ends_a_model_call_that_trickles_and_closes_its_connection(llm_server, conversation):
    """A server that sends only keep-alive comments: the cancel reaches the call, not only the run."""
    from chat.services.runs import run_cancel

    llm_server.push(text_reply("never", trickle_s=0.2), text_reply("never asked for"))
    run = run_start(conversation=conversation, content="think hard")
    wait_until(lambda: llm_server.open_streams == 1, what="the model call to start")
    run = run_cancel(run=run)
    assert run.status == RunStatus.CANCELLED
    wait_until(lambda: llm_server.open_streams == 0, what="the model connection to be closed")
    call = wait_for_model_call(run)
    assert call.status == "failed"
    assert "cancelled" in call.error
    assert len(llm_server.requests) == 1  # and it was not asked again
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED


def test_a_model_call_past_its_deadline_fails_the_run_readably(llm_server, conversation, settings):
    settings.LLM_CALL_DEADLINE_S = 1.0
    llm_server.push(*[text_reply("never", trickle_s=0.2) for _ in range(3)])
    run = wait_for_run(run_start(conversation=conversation, content="think hard"))
    assert run.status == RunStatus.FAILED
    assert "deadline" in run.error
    assert "no complete answer within 1 s" in run.error
    assert len(llm_server.requests) == 1
    wait_until(lambda: llm_server.open_streams == 0, what="the model connection to be closed")
    assert [m.role for m in stored(conversation)] == [Role.USER]


def wait_for_model_call(run):
    wait_until(ModelCall.objects.filter(run=run).exists, what="the call's audit row")
    return ModelCall.objects.get(run=run)


def test_a_tool_call_with_an_empty_name_is_answered_not_stuck(llm_server, conversation):
    llm_server.push(tool_calls_reply([("", "{}")]), text_reply("That tool does not exist."))
    run = wait_for_run(run_start(conversation=conversation, content="do something"))
    assert run.status == RunStatus.COMPLETED, run.error
    call = stored(conversation)[1].tool_calls[0]
    assert call["function"]["name"] == "unnamed_tool"
    tool_message = stored(conversation)[2]
    assert tool_message.name == "unnamed_tool"
    assert json.loads(tool_message.content)["success"] is False
    assert_valid_history(history_for_model(conversation=conversation))


def test_a_slow_first_token_does_not_get_a_live_run_taken_over(llm_server, conversation, settings):
    from chat.engine.recovery import runs_recover

    settings.TOOLCHAT_RUN_STALE_S = 1.0
    settings.TOOLCHAT_HEARTBEAT_S = 0.2
    llm_server.push(text_reply("Worth the wait.", delay_s=3))
    run = run_start(conversation=conversation, content="take your time")
    # Sweep once the model call has been silent for longer than the stale window,
    # while the heartbeat still renews the lease: without it, the run would be taken.
    stale = timedelta(seconds=settings.TOOLCHAT_RUN_STALE_S)
    wait_until(
        Run.objects.filter(
            pk=run.pk,
            status=RunStatus.RUNNING,
            heartbeat_at__gt=F("started_at") + stale,  # the call began as the run did
        ).exists,
        what="a heartbeat more than the stale window into the model call",
    )
    recovered = runs_recover()
    run = wait_for_run(run)
    assert run.status == RunStatus.COMPLETED, run.error
    assert recovered == []
    assert len(llm_server.requests) == 1
    assert ModelCall.objects.filter(run=run).count() == 1


def test_an_empty_answer_is_asked_again_once(llm_server, conversation):
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "12*7"}')]),
        text_reply(""),
        text_reply("12 times 7 is 84."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="what is 12*7"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert stored(conversation)[-1].content == "12 times 7 is 84."
    calls = list(ModelCall.objects.filter(run=run).order_by("started_at"))
    assert [(c.purpose, c.status) for c in calls] == [
        ("tools", "succeeded"),
        ("compose", "failed"),
        ("compose", "succeeded"),
    ]
    assert calls[1].error == "The model answered with no text."
    assert run.model_calls == 3
    assert_valid_history(history_for_model(conversation=conversation))


def test_two_empty_answers_fall_back_to_what_the_tools_said(llm_server, conversation):
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "12*7"}')]),
        text_reply(""),
        text_reply("   "),
    )
    run = wait_for_run(run_start(conversation=conversation, content="what is 12*7"))
    assert run.status == RunStatus.COMPLETED, run.error
    final = stored(conversation)[-1]
    assert final.role == Role.ASSISTANT
    assert "84" in final.content  # the calculator's own message, never an empty answer
    assert_valid_history(history_for_model(conversation=conversation))


def test_two_empty_answers_without_tools_fail_the_run_with_a_reason(llm_server, conversation):
    # Each empty streamed answer to a request with tools is asked once more unstreamed.
    llm_server.push(*[text_reply("") for _ in range(4)])
    run = wait_for_run(run_start(conversation=conversation, content="hello?"))
    assert run.status == RunStatus.FAILED
    assert "no text" in run.error
    assert [request.get("stream", False) for request in llm_server.requests] == [
        True,
        False,
        True,
        False,
    ]
    assert not Message.objects.filter(run=run, role=Role.ASSISTANT).exists()
