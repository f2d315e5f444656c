"""A claim takes a run's lease and reads the run as the loop needs it, in one round trip."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from chat.engine.ledger import run_claim
from chat.models import Message, Role, Run, RunStatus
from tests.factories import ConversationFactory

pytestmark = pytest.mark.django_db


def queued_run(user, *, messages: int = 1, **fields):
    conversation = ConversationFactory(owner=user, system_prompt="Be brief.")
    run = Run.objects.create(conversation=conversation, mode=conversation.mode, **fields)
    for position in range(messages):
        Message.objects.create(
            conversation=conversation, run=run, position=position, role=Role.USER, content="hi"
        )
    return run


def fields_of(instance) -> dict:
    return {
        field.attname: getattr(instance, field.attname) for field in instance._meta.concrete_fields
    }


def test_a_queued_run_is_claimed_with_its_conversation_owner_and_last_position(
    user, django_assert_num_queries
):
    run = queued_run(user, messages=3)
    with django_assert_num_queries(1 if connection.vendor == "postgresql" else 2):
        claim = run_claim(run_id=run.pk)
    assert claim is not None
    assert claim.first
    stored = Run.objects.select_related("conversation__owner").get(pk=run.pk)
    assert stored.status == RunStatus.RUNNING
    assert stored.lease == claim.token
    with django_assert_num_queries(0):
        # Every field as the ORM reads it (UUIDs, datetimes, JSON), and the related rows.
        assert fields_of(claim.run) == fields_of(stored)
        assert fields_of(claim.run.conversation) == fields_of(stored.conversation)
        assert fields_of(claim.run.conversation.owner) == fields_of(stored.conversation.owner)
        assert claim.run.last_position == 2


def test_a_claim_of_a_run_with_a_live_lease_takes_nothing(user, django_assert_num_queries):
    run = queued_run(
        user, status=RunStatus.RUNNING, lease=uuid.uuid4(), heartbeat_at=timezone.now()
    )
    assert run_claim(run_id=run.pk) is None
    assert Run.objects.get(pk=run.pk).lease == run.lease


def test_a_stale_run_is_taken_over_and_read_as_a_new_one_is(user, settings):
    settings.TOOLCHAT_RESTART_GRACE_S = 0
    stale = timezone.now() - timedelta(minutes=5)
    run = queued_run(
        user,
        messages=2,
        status=RunStatus.RUNNING,
        lease=uuid.uuid4(),
        heartbeat_at=stale,
        started_at=stale,
        client_tools=[{"type": "function", "function": {"name": "x"}}],
    )
    claim = run_claim(run_id=run.pk)
    assert claim is not None
    assert not claim.first
    assert claim.run.started_at == stale  # kept from the first claim
    assert claim.run.client_tools == [{"type": "function", "function": {"name": "x"}}]
    assert claim.run.conversation.owner == user
    assert claim.run.last_position == 1


def test_a_run_of_a_conversation_without_messages_has_no_last_position(user):
    claim = run_claim(run_id=queued_run(user, messages=0).pk)
    assert claim is not None
    assert claim.run.last_position is None


def test_an_ended_or_unknown_run_is_not_claimed(user):
    assert run_claim(run_id=queued_run(user, status=RunStatus.COMPLETED).pk) is None
    assert run_claim(run_id=uuid.uuid4()) is None
