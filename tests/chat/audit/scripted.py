"""Runs made by the turn engine against the scripted model server, for the audit's tests.

Each posts a user message with `run_start` and lets the in-process tasks run
the turn with the real openai SDK, so the rows the audit reads (Run,
ModelCall, ToolExecution, Message) are the engine's own, timings included.
The model waits a little before its first chunk and between chunks, so that
model calls have a visible first token and a length of their own.
"""

from __future__ import annotations

from chat.models import Conversation, Mode, Run, RunStatus
from chat.services.runs import run_start
from tests.factories import ConversationFactory
from tests.llm_server import ScriptedLLMServer, text_reply, tool_calls_reply
from tests.stack import wait_for_run

PACE = {"delay_s": 0.04, "chunk_delay_s": 0.01}


def two_pass_run(llm_server: ScriptedLLMServer, owner, *, question: str = "What is 12*7?") -> Run:
    """A two-pass run: one calculator call, then the composed answer."""
    conversation: Conversation = ConversationFactory(
        owner=owner, mode=Mode.TWO_PASS, title="Arithmetic"
    )
    llm_server.push(
        tool_calls_reply(
            [("calculator", '{"expression": "12*7"}', f"call_{conversation.pk.hex[:10]}_1")],
            prompt_tokens=120,
            completion_tokens=18,
            **PACE,
        ),
        text_reply("Twelve times seven is 84.", prompt_tokens=160, completion_tokens=9, **PACE),
    )
    run = wait_for_run(run_start(conversation=conversation, content=question))
    assert run.status == RunStatus.COMPLETED, run.error
    return run


def loop_run(llm_server: ScriptedLLMServer, owner, *, question: str = "Prepare two steps") -> Run:
    """A loop run: three tool calls in parallel (two slow ones), then one more, then the answer."""
    conversation: Conversation = ConversationFactory(
        owner=owner, mode=Mode.LOOP, max_steps=5, title="Preparations"
    )
    prefix = f"call_{conversation.pk.hex[:22]}"  # as long as OpenAI's ids (29 characters)
    llm_server.push(
        tool_calls_reply(
            [
                ("slow_step", '{"label": "fetch", "seconds": 0.3}', f"{prefix}_a"),
                ("slow_step", '{"label": "index", "seconds": 0.15}', f"{prefix}_b"),
                ("calculator", '{"expression": "2+2"}', f"{prefix}_c"),
            ],
            prompt_tokens=200,
            completion_tokens=40,
            **PACE,
        ),
        tool_calls_reply(
            [("calculator", '{"expression": "4*10"}', f"{prefix}_d")],
            prompt_tokens=260,
            completion_tokens=12,
            **PACE,
        ),
        text_reply("Both steps are done, and the answer is 40.", **PACE),
    )
    run = wait_for_run(run_start(conversation=conversation, content=question), timeout=30)
    assert run.status == RunStatus.COMPLETED, run.error
    return run
