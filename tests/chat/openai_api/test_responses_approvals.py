"""Approvals through /v1/responses: an `mcp_approval_request` item, answered by an
`mcp_approval_response` in the next request, decided through the durable approval.

The openai SDK on a real uvicorn for the round trips (plain and streamed);
the in-process client for the refusals. What the model was sent is read at
the scripted server; what was decided, from the audit rows.
"""

from __future__ import annotations

import json
import uuid

import pytest
from openai import ConflictError, OpenAI
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from chat.models import Conversation, ExecutionStatus, Run, RunStatus, ToolExecution
from chat.selectors import history_for_model
from tests.assertions import assert_valid_history
from tests.factories import ResourceFactory, UserFactory
from tests.llm_server import text_reply, tool_calls_reply
from tests.stack import wait_for_run
from tools.models import Resource

MODEL = "openai/test-model"
URL = "/v1/responses"
DELETE_TWO = json.dumps({"note_ids": [str(uuid.uuid4()), str(uuid.uuid4())]})


def _client(base_url: str) -> tuple[OpenAI, object]:
    user = UserFactory()
    token = Token.objects.create(user=user).key
    return OpenAI(base_url=f"{base_url}/v1", api_key=token, max_retries=0), user


def _answer(request_id: str, approve: bool, **fields) -> dict:
    return {
        "type": "mcp_approval_response",
        "approval_request_id": request_id,
        "approve": approve,
        **fields,
    }


@pytest.mark.postgres
def test_an_approval_request_approved_in_the_next_request_runs_the_call_and_answers(
    scripted_server, llm_server
):
    client, user = _client(scripted_server)
    notes = json.dumps({"note_ids": [str(ResourceFactory(owner=user).pk) for _ in range(2)]})
    llm_server.push(
        tool_calls_reply([("delete_notes", notes, "call_delete")]),
        text_reply("Both notes are deleted."),
    )
    first = client.responses.create(model=MODEL, input="Delete my two old notes.")
    assert first.status == "completed"
    (request,) = first.output
    execution = ToolExecution.objects.get(tool_call_id="call_delete")
    assert request.type == "mcp_approval_request"
    assert (request.id, request.server_label, request.name) == (
        f"mcpr_{execution.pk.hex}",
        "toolchat",
        "delete_notes",
    )
    assert json.loads(request.arguments) == json.loads(notes)
    assert execution.status == ExecutionStatus.AWAITING_APPROVAL
    assert len(llm_server.requests) == 1  # the model waits too

    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[_answer(request.id, True)],
    )
    assert second.id != first.id
    assert second.status == "completed"
    assert second.previous_response_id == first.id
    call, _message = second.output
    assert (call.type, call.name, call.status) == ("mcp_call", "delete_notes", "completed")
    assert call.approval_request_id == request.id
    assert second.output_text == "Both notes are deleted."
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.SUCCEEDED
    assert execution.approved_by_id == user.pk
    assert not Resource.objects.filter(owner=user).exists()
    # The model was sent the call's result before it answered.
    assert llm_server.requests[1]["messages"][-1]["role"] == "tool"
    # Each response keeps its own part of the turn.
    assert [item.type for item in client.responses.retrieve(first.id).output] == [
        "mcp_approval_request"
    ]
    assert client.responses.retrieve(second.id).output_text == "Both notes are deleted."
    # The same decision again: the call does not wait any more.
    with pytest.raises(ConflictError, match="not waiting"):
        client.responses.create(
            model=MODEL, previous_response_id=second.id, input=[_answer(request.id, True)]
        )
    (conversation,) = Conversation.objects.filter(owner=user)
    assert_valid_history(history_for_model(conversation=conversation))

    # The conversation goes on from the part.
    llm_server.push(text_reply("You have no notes left."))
    third = client.responses.create(
        model=MODEL, previous_response_id=second.id, input="Any notes left?"
    )
    assert third.output_text == "You have no notes left."


@pytest.mark.postgres
def test_a_rejection_streamed_tells_the_model_and_the_reason(scripted_server, llm_server):
    client, _ = _client(scripted_server)
    llm_server.push(
        tool_calls_reply([("delete_notes", DELETE_TWO, "call_delete")]),
        text_reply("I left your notes alone."),
    )
    with client.responses.stream(model=MODEL, input="Delete my two old notes.") as stream:
        events = list(stream)
        first = stream.get_final_response()
    added = [e.item.type for e in events if e.type == "response.output_item.added"]
    assert added == ["mcp_approval_request"]
    (request,) = first.output
    with client.responses.stream(
        model=MODEL,
        previous_response_id=first.id,
        input=[_answer(request.id, False, reason="Keep them.")],
    ) as stream:
        events = list(stream)
        second = stream.get_final_response()
    assert [event.sequence_number for event in events] == list(range(len(events)))
    call, _ = second.output
    assert (call.type, call.status, call.approval_request_id) == ("mcp_call", "failed", request.id)
    assert second.output_text == "I left your notes alone."
    execution = ToolExecution.objects.get(tool_call_id="call_delete")
    assert (execution.status, execution.decision_reason) == (ExecutionStatus.REJECTED, "Keep them.")
    assert "Keep them." in llm_server.requests[1]["messages"][-1]["content"]


