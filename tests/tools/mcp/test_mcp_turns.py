"""Turns that call MCP tools, end to end: the scripted model, the real turn engine, real servers.

The servers are real processes: the MCPServer server of server.py (over stdio
and over streamable HTTP) and mcp-server-time from PyPI. Only the model is
scripted.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from chat.models import ExecutionStatus, Message, Role, RunEvent, RunStatus, ToolExecution
from chat.selectors import history_for_model
from chat.services.approvals import tool_call_decide
from chat.services.runs import run_start
from tests.assertions import assert_valid_history, wait_until
from tests.chat.api.conftest import token_client
from tests.chat.api.test_export import assert_fine_tuning_line
from tests.factories import ConversationFactory
from tests.llm_server import text_reply, tool_calls_reply
from tests.stack import wait_for_run
from tests.tools.mcp.servers import stdio_server, time_server

pytestmark = pytest.mark.django_db(transaction=True)


def turn(llm_server, conversation, calls, answer="Done.", content="go", timeout=30.0):
    """One turn in which the model calls `calls` [(name, arguments)], then answers."""
    llm_server.push(
        tool_calls_reply([(name, json.dumps(arguments)) for name, arguments in calls]),
        text_reply(answer),
    )
    run = wait_for_run(run_start(conversation=conversation, content=content), timeout)
    assert run.status == RunStatus.COMPLETED, run.error
    return run


def executions(run):
    return list(ToolExecution.objects.filter(run=run).order_by("created_at"))


def tool_message(run):
    return Message.objects.get(run=run, role=Role.TOOL)


def test_a_turn_calls_an_mcp_tool_over_stdio_and_the_history_is_valid_and_exports(
    llm_server, mcp_servers, user
):
    mcp_servers({"t": stdio_server()})
    conversation = ConversationFactory(owner=user)
    run = turn(llm_server, conversation, [("t__add", {"a": 2, "b": 3})], answer="It is 5.")

    # The model was offered the server's tools beside the built-in ones, schemas as given.
    offered = {t["function"]["name"]: t["function"] for t in llm_server.requests[0]["tools"]}
    assert "calculator" in offered
    assert offered["t__add"]["parameters"]["required"] == ["a", "b"]
    assert offered["t__add"]["description"] == "Add two integers."
    assert "t__files_read_" in " ".join(offered)  # "files.read" made a valid function name

    (execution,) = executions(run)
    assert execution.status == ExecutionStatus.SUCCEEDED
    assert execution.arguments == {"a": 2, "b": 3}
    assert execution.content == "5"
    assert execution.result["content"] == [{"type": "text", "text": "5"}]
    assert execution.result["structuredContent"] == {"result": "5"}
    message = tool_message(run)
    assert (message.name, message.content) == ("t__add", "5")
    # The compose request carried the tool's answer.
    assert {"role": "tool", "tool_call_id": message.tool_call_id, "content": "5"}.items() <= next(
        m for m in llm_server.requests[1]["messages"] if m["role"] == "tool"
    ).items()

    assert_valid_history(history_for_model(conversation=conversation))
    response = token_client(user).get(f"/api/v1/conversations/{conversation.id}/export/")
    assert response.status_code == 200
    (line,) = [json.loads(text) for text in response.content.decode().splitlines()]
    assert_fine_tuning_line(line)
    assert "t__add" in {t["function"]["name"] for t in line["tools"]}


def test_progress_notifications_become_tool_progress_events(llm_server, mcp_servers, user):
    mcp_servers({"t": stdio_server()})
    run = turn(llm_server, ConversationFactory(owner=user), [("t__count", {"steps": 4})])
    progress = [
        e.data for e in RunEvent.objects.filter(run=run, type="tool.progress").order_by("seq")
    ]
    assert [p["percent"] for p in progress] == [25, 50, 75, 100]
    assert progress[0]["message"] == "step 1 of 4"
    assert {p["name"] for p in progress} == {"t__count"}
    assert executions(run)[0].content == "counted to 4"


def test_an_error_result_is_audited_as_failed_and_the_model_reads_it(llm_server, mcp_servers, user):
    mcp_servers({"t": stdio_server()})
    run = turn(llm_server, ConversationFactory(owner=user), [("t__refuse", {"reason": "no"})])
    (execution,) = executions(run)
    assert execution.status == ExecutionStatus.FAILED
    assert "refused: no" in execution.error
    assert execution.result["isError"] is True
    sent = json.loads(tool_message(run).content)
    assert sent["success"] is False
    assert "refused: no" in sent["error"]


def test_invalid_arguments_never_reach_the_server(llm_server, mcp_servers, user):
    mcp_servers({"t": stdio_server()})
    run = turn(llm_server, ConversationFactory(owner=user), [("t__add", {"a": "two"})])
    (execution,) = executions(run)
    assert execution.status == ExecutionStatus.FAILED
    details = json.loads(execution.content)["details"]["errors"]
    assert {"field": "b", "message": "'b' is a required property"} in details
    assert {"field": "a", "message": "'two' is not of type 'integer'"} in details


def test_a_slow_tool_times_out_and_the_run_still_answers(llm_server, mcp_servers, user):
    mcp_servers({"t": stdio_server(timeout=0.5)})
    conversation = ConversationFactory(owner=user)
    run = turn(llm_server, conversation, [("t__sleep", {"seconds": 10})], answer="It timed out.")
    (execution,) = executions(run)
    assert execution.status == ExecutionStatus.TIMED_OUT
    assert execution.duration_ms < 3000
    # The server is still there for the next call, and was told to stop the first.
    run = turn(llm_server, conversation, [("t__add", {"a": 1, "b": 1})])
    assert executions(run)[0].content == "2"
    run = turn(llm_server, conversation, [("t__cancelled", {})])
    assert executions(run)[0].content == "sleep 10"


def server_sleeping(run):
    """Wait until the server has the call: its `sleep` reports progress once it starts.

    (The execution row is running a little before the request reaches the server; a
    server killed in between is restarted for the call, which then sleeps it out.)
    """
    wait_until(
        lambda: RunEvent.objects.filter(run=run, type="tool.progress").exists(),
        what="the server to be sleeping",
    )


def test_killing_the_server_mid_call_gives_an_error_and_the_next_call_restarts_it(
    llm_server, mcp_servers, user
):
    mcp_servers({"t": stdio_server()})
    conversation = ConversationFactory(owner=user)
    run = turn(llm_server, conversation, [("t__whoami", {})])
    pid = int(executions(run)[0].content)
    # Reused across calls: the same process answers again.
    run = turn(llm_server, conversation, [("t__whoami", {})])
    assert int(executions(run)[0].content) == pid

    llm_server.push(
        tool_calls_reply([("t__sleep", json.dumps({"seconds": 20}))]),
        text_reply("The server went away."),
    )
    run = run_start(conversation=conversation, content="sleep")
    server_sleeping(run)
    os.kill(pid, signal.SIGKILL)
    # The run ends once the client notices the dead server and the model answers (the
    # tool's 20 s sleep is what it must not wait out).
    run = wait_for_run(run, 15)
    assert run.status == RunStatus.COMPLETED, run.error
    (execution,) = executions(run)
    assert execution.status == ExecutionStatus.FAILED
    assert execution.duration_ms < 10_000
    assert "was lost during the call" in execution.error
    assert Message.objects.get(run=run, role=Role.ASSISTANT, tool_calls__isnull=True).content == (
        "The server went away."
    )

    run = turn(llm_server, conversation, [("t__whoami", {})])
    (execution,) = executions(run)
    assert execution.status == ExecutionStatus.SUCCEEDED
    assert int(execution.content) != pid
    assert_valid_history(history_for_model(conversation=conversation))


def test_a_server_that_exited_between_calls_is_restarted_and_the_next_call_succeeds(
    llm_server, mcp_servers, user
):
    hub = mcp_servers({"t": stdio_server()})
    conversation = ConversationFactory(owner=user)
    run = turn(llm_server, conversation, [("t__whoami", {})])
    pid = int(executions(run)[0].content)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: exited(pid), what="the server to exit")
    # Between calls: the hub has read the end of the server's output. (A call sent
    # in the very millisecond the server dies, before that, is "lost during the
    # call", which a loaded CI machine once made this test see.)
    wait_until(lambda: not hub._connections["t"]._alive, what="the hub to see the exit")

    run = turn(llm_server, conversation, [("t__whoami", {})])
    (execution,) = executions(run)
    assert execution.status == ExecutionStatus.SUCCEEDED, execution.error
    assert int(execution.content) != pid


def exited(pid: int) -> bool:
    """Whether the process has ended (a zombie not yet reaped has)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):  # reaped before the open, or before the read
        return True


