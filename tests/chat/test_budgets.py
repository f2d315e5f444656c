"""Budgets: a post over a hard limit is refused with nothing stored, runs reserve what they may
use, a run over a per-run limit ends there with a whole history, and soft limits warn."""

from __future__ import annotations

import datetime
import json
import threading
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group
from django.db import connection, connections

from chat.budget_use import period_bounds
from chat.exceptions import BudgetExceeded
from chat.models import (
    BudgetLimit,
    Message,
    Run,
    RunEvent,
    RunStatus,
)
from chat.selectors import history_for_model
from chat.services.policies import policies_dump, policies_replace
from chat.services.runs import run_start
from chat.usage import usage_report
from tests.assertions import assert_valid_history
from tests.chat.engine.conftest import wait_for_run
from tests.factories import ConversationFactory, ModelCallFactory, RunFactory, UserFactory
from tests.llm_server import text_reply, tool_calls_reply


def spent(user, tokens: int, cost: str | None = None, **fields):
    """A finished run of the user whose one model call used `tokens` (and cost `cost`)."""
    run = RunFactory(conversation=ConversationFactory(owner=user), status=RunStatus.COMPLETED)
    return ModelCallFactory(
        run=run,
        prompt_tokens=tokens - tokens // 4,
        completion_tokens=tokens // 4,
        cost_usd=None if cost is None else Decimal(cost),
        **fields,
    )


@pytest.mark.django_db
def test_a_post_over_a_hard_daily_limit_is_refused_naming_it_with_nothing_stored(user):
    limit = BudgetLimit.objects.create(period="day", tokens=1000, note="trial accounts")
    limit.users.add(user)
    spent(user, 1000)
    conversation = ConversationFactory(owner=user)

    with pytest.raises(BudgetExceeded) as refused:
        run_start(conversation=conversation, content="one more")

    error = refused.value
    assert error.code == "budget_exceeded"
    assert "daily limit of 1,000 tokens" in error.message
    assert "(1,000 used)" in error.message
    assert "trial accounts" in error.message
    stated = error.details["limit"]
    assert (stated["id"], stated["figure"], stated["tokens"], stated["used"]) == (
        limit.pk,
        "tokens",
        1000,
        1000,
    )
    midnight = period_bounds("day", datetime.datetime.now(datetime.UTC))[1]
    assert stated["resets_at"] == midnight.isoformat().replace("+00:00", "Z")
    assert 0 < error.details["retry_after"] <= 86401
    assert not Run.objects.filter(conversation=conversation).exists()
    assert not Message.objects.filter(conversation=conversation).exists()


@pytest.mark.django_db
def test_yesterdays_use_and_other_peoples_do_not_count(user, other_user):
    BudgetLimit.objects.create(period="day", tokens=1000)
    old = spent(user, 5000)
    old.started_at -= datetime.timedelta(days=1, hours=1)
    old.save()
    spent(other_user, 5000)
    run = run_start(conversation=ConversationFactory(owner=user), content="hello")
    assert run.budget["reserved"]["tokens"] == 4000


@pytest.mark.django_db
def test_a_monthly_dollar_limit_counts_priced_calls_and_a_group_limit_covers_its_members(user):
    interns = Group.objects.create(name="interns")
    user.groups.add(interns)
    limit = BudgetLimit.objects.create(period="month", cost_usd=Decimal("2.50"))
    limit.groups.add(interns)
    spent(user, 100, cost="2.4")
    spent(user, 100)  # no price: tokens, no dollars
    run_start(conversation=ConversationFactory(owner=user), content="fits")
    spent(user, 100, cost="0.2")
    with pytest.raises(BudgetExceeded) as refused:
        run_start(conversation=ConversationFactory(owner=user), content="over")
    assert "monthly limit of US$2.50" in refused.value.message
    # someone outside the group is not covered
    other = UserFactory()
    spent(other, 100, cost="9")
    assert run_start(conversation=ConversationFactory(owner=other), content="free").budget is None


