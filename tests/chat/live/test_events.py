"""event_publish numbers events per conversation, stores them, and sends them after commit."""

from __future__ import annotations

import threading

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection, transaction

from chat.live.event_types import MessageDelta, RunStarted
from chat.live.events import conversation_group, event_envelope, event_publish, run_end_group
from chat.models import RunEvent
from chat.selectors import run_event_list
from tests.factories import ConversationFactory, RunFactory, event_make


@pytest.mark.django_db
def test_events_are_numbered_per_conversation(conversation):
    run = RunFactory(conversation=conversation)
    other_run = RunFactory(conversation=ConversationFactory())
    first = event_publish(run=run, event=RunStarted(mode="loop"))
    event_publish(run=other_run, event=RunStarted(mode="loop"))
    second = event_publish(run=run, event=MessageDelta(message_id="m", text="hi"))
    assert (first.seq, second.seq) == (1, 2)
    assert [e.seq for e in run_event_list(run=run)] == [1, 2]
    assert [e.seq for e in run_event_list(run=run, after=1)] == [2]
    envelope = event_envelope(second)
    assert envelope["type"] == "message.delta"
    assert envelope["run_id"] == str(run.id)
    assert envelope["data"] == {"message_id": "m", "text": "hi"}
    assert envelope["ts"].endswith("Z")


@pytest.mark.django_db(transaction=True)
def test_events_reach_the_channel_layer_only_after_commit(conversation):
    run = RunFactory(conversation=conversation)
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(conversation_group(conversation.id), channel)
    with transaction.atomic():
        event_publish(run=run, event=RunStarted(mode="loop"))
        # Nothing is sent while the transaction may still roll back.
        with pytest.raises(TimeoutError):
            async_to_sync(_receive)(layer, channel, 0.05)
    message = async_to_sync(_receive)(layer, channel, 1)
    assert message["event"]["seq"] == 1
    assert message["event"]["type"] == "run.started"


@pytest.mark.django_db(transaction=True)
def test_a_runs_end_group_hears_only_its_terminal_event(conversation):
    run = RunFactory(conversation=conversation)
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(run_end_group(run.pk), channel)
    event_publish(run=run, event=RunStarted(mode="two_pass"))
    event_publish(run=run, event=event_make("run.failed"))
    message = async_to_sync(_receive)(layer, channel, 1)
    assert (message["event"]["type"], message["event"]["seq"]) == ("run.failed", 2)
    with pytest.raises(TimeoutError):
        async_to_sync(_receive)(layer, channel, 0.05)


async def _receive(layer, channel, timeout):
    import asyncio

    return await asyncio.wait_for(layer.receive(channel), timeout)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_publishers_never_share_a_seq(conversation):
    run = RunFactory(conversation=conversation)

    def publish_many():
        try:
            for _ in range(25):
                event_publish(run=run, event=event_make("tool.progress"))
        finally:
            connection.close()

    threads = [threading.Thread(target=publish_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seqs = sorted(RunEvent.objects.filter(run=run).values_list("seq", flat=True))
    assert seqs == list(range(1, 101))