def test_a_crash_inside_the_server_mid_call_is_an_error_result(llm_server, mcp_servers, user):
    mcp_servers({"t": stdio_server()})
    conversation = ConversationFactory(owner=user)
    run = turn(llm_server, conversation, [("t__crash", {})])
    assert executions(run)[0].status == ExecutionStatus.FAILED
    run = turn(llm_server, conversation, [("t__add", {"a": 4, "b": 4})])
    assert executions(run)[0].content == "8"


def test_the_published_time_server_answers_over_stdio(llm_server, mcp_servers, user):
    mcp_servers({"time": time_server()})
    run = turn(
        llm_server,
        ConversationFactory(owner=user),
        [("time__get_current_time", {"timezone": "Asia/Tokyo"})],
    )
    (execution,) = executions(run)
    assert execution.status == ExecutionStatus.SUCCEEDED
    assert json.loads(execution.content)["timezone"] == "Asia/Tokyo"
    assert ToolExecution.objects.get(run=run).name == "time__get_current_time"


def test_an_http_server_is_called_and_one_killed_mid_call_is_noticed_and_reconnected(
    llm_server, mcp_servers, mcp_http_server, user
):
    mcp_servers({"h": {"url": mcp_http_server.url, "timeout": 20}})
    conversation = ConversationFactory(owner=user)
    run = turn(llm_server, conversation, [("h__count", {"steps": 2}), ("h__add", {"a": 1, "b": 2})])
    assert sorted(e.content for e in executions(run)) == ["3", "counted to 2"]
    assert RunEvent.objects.filter(run=run, type="tool.progress").count() == 2

    llm_server.push(
        tool_calls_reply([("h__sleep", json.dumps({"seconds": 30}))]),
        text_reply("The server went away."),
    )
    run = run_start(conversation=conversation, content="sleep")
    server_sleeping(run)
    mcp_http_server.kill()
    run = wait_for_run(run, 15)
    assert run.status == RunStatus.COMPLETED, run.error
    (execution,) = executions(run)
    assert execution.status == ExecutionStatus.FAILED
    assert execution.duration_ms < 10_000, "noticed by the pings, not the 20 s timeout"

    # While it is down, calls fail at once with a readable error.
    run = turn(llm_server, conversation, [("h__add", {"a": 1, "b": 1})])
    (execution,) = executions(run)
    assert execution.status == ExecutionStatus.FAILED
    assert "could not be" in execution.error

    mcp_http_server.start()
    run = turn(llm_server, conversation, [("h__add", {"a": 2, "b": 2})])
    assert executions(run)[0].content == "4"
    assert_valid_history(history_for_model(conversation=conversation))


