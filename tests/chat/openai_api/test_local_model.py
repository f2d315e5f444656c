"""The openai SDK through /v1 to a real local model: llama-cpp-python's server with SmolLM2-135M.

Two real things at both ends: a client no one here wrote, and a model server
with its own limits (it cannot stream an answer that calls tools). The SDK
talks to the ASGI application in this process (httpx's ASGI transport), so
the test runs in the SQLite pass, where the llamacpp tests run. Whatever the
tiny model says, every request answers in OpenAI's shape, the follow-up
continues the same conversation, and the stored history is valid.
"""

from __future__ import annotations

import asyncio

import httpx2
import openai
import pytest
from rest_framework.authtoken.models import Token

from chat.models import Conversation, ExecutionStatus, Run, RunStatus, ToolExecution
from chat.selectors import history_for_model
from chat.services.approvals import tool_call_decide
from project.handler import get_asgi_application
from tests.assertions import assert_valid_history
from tests.clients.sdk import async_openai
from tests.plugins.llamacpp import LLAMA_MODEL
from tests.stack import wait_for_run

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(900),
]

MODEL = LLAMA_MODEL


def test_the_openai_sdk_holds_a_conversation_with_a_real_local_model(llama, user):
    token = Token.objects.create(user=user).key
    transport = httpx2.ASGITransport(app=get_asgi_application())

    async def ask(messages: list[dict]) -> tuple[str | None, str]:
        """The answer's text (None: the turn failed, as it must say) and its run id."""
        async with httpx2.AsyncClient(transport=transport, timeout=600) as http:
            client = async_openai(
                base_url="http://testserver/v1", api_key=token, http_client=http, max_retries=0
            )
            assert f"openai/{MODEL}" in [m.id async for m in client.models.list()]
            try:
                raw = await client.chat.completions.with_raw_response.create(
                    model=f"openai/{MODEL}", messages=messages
                )
            except openai.APIStatusError as error:
                failed = error
            else:
                reply = raw.parse()
                assert reply.choices[0].finish_reason in ("stop", "length")
                return reply.choices[0].message.content, raw.headers["x-toolchat-run-id"]
        # The tiny model may fail a turn; it must say why, in OpenAI's shape.
        assert failed.status_code == 502, failed
        assert failed.body["code"] == "run_failed"
        return None, failed.response.headers["x-toolchat-run-id"]

    messages = [{"role": "user", "content": "What is 12*7? Use the calculator tool."}]
    for follow_up in ("Thank you. And 2+2?", None):
        text, run_id = asyncio.run(ask(messages))
        run = Run.objects.get(pk=run_id)
        if run.status == RunStatus.AWAITING_APPROVAL:
            # The model chose a tool that asks first (delete_notes): the answer says so,
            # and the owner decides as docs/openai-api.md tells; the run then ends.
            assert text is not None
            assert "waiting for approval" in text
            for execution in ToolExecution.objects.filter(
                run=run, status=ExecutionStatus.AWAITING_APPROVAL
            ):
                tool_call_decide(execution_id=execution.pk, user=user, approve=False)
            run = wait_for_run(run, 600)
        assert run.status in (RunStatus.COMPLETED, RunStatus.FAILED), run.status
        if text is None or follow_up is None:
            break
        messages += [
            {"role": "assistant", "content": text},
            {"role": "user", "content": follow_up},
        ]
    conversations = Conversation.objects.filter(owner=user)
    assert conversations.count() == 1, "the follow-up continued the first request's conversation"
    assert_valid_history(history_for_model(conversation=conversations.get()))