def _text(response: dict) -> str:
    """The response's answer, as the openai SDK's `output_text` reads it."""
    message = response["output"][-1]
    return "".join(part["text"] for part in message["content"] if part["type"] == "output_text")


def _waiting(v1, llm_server) -> tuple[dict, str]:
    llm_server.push(tool_calls_reply([("delete_notes", DELETE_TWO, "call_delete")]))
    first = v1.post(URL, {"model": MODEL, "input": "Delete two notes."}, format="json").json()
    (request,) = first["output"]
    return first, request["id"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("fields", "status", "param"),
    [
        ({"input": [_answer("mcpr_nonesuch", True)]}, 400, "input[0].approval_request_id"),
        (
            {"input": [_answer(f"mcpr_{uuid.uuid4().hex}", True)]},
            400,
            "input[0].approval_request_id",
        ),
        (
            {"input": [{"type": "mcp_approval_response", "approval_request_id": "REQ"}]},
            400,
            "input[0].approve",
        ),
        ({"input": [_answer("REQ", True), {"role": "user", "content": "hi"}]}, 400, "input[1]"),
        # Without previous_response_id: a stateless history's closing answers.
        (
            {"input": [_answer(f"mcpr_{uuid.uuid4().hex}", True)], "previous_response_id": None},
            404,
            "input[0].approval_request_id",
        ),
        (
            {"input": [_answer("mcpr_nonesuch", True)], "previous_response_id": None},
            400,
            "input[0].approval_request_id",
        ),
        (
            {
                "input": [_answer("REQ", True)],
                "previous_response_id": None,
                "conversation": "conv_" + uuid.uuid4().hex,
            },
            404,
            "conversation",
        ),
    ],
)
def test_a_decision_that_cannot_be_made_is_refused_and_decides_nothing(
    v1, llm_server, fields, status, param
):
    first, request_id = _waiting(v1, llm_server)
    body = {"model": MODEL, "previous_response_id": first["id"], **fields}
    body["input"] = [
        {**item, "approval_request_id": request_id}
        if item.get("approval_request_id") == "REQ"
        else item
        for item in body["input"]
    ]
    if body["previous_response_id"] is None:
        del body["previous_response_id"]
    response = v1.post(URL, body, format="json")
    assert response.status_code == status, response.json()
    assert response.json()["error"]["param"] == param
    assert ToolExecution.objects.get().status == ExecutionStatus.AWAITING_APPROVAL
    assert Run.objects.get().status == RunStatus.AWAITING_APPROVAL


@pytest.mark.django_db(transaction=True)
def test_a_call_decided_on_the_rest_api_meanwhile_is_a_409(v1, user, llm_server):
    first, request_id = _waiting(v1, llm_server)
    llm_server.push(text_reply("Deleted."))
    execution = ToolExecution.objects.get()
    rest = APIClient()
    rest.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get(user=user).key}")
    approved = rest.post(f"/api/v1/tool-executions/{execution.pk}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.json()
    response = v1.post(
        URL,
        {
            "model": MODEL,
            "previous_response_id": first["id"],
            "input": [_answer(request_id, False)],
        },
        format="json",
    )
    assert response.status_code == 409, response.json()
    error = response.json()["error"]
    assert error["type"] == "conflict_error"
    assert request_id in error["message"]
    # The decision on the REST API stands: the run goes on to its answer (and the
    # test ends after it, not while the run's thread still writes).
    run = wait_for_run(execution.run)
    assert run.status == RunStatus.COMPLETED
    assert ToolExecution.objects.get().approved_by_id == user.pk


@pytest.mark.django_db(transaction=True)
def test_another_users_approval_request_is_not_theirs_to_decide(v1, other_v1, llm_server):
    first, request_id = _waiting(v1, llm_server)
    response = other_v1.post(
        URL,
        {"model": MODEL, "previous_response_id": first["id"], "input": [_answer(request_id, True)]},
        format="json",
    )
    assert response.status_code == 404, response.json()
    assert ToolExecution.objects.get().status == ExecutionStatus.AWAITING_APPROVAL


@pytest.mark.postgres
def test_the_same_input_sent_again_after_a_pause_is_a_new_conversation_not_a_retry(
    scripted_server, llm_server
):
    """A response that ended with approval requests was answered, as a text is: the
    same input again, without previous_response_id, is another request of its own,
    whether the call still waits or was decided and answered meanwhile."""
    client, user = _client(scripted_server)
    llm_server.push(tool_calls_reply([("delete_notes", DELETE_TWO)]))
    first = client.responses.create(model=MODEL, input="Delete my two old notes.")
    assert [item.type for item in first.output] == ["mcp_approval_request"]

    llm_server.push(tool_calls_reply([("delete_notes", DELETE_TWO)]))
    second = client.responses.create(model=MODEL, input="Delete my two old notes.")
    assert [item.type for item in second.output] == ["mcp_approval_request"]
    assert Conversation.objects.filter(owner=user).count() == 2

    waiting = ToolExecution.objects.get(run_id=uuid.UUID(first.id.removeprefix("resp_")))
    llm_server.push(text_reply("Both notes are deleted."))
    decided = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[_answer(f"mcpr_{waiting.pk.hex}", True)],
    )
    assert decided.output_text == "Both notes are deleted."
    llm_server.push(text_reply("A third conversation."))
    third = client.responses.create(model=MODEL, input="Delete my two old notes.")
    assert Conversation.objects.filter(owner=user).count() == 3
    assert third.id not in (first.id, second.id)
    # The first conversation's answer stands: nothing was regenerated.
    assert client.responses.retrieve(decided.id).output_text == "Both notes are deleted."
    assert not Run.objects.filter(conversation__owner=user, status=RunStatus.CANCELLED).exists()