def test_an_http_server_restarted_between_calls_gets_a_new_session_and_the_call_succeeds(
    llm_server, mcp_servers, mcp_http_server, user
):
    hub = mcp_servers({"h": {"url": mcp_http_server.url}})
    conversation = ConversationFactory(owner=user)
    run = turn(llm_server, conversation, [("h__add", {"a": 1, "b": 2})])
    assert executions(run)[0].content == "3"

    # The new process knows nothing of the session the old one gave.
    mcp_http_server.kill()
    mcp_http_server.start()
    run = turn(llm_server, conversation, [("h__add", {"a": 2, "b": 2})])
    (execution,) = executions(run)
    assert execution.status == ExecutionStatus.SUCCEEDED, execution.error
    assert execution.content == "4"
    (status,) = hub.status()
    assert status["connections"] == 2


def test_a_server_that_is_down_does_not_hold_up_turns(llm_server, mcp_servers, user):
    hub = mcp_servers(
        {"down": {"command": "/nonexistent/mcp-server"}, "t": stdio_server()},
        retry_s=3600,
    )
    conversation = ConversationFactory(owner=user)
    run = turn(llm_server, conversation, [("calculator", {"expression": "6*7"})])
    offered = {t["function"]["name"] for t in llm_server.requests[0]["tools"]}
    assert "t__add" in offered
    assert not any(name.startswith("down__") for name in offered)
    (status,) = [s for s in hub.status() if s["name"] == "down"]
    assert status["state"] == "error"
    assert "No such file" in status["error"]

    # A call of a tool it would have had is an unknown tool, answered at once.
    run = turn(llm_server, conversation, [("down__anything", {})])
    (execution,) = executions(run)
    assert execution.status == ExecutionStatus.FAILED
    assert "There is no tool called 'down__anything'" in execution.content


