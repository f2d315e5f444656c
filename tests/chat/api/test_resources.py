"""A resource card's link: the record, for its owner only."""

from __future__ import annotations

import pytest

from tests.factories import ResourceFactory


@pytest.mark.django_db
def test_the_owner_reads_a_resource_and_nobody_else_does(api, other_api, user):
    note = ResourceFactory(owner=user, kind="note", title="Boiler serviced", data={"body": "x"})

    response = api.get(f"/api/v1/resources/{note.pk}/")

    assert response.status_code == 200
    body = response.json()
    assert (body["kind"], body["title"], body["data"]) == ("note", "Boiler serviced", {"body": "x"})
    assert other_api.get(f"/api/v1/resources/{note.pk}/").status_code == 404
    missing = api.get("/api/v1/resources/00000000-0000-0000-0000-000000000000/")
    assert missing.status_code == 404
    assert missing.json()["code"] == "not_found"
