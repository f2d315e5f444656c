"""Turns against a real local model: llama-cpp-python's server with SmolLM2-135M-Instruct.

This server cannot stream an answer that calls tools (it answers such a
request with an empty stream and drops the connection), ignores
`max_completion_tokens`, and its tiny model says odd things. Every run must
still end; none may fail for a reason the server's limits explain; the
stored history stays valid; latency and the usage the server reports are
recorded.
"""

from __future__ import annotations

import json
import logging

import pytest

from chat.llm import get_provider
from chat.llm.base import ChatRequest, Done
from chat.llm.limits import server_limits
from chat.models import CallStatus, Mode, ModelCall, RunStatus
from chat.selectors import history_for_model
from chat.services.runs import run_start
from tests.assertions import assert_valid_history
from tests.chat.engine.conftest import wait_for_run
from tests.factories import ConversationFactory
from tests.plugins.llamacpp import LLAMA_MODEL
from tools.registry import registry as tool_registry

# A real model on a CPU shared with the suite's other worker: a turn in each mode took
# up to 5 minutes on a loaded 2-core machine, so these wait longer than pytest's 300 s.
pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(900),
]

MODEL = LLAMA_MODEL
# What a failure caused by the server's limits (not by the model's words) says.
LIMIT_WORDS = ("connection error", "stream", "not supported", "HTTP ", "timed out", "deadline")
PROMPTS = [
    "What is 12*7? Use the calculator tool.",
    "Use the calculator to compute 2+2.",
]


def assert_ended_well(run, conversation) -> None:
    assert run.status in (RunStatus.COMPLETED, RunStatus.FAILED), run.status
    if run.status == RunStatus.FAILED:
        assert not any(words in run.error for words in LIMIT_WORDS), run.error
    assert_valid_history(history_for_model(conversation=conversation))
    calls = list(ModelCall.objects.filter(run=run))
    assert calls
    for call in calls:
        assert call.latency_ms is not None
        if call.status == CallStatus.FAILED:
            assert not any(words in call.error for words in LIMIT_WORDS), call.error
    # The server reports usage in its unstreamed answers only: a streamed one is "not
    # reported" (NULL), never 0.
    for call in calls:
        if call.status == CallStatus.SUCCEEDED:
            if "streaming" in call.note:
                assert call.prompt_tokens, call.note
            assert call.prompt_tokens != 0
            assert call.completion_tokens != 0


@pytest.mark.parametrize("mode", [Mode.TWO_PASS, Mode.LOOP, Mode.DIRECT])
def test_every_mode_ends_well_on_a_real_local_model(llama, user, mode):
    conversation = ConversationFactory(owner=user, mode=mode, max_steps=2)
    for prompt in PROMPTS:
        run = wait_for_run(run_start(conversation=conversation, content=prompt), timeout=600)
        assert_ended_well(run, conversation)


def test_the_model_picks_a_tool_and_the_turn_completes_with_its_result(llama, user):
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    picked = False
    for prompt in PROMPTS * 2:
        run = wait_for_run(run_start(conversation=conversation, content=prompt), timeout=600)
        assert_ended_well(run, conversation)
        if run.steps:
            picked = True
            assert run.status == RunStatus.COMPLETED, run.error
            # The step's first call (an empty answer is asked again, as a second row).
            tools_call = ModelCall.objects.filter(run=run, step=1).order_by("pk").first()
            assert tools_call is not None
            assert tools_call.note  # asked without streaming, and the row says so
            break
    assert picked, "the model never picked a tool"
    # Learned once: later requests with tools go unstreamed at once.
    assert not server_limits(llama.rstrip("/") + "/", MODEL).stream_tools


def test_a_tool_with_a_long_text_field_is_offered_without_crashing_the_server(llama):
    """The server builds a grammar from the schema: `maxLength: 20000` overflows its stack."""
    provider = get_provider("openai")
    (note_tool,) = tool_registry.openai_tools(["record_note"])
    assert "20000" in json.dumps(note_tool)  # the bound that crashed it
    for _ in range(2):  # the server still answers after the first
        events = list(
            provider.stream(
                ChatRequest(
                    model=MODEL,
                    messages=[{"role": "user", "content": "Note this: buy milk."}],
                    tools=[note_tool],
                    tool_choice={"type": "function", "function": {"name": "record_note"}},
                    max_tokens=64,
                )
            )
        )
        assert isinstance(events[-1], Done)
        (called,) = events[-1].completion.tool_calls
        assert called.name == "record_note"


def test_streamed_calls_to_a_real_server_share_one_connection(llama, caplog):
    """llama-cpp-python's server (uvicorn) keeps the connection: each streamed call reuses it.

    The openai SDK stops reading at `[DONE]` and would close it every time
    (chat/llm/watch.py reads the body's end).
    """
    from chat.llm.openai_provider import OpenAIProvider

    provider = OpenAIProvider(api_key="sk-local", base_url=llama, timeout_s=120, max_retries=0)
    request = ChatRequest(
        model=MODEL, messages=[{"role": "user", "content": "Say hi."}], max_tokens=4
    )
    caplog.set_level(logging.DEBUG, logger="httpcore2.connection")
    for _ in range(3):
        assert isinstance(list(provider.stream(request))[-1], Done)
    connects = [r for r in caplog.records if r.getMessage().startswith("connect_tcp.started")]
    assert len(connects) == 1