def test_allow_tools_and_requires_approval_apply_to_mcp_tools(llm_server, mcp_servers, user):
    mcp_servers({"t": stdio_server(allowTools=["add", "whoami"], requiresApproval=["add"])})
    conversation = ConversationFactory(owner=user)
    llm_server.push(
        tool_calls_reply([("t__add", json.dumps({"a": 20, "b": 22}))]), text_reply("42.")
    )
    run = run_start(conversation=conversation, content="add")
    offered = None

    def waiting():
        run.refresh_from_db()
        return run.status == RunStatus.AWAITING_APPROVAL

    wait_until(waiting, what="the call to wait for approval")
    offered = {t["function"]["name"] for t in llm_server.requests[0]["tools"]}
    assert {"t__add", "t__whoami"} <= offered
    assert "t__count" not in offered
    execution = ToolExecution.objects.get(run=run)
    assert execution.status == ExecutionStatus.AWAITING_APPROVAL
    tool_call_decide(execution_id=execution.pk, user=user, approve=True, reason="fine")
    run = wait_for_run(run, 30)
    assert run.status == RunStatus.COMPLETED, run.error
    assert ToolExecution.objects.get(run=run).content == "42"


def test_a_tool_policy_denies_an_mcp_servers_tools_by_its_prefix(llm_server, mcp_servers, user):
    from chat.models import ToolPolicy

    mcp_servers({"t": stdio_server()})
    rule = ToolPolicy.objects.create(tools=["t__*"], decision="deny", note="not that server")
    run = turn(llm_server, ConversationFactory(owner=user), [("t__add", {"a": 1, "b": 2})])

    assert not any(t["function"]["name"].startswith("t__") for t in llm_server.requests[0]["tools"])
    execution = ToolExecution.objects.get(run=run)
    assert execution.status == ExecutionStatus.REJECTED
    assert execution.policy == {"decision": "deny", "rule": rule.pk}
    assert execution.result_chars == 0 or "not allowed" in execution.content
    assert f"tool policy rule {rule.pk}: not that server" in tool_message(run).content


def test_an_image_is_stored_as_the_users_resource(llm_server, mcp_servers, user):
    mcp_servers({"t": stdio_server()})
    run = turn(llm_server, ConversationFactory(owner=user), [("t__picture", {})])
    (execution,) = executions(run)
    (resource,) = execution.created_resources.all()
    assert (resource.kind, resource.owner_id) == ("image", user.pk)
    assert resource.data["mimeType"] == "image/png"
    assert str(resource.pk) in execution.content
    assert "data" not in execution.result["content"][0]
    assert tool_message(run).resource_id == resource.pk


def test_the_tools_api_shows_each_mcp_tool_with_its_server(mcp_servers, user):
    mcp_servers({"time": time_server()})
    response = token_client(user).get("/api/v1/tools/")
    assert response.status_code == 200
    tools = {t["name"]: t for t in response.json()["results"]}
    assert tools["calculator"]["server"] is None
    current = tools["time__get_current_time"]
    assert current["server"] == "time"
    assert current["parameters"]["required"] == ["timezone"]
    assert current["idempotent"] is True  # the server says it is read-only


def test_a_server_whose_tool_list_changes_is_listed_again_at_once(llm_server, mcp_servers, user):
    hub = mcp_servers({"t": stdio_server()})
    conversation = ConversationFactory(owner=user)
    run = turn(llm_server, conversation, [("t__grow", {})])
    assert executions(run)[0].content == "grew"
    wait_until(
        lambda: "t__grown" in {spec.name for spec in hub.specs()},
        timeout=10,
        what="the new tool to be listed",
    )
    run = turn(llm_server, conversation, [("t__grown", {})])
    assert executions(run)[0].content == "grown"
