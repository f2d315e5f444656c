"""A turn on real Celery workers is one trace, even when its worker is killed mid-call.

These run in the PostgreSQL pass, as the engine's other worker tests do.
"""

from __future__ import annotations

import pytest

from chat.models import ModelCall, RunEvent, RunStatus
from chat.services.runs import run_start
from tests.assertions import wait_until
from tests.chat.engine.conftest import wait_for_run
from tests.chat.telemetry.conftest import by_operation, turn_spans
from tests.factories import ConversationFactory
from tests.llm_server import text_reply

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

ERROR = 2  # the OTLP status code


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_a_turn_taken_over_from_a_killed_worker_stays_one_trace(
    otlp, llm_server, start_worker, celery_env, user, pool
):
    celery_env["env"].update(
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp.endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_SERVICE_NAME="toolchat-worker",
        OTEL_BSP_SCHEDULE_DELAY="100",  # ms: the worker exports its spans at once
    )
    worker = start_worker("w1", pool=pool)
    conversation = ConversationFactory(owner=user)
    llm_server.push(
        text_reply("this answer streams very slowly " * 3, chunk_delay_s=0.4),
        text_reply("The answer after the crash."),
    )
    run = run_start(conversation=conversation, content="hello")
    wait_until(
        lambda: RunEvent.objects.filter(run=run, type="message.delta").exists(),
        what="the first answer to be streaming",
    )
    worker.kill()
    start_worker("w2", pool=pool)
    run = wait_for_run(run, 60)
    assert run.status == RunStatus.COMPLETED, run.error

    turn, *calls = turn_spans(otlp, run, 3)
    # The turn's span was chosen by the process that took the post; the worker
    # that took the run over wrote it, and both calls are its children.
    assert turn.name == "invoke_agent toolchat"
    assert turn.resource["service.name"] == "toolchat-worker"
    assert turn.attributes["toolchat.run.outcome"] == "completed"
    assert turn.attributes["toolchat.run.model_calls"] == 2
    assert {c.parent_span_id for c in calls} == {turn.span_id}
    lost, answered = by_operation(calls, "chat")
    rows = list(ModelCall.objects.filter(run=run).order_by("started_at"))
    assert lost.attributes["toolchat.model_call.id"] == str(rows[0].pk)
    assert lost.attributes["error.type"] == "worker_lost"
    assert lost.status_code == ERROR
    assert answered.attributes["toolchat.model_call.id"] == str(rows[1].pk)
    assert answered.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    # Each model request carried the trace, the killed worker's too.
    trace_ids = {h["traceparent"].split("-")[1] for h in llm_server.request_headers}
    assert trace_ids == {turn.trace_id}
