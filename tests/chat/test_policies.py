"""Tool policies: which rule decides a call, whom a rule covers, and what a turn does with it."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group

from chat.models import (
    ExecutionStatus,
    Message,
    PolicyDecision,
    Role,
    RunEvent,
    RunStatus,
    ToolExecution,
    ToolPolicy,
)
from chat.policies import Rule, ToolPolicies, policies_for, run_policies
from chat.selectors import history_for_model
from chat.services.runs import run_start
from tests.assertions import assert_valid_history, wait_until
from tests.chat.engine.conftest import wait_for_run
from tests.factories import UserFactory
from tests.llm_server import text_reply, tool_calls_reply

ALLOW, ASK, DENY = PolicyDecision.ALLOW, PolicyDecision.ASK, PolicyDecision.DENY


def rules(*specs: tuple[int, list[str], str]) -> tuple[Rule, ...]:
    return tuple(Rule.of(rule_id, tools, decision, "") for rule_id, tools, decision in specs)


@pytest.mark.parametrize(
    ("stored", "name", "decided"),
    [
        # deny wins over ask, ask over allow, whatever the order of the rules
        ([(1, ["delete_*"], "allow"), (2, ["delete_notes"], "deny")], "delete_notes", (DENY, 2)),
        ([(1, ["*"], "deny"), (2, ["delete_notes"], "allow")], "delete_notes", (DENY, 1)),
        ([(1, ["calc*"], "allow"), (2, ["*"], "ask")], "calculator", (ASK, 2)),
        # of equal rules, the oldest is the one named
        ([(3, ["calculator"], "ask"), (7, ["calc*"], "ask")], "calculator", (ASK, 3)),
        # globs are over the whole name, case-sensitive, and any pattern of a rule may match
        ([(1, ["tracker__*"], "deny")], "tracker__issues_close", (DENY, 1)),
        ([(1, ["tracker__*"], "deny")], "tracker", (ALLOW, None)),
        ([(1, ["Calculator"], "deny")], "calculator", (ALLOW, None)),
        ([(1, ["get_current_time", "calc?lator"], "deny")], "calculator", (DENY, 1)),
        # no rule: the tool's own requires_approval
        ([], "calculator", (ALLOW, None)),
        ([], "launch_rocket", (ASK, None)),
        ([(1, ["calculator"], "deny")], "launch_rocket", (ASK, None)),
        # an allow rule runs a tool that would ask, without asking
        ([(1, ["launch_*"], "allow")], "launch_rocket", (ALLOW, 1)),
    ],
)
def test_the_strongest_rule_that_covers_a_call_decides_it(stored, name, decided):
    arguments = {"launch_rocket": {"target": "x"}}.get(name, {"expression": "1"})
    verdict = ToolPolicies(rules(*stored)).verdict(name, arguments)
    assert (verdict.decision, verdict.rule) == decided


def test_with_the_default_deny_only_what_a_rule_allows_or_asks_for_runs():
    policies = ToolPolicies(rules((1, ["calculator"], "allow")), default_deny=True)
    assert policies.verdict("calculator", {}).decision == ALLOW
    refused = policies.verdict("get_current_time", {})
    assert (refused.decision, refused.rule) == (DENY, None)
    assert "TOOLCHAT_TOOLS_DEFAULT=deny" in refused.reason()
    assert policies.offers("calculator")
    assert not policies.offers("get_current_time")


def test_a_denied_tool_is_left_out_of_the_offer_and_the_rest_kept_in_order():
    tools = [{"type": "function", "function": {"name": n}} for n in ("a", "b_1", "b_2", "c")]
    policies = ToolPolicies(rules((1, ["b_*"], "deny"), (2, ["c"], "ask")))
    assert [t["function"]["name"] for t in policies.offered(tools)] == ["a", "c"]
    assert ToolPolicies().offered(tools) is tools  # nothing can deny: the same list


@pytest.mark.django_db
def test_a_person_is_covered_by_their_rules_their_groups_rules_and_everyones(
    django_assert_num_queries,
):
    alice, bob = UserFactory(), UserFactory()
    ops = Group.objects.create(name="ops")
    alice.groups.add(ops)
    everyone = ToolPolicy.objects.create(tools=["calculator"], decision="ask")
    hers = ToolPolicy.objects.create(tools=["delete_*"], decision="allow")
    hers.users.add(alice)
    group = ToolPolicy.objects.create(tools=["tracker__*"], decision="deny")
    group.groups.add(ops)
    his = ToolPolicy.objects.create(tools=["get_current_time"], decision="deny")
    his.users.add(bob)

    with django_assert_num_queries(1):
        covering = policies_for(alice.pk)
    assert [rule.id for rule in covering.rules] == [everyone.pk, hers.pk, group.pk]
    assert [rule.id for rule in policies_for(bob.pk).rules] == [everyone.pk, his.pk]
    # a rule for one person and a group covers the person and the group's members
    both = ToolPolicy.objects.create(tools=["x"], decision="deny")
    both.users.add(bob)
    both.groups.add(ops)
    assert both.pk in [rule.id for rule in policies_for(alice.pk).rules]
    assert both.pk in [rule.id for rule in policies_for(bob.pk).rules]
    assert both.pk not in [rule.id for rule in policies_for(UserFactory().pk).rules]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("queued", [True, False], ids=["queued", "taken over"])
def test_a_claim_reads_the_owners_rules_with_the_run_and_no_query_more(
    django_assert_num_queries, queued
):
    from chat.engine.ledger import run_claim
    from tests.factories import ConversationFactory, RunFactory

    alice = UserFactory()
    ops = Group.objects.create(name="ops")
    alice.groups.add(ops)
    group = ToolPolicy.objects.create(tools=["tracker__*"], decision="deny", note="not here")
    group.groups.add(ops)
    ToolPolicy.objects.create(tools=["calculator", "get_*"], decision="ask")
    ToolPolicy.objects.create(tools=["x"], decision="allow").users.add(UserFactory())
    run = RunFactory(conversation=ConversationFactory(owner=alice), status=RunStatus.QUEUED)
    if not queued:
        type(run).objects.filter(pk=run.pk).update(
            status=RunStatus.RUNNING, started_at=run.created_at
        )

    claim = run_claim(run_id=run.pk)
    assert claim is not None
    with django_assert_num_queries(0):
        claimed = run_policies(claim.run)
    assert claimed == policies_for(alice.pk)
    first = claimed.rules[0]
    assert (first.id, first.decision, first.note) == (group.pk, DENY, "not here")
    assert not claimed.offers("tracker__close")
    assert claimed.offers("calculator")


# --- what a turn does with them ---------------------------------------------------------


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("TOOLCHAT_TEST_LEDGER", str(path))
    return path


def launched(ledger) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


def offered(request: dict) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools") or []]


@pytest.mark.django_db(transaction=True)
def test_a_denied_tool_is_not_offered_and_a_call_to_it_anyway_is_refused_naming_the_rule(
    llm_server, conversation, ledger
):
    rule = ToolPolicy.objects.create(
        tools=["launch_*"], decision="deny", note="no launches from chat"
    )
    llm_server.push(
        tool_calls_reply([("launch_rocket", '{"target": "the moon"}')]),
        text_reply("I may not launch rockets here."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="launch it"))

    assert run.status == RunStatus.COMPLETED, run.error
    assert "launch_rocket" not in offered(llm_server.requests[0])
    assert "calculator" in offered(llm_server.requests[0])
    assert launched(ledger) == []  # it never ran
    execution = ToolExecution.objects.get(run=run)
    assert execution.status == ExecutionStatus.REJECTED
    assert execution.policy == {"decision": "deny", "rule": rule.pk}
    assert execution.decision == "denied"
    assert execution.approved_by is None
    assert execution.decided_at is None
    # the model read the refusal, with the rule and its note, and answered
    tool_message = next(m for m in llm_server.requests[1]["messages"] if m["role"] == "tool")
    error = json.loads(tool_message["content"])["error"]
    assert f"tool policy rule {rule.pk}: no launches from chat" in error
    assert "did not run" in error
    answer = Message.objects.filter(run=run, role=Role.ASSISTANT).last()
    assert answer.content == "I may not launch rockets here."
    types = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert "tool_call.started" not in types
    assert "tool_call.approval_requested" not in types
    assert types.index("tool_call.completed") < types.index("tools.ended")
    assert types[-1] == "run.completed"
    assert_valid_history(history_for_model(conversation=conversation))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("inline", [True, False])
def test_in_a_step_with_a_denied_call_the_allowed_one_runs_and_the_turn_answers(
    llm_server, conversation, ledger, settings, inline
):
    settings.TOOLCHAT_INLINE_TOOL_CALLS = inline
    ToolPolicy.objects.create(tools=["launch_rocket"], decision="deny")
    llm_server.push(
        tool_calls_reply(
            [("launch_rocket", '{"target": "mars"}'), ("calculator", '{"expression": "6*7"}')]
        ),
        text_reply("42; the launch is not allowed."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="launch and compute"))

    assert run.status == RunStatus.COMPLETED, run.error
    assert launched(ledger) == []
    statuses = dict(ToolExecution.objects.filter(run=run).values_list("name", "status"))
    assert statuses == {"launch_rocket": "rejected", "calculator": "succeeded"}
    decisions = dict(ToolExecution.objects.filter(run=run).values_list("name", "policy_decision"))
    assert decisions == {"launch_rocket": "deny", "calculator": "allow"}
    sent = llm_server.requests[1]["messages"]
    asked = next(m for m in sent if m.get("tool_calls"))
    answers = [m for m in sent if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in answers] == [c["id"] for c in asked["tool_calls"]]
    assert "not allowed here" in answers[0]["content"]
    assert "42" in answers[1]["content"]
    assert RunEvent.objects.filter(run=run, type="tools.ended").count() == 1
    assert_valid_history(history_for_model(conversation=conversation))


@pytest.mark.django_db(transaction=True)
def test_an_allow_rule_runs_a_tool_that_would_ask_without_asking(llm_server, conversation, ledger):
    rule = ToolPolicy.objects.create(tools=["launch_rocket"], decision="allow")
    rule.users.add(conversation.owner)
    llm_server.push(
        tool_calls_reply([("launch_rocket", '{"target": "the moon"}')]),
        text_reply("Launched."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="launch it"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert launched(ledger) == ["launched the moon"]
    execution = ToolExecution.objects.get(run=run)
    assert execution.policy == {"decision": "allow", "rule": rule.pk}
    assert not RunEvent.objects.filter(run=run, type="tool_call.approval_requested").exists()


@pytest.mark.django_db(transaction=True)
def test_an_ask_rule_holds_a_free_tool_for_the_owners_decision(llm_server, conversation):
    rule = ToolPolicy.objects.create(tools=["calculator"], decision="ask")
    llm_server.push(tool_calls_reply([("calculator", '{"expression": "6*7"}')]))
    run = run_start(conversation=conversation, content="6*7?")
    wait_until(
        lambda: type(run).objects.get(pk=run.pk).status == RunStatus.AWAITING_APPROVAL,
        what="the run to wait for approval",
    )
    execution = ToolExecution.objects.get(run=run)
    assert execution.status == ExecutionStatus.AWAITING_APPROVAL
    assert execution.policy == {"decision": "ask", "rule": rule.pk}


@pytest.mark.django_db(transaction=True)
def test_another_persons_rule_does_not_cover_this_one(llm_server, conversation, ledger):
    theirs = ToolPolicy.objects.create(tools=["calculator"], decision="deny")
    theirs.users.add(UserFactory())
    llm_server.push(tool_calls_reply([("calculator", '{"expression": "6*7"}')]), text_reply("42."))
    run = wait_for_run(run_start(conversation=conversation, content="6*7?"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert "calculator" in offered(llm_server.requests[0])
    execution = ToolExecution.objects.get(run=run)
    assert (execution.status, execution.policy) == (
        ExecutionStatus.SUCCEEDED,
        {"decision": "allow", "rule": None},
    )


@pytest.mark.django_db(transaction=True)
def test_with_the_default_deny_a_turn_offers_only_what_a_rule_allows(
    llm_server, conversation, settings
):
    settings.TOOLCHAT_TOOLS_DEFAULT = "deny"
    ToolPolicy.objects.create(tools=["calculator"], decision="allow")
    llm_server.push(
        tool_calls_reply([("get_current_time", "{}")]), text_reply("I cannot tell the time.")
    )
    run = wait_for_run(run_start(conversation=conversation, content="what time is it?"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert offered(llm_server.requests[0]) == ["calculator"]
    execution = ToolExecution.objects.get(run=run)
    assert execution.status == ExecutionStatus.REJECTED
    assert execution.policy == {"decision": "deny", "rule": None}
