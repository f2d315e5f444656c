"""The audit writes every time one way: the date, the exact time and the zone."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client

from chat.models import Message, Role, Run, RunStatus
from tests.factories import ConversationFactory, RunFactory, UserFactory

EXACT = r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{6})? UTC"


@pytest.mark.django_db
def test_the_audits_pages_write_times_with_their_zone():
    client = Client()
    client.force_login(UserFactory(is_staff=True))
    conversation = ConversationFactory()
    run = RunFactory(conversation=conversation, status=RunStatus.COMPLETED)
    Run.objects.filter(pk=run.pk).update(
        started_at=run.created_at + timedelta(milliseconds=5),
        finished_at=run.created_at + timedelta(milliseconds=400),
        latency_ms=400,
    )
    Message.objects.create(
        conversation=conversation, run=run, position=0, role=Role.ASSISTANT, content="hi"
    )
    page = client.get(f"/audit/runs/{run.pk}/").content.decode()
    for label in ("Started", "Finished"):
        shown = re.search(rf"<dt>{label}</dt><dd>([^<]*)</dd>", page)
        assert shown is not None
        assert re.fullmatch(EXACT, shown.group(1)), shown.group(1)
    # The timeline's messages: no bare "16:04:38.207138".
    assert not re.search(r"· \d{2}:\d{2}:\d{2}\.\d{6}<", page)
    assert re.search(r"· \d{2}:\d{2}:\d{2}\.\d{6} UTC<", page)
    listing = client.get(f"/audit/conversations/{conversation.pk}/").content.decode()
    assert re.search(rf"<dt>Created</dt><dd>{EXACT}</dd>", listing)
    started = re.search(r'data-label="Started"><a [^>]*>([^<]*)</a>', listing)
    assert started is not None
    assert re.fullmatch(EXACT, started.group(1)), started.group(1)