@pytest.mark.django_db
def test_dollars_that_add_up_to_the_cap_reach_it_on_either_database(user):
    # As floats, 0.7 + 0.1 is 0.7999999999999999: SQLite sums floats.
    BudgetLimit.objects.create(period="day", cost_usd=Decimal("0.80"))
    spent(user, 10, cost="0.7")
    spent(user, 10, cost="0.1")
    with pytest.raises(BudgetExceeded) as refused:
        run_start(conversation=ConversationFactory(owner=user), content="over")
    assert refused.value.details["limit"]["used"] == 0.8


@pytest.mark.django_db
def test_runs_in_flight_reserve_their_share_so_the_limit_holds_before_they_use_it(user, settings):
    settings.TOOLCHAT_BUDGET_RESERVE_TOKENS = 1000
    BudgetLimit.objects.create(period="day", tokens=3000)
    # Three runs queued (nothing ran: their reservations are all that counts), the fourth refused.
    started = [
        run_start(conversation=ConversationFactory(owner=user), content=f"q{n}") for n in range(3)
    ]
    assert [run.budget["reserved"]["tokens"] for run in started] == [1000, 1000, 1000]
    with pytest.raises(BudgetExceeded) as refused:
        run_start(conversation=ConversationFactory(owner=user), content="q4")
    assert refused.value.details["limit"]["used"] == 3000
    # A run that ended counts what it used, not what it reserved.
    ended = started[0]
    ModelCallFactory(run=ended, prompt_tokens=150, completion_tokens=50)
    Run.objects.filter(pk=ended.pk).update(status=RunStatus.COMPLETED)
    run_start(conversation=ConversationFactory(owner=user), content="q5")
    # ...and one still running counts the larger of its reservation and its use.
    ModelCallFactory(run=started[1], prompt_tokens=1500, completion_tokens=500)
    report = usage_report(user.pk, "day")
    assert report["tokens"] == 2200
    assert report["reserved"]["tokens"] == 2000  # started[2], q5, and nothing left of started[1]
    assert report["limits"][0]["used_tokens"] == 4200


@pytest.mark.django_db
def test_a_per_run_hard_token_cap_is_what_a_run_reserves(user, settings):
    settings.TOOLCHAT_BUDGET_RESERVE_TOKENS = 1000
    BudgetLimit.objects.create(period="run", tokens=300, model_calls=4)
    BudgetLimit.objects.create(period="run", tokens=600, hard=False)
    run = run_start(conversation=ConversationFactory(owner=user), content="hi")
    assert run.budget["reserved"]["tokens"] == 300
    assert [limit["tokens"] for limit in run.budget["limits"]] == [300, 600]


@pytest.mark.django_db
def test_a_soft_limit_reached_lets_the_post_through_with_a_warning(user):
    limit = BudgetLimit.objects.create(period="day", tokens=100, hard=False, note="heads up")
    spent(user, 150)
    run = run_start(conversation=ConversationFactory(owner=user), content="still fine")
    warning = RunEvent.objects.get(run=run, type="budget.warning").data
    assert (warning["limit"]["id"], warning["limit"]["hard"]) == (limit.pk, False)
    assert warning["limit"]["used"] == 150
    assert "daily limit of 100 tokens" in warning["message"]
    assert warning["message"].endswith("this is a warning.")


@pytest.mark.django_db
def test_with_no_limit_a_post_reads_nothing_more_and_with_limits_what_they_need(
    user, django_assert_num_queries
):
    def post(conversation) -> Run:
        return run_start(conversation=conversation, content="hello")

    post(ConversationFactory(owner=user))  # the first post's one-time reads
    fresh = [ConversationFactory(owner=user) for _ in range(3)]
    queries = POST_QUERIES[connection.vendor]
    with django_assert_num_queries(queries):
        post(fresh[0])
    BudgetLimit.objects.create(period="run", model_calls=5)
    with django_assert_num_queries(queries):  # the limits come with the conversation's lock
        post(fresh[1])
    BudgetLimit.objects.create(period="day", tokens=10**9)
    with django_assert_num_queries(queries + 1):  # what the user used, and holds in flight
        post(fresh[2])


