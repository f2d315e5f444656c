"""Replaying a stored turn: the real engine, the openai SDK against the scripted server.

Each test records a turn the way a user makes one (`run_start`, the tools
really run), replays it through the REST API, and checks what the replay's
model was sent and what was stored: no tool ran, no resource was made, and
each call's audit row says how it was answered.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone
from rest_framework.throttling import ScopedRateThrottle

from chat.engine.tool_calls import tool_call_execute
from chat.models import (
    Conversation,
    ExecutionStatus,
    Message,
    ModelCall,
    Role,
    Run,
    RunEvent,
    RunStatus,
    ToolExecution,
)
from chat.services.runs import run_start
from tests.assertions import wait_until
from tests.chat.api.conftest import token_client
from tests.chat.engine.conftest import wait_for_run
from tests.factories import ConversationFactory, UserFactory
from tests.llm_server import error_reply, text_reply, tool_calls_reply
from tools.models import Resource

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "openai/test-model"


@pytest.fixture(autouse=True)
def _fresh_throttle_counts():
    # Replays draw on the message rate limit, whose counts outlive a test's rows.
    cache.clear()
    yield
    cache.clear()


def replay(api, run: Run, **body) -> Run:
    """POST the replay and wait for its run to end."""
    response = api.post(f"/api/v1/runs/{run.pk}/replay/", {"model": MODEL, **body}, format="json")
    assert response.status_code == 202, response.json()
    assert response.json()["replay_of"] == str(run.pk)
    return wait_for_run(Run.objects.get(pk=response.json()["id"]))


def record_note_turn(llm_server, user) -> Run:
    conversation = ConversationFactory(owner=user, title="Shopping")
    llm_server.push(
        tool_calls_reply([("record_note", '{"title": "Milk", "body": "two litres"}', "call_n1")]),
        text_reply("I noted it."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="note: buy milk, two litres"))
    assert run.status == RunStatus.COMPLETED, run.error
    return run


def test_recorded_tools_serve_the_record_and_run_nothing(llm_server, user):
    original = record_note_turn(llm_server, user)
    recorded = ToolExecution.objects.get(run=original)
    assert Resource.objects.count() == 1
    llm_server.requests.clear()
    llm_server.push(
        tool_calls_reply(
            [
                # The same call, its keys in another order: equal as JSON.
                ("record_note", '{"body": "two litres", "title": "Milk"}'),
                ("calculator", '{"expression": "2*3"}'),  # the original never made it
            ]
        ),
        text_reply("Noted, and 6."),
    )

    replica = replay(token_client(user), original)

    assert replica.status == RunStatus.COMPLETED, replica.error
    assert Resource.objects.count() == 1  # the note was not recorded twice
    rows = {e.name: e for e in ToolExecution.objects.filter(run=replica)}
    note, sum_ = rows["record_note"], rows["calculator"]
    assert note.status == ExecutionStatus.REPLAYED
    assert note.replayed_from_id == recorded.pk
    assert (note.result, note.content) == (recorded.result, recorded.content)
    assert note.attempts == 1
    assert note.worker
    assert sum_.status == ExecutionStatus.UNMATCHED
    assert sum_.replayed_from_id is None
    assert sum_.result is None
    assert "No recorded result" in sum_.content
    # What the model read back: the recorded result, and that no result exists.
    tool_messages = {
        m["tool_call_id"]: m["content"]
        for m in llm_server.requests[1]["messages"]
        if m["role"] == "tool"
    }
    assert tool_messages[note.tool_call_id] == recorded.content
    assert json.loads(tool_messages[sum_.tool_call_id])["success"] is False
    # The replay's tool message shows the note the original made.
    note_message = Message.objects.get(
        conversation=replica.conversation, role=Role.TOOL, tool_call_id=note.tool_call_id
    )
    assert note_message.resource_id == Resource.objects.get().pk


def test_a_replay_lives_in_its_own_conversation_hidden_from_the_list(llm_server, user):
    original = record_note_turn(llm_server, user)
    api = token_client(user)
    llm_server.push(text_reply("Sure."))

    replica = replay(api, original)

    conversation = replica.conversation
    assert conversation.replay_of_id == original.pk
    assert conversation.owner_id == user.pk
    assert conversation.model == MODEL
    listed = [c["id"] for c in api.get("/api/v1/conversations/").json()["results"]]
    assert listed == [str(original.conversation_id)]
    shown = api.get(f"/api/v1/conversations/{conversation.pk}/")
    assert shown.status_code == 200
    assert shown.json()["replay_of"] == str(original.pk)
    # The copy is the history the original was sent, then the replay's own answer.
    roles = [
        m["role"]
        for m in api.get(f"/api/v1/conversations/{conversation.pk}/messages/").json()["results"]
    ]
    assert roles == ["user", "assistant"]
    # The original lists its replays; another user reads neither.
    listed = api.get(f"/api/v1/runs/{original.pk}/replays/").json()["results"]
    assert [(r["id"], r["model"], r["replay_tools"], r["status"]) for r in listed] == [
        (str(replica.pk), MODEL, "recorded", "completed")
    ]
    other = token_client(UserFactory())
    assert other.get(f"/api/v1/runs/{original.pk}/replays/").status_code == 404
    assert other.get(f"/api/v1/conversations/{conversation.pk}/").status_code == 404


def test_the_same_model_on_the_same_server_sends_the_same_first_request(llm_server, user):
    conversation = ConversationFactory(owner=user, system_prompt="Be brief.")
    llm_server.push(text_reply("Hello."))
    wait_for_run(run_start(conversation=conversation, content="hi"))
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "12*7"}', "call_c1")]),
        text_reply("84."),
    )
    original = wait_for_run(run_start(conversation=conversation, content="what is 12*7?"))
    llm_server.requests.clear()
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "12*7"}', "call_c1")]),
        text_reply("84."),
    )

    replica = replay(token_client(user), original)

    assert replica.status == RunStatus.COMPLETED, replica.error
    first = ModelCall.objects.filter(run=original).order_by("started_at").first()
    again = ModelCall.objects.filter(run=replica).order_by("started_at").first()
    assert first is not None
    assert again is not None
    assert again.request_hash == first.request_hash
    assert again.message_count == first.message_count == 4  # the prompt and the earlier turn
    sent = llm_server.requests[0]
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "user"]
    # The call id the model repeated is the original's: the replay stored it with a fresh one.
    execution = ToolExecution.objects.get(run=replica)
    assert execution.status == ExecutionStatus.REPLAYED
    assert execution.tool_call_id != "call_c1"


def test_live_tools_run_for_real(llm_server, user):
    original = record_note_turn(llm_server, user)
    llm_server.push(
        tool_calls_reply([("record_note", '{"title": "Milk", "body": "two litres"}')]),
        text_reply("Noted."),
    )

    replica = replay(token_client(user), original, tools="live")

    assert replica.status == RunStatus.COMPLETED, replica.error
    execution = ToolExecution.objects.get(run=replica)
    assert execution.status == ExecutionStatus.SUCCEEDED
    assert execution.replayed_from_id is None
    assert Resource.objects.count() == 2


def test_a_live_replay_is_refused_a_tool_a_policy_denies_since(llm_server, user):
    from chat.models import ToolPolicy

    original = record_note_turn(llm_server, user)
    rule = ToolPolicy.objects.create(tools=["record_*"], decision="deny", note="read-only now")
    llm_server.push(
        tool_calls_reply([("record_note", '{"title": "Milk", "body": "two litres"}')]),
        text_reply("I may not note it."),
    )

    replica = replay(token_client(user), original, tools="live")

    assert replica.status == RunStatus.COMPLETED, replica.error
    execution = ToolExecution.objects.get(run=replica)
    assert execution.status == ExecutionStatus.REJECTED
    assert execution.policy == {"decision": "deny", "rule": rule.pk}
    assert Resource.objects.count() == 1  # the original's note only: nothing ran
    assert "record_note" not in [t["function"]["name"] for t in llm_server.requests[-2]["tools"]]


def test_recorded_tools_ask_no_approval(llm_server, user):
    conversation = ConversationFactory(owner=user)
    llm_server.push(text_reply("Nothing to delete."))
    original = wait_for_run(run_start(conversation=conversation, content="delete my notes"))
    llm_server.push(
        tool_calls_reply([("delete_notes", '{"note_ids": ["n1"]}')]),
        text_reply("I could not."),
    )

    replica = replay(token_client(user), original)

    assert replica.status == RunStatus.COMPLETED, replica.error
    execution = ToolExecution.objects.get(run=replica)
    assert execution.status == ExecutionStatus.UNMATCHED
    assert execution.decided_at is None


def test_nothing_is_stored_for_a_bad_request(llm_server, user, other_user):
    original = record_note_turn(llm_server, user)
    api = token_client(user)
    before = (Conversation.objects.count(), Run.objects.count(), Message.objects.count())
    url = f"/api/v1/runs/{original.pk}/replay/"
    for body, field in [
        ({"model": "nowhere/nothing"}, "model"),
        ({}, "model"),
        ({"model": MODEL, "tools": "sometimes"}, "tools"),
        ({"model": MODEL, "replay": "backwards"}, "replay"),
        ({"model": MODEL, "replay": "forced", "tools": "live"}, "tools"),
        ({"model": "openai/test\x00model"}, "model"),
        ({"model": MODEL, "system_prompt": "be\x00brief"}, "system_prompt"),
        ({"model": MODEL, "mode": "sideways"}, "mode"),
        ({"model": MODEL, "colour": "blue"}, "colour"),
    ]:
        response = api.post(url, body, format="json")
        assert response.status_code == 400, (body, response.json())
        assert field in response.json()["details"]["errors"], (body, response.json())
    assert token_client(other_user).post(url, {"model": MODEL}, format="json").status_code == 404
    assert (
        api.post(
            f"/api/v1/runs/{original.conversation_id}/replay/", {"model": MODEL}, format="json"
        ).status_code
        == 404
    )
    after = (Conversation.objects.count(), Run.objects.count(), Message.objects.count())
    assert after == before


def test_the_comparison_shows_both_runs_side_by_side(llm_server, user, other_user):
    original = record_note_turn(llm_server, user)
    llm_server.push(
        tool_calls_reply(
            [
                ("record_note", '{"title": "Milk", "body": "two litres"}'),
                ("calculator", '{"expression": "2*3"}'),
            ]
        ),
        text_reply("I noted it, and 6."),
    )
    api = token_client(user)
    replica = replay(api, original)

    response = api.get(f"/api/v1/runs/{original.pk}/compare/?with={replica.pk}")

    assert response.status_code == 200, response.json()
    body = response.json()
    mine, theirs = body["runs"]
    assert (mine["id"], theirs["id"]) == (str(original.pk), str(replica.pk))
    assert (mine["answer"], theirs["answer"]) == ("I noted it.", "I noted it, and 6.")
    assert theirs["replay_of"] == str(original.pk)
    assert [(c["name"], c["match"]) for c in mine["tool_calls"]] == [("record_note", "live")]
    assert [(c["name"], c["match"]) for c in theirs["tool_calls"]] == [
        ("record_note", "matched"),
        ("calculator", "unmatched"),
    ]
    assert theirs["tool_calls"][0]["arguments"] == {"title": "Milk", "body": "two litres"}
    assert body["same_tool_calls"] is False
    assert body["steps"][0]["same"] is False
    assert (mine["model_calls"], theirs["model_calls"]) == (2, 2)
    assert mine["latency_ms"] is not None
    assert mine["first_token_ms"] is not None
    assert (mine["prompt_tokens"], theirs["completion_tokens"]) == (22, 14)
    assert 0 < body["answer_similarity"] < 1
    diff = body["answer_diff"]
    assert "".join(p["text"] for p in diff if p["op"] != "insert") == "I noted it."
    assert "".join(p["text"] for p in diff if p["op"] != "delete") == "I noted it, and 6."
    assert diff[0] == {"op": "equal", "text": "I noted"}
    assert body["answer_diff_limited"] is False
    # Another user's runs, and a missing or malformed `with`.
    other = token_client(other_user)
    url = f"/api/v1/runs/{original.pk}/compare/"
    assert other.get(f"{url}?with={replica.pk}").status_code == 404
    foreign = record_note_turn(llm_server, other_user)
    missing = api.get(f"{url}?with={foreign.pk}")
    assert missing.status_code == 404
    assert missing.json()["field"] == "with"
    for query in ("", "?with=", "?with=yesterday", f"?with={other_user.pk}"):
        bad = api.get(url + query)
        assert bad.status_code == 400
        assert "with" in bad.json()["details"]["errors"]


def test_a_forced_replay_asks_each_original_step_with_the_original_history(llm_server, user):
    original = record_note_turn(llm_server, user)
    sent_before = list(llm_server.requests)
    llm_server.requests.clear()
    llm_server.push(
        # At step 1 the new model would compute instead of noting; at step 2 it is sent
        # the original's note call and its recorded result all the same.
        tool_calls_reply([("calculator", '{"expression": "2*3"}')]),
        text_reply("Your note is recorded."),
    )
    api = token_client(user)

    replica = replay(api, original, replay="forced")

    assert replica.status == RunStatus.COMPLETED, replica.error
    assert replica.replay_mode == "forced"
    assert Resource.objects.count() == 1
    assert not ToolExecution.objects.filter(run=replica).exists()
    # The model was sent exactly what the original's model was sent, step by step.
    assert [r["messages"] for r in llm_server.requests] == [r["messages"] for r in sent_before]
    assert "tools" not in llm_server.requests[1]
    originals = list(ModelCall.objects.filter(run=original).order_by("started_at"))
    forced = list(ModelCall.objects.filter(run=replica).order_by("started_at"))
    assert [(c.step, c.purpose) for c in forced] == [(c.step, c.purpose) for c in originals]
    assert [c.request_hash for c in forced] == [c.request_hash for c in originals]
    assert forced[0].forced_answer["tool_calls"][0]["function"]["name"] == "calculator"
    assert forced[1].forced_answer["content"] == "Your note is recorded."
    assert (replica.model_calls, replica.steps) == (2, 1)
    # Its answer stands where the original's stood, after the original's call and result.
    final = Message.objects.get(run=replica, role=Role.ASSISTANT)
    assert final.content == "Your note is recorded."
    assert final.position == Message.objects.get(run=original, content="I noted it.").position
    assert forced[1].response_message_id == final.pk

    body = api.get(f"/api/v1/runs/{original.pk}/compare/?with={replica.pk}").json()
    _, theirs = body["runs"]
    assert [(c["step"], c["name"], c["match"]) for c in theirs["tool_calls"]] == [
        (1, "calculator", "unmatched")
    ]
    assert body["steps"][0]["same"] is False
    assert theirs["answer"] == "Your note is recorded."


def test_a_forced_replay_matches_the_same_call_at_the_same_step(llm_server, user):
    original = record_note_turn(llm_server, user)
    llm_server.push(
        tool_calls_reply([("record_note", '{"body": "two litres", "title": "Milk"}')]),
        text_reply("Noted."),
    )
    api = token_client(user)

    replica = replay(api, original, replay="forced")

    body = api.get(f"/api/v1/runs/{replica.pk}/compare/?with={original.pk}").json()
    mine, _ = body["runs"]
    assert [(c["name"], c["match"]) for c in mine["tool_calls"]] == [("record_note", "matched")]
    assert body["same_tool_calls"] is True
    assert [s["same"] for s in body["steps"]] == [True]


def test_the_admin_tells_replays_apart(llm_server, user, client):
    original = record_note_turn(llm_server, user)
    llm_server.push(text_reply("Sure."))
    replica = replay(token_client(user), original)
    staff = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(staff)

    listed = {
        value: client.get(f"/admin/chat/run/?replay={value}").content.decode()
        for value in ("no", "free", "forced")
    }

    assert str(original.pk)[:8] in listed["no"]
    assert str(replica.pk)[:8] not in listed["no"]
    assert str(replica.pk)[:8] in listed["free"]
    assert str(replica.pk)[:8] not in listed["forced"]
    page = client.get(f"/admin/chat/run/{replica.pk}/change/")
    assert page.status_code == 200
    assert "recorded" in page.content.decode()


def test_replays_draw_on_the_message_rate_limit(llm_server, user, monkeypatch):
    original = record_note_turn(llm_server, user)
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"messages": "1/min"})
    api = token_client(user)
    url = f"/api/v1/runs/{original.pk}/replay/"
    llm_server.push(text_reply("Sure."))

    first = api.post(url, {"model": MODEL}, format="json")
    second = api.post(url, {"model": MODEL}, format="json")

    assert (first.status_code, second.status_code) == (202, 429)
    assert second.json()["details"]["retry_after"] > 0
    wait_for_run(Run.objects.get(pk=first.json()["id"]))


def test_a_replay_composes_with_its_own_model_not_the_compose_model(llm_server, user, settings):
    settings.LLM_ALLOWED_MODELS = ["other-model", "compose-model"]
    settings.LLM_COMPOSE_MODEL = "compose-model"
    original = record_note_turn(llm_server, user)
    assert [r["model"] for r in llm_server.requests] == ["test-model", "compose-model"]
    llm_server.requests.clear()
    llm_server.push(
        tool_calls_reply([("record_note", '{"title": "Milk", "body": "two litres"}')]),
        text_reply("Noted."),
    )

    replica = replay(token_client(user), original, model="openai/other-model")

    assert replica.status == RunStatus.COMPLETED, replica.error
    assert [r["model"] for r in llm_server.requests] == ["other-model", "other-model"]


@pytest.mark.parametrize(("mode", "max_steps"), [("loop", 1), ("loop", 5), ("llm", 5)])
def test_a_forced_replay_on_the_same_model_sends_each_step_as_the_original_did(
    llm_server, user, mode, max_steps
):
    conversation = ConversationFactory(owner=user, mode=mode, max_steps=max_steps)
    if mode == "llm":
        first = text_reply(
            json.dumps(
                {
                    "done": False,
                    "next_tool": "calculator",
                    "arguments": {"expression": "6*7"},
                    "final_output": "",
                }
            )
        )
        last = text_reply(
            json.dumps({"done": True, "next_tool": "", "arguments": {}, "final_output": "42."})
        )
    else:
        first = tool_calls_reply([("calculator", '{"expression": "6*7"}')])
        last = text_reply("42.")
    llm_server.push(first, last)
    original = wait_for_run(run_start(conversation=conversation, content="6*7?"))
    assert original.status == RunStatus.COMPLETED, original.error
    llm_server.push(first, last)

    replica = replay(token_client(user), original, replay="forced")

    assert replica.status == RunStatus.COMPLETED, replica.error
    originals = ModelCall.objects.filter(run=original).exclude(purpose="suggest")
    forced = ModelCall.objects.filter(run=replica)
    pairs = [(c.step, c.purpose, c.request_hash) for c in originals.order_by("started_at")]
    assert [(c.step, c.purpose, c.request_hash) for c in forced.order_by("started_at")] == pairs
    assert Message.objects.get(run=replica, role=Role.ASSISTANT).content == "42."


def test_a_recorded_call_whose_worker_died_is_served_again_not_interrupted(llm_server, user):
    original = record_note_turn(llm_server, user)
    recorded = ToolExecution.objects.get(run=original)
    llm_server.push(text_reply("Sure."))
    replica = replay(token_client(user), original)
    # A call of the replay left running by a worker that died long ago (record_note is
    # not idempotent: a live run would record it interrupted rather than run it twice).
    Run.objects.filter(pk=replica.pk).update(status=RunStatus.RUNNING, finished_at=None)
    call = {
        "id": "call_lost",
        "type": "function",
        "function": {"name": "record_note", "arguments": '{"title": "Milk", "body": "two litres"}'},
    }
    asking = Message.objects.create(
        conversation=replica.conversation,
        run=replica,
        position=10,
        role=Role.ASSISTANT,
        content=None,
        tool_calls=[call],
    )
    long_ago = timezone.now() - timedelta(minutes=10)
    lost = ToolExecution.objects.create(
        run=replica,
        message=asking,
        tool_call_id="call_lost",
        name="record_note",
        status=ExecutionStatus.RUNNING,
        started_at=long_ago,
        heartbeat_at=long_ago,
    )

    llm_server.push(text_reply("Noted."))  # the run the last call wakes composes its answer

    tool_call_execute(execution_id=lost.pk)

    lost.refresh_from_db()
    assert lost.status == ExecutionStatus.REPLAYED
    assert lost.replayed_from_id == recorded.pk
    assert Resource.objects.count() == 1
    assert wait_for_run(replica).status == RunStatus.COMPLETED


def parallel_calls_turn(llm_server, user, calls: int) -> Run:
    """A turn whose one step made `calls` equal calls at once (a note each time)."""
    conversation = ConversationFactory(owner=user, title="Notes")
    note = '{"title": "Milk", "body": "two litres"}'
    llm_server.push(tool_calls_reply([("record_note", note)] * calls), text_reply("Noted."))
    run = wait_for_run(run_start(conversation=conversation, content="note milk"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert ToolExecution.objects.filter(run=run, status=ExecutionStatus.SUCCEEDED).count() == calls
    return run


@pytest.mark.parametrize(
    ("recorded", "replayed"), [(1, 2), (2, 2), (6, 6), (3, 5)], ids=lambda n: str(n)
)
def test_equal_parallel_calls_are_each_served_a_recorded_call_of_their_own(
    llm_server, user, recorded, replayed
):
    original = parallel_calls_turn(llm_server, user, recorded)
    note = '{"body": "two litres", "title": "Milk"}'
    # The replay's calls run as tasks of their own, at once (the in-process pool's threads).
    llm_server.push(tool_calls_reply([("record_note", note)] * replayed), text_reply("Noted."))

    replica = replay(token_client(user), original)

    assert replica.status == RunStatus.COMPLETED, replica.error
    rows = ToolExecution.objects.filter(run=replica)
    served = [row.replayed_from_id for row in rows if row.status == ExecutionStatus.REPLAYED]
    # Each of the original's calls is served once: the calls beyond its count had no
    # recorded result (the original made fewer notes than the replay asked for).
    assert set(served) <= set(
        ToolExecution.objects.filter(run=original).values_list("pk", flat=True)
    )
    assert len(served) == min(recorded, replayed)
    assert len(set(served)) == len(served)
    assert rows.filter(status=ExecutionStatus.UNMATCHED).count() == max(0, replayed - recorded)
    assert Resource.objects.count() == recorded


def test_deleting_the_original_cancels_its_running_replay_first_and_leaves_nothing(
    llm_server, user, caplog, settings, monkeypatch, tmp_path
):
    from tests.chat.telemetry.test_metrics import TOKEN, scrape, value

    settings.TOOLCHAT_METRICS_TOKEN = TOKEN  # the replay's end is counted, as a cancel
    ledger = tmp_path / "ledger.txt"
    monkeypatch.setenv("TOOLCHAT_TEST_LEDGER", str(ledger))
    caplog.set_level(logging.INFO)
    original = record_note_turn(llm_server, user)
    api = token_client(user)
    # The replay runs its tools for real: two slow ones at once, as tasks of their own.
    llm_server.push(
        tool_calls_reply(
            [("slow_step", '{"label": "one", "seconds": 1}'), ("slow_step", '{"label": "two"}')]
        )
    )
    cancelled = "toolchat_replay_turn_duration_seconds_count"
    before = value(scrape(), cancelled, mode="two_pass", model=MODEL, outcome="cancelled")
    queued = api.post(
        f"/api/v1/runs/{original.pk}/replay/", {"model": MODEL, "tools": "live"}, format="json"
    )
    assert queued.status_code == 202
    replica = Run.objects.get(pk=queued.json()["id"])
    running = ToolExecution.objects.filter(run=replica, status=ExecutionStatus.RUNNING)
    wait_until(lambda: running.count() == 2, what="the replay's tools to run")

    deleted = api.delete(f"/api/v1/conversations/{original.conversation_id}/")

    assert deleted.status_code == 204
    after = value(scrape(), cancelled, mode="two_pass", model=MODEL, outcome="cancelled")
    assert after == before + 1
    # The tools end after their rows went: their tasks find nothing to store, and say so.
    gone = "its run is gone"
    wait_until(
        lambda: (
            ledger.read_text().count("end ") == 2
            and sum(gone in r.getMessage() for r in caplog.records) == 2
        ),
        what="the replay's tools to end",
    )
    assert not Run.objects.filter(pk__in=[original.pk, replica.pk]).exists()
    assert not Conversation.objects.filter(pk=replica.conversation_id).exists()
    for model in (Message, ModelCall, ToolExecution, RunEvent):
        assert not model.objects.exists(), model
    assert Resource.objects.count() == 1  # the user's note, made by the original, is theirs
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_failed_replay_says_why_in_its_comparison_and_its_list(llm_server, user, settings):
    original = record_note_turn(llm_server, user)
    settings.LLM_MAX_RETRIES = 0
    llm_server.push(error_reply(400, "context length exceeded"))
    api = token_client(user)
    replica = replay(api, original)
    assert replica.status == RunStatus.FAILED

    body = api.get(f"/api/v1/runs/{original.pk}/compare/?with={replica.pk}").json()
    mine, theirs = body["runs"]
    assert mine["error"] is None
    assert "context length exceeded" in theirs["error"]
    (listed,) = api.get(f"/api/v1/runs/{original.pk}/replays/").json()["results"]
    assert listed["error"] == theirs["error"]
    client = Client()
    client.force_login(UserFactory(is_staff=True))
    page = client.get(f"/audit/runs/{original.pk}/compare/{replica.pk}/").content.decode()
    assert "context length exceeded" in page
