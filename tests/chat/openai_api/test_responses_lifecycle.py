"""A stored response's input items, listed as OpenAI pages them; a response cancelled; one in
the background, polled.

The openai SDK's `responses.input_items.list`, `responses.cancel` and
`create(background=True)` on a real uvicorn, with the scripted model server;
the query's refusals in-process.
"""

from __future__ import annotations

import pytest
from openai import ConflictError, NotFoundError, OpenAI
from rest_framework.authtoken.models import Token

from chat.models import Run, RunStatus
from tests.assertions import wait_until
from tests.factories import UserFactory
from tests.llm_server import text_reply

MODEL = "openai/test-model"
URL = "/v1/responses"


def _client(base_url: str) -> OpenAI:
    token = Token.objects.create(user=UserFactory()).key
    return OpenAI(base_url=f"{base_url}/v1", api_key=token, max_retries=0)


@pytest.mark.postgres
def test_input_items_list_the_request_newest_first_and_page(scripted_server, llm_server):
    client, other = _client(scripted_server), _client(scripted_server)
    llm_server.push(text_reply("Paris."), text_reply("Lyon."))
    given = [
        {"type": "message", "role": "user", "content": "Capital of France?"},
        {"type": "message", "role": "assistant", "content": "Paris."},
        {"role": "user", "content": [{"type": "input_text", "text": "And its second city?"}]},
    ]
    response = client.responses.create(model=MODEL, input=given, instructions="Be brief.")
    listed = client.responses.input_items.list(response.id)
    assert [item.type for item in listed.data] == ["message"] * 3
    texts = [item.content[0].text for item in listed.data]
    assert texts == ["And its second city?", "Paris.", "Capital of France?"]  # newest first
    assert listed.has_more is False
    assert [item.content[0].type for item in listed.data] == [
        "input_text",
        "output_text",
        "input_text",
    ]
    first = client.responses.input_items.list(response.id, order="asc", limit=2)
    assert [item.content[0].text for item in first.data] == ["Capital of France?", "Paris."]
    assert first.has_more is True
    rest = client.responses.input_items.list(response.id, order="asc", after=first.last_id)
    assert [item.content[0].text for item in rest.data] == ["And its second city?"]
    assert rest.has_more is False
    # Every page, through the SDK's own paging.
    assert len(list(client.responses.input_items.list(response.id, limit=1))) == 3

    follow = client.responses.create(
        model=MODEL, input="And Spain's?", previous_response_id=response.id
    )
    (item,) = client.responses.input_items.list(follow.id).data
    assert (item.role, item.content[0].text) == ("user", "And Spain's?")
    with pytest.raises(NotFoundError):
        other.responses.input_items.list(response.id)


@pytest.mark.postgres
def test_an_in_flight_response_is_cancelled_with_its_run(scripted_server, llm_server):
    client = _client(scripted_server)
    llm_server.push(text_reply("A long answer.", delay_s=30))
    stream = client.responses.create(model=MODEL, input="Take your time.", stream=True)
    events = iter(stream)
    created = next(events)
    assert created.type == "response.created"
    cancelled = client.responses.cancel(created.response.id)
    assert cancelled.status == "cancelled"
    assert cancelled.id == created.response.id
    rest = list(events)
    assert rest[-1].type == "response.failed"
    assert rest[-1].response.status == "cancelled"
    assert client.responses.retrieve(cancelled.id).status == "cancelled"
    run = Run.objects.get(pk=created.response.id.removeprefix("resp_"))
    assert run.status == RunStatus.CANCELLED
    with pytest.raises(ConflictError):
        client.responses.cancel(cancelled.id)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=x", "limit"),
        ("order=up", "order"),
        ("after=nope", "after"),
    ],
)
def test_a_bad_input_items_query_is_a_400_naming_it(v1, llm_server, query, param):
    llm_server.push(text_reply("Hi."))
    body = v1.post(URL, {"model": MODEL, "input": "Hi"}, format="json").json()
    response = v1.get(f"{URL}/{body['id']}/input_items?{query}")
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["param"] == param


@pytest.mark.django_db(transaction=True)
def test_a_completed_response_cannot_be_cancelled_and_another_users_is_a_404(
    v1, other_v1, llm_server
):
    llm_server.push(text_reply("Hi."))
    body = v1.post(URL, {"model": MODEL, "input": "Hi"}, format="json").json()
    assert other_v1.post(f"{URL}/{body['id']}/cancel").status_code == 404
    response = v1.post(f"{URL}/{body['id']}/cancel")
    assert response.status_code == 409, response.json()
    assert response.json()["error"]["type"] == "conflict_error"
    assert v1.get(f"{URL}/{body['id']}").json()["status"] == "completed"


@pytest.mark.postgres
def test_a_background_response_answers_at_once_and_is_polled_to_its_end(
    scripted_server, llm_server
):
    client = _client(scripted_server)
    llm_server.push(
        text_reply("Done in the background.", delay_s=1.5), text_reply("Never sent.", delay_s=30)
    )
    started = client.responses.create(model=MODEL, input="Work on it.", background=True)
    assert started.status in ("queued", "in_progress")
    assert started.background is True
    assert started.output == []
    wait_until(lambda: client.responses.retrieve(started.id).status == "completed", timeout=20)
    done = client.responses.retrieve(started.id)
    assert done.output_text == "Done in the background."
    assert done.background is True

    later = client.responses.create(
        model=MODEL, input="And more.", background=True, previous_response_id=done.id
    )
    cancelled = client.responses.cancel(later.id)
    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(later.id).status == "cancelled"