# A post's queries with no budget limit, as before budgets existed: the conversation's
# lock, the run and the message, the user message's event (its number and its row), and
# on SQLite the savepoint and its release (PostgreSQL numbers and stores the event in one).
POST_QUERIES = {"postgresql": 6, "sqlite": 7}


# --- per-run limits, in a real turn ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_run_over_its_model_call_limit_ends_before_the_next_call_with_a_whole_history(
    llm_server, conversation
):
    BudgetLimit.objects.create(period="run", model_calls=1, note="one call per turn")
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "6*7"}')]),
        text_reply("never asked"),
    )
    run = wait_for_run(run_start(conversation=conversation, content="6*7?"))

    assert run.status == RunStatus.FAILED
    assert "per-run limit of 1 model calls" in run.error
    assert "one call per turn" in run.error
    assert "the run stopped there" in run.error
    assert len(llm_server.requests) == 1
    failed = RunEvent.objects.get(run=run, type="run.failed").data
    assert failed["error"] == run.error
    assert_valid_history(history_for_model(conversation=conversation))


@pytest.mark.django_db(transaction=True)
def test_a_soft_per_run_limit_warns_once_and_the_run_goes_on(llm_server, conversation):
    limit = BudgetLimit.objects.create(period="run", tokens=10, hard=False)
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "1+1"}')]),
        tool_calls_reply([("calculator", '{"expression": "2+2"}')]),
        text_reply("2 and 4"),
    )
    run = wait_for_run(run_start(conversation=conversation, content="sums"))

    assert run.status == RunStatus.COMPLETED, run.error
    warnings = RunEvent.objects.filter(run=run, type="budget.warning")
    assert [event.data["limit"]["id"] for event in warnings] == [limit.pk]
    assert warnings[0].data["limit"]["used"] == 18  # the first call's 11 in and 7 out
    assert Run.objects.get(pk=run.pk).budget["warned"] == [limit.pk]


# --- under concurrency ----------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_fifty_posts_at_once_with_room_for_ten_start_ten_runs(llm_server, settings):
    """50 posts from one person on 50 conversations, each on its own connection, at once."""
    settings.TOOLCHAT_BUDGET_RESERVE_TOKENS = 1000
    # Every run holds its model call open until all posts are answered: a run that ended
    # early would free its reservation and let a later post in.
    answer = threading.Event()
    llm_server.push(*[text_reply("slow", gate=answer) for _ in range(60)])
    user = UserFactory()
    BudgetLimit.objects.create(period="day", tokens=10_000)
    conversations = [ConversationFactory(owner=user) for _ in range(50)]
    barrier = threading.Barrier(50)
    outcomes: list[str] = []

    def post(conversation):
        barrier.wait()
        try:
            run_start(conversation=conversation, content="go")
            outcomes.append("started")
        except BudgetExceeded:
            outcomes.append("refused")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post, args=(c,)) for c in conversations]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(outcomes).count("started") == 10, outcomes
    assert outcomes.count("refused") == 40
    runs = list(Run.objects.filter(conversation__owner=user))
    assert len(runs) == 10
    # The refused left nothing: one user message per run, no other.
    assert Message.objects.filter(conversation__owner=user).count() == 10
    answer.set()
    # Each answers; then each counts what it used, not its reservation.
    assert all(wait_for_run(run, timeout=30).status == RunStatus.COMPLETED for run in runs)
    assert usage_report(user.pk, "day")["limits"][0]["used_tokens"] == 10 * 18


# --- the policies file ----------------------------------------------------------------


