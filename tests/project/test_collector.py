"""A started web process or worker leaves what it loaded out of the garbage collector's full passes.

Each case runs the process as it is deployed: the ASGI module imported by a
fresh interpreter, a real Celery worker with each pool.
"""

from __future__ import annotations

import json
import re

import pytest

from chat.models import RunStatus
from chat.services.runs import run_start
from tests.chat.engine.conftest import wait_for_run
from tests.factories import ConversationFactory
from tests.llm_server import text_reply
from tests.project.test_settings import run

# A fresh interpreter imports the ASGI application, then streams one chat answer
# with the openai SDK, as a run's first model request does, and prints what the
# collector holds: frozen by the import, and what its passes walk (tracked, not frozen) before
# the request and after it.
STARTED_WEB_PROCESS = """
import gc, json, sys
baseline = gc.get_freeze_count()  # Python 3.12 counts a few hundred of its own
import project.asgi
import openai
frozen, before = gc.get_freeze_count() - baseline, len(gc.get_objects())
client = openai.OpenAI(base_url=sys.argv[1], api_key="sk-test", max_retries=0)
stream = client.chat.completions.create(
    model="test-model",
    messages=[{"role": "user", "content": "hello"}],
    stream=True,
    stream_options={"include_usage": True},
)
text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
gc.collect()
print(json.dumps({"frozen": frozen, "before": before, "after": len(gc.get_objects()), "text": text}))
"""


def started_web_process(llm_server, tmp_path, **env: str) -> dict:
    llm_server.push(text_reply("Hello there."))
    result = run(
        ["-c", STARTED_WEB_PROCESS, llm_server.base_url],
        DJANGO_DEBUG="1",
        DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3",
        TOOLCHAT_RECOVER_S="0",
        **env,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_web_process_freezes_what_it_loaded_the_sdks_first_request_included(
    llm_server, tmp_path
):
    state = started_web_process(llm_server, tmp_path)

    assert state["text"] == "Hello there."
    # Django, DRF, Channels, Celery's app and the SDK's chat types: well over 50,000.
    assert state["frozen"] > 50_000
    # What a full pass walks after the first streamed request: not the SDK's chat
    # types (about 50,000 objects), imported before the freeze; its HTTP
    # transport's few modules, about 5,000.
    assert state["after"] < 10_000, state


def test_the_collector_is_left_as_python_sets_it_when_turned_off(llm_server, tmp_path):
    state = started_web_process(llm_server, tmp_path, TOOLCHAT_GC_FREEZE="0")

    assert state["text"] == "Hello there."
    assert state["frozen"] == 0
    assert state["after"] > 50_000


FROZEN_LINE = re.compile(
    r"(\d+) objects loaded at start are left out of the garbage collector's full passes"
)


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_a_ready_worker_freezes_what_it_loaded_and_runs_turns(llm_server, start_worker, user, pool):
    worker = start_worker("w1", pool=pool)
    llm_server.push(text_reply("Still answering."))

    run_ = wait_for_run(run_start(conversation=ConversationFactory(owner=user), content="hi"), 30)

    assert run_.status == RunStatus.COMPLETED, run_.error
    frozen = [int(count) for count in FROZEN_LINE.findall(worker.log())]
    # The worker once ready; a prefork pool's process too, once started.
    assert len(frozen) >= (2 if pool == "prefork" else 1), worker.log()[-3000:]
    assert min(frozen) > 50_000
