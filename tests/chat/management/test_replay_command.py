"""`manage.py replay`: many stored runs replayed on two models through the queue, and the report.

The runs are the engine's own, against the scripted server; its model answers
by the model asked: `test-model` as the original did, `other-model` with
another tool call and another answer.
"""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import CommandError, call_command

from chat.models import Run, RunStatus
from chat.services.runs import run_start
from tests.factories import ConversationFactory, UserFactory
from tests.llm_server import Reply, text_reply, tool_calls_reply
from tests.stack import wait_for_run
from tools.models import Resource

pytestmark = pytest.mark.django_db(transaction=True)


def answer_by_model(body: dict) -> Reply:
    """What each model says: a note first (the original's call, or another), then text."""
    has_result = any(m["role"] == "tool" for m in body["messages"])
    if body["model"] == "other-model":
        if "tools" in body and not has_result:
            return tool_calls_reply([("calculator", '{"expression": "1+1"}')])
        return text_reply("Something else entirely.")
    if "tools" in body and not has_result:
        return tool_calls_reply([("record_note", '{"title": "Milk", "body": "two litres"}')])
    return text_reply("I noted it.")


def test_replay_many_runs_on_two_models_and_report(llm_server, settings, tmp_path):
    settings.LLM_ALLOWED_MODELS = ["other-model"]
    llm_server.responder = answer_by_model
    user = UserFactory()
    originals = [
        wait_for_run(run_start(conversation=ConversationFactory(owner=user), content=f"note {i}"))
        for i in range(3)
    ]
    assert all(run.status == RunStatus.COMPLETED for run in originals)
    assert Resource.objects.count() == 3
    out, err = io.StringIO(), io.StringIO()
    path = tmp_path / "report.csv"

    call_command(
        "replay",
        "--model=openai/test-model",
        "--model=openai/other-model",
        "--concurrency=2",
        f"--csv={path}",
        stdout=out,
        stderr=err,
    )

    assert Resource.objects.count() == 3  # recorded tools: nothing ran
    assert Run.objects.filter(replay_of__isnull=False).count() == 6
    assert "6/6" in err.getvalue()  # the progress bar's end
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 6
    by_model = {}
    for row in rows:
        by_model.setdefault(row["model"], []).append(row)
    same = [r["same_tool_calls"] for r in by_model["openai/test-model"]]
    other = [r["same_tool_calls"] for r in by_model["openai/other-model"]]
    assert same == ["True"] * 3
    assert other == ["False"] * 3
    assert {r["answer_similarity"] for r in by_model["openai/test-model"]} == {"1.0"}
    assert all(float(r["answer_similarity"]) < 0.5 for r in by_model["openai/other-model"])
    assert all(r["status"] == "completed" for r in rows)
    table = out.getvalue()
    assert "openai/test-model" in table
    assert "3/3" in table  # same tools for three replays of three
    assert f"CSV: {path}" in table
    json.dumps(rows)  # plain values only


def test_a_forced_batch_counts_the_steps_that_agree(llm_server, settings, tmp_path):
    settings.LLM_ALLOWED_MODELS = ["other-model"]
    llm_server.responder = answer_by_model
    user = UserFactory()
    original = wait_for_run(run_start(conversation=ConversationFactory(owner=user), content="hi"))
    out = io.StringIO()

    call_command(
        "replay",
        f"--run={original.pk}",
        "--model=openai/other-model",
        "--replay=forced",
        f"--csv={tmp_path / 'r.csv'}",
        stdout=out,
        stderr=io.StringIO(),
    )

    (row,) = csv.DictReader((tmp_path / "r.csv").open())
    assert (row["mode"], row["steps_same"], row["steps"]) == ("forced", "0", "1")
    assert "0/1 steps" in out.getvalue()


def test_bad_options_are_refused_before_anything_is_replayed(llm_server, tmp_path):
    user = UserFactory()
    llm_server.push(text_reply("Hello."))
    wait_for_run(run_start(conversation=ConversationFactory(owner=user), content="hi"))
    with pytest.raises(CommandError, match="not offered"):
        call_command(
            "replay", "--model=nowhere/nothing", stdout=io.StringIO(), stderr=io.StringIO()
        )
    with pytest.raises(CommandError, match="ISO 8601"):
        call_command(
            "replay", "--model=openai/test-model", "--since=yesterday", stderr=io.StringIO()
        )
    with pytest.raises(CommandError, match="nothing to replay"):
        call_command(
            "replay",
            "--model=openai/test-model",
            "--since=2999-01-01T00:00:00Z",
            stderr=io.StringIO(),
        )
    assert not Run.objects.filter(replay_of__isnull=False).exists()


@pytest.mark.postgres
@pytest.mark.redis
def test_a_hundred_runs_on_two_models_on_a_celery_worker_with_postgresql(
    llm_server, settings, celery_env, start_worker, tmp_path
):
    settings.LLM_ALLOWED_MODELS = ["other-model"]
    celery_env["env"]["LLM_ALLOWED_MODELS"] = "other-model"
    llm_server.responder = answer_by_model
    start_worker("w1")
    user = UserFactory()
    originals = [
        run_start(conversation=ConversationFactory(owner=user), content=f"note {i}")
        for i in range(100)
    ]
    assert all(wait_for_run(run, 60).status == RunStatus.COMPLETED for run in originals)
    out = io.StringIO()

    call_command(
        "replay",
        "--model=openai/test-model",
        "--model=openai/other-model",
        "--concurrency=8",
        f"--csv={tmp_path / 'r.csv'}",
        stdout=out,
        stderr=io.StringIO(),
    )

    rows = list(csv.DictReader((tmp_path / "r.csv").open()))
    assert len(rows) == 200
    assert all(row["status"] == "completed" for row in rows)
    assert Resource.objects.count() == 100  # the replays made no note
    assert "100/100" in out.getvalue()  # test-model called the same tools every time