@pytest.mark.django_db
def test_the_policies_file_replaces_the_limits_whole_or_not_at_all(user):
    Group.objects.create(name="ops")
    kept = BudgetLimit.objects.create(period="day", tokens=5)
    bad = {
        "limits": [
            {"period": "day", "tokens": 100},
            {"period": "month", "model_calls": 3},
        ]
    }
    from chat.exceptions import InvalidInput

    with pytest.raises(InvalidInput) as refused:
        policies_replace(document=bad)
    assert refused.value.field == "limits[1].model_calls"
    assert "Only a run's limit caps model calls" in refused.value.message
    assert list(BudgetLimit.objects.values_list("pk", flat=True)) == [kept.pk]

    good = {
        "limits": [
            {"users": [user.username], "period": "day", "tokens": 100, "cost_usd": 1.5},
            {"groups": ["ops"], "period": "run", "seconds": 60, "hard": False, "note": "n"},
        ]
    }
    loaded = policies_replace(document=good)
    assert loaded.rules is None
    assert len(loaded.limits) == 2
    dumped = policies_dump()["limits"]
    assert dumped[0] == {
        "users": [user.username],
        "groups": [],
        "period": "day",
        "tokens": 100,
        "cost_usd": 1.5,
        "model_calls": None,
        "tool_calls": None,
        "seconds": None,
        "hard": True,
        "note": "",
    }
    assert (dumped[1]["seconds"], dumped[1]["hard"], dumped[1]["groups"]) == (60, False, ["ops"])
    # A dump loads back as it was.
    policies_replace(document=json.loads(json.dumps({"limits": dumped})))
    assert policies_dump()["limits"] == dumped


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"period": "day"}, "tokens"),
        ({"period": "week", "tokens": 5}, "period"),
        ({"period": "day", "tokens": 0}, "tokens"),
        ({"period": "day", "tokens": "5"}, "tokens"),
        ({"period": "day", "cost_usd": -1}, "cost_usd"),
        ({"period": "day", "tokens": 5, "hard": "yes"}, "hard"),
        ({"period": "day", "tokens": 5, "users": ["nobody"]}, "users"),
        ({"period": "day", "tokens": 5, "limit": 3}, "limit"),
        ({"period": "day", "seconds": 5}, "seconds"),
    ],
)
def test_a_bad_limit_is_refused_naming_its_key(entry, field):
    from chat.exceptions import InvalidInput

    with pytest.raises(InvalidInput) as refused:
        policies_replace(document={"limits": [entry]})
    assert refused.value.field == f"limits[0].{field}"
    assert not BudgetLimit.objects.exists()