@pytest.mark.django_db(transaction=True)
def test_a_stateless_history_that_ends_with_the_answer_decides_the_call(v1, user, llm_server):
    """The agents SDK's default: no previous_response_id, the whole history resent."""
    first, request_id = _waiting(v1, llm_server)
    (request,) = first["output"]
    execution = ToolExecution.objects.get()
    history = [{"role": "user", "content": "Delete two notes."}, request]
    toolchat = {"type": "mcp", "server_label": "toolchat", "require_approval": "always"}
    llm_server.push(text_reply("Deleted."))
    body = {"model": MODEL, "input": [*history, _answer(request_id, True)], "tools": [toolchat]}
    second = v1.post(URL, body, format="json")
    assert second.status_code == 200, second.json()
    assert second.json()["id"] == f"resp_{execution.run_id.hex}_1"
    assert second.json()["previous_response_id"] is None
    assert _text(second.json()) == "Deleted."
    execution.refresh_from_db()
    # Approved by the user, it ran (the notes it names do not exist).
    assert (execution.status, execution.approved_by_id) == (ExecutionStatus.FAILED, user.pk)
    # The same answer again: the call does not wait any more, as with previous_response_id.
    again = v1.post(URL, body, format="json")
    assert again.status_code == 409, again.json()
    assert request_id in again.json()["error"]["message"]
    # The history resent with a new message: the answer is history, the conversation goes on.
    llm_server.push(text_reply("None left."))
    shown = [*body["input"], *second.json()["output"], {"role": "user", "content": "Any left?"}]
    third = v1.post(URL, {"model": MODEL, "input": shown}, format="json")
    assert _text(third.json()) == "None left.", third.json()
    assert Conversation.objects.filter(owner=user).count() == 1


@pytest.mark.django_db(transaction=True)
def test_another_users_call_named_in_a_stateless_history_is_a_404(v1, other_v1, llm_server):
    _first, request_id = _waiting(v1, llm_server)
    response = other_v1.post(
        URL,
        {"model": MODEL, "input": [{"role": "user", "content": "Hi"}, _answer(request_id, True)]},
        format="json",
    )
    assert response.status_code == 404, response.json()
    assert response.json()["error"]["param"] == "input[1].approval_request_id"
    assert ToolExecution.objects.get().status == ExecutionStatus.AWAITING_APPROVAL


@pytest.mark.django_db(transaction=True)
def test_a_turn_not_stored_is_decided_statelessly_and_stays_unretrievable(v1, llm_server):
    llm_server.push(tool_calls_reply([("delete_notes", DELETE_TWO, "call_delete")]))
    body = {"model": MODEL, "input": "Delete two notes.", "store": False}
    first = v1.post(URL, body, format="json").json()
    (request,) = first["output"]
    llm_server.push(text_reply("Deleted."))
    items = [
        {"role": "user", "content": "Delete two notes."},
        request,
        _answer(request["id"], True),
    ]
    second = v1.post(URL, {**body, "input": items}, format="json")
    assert second.status_code == 200, second.json()
    assert (_text(second.json()), second.json()["store"]) == ("Deleted.", False)
    assert second.json()["model"] == first["model"]
    assert v1.get(f"{URL}/{first['id']}").status_code == 404
    assert v1.get(f"{URL}/{second.json()['id']}").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_an_answer_sent_to_another_conversation_is_a_400(v1, llm_server):
    _first, request_id = _waiting(v1, llm_server)
    other = v1.post("/v1/conversations", {}, format="json").json()["id"]
    body = {"model": MODEL, "conversation": other, "input": [_answer(request_id, True)]}
    response = v1.post(URL, body, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["param"] == "input[0].approval_request_id"
    assert ToolExecution.objects.get().status == ExecutionStatus.AWAITING_APPROVAL
