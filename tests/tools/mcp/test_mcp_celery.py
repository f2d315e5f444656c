"""MCP tools on real Celery workers, configured as deployed: TOOLCHAT_MCP_CONFIG names a file."""

from __future__ import annotations

import json

import pytest

from chat.models import ExecutionStatus, RunStatus, ToolExecution
from chat.selectors import history_for_model
from chat.services.runs import run_start
from tests.assertions import assert_valid_history
from tests.factories import ConversationFactory
from tests.llm_server import text_reply, tool_calls_reply
from tests.stack import wait_for_run
from tests.tools.mcp.servers import stdio_server

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_a_worker_offers_and_runs_mcp_tools_and_reuses_its_server(
    llm_server, start_worker, celery_env, user, tmp_path, pool
):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"t": stdio_server()}}))
    celery_env["env"]["TOOLCHAT_MCP_CONFIG"] = str(config)
    start_worker("w1", pool=pool, options=("--concurrency=1",))
    conversation = ConversationFactory(owner=user)

    pids = []
    for _ in range(2):
        llm_server.push(tool_calls_reply([("t__whoami", "{}")]), text_reply("Done."))
        run = wait_for_run(run_start(conversation=conversation, content="who?"), 60)
        assert run.status == RunStatus.COMPLETED, run.error
        execution = ToolExecution.objects.get(run=run)
        assert execution.status == ExecutionStatus.SUCCEEDED
        pids.append(int(execution.content))

    offered = {t["function"]["name"] for t in llm_server.requests[0]["tools"]}
    assert {"calculator", "t__whoami", "t__add"} <= offered
    # The worker process keeps its server: the second call reached the same process.
    assert pids[0] == pids[1]
    assert_valid_history(history_for_model(conversation=conversation))
