"""A Redis outage while turns are in flight, on a real Celery worker and a real Redis.

Redis (the broker) is killed while the worker runs tools, kept down for a
while, and started again on the same port. The worker must stay up, every
run must end, no tool may run twice, and a turn posted after the outage
must complete.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from chat.models import RunStatus, ToolExecution
from chat.selectors import history_for_model
from chat.services.runs import run_start
from tests.assertions import assert_valid_history, wait_until
from tests.chat.engine.conftest import wait_for_run
from tests.factories import ConversationFactory
from tests.llm_server import Reply, text_reply, tool_calls_reply
from tests.plugins.services import RedisServer

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def redis_server():
    """A Redis of this test's own, so that killing it harms no other test."""
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server):
    """celery_env and the workers use the private server."""
    return redis_server.url


def answer(body) -> Reply:
    """Call slow_step for "slow <label>", then answer once its result is in."""
    messages = body["messages"]
    asked = max(i for i, m in enumerate(messages) if m["role"] == "user")
    results = [m for m in messages[asked:] if m["role"] == "tool"]
    if results:
        return text_reply(f"Done: {json.loads(results[-1]['content'])['label']}.")
    label = re.search(r"slow (\w+)", messages[asked]["content"]).group(1)
    arguments = json.dumps({"label": label, "seconds": 3})
    return tool_calls_reply([("slow_step", arguments, f"call_{label}")])


# Two minutes down is `long`: `make test-long` runs it (docs/deploy.md reports both).
@pytest.mark.parametrize("down_s", [10, pytest.param(120, marks=pytest.mark.long)])
def test_the_worker_survives_a_redis_outage_and_every_run_ends(
    llm_server, start_worker, celery_env, redis_server, user, down_s
):
    llm_server.responder = answer
    # -B: the recovery sweep (docker-compose runs it as its own `beat` service),
    # once a second (the test settings leave it to the tests).
    celery_env["env"]["TOOLCHAT_RECOVER_S"] = "1"
    worker = start_worker("w1", options=("-B", "--schedule", str(celery_env["logs"] / "beat")))
    conversations = [ConversationFactory(owner=user) for _ in range(4)]
    runs = [
        run_start(conversation=conversation, content=f"slow r{i}")
        for i, conversation in enumerate(conversations[:3])
    ]
    # Kill the broker while the tools run: the worker holds unacknowledged tasks.
    wait_until(lambda: ToolExecution.objects.filter(status="running").count() == 3, timeout=30)
    redis_server.process.kill()
    redis_server.process.wait(10)
    # A turn posted during the outage is stored and answered 202 at once; it waits.
    started = time.monotonic()
    posted = run_start(conversation=conversations[3], content="slow r3")
    assert time.monotonic() - started < 5
    time.sleep(down_s)  # the outage itself: what is tested is what follows it
    assert worker.process.poll() is None, worker.log()[-3000:]
    redis_server.start()

    for run in [*runs, posted]:
        ended = wait_for_run(run, 90)
        assert ended.status == RunStatus.COMPLETED, (
            ended.status,
            ended.error,
            worker.log()[-3000:],
        )
    ledger = celery_env["ledger"].read_text().split()
    for i in range(4):
        assert ledger.count(f"r{i}") == 2, ledger  # one start and one end: run once
    after = run_start(conversation=conversations[0], content="slow after")
    assert wait_for_run(after, 60).status == RunStatus.COMPLETED
    assert worker.process.poll() is None, worker.log()[-3000:]
    assert "Unrecoverable error" not in worker.log()
    for conversation in conversations:
        assert_valid_history(history_for_model(conversation=conversation))
