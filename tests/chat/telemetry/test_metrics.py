"""`GET /metrics`: protected, and what a scraper reads after real turns."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from chat.models import Mode, Run, RunStatus
from chat.services.replays import run_replay
from chat.services.runs import run_start
from tests.chat.engine.conftest import wait_for_run
from tests.factories import ConversationFactory
from tests.llm_server import error_reply, text_reply, tool_calls_reply
from tests.plugins.servers import AsgiServer

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "a-scraper-token-for-tests"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def metrics_on(settings):
    settings.TOOLCHAT_METRICS_TOKEN = TOKEN
    settings.TOOLCHAT_METRICS_NETWORKS = []


def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, by name and labels."""
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def calculator_turn(llm_server, conversation, call_id: str) -> Run:
    """A completed two-pass turn of `conversation`: one calculator call, then "84."."""
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "12*7"}', call_id)]), text_reply("84.")
    )
    run = wait_for_run(run_start(conversation=conversation, content="what is 12*7"))
    assert run.status == RunStatus.COMPLETED, run.error
    return run


def test_metrics_are_off_unless_configured(settings):
    settings.TOOLCHAT_METRICS_TOKEN = ""
    settings.TOOLCHAT_METRICS_NETWORKS = []
    assert Client().get("/metrics").status_code == 404


def test_metrics_need_the_token_or_an_allowed_network(settings):
    settings.TOOLCHAT_METRICS_TOKEN = TOKEN
    settings.TOOLCHAT_METRICS_NETWORKS = ["10.0.0.0/8"]
    assert Client().get("/metrics").status_code == 403
    wrong = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer not-the-token")
    assert wrong.status_code == 403
    assert b"toolchat" not in wrong.content
    assert Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    # The test client connects from 127.0.0.1: allowed once its network is.
    settings.TOOLCHAT_METRICS_NETWORKS = ["127.0.0.0/8"]
    assert Client().get("/metrics").status_code == 200


@pytest.mark.parametrize(
    "header",
    ["HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP"],
)
def test_an_address_a_forwarding_header_claims_never_opens_the_metrics(settings, header):
    """What a server that took the address from the header hands Django: refused all the same."""
    settings.TOOLCHAT_METRICS_TOKEN = TOKEN
    settings.TOOLCHAT_METRICS_NETWORKS = ["10.0.0.0/8"]
    claimed = "for=10.0.0.1" if header == "HTTP_FORWARDED" else "10.0.0.1"
    response = Client().get("/metrics", REMOTE_ADDR="10.0.0.1", **{header: claimed})
    assert response.status_code == 403
    # The token still opens them, header or not.
    authorized = Client().get(
        "/metrics",
        REMOTE_ADDR="10.0.0.1",
        HTTP_AUTHORIZATION=f"Bearer {TOKEN}",
        **{header: claimed},
    )
    assert authorized.status_code == 200


@pytest.fixture(params=["10.0.0.0/8"])
def metrics_server(request, asgi_server_session, transactional_db):
    """A uvicorn as toolchat runs it (proxy headers trusted from loopback, uvicorn's default)."""
    env = {
        **asgi_server_session.env,
        "TOOLCHAT_METRICS_TOKEN": "",
        "TOOLCHAT_METRICS_NETWORKS": request.param,
    }
    server = AsgiServer(env=env, log_path=asgi_server_session.log_path.parent / "metrics.log")
    server.start()
    yield server.base_url
    server.stop()


def status_of(url: str, headers: dict[str, str]) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.postgres
def test_on_a_real_server_a_forwarded_for_from_loopback_does_not_open_the_metrics(metrics_server):
    url = f"{metrics_server}/metrics"
    assert status_of(url, {}) == 403  # loopback is not in the allowed network
    assert status_of(url, {"X-Forwarded-For": "10.0.0.1"}) == 403
    assert status_of(url, {"X-Forwarded-For": "192.168.1.9, 10.0.0.1"}) == 403


@pytest.mark.postgres
@pytest.mark.parametrize("metrics_server", ["127.0.0.0/8,10.0.0.0/8"], indirect=True)
def test_on_a_real_server_the_connections_own_address_counts(metrics_server):
    url = f"{metrics_server}/metrics"
    assert status_of(url, {}) == 200  # the peer, loopback, is allowed
    # Both the peer and the claim are allowed, but what a header says is never taken.
    assert status_of(url, {"X-Forwarded-For": "10.0.0.1"}) == 403
    assert status_of(url, {"X-Forwarded-For": "127.0.0.1"}) == 403


def test_a_scrape_after_turns_counts_them_their_calls_tokens_and_tools(
    metrics_on, llm_server, user
):
    before = scrape()
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    calculator_turn(llm_server, conversation, "call_m1")
    llm_server.push(error_reply(400, "no"))
    failed = wait_for_run(run_start(conversation=conversation, content="again"))
    assert failed.status == RunStatus.FAILED
    after = scrape()

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    model = conversation.model
    turn = "toolchat_turn_duration_seconds_count"
    assert grew(turn, mode="two_pass", model=model, outcome="completed") == 1
    assert grew(turn, mode="two_pass", model=model, outcome="failed") == 1
    calls = "toolchat_model_call_duration_seconds_count"
    assert grew(calls, provider="openai", model="test-model", outcome="succeeded") == 2
    assert grew(calls, provider="openai", model="test-model", outcome="failed") == 1
    tokens = "toolchat_model_tokens_total"
    assert grew(tokens, provider="openai", model="test-model", type="input") == 22  # 11 a call
    assert grew(tokens, provider="openai", model="test-model", type="output") > 0
    ttft = "toolchat_time_to_first_token_seconds_count"
    assert grew(ttft, mode="two_pass", model="test-model") == 2
    tools = "toolchat_tool_call_duration_seconds_count"
    assert grew(tools, tool="calculator", status="succeeded") == 1
    assert value(after, "toolchat_runs_active", status="running") == 0
    assert value(after, "toolchat_tool_calls_awaiting_approval") == 0
    assert ("toolchat_task_queue_depth", ()) in after
    assert any(name.startswith("process_") for name, _ in after)  # the process's own metrics

    # The Grafana dashboard asks only for metrics a scrape has.
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    asked = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\b(?:toolchat|process)_[a-z_]+", target["expr"])
    }
    assert len(asked) >= 10
    assert asked <= {name for name, _ in after}, asked - {name for name, _ in after}


