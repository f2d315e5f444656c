"""Writes that start replays (chat/services/replays.py): a batch starts whole or not at all."""

from __future__ import annotations

import pytest

from chat.exceptions import Conflict
from chat.models import Conversation, Message, Run, RunStatus
from chat.selectors import runs_to_replay
from chat.services.replays import runs_replay
from tests.factories import ConversationFactory, finished_run

pytestmark = pytest.mark.django_db

MODEL = "openai/test-model"


@pytest.fixture
def openai_models(settings):
    settings.LLM_PROVIDER = "openai"
    settings.OPENAI_API_KEY = "sk-test"
    settings.LLM_MODEL = "test-model"


def unanswerable(owner) -> Run:
    """A completed run whose user message is gone: there is no turn to replay."""
    run = finished_run(ConversationFactory(owner=owner))
    Run.objects.filter(pk=run.pk).update(trigger_message=None)
    run.refresh_from_db()
    return run


@pytest.mark.parametrize("kind", ["no user message", "a replay", "still running"])
def test_a_batch_with_a_run_that_cannot_be_replayed_starts_nothing(
    user, openai_models, django_capture_on_commit_callbacks, kind
):
    good = finished_run(ConversationFactory(owner=user))
    if kind == "no user message":
        bad = unanswerable(user)
    elif kind == "a replay":
        bad = finished_run(ConversationFactory(owner=user), replay_of=good)
    else:
        bad = finished_run(ConversationFactory(owner=user))
        Run.objects.filter(pk=bad.pk).update(status=RunStatus.RUNNING)
        bad.refresh_from_db()
    before = (Run.objects.count(), Conversation.objects.count(), Message.objects.count())

    with django_capture_on_commit_callbacks() as queued, pytest.raises(Conflict) as refused:
        runs_replay(runs=[good, bad], models=[MODEL], tools="recorded", replay="free")

    assert str(bad.pk) in refused.value.message
    assert "nothing was started" in refused.value.message
    assert (Run.objects.count(), Conversation.objects.count(), Message.objects.count()) == before
    assert queued == []


def test_the_runs_to_replay_leave_out_those_that_cannot_be_replayed(user):
    good = finished_run(ConversationFactory(owner=user))
    unanswerable(user)
    finished_run(ConversationFactory(owner=user), replay_of=good)

    assert runs_to_replay() == [good]
