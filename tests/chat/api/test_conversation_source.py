"""Where a conversation came from (`source`), and the list kept to some sources."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from chat.models import Source
from tests.chat.api.conftest import token_client
from tests.factories import ConversationFactory


@pytest.mark.django_db
def test_the_source_says_who_made_it_and_the_list_keeps_the_sources_asked(user):
    page = APIClient()
    page.force_login(user)
    made = page.post("/api/v1/conversations/", {"title": "From the page"}, format="json").json()
    assert made["source"] == "chat"
    api = token_client(user)
    assert api.post("/api/v1/conversations/", {}, format="json").json()["source"] == "api"
    ConversationFactory(owner=user, title="From a client", source=Source.V1)
    ConversationFactory(owner=user, title="A task", source=Source.TASK)

    def titles(query: str = "") -> set[str]:
        return {c["title"] for c in api.get("/api/v1/conversations/" + query).json()["results"]}

    assert titles() == {"From the page", "", "From a client"}  # never the task
    assert titles("?source=chat,api") == {"From the page", ""}
    assert titles("?source=v1") == {"From a client"}
    response = api.get("/api/v1/conversations/?source=task")
    assert response.status_code == 400
    assert response.json()["field"] == "source"