def _posts_at_once(urls: list[str], token: str) -> list[int]:
    """POST "go" to each of `urls` at once, each on its own connection; the status codes."""
    import urllib.error
    import urllib.request

    barrier = threading.Barrier(len(urls))
    codes: list[int] = []

    def post(url: str) -> None:
        request = urllib.request.Request(
            url,
            data=b'{"content": "go"}',
            headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        )
        barrier.wait()
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                codes.append(response.status)
        except urllib.error.HTTPError as error:
            codes.append(error.code)

    threads = [threading.Thread(target=post, args=(url,)) for url in urls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return codes


@pytest.mark.postgres
def test_posts_through_two_web_processes_at_once_share_one_budget(
    scripted_server, asgi_server_session, llm_server, tmp_path, settings
):
    """50 posts over REST, split between two uvicorn processes that run their own turns."""
    from rest_framework.authtoken.models import Token

    from tests.plugins.servers import AsgiServer, server_settle

    second = AsgiServer(
        env={
            **asgi_server_session.env,
            "LLM_PROVIDER": "openai",
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": llm_server.base_url,
            "LLM_MODEL": "test-model",
            "TOOLCHAT_BUDGET_RESERVE_TOKENS": "1000",
        },
        log_path=tmp_path / "uvicorn-second.log",
    )
    second.start()
    answer = threading.Event()
    llm_server.push(*[text_reply("slow", gate=answer) for _ in range(60)])
    user = UserFactory()
    token = Token.objects.create(user=user).key
    # The first process reserves its default (4,000 tokens), the second 1,000: each post is
    # let in while what the runs before it hold is under 10,000, and refused once it is not.
    BudgetLimit.objects.create(period="day", tokens=10_000)
    conversations = [ConversationFactory(owner=user) for _ in range(50)]
    servers = [scripted_server, second.base_url]
    urls = [
        f"{servers[n % 2]}/api/v1/conversations/{conversation.pk}/messages/"
        for n, conversation in enumerate(conversations)
    ]
    try:
        codes = _posts_at_once(urls, token)
        assert sorted(set(codes)) == [202, 429], codes
        runs = list(Run.objects.filter(conversation__owner=user).order_by("created_at"))
        held = [run.budget["reserved"]["tokens"] for run in runs]
        # In the order they were let in (one at a time, under the owner's lock), each saw
        # the runs before it hold less than the limit; and then it was reached.
        assert all(sum(held[:n]) < 10_000 for n in range(len(held))), held
        assert sum(held) >= 10_000, held
        assert codes.count(202) == len(runs)
        assert Message.objects.filter(conversation__owner=user).count() == len(runs)
        assert {run.budget["reserved"]["tokens"] for run in runs} <= {1000, 4000}
        answer.set()
        server_settle(timeout=30)
    finally:
        answer.set()
        second.stop()


@pytest.mark.postgres
def test_two_web_processes_and_two_workers_overrun_a_budget_by_the_runs_in_flight_at_most(
    celery_env, start_worker, llm_server, tmp_path
):
    """Posts through two uvicorn processes, runs on two Celery workers, each run past its
    reservation: the budget is overrun by what the runs let in before it was reached used,
    and by nothing more; once they settle, every post is refused."""
    from rest_framework.authtoken.models import Token

    from tests.plugins.servers import AsgiServer

    env = {**celery_env["env"], "TOOLCHAT_BUDGET_RESERVE_TOKENS": "1000"}
    servers = [AsgiServer(env=env, log_path=tmp_path / f"uvicorn-{n}.log") for n in (1, 2)]
    for server in servers:
        server.start()
    start_worker("w1")
    start_worker("w2")
    answer = threading.Event()
    # Each answer uses 1,500 tokens, past the 1,000 its run reserved.
    llm_server.push(
        *[
            text_reply("costly", gate=answer, prompt_tokens=1200, completion_tokens=300)
            for _ in range(100)
        ]
    )
    user = UserFactory()
    token = Token.objects.create(user=user).key
    BudgetLimit.objects.create(period="day", tokens=10_000)
    conversations = [ConversationFactory(owner=user) for _ in range(100)]

    def urls(batch) -> list[str]:
        return [
            f"{servers[n % 2].base_url}/api/v1/conversations/{conversation.pk}/messages/"
            for n, conversation in enumerate(batch)
        ]

    try:
        codes = _posts_at_once(urls(conversations[:50]), token)
        assert codes.count(202) == 10, codes  # ten reservations of 1,000 reach 10,000
        assert codes.count(429) == 40, codes
        answer.set()
        runs = list(Run.objects.filter(conversation__owner=user))
        assert len(runs) == 10
        assert all(wait_for_run(run, timeout=60).status == RunStatus.COMPLETED for run in runs)
        # Overrun by the ten in flight when it was reached, by what each used past its
        # reservation (500 tokens), and no more.
        report = usage_report(user.pk, "day")
        assert report["tokens"] == 10 * 1500
        assert report["reserved"]["tokens"] == 0
        # Settled: what was used counts, and it is past the limit: every post is refused.
        codes = _posts_at_once(urls(conversations[50:]), token)
        assert codes == [429] * 50, codes
        assert Run.objects.filter(conversation__owner=user).count() == 10
        workers = {
            worker
            for worker in ("w1", "w2")
            if "chat.run_execute" in (celery_env["logs"] / f"{worker}.log").read_text()
        }
        assert workers, "no worker ran a run"
    finally:
        answer.set()
        for server in servers:
            server.stop()