def test_replays_are_counted_in_series_of_their_own(metrics_on, llm_server, user):
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    original = calculator_turn(llm_server, conversation, "call_r1")
    before = scrape()
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "7*12"}')]), text_reply("Also 84.")
    )

    replica = wait_for_run(run_replay(run=original, model="openai/test-model", tools="live"))

    assert replica.status == RunStatus.COMPLETED, replica.error
    after = scrape()

    def grew(name: str, **labels: str) -> float:
        """What the series of `name` with `labels` grew by, whatever their other labels."""

        def total(samples) -> float:
            wanted = set(labels.items())
            return sum(v for (n, ls), v in samples.items() if n == name and wanted <= set(ls))

        return total(after) - total(before)

    for prefix, replays in (("toolchat_", 0), ("toolchat_replay_", 1)):
        assert grew(f"{prefix}turn_duration_seconds_count") == replays
        assert grew(f"{prefix}model_call_duration_seconds_count") == 2 * replays
        assert grew(f"{prefix}model_tokens_total", type="input") == 22 * replays  # 11 a call
        assert grew(f"{prefix}time_to_first_token_seconds_count") == 2 * replays
        assert grew(f"{prefix}tool_call_duration_seconds_count") == replays
        assert value(after, f"{prefix}runs_active", status="running") == 0
        assert (f"{prefix}tool_calls_awaiting_approval", ()) in after
    model = "openai/test-model"  # the replay's conversation names the model it replays on
    replayed = "toolchat_replay_turn_duration_seconds_count"
    assert value(after, replayed, mode="two_pass", model=model, outcome="completed") == 1
    tools = "toolchat_replay_tool_call_duration_seconds_count"
    assert value(after, tools, tool="calculator", status="succeeded") == 1


def test_runs_waiting_for_approval_are_counted_when_scraped(
    metrics_on, llm_server, user, monkeypatch, tmp_path
):
    from tests.assertions import wait_until

    monkeypatch.setenv("TOOLCHAT_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    llm_server.push(tool_calls_reply([("launch_rocket", '{"target": "the moon"}')]))
    run = run_start(conversation=ConversationFactory(owner=user), content="launch it")
    wait_until(
        lambda: type(run).objects.get(pk=run.pk).status == RunStatus.AWAITING_APPROVAL,
        what="the run to wait for approval",
    )
    samples = scrape()
    assert value(samples, "toolchat_runs_active", status="awaiting_approval") == 1
    assert value(samples, "toolchat_tool_calls_awaiting_approval") == 1


@pytest.mark.anyio
async def test_events_a_socket_receives_live_are_counted_with_their_lag(metrics_on, user, settings):
    from channels.db import database_sync_to_async

    from tests.chat.live.test_consumers import connect, headers_for, make, receive_events

    settings.LLM_PROVIDER = "offline"
    lag = "toolchat_event_fanout_lag_seconds_count"
    before = value(await database_sync_to_async(scrape)(), lag)
    conversation = await make(ConversationFactory, owner=user)
    communicator, connected, _ = await connect(conversation.id, await headers_for(user), "after=0")
    assert connected
    await communicator.send_json_to({"type": "message", "content": "hello"})
    received = []
    while not any(m["type"] == "run.completed" for m in received):
        received += await receive_events(communicator, 1)
    await communicator.disconnect()
    events = [m for m in received if "seq" in m]
    after = await database_sync_to_async(scrape)()
    assert value(after, lag) - before == len(events)
    assert value(after, "toolchat_event_fanout_lag_seconds_bucket", le="+Inf") == value(after, lag)


def test_a_turns_wait_for_a_person_is_counted_apart_from_its_duration(metrics_on, llm_server, user):
    import time

    from chat.models import ToolExecution
    from chat.services.approvals import tool_call_decide
    from tests.assertions import wait_until

    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    llm_server.push(
        tool_calls_reply([("delete_notes", '{"note_ids": ["a", "b"]}', "call_w")]),
        text_reply("Deleted."),
    )
    before = scrape()
    run = run_start(conversation=conversation, content="delete a and b")
    wait_until(lambda: ToolExecution.objects.filter(run=run, status="awaiting_approval").exists())
    time.sleep(1.0)  # a person reads the request
    execution = ToolExecution.objects.get(run=run)
    tool_call_decide(execution_id=execution.pk, user=user, approve=True)
    run = wait_for_run(run)
    after = scrape()

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    labels = {"mode": "two_pass", "model": conversation.model, "outcome": "completed"}
    waited = grew("toolchat_turn_approval_wait_seconds_sum", **labels)
    assert grew("toolchat_turn_approval_wait_seconds_count", **labels) == 1
    assert waited == pytest.approx(run.approval_wait_ms / 1000)
    assert waited >= 1.0
    # The turn's duration is toolchat's: its latency less the wait.
    duration = grew("toolchat_turn_duration_seconds_sum", **labels)
    assert duration == pytest.approx((run.latency_ms - run.approval_wait_ms) / 1000)
    assert duration <= run.latency_ms / 1000 - 1.0
