"""/v1/chat/completions and /v1/models in-process: threading, client tools, errors, what is stored."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from rest_framework.throttling import ScopedRateThrottle

from chat.models import (
    Conversation,
    ExecutionStatus,
    Message,
    Mode,
    ModelCall,
    Run,
    RunStatus,
    ToolExecution,
)
from chat.selectors import history_for_model
from tests.assertions import assert_valid_history
from tests.chat.api.conftest import token_client
from tests.llm_server import error_reply, text_reply, tool_calls_reply

MODEL = "openai/test-model"
URL = "/v1/chat/completions"
CLIENT_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look an order up in the client's own system.",
        "parameters": {
            "type": "object",
            "properties": {"order": {"type": "string"}},
            "required": ["order"],
        },
    },
}


def post(client, messages, **fields):
    return client.post(URL, {"model": MODEL, "messages": messages} | fields, format="json")


async def _body(response) -> bytes:
    """A streamed answer's bytes (its iterator is asynchronous)."""
    return b"".join([part async for part in response.streaming_content])


def error_of(response):
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


# --- models ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_models_lists_what_the_rest_api_lists_in_openai_shape(v1, user, llm_server):
    body = v1.get("/v1/models").json()
    assert body["object"] == "list"
    rest = token_client(user).get("/api/v1/models/").json()["results"]
    assert [m["id"] for m in body["data"]] == [m["id"] for m in rest]
    assert {"id": MODEL, "object": "model", "created": 0, "owned_by": "openai"} in body["data"]
    assert v1.get(f"/v1/models/{MODEL}").json()["id"] == MODEL
    response = v1.get("/v1/models/openai/none-such")
    assert response.status_code == 404
    assert error_of(response)["code"] == "model_not_found"


@pytest.mark.django_db(transaction=True)
def test_a_model_id_after_openai_slash_names_the_same_model(v1, llm_server):
    """What the agents SDK and LiteLLM take as one string: `openai/` then the id."""
    aliased = f"openai/{MODEL}"
    assert v1.get(f"/v1/models/{aliased}").json()["id"] == aliased
    llm_server.push(text_reply("Hello."))
    response = post(v1, [{"role": "user", "content": "Hi"}], model=aliased)
    assert response.status_code == 200, response.json()
    assert response.json()["model"] == MODEL
    assert llm_server.requests[0]["model"] == "test-model"
    response = post(v1, [{"role": "user", "content": "Hi"}], model="openai/none-such")
    assert (response.status_code, error_of(response)["code"]) == (404, "model_not_found")


@pytest.mark.django_db
@pytest.mark.parametrize("authorization", [None, "Bearer wrong", "Basic dXNlcjpwYXNz"])
def test_without_a_valid_token_the_answer_is_openais_401(client, authorization, llm_server):
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    response = client.post(
        URL,
        json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}),
        content_type="application/json",
        **headers,
    )
    assert response.status_code == 401
    error = error_of(response)
    assert (error["type"], error["code"]) == ("authentication_error", "invalid_api_key")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert not Conversation.objects.exists()


@pytest.mark.django_db
def test_an_unknown_path_under_v1_is_a_json_404(v1):
    response = v1.get("/v1/completions-of-another-kind")
    assert response.status_code == 404
    assert error_of(response)["type"] == "not_found_error"


# --- a turn with toolchat's own tools -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_completion_is_a_stored_audited_turn_with_server_side_tools(v1, user, llm_server):
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "12*7"}', "call_a")]),
        text_reply("12 times 7 is 84."),
    )
    response = post(
        v1,
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "12*7?"}],
        temperature=0.2,
        max_tokens=300,
        user="customer-7",
        metadata={"ticket": "T-1"},
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == MODEL
    (choice,) = body["choices"]
    assert choice["message"]["content"] == "12 times 7 is 84."
    assert choice["finish_reason"] == "stop"
    assert "tool_calls" not in choice["message"]  # toolchat's own calls stay on the server
    # Usage sums the turn's two model calls.
    run = Run.objects.get(pk=response["X-Toolchat-Run-Id"])
    calls = ModelCall.objects.filter(run=run)
    assert calls.count() == 2
    assert body["usage"]["prompt_tokens"] == sum(c.prompt_tokens for c in calls)
    assert body["usage"]["total_tokens"] == sum(
        c.prompt_tokens + c.completion_tokens for c in calls
    )

    conversation = Conversation.objects.get(owner=user)
    assert str(conversation.pk) == response["X-Toolchat-Conversation-Id"]
    assert (conversation.mode, conversation.model) == (Mode.LOOP, MODEL)
    assert conversation.system_prompt == "Be brief."
    assert run.client_options == {
        "temperature": 0.2,
        "max_tokens": 300,
        "user": "customer-7",
        "metadata": {"ticket": "T-1"},
    }
    (execution,) = ToolExecution.objects.filter(run=run)
    assert (execution.name, execution.status) == ("calculator", ExecutionStatus.SUCCEEDED)
    assert_valid_history(history_for_model(conversation=conversation))
    # The model was sent the client's system prompt and options.
    first = llm_server.requests[0]
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}
    assert (first["temperature"], first.get("max_completion_tokens") or first["max_tokens"]) == (
        0.2,
        300,
    )


@pytest.mark.django_db(transaction=True)
def test_a_follow_up_continues_the_same_conversation_whatever_the_client_reformats(
    v1, user, llm_server
):
    llm_server.push(text_reply("Paris."), text_reply("About 2.1 million."))
    first = [{"role": "user", "content": "Capital of France?"}]
    answer = post(v1, first).json()["choices"][0]["message"]
    # The client resends the history its own way: content as parts, whitespace changed,
    # a `name`, the assistant's refusal field dropped.
    again = [
        {"role": "user", "content": [{"type": "text", "text": "Capital of  France?\n"}]},
        {"role": "assistant", "content": answer["content"], "name": "bot"},
        {"role": "user", "content": "How many people live there?"},
    ]
    response = post(v1, again)
    assert response.status_code == 200, response.json()
    assert Conversation.objects.filter(owner=user).count() == 1
    conversation = Conversation.objects.get(owner=user)
    stored = [(m.role, m.content) for m in Message.objects.filter(conversation=conversation)]
    assert stored == [
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
        ("user", "How many people live there?"),
        ("assistant", "About 2.1 million."),
    ]
    # Only the new message was stored; the model saw the whole history once.
    assert [m["content"] for m in llm_server.requests[1]["messages"][1:]] == [
        "Capital of France?",
        "Paris.",
        "How many people live there?",
    ]


@pytest.mark.django_db(transaction=True)
def test_another_history_or_another_user_starts_a_new_conversation(
    v1, other_v1, user, other_user, llm_server
):
    llm_server.push(text_reply("Paris."), text_reply("Rome."), text_reply("Paris, again."))
    post(v1, [{"role": "user", "content": "Capital of France?"}])
    # An edited earlier answer is not the conversation's history: a new one.
    edited = [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Lyon."},
        {"role": "user", "content": "And of Italy?"},
    ]
    assert post(v1, edited).status_code == 200
    assert Conversation.objects.filter(owner=user).count() == 2
    # The imported past is stored as the client sent it.
    imported = Conversation.objects.filter(owner=user).order_by("created_at").last()
    assert [m.content for m in Message.objects.filter(conversation=imported)] == [
        "Capital of France?",
        "Lyon.",
        "And of Italy?",
        "Rome.",
    ]
    # The same messages from another user continue nothing of the first user's.
    same = [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "Sure?"},
    ]
    assert post(other_v1, same).status_code == 200
    assert Conversation.objects.filter(owner=other_user).count() == 1
    assert Conversation.objects.filter(owner=user).count() == 2


@pytest.mark.django_db(transaction=True)
def test_the_mode_is_loop_unless_named_and_a_follow_up_keeps_the_conversations_own(
    v1, user, llm_server
):
    """Clients have no mode to send: a conversation's mode, once set (here in the chat
    page), is not put back to the default by each request that names none."""
    llm_server.push(text_reply("Paris."), text_reply("2.1 million."), text_reply("Sure."))
    first = [{"role": "user", "content": "Capital of France?"}]
    answer = post(v1, first).json()["choices"][0]["message"]["content"]
    conversation = Conversation.objects.get(owner=user)
    assert conversation.mode == Mode.LOOP
    page = token_client(user)
    changed = page.patch(
        f"/api/v1/conversations/{conversation.pk}/", {"mode": "two_pass"}, format="json"
    )
    assert changed.status_code == 200, changed.json()
    history = [*first, {"role": "assistant", "content": answer}]
    follow_up = [*history, {"role": "user", "content": "How many live there?"}]
    assert post(v1, follow_up).status_code == 200
    conversation.refresh_from_db()
    assert conversation.mode == Mode.TWO_PASS
    assert Run.objects.filter(conversation=conversation).latest("created_at").mode == Mode.TWO_PASS
    # Named, it is the request's.
    named = [*follow_up, {"role": "assistant", "content": "2.1 million."}]
    named.append({"role": "user", "content": "Sure?"})
    response = post(v1, named, metadata={"toolchat_mode": "direct"})
    assert response.status_code == 200, response.json()
    conversation.refresh_from_db()
    assert conversation.mode == Mode.DIRECT


@pytest.mark.django_db(transaction=True)
def test_a_header_names_the_conversation_as_open_webui_sends_it(v1, user, llm_server):
    llm_server.push(text_reply("One."), text_reply("Two."))
    headers = {"HTTP_X_OPENWEBUI_CHAT_ID": "owui-chat-1"}
    v1.post(
        URL,
        {"model": MODEL, "messages": [{"role": "user", "content": "a"}]},
        format="json",
        **headers,
    )
    # Open WebUI may resend its history with its own edits: the header still decides.
    messages = [
        {"role": "user", "content": "a (edited)"},
        {"role": "assistant", "content": "One."},
        {"role": "user", "content": "b"},
    ]
    response = v1.post(URL, {"model": MODEL, "messages": messages}, format="json", **headers)
    assert response.status_code == 200
    conversation = Conversation.objects.get(owner=user)
    assert conversation.client_ref == "owui-chat-1"
    assert [m.content for m in Message.objects.filter(conversation=conversation)] == [
        "a",
        "One.",
        "b",
        "Two.",
    ]


# --- the client's own tools ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_client_tools_round_trip_beside_server_tools(v1, user, llm_server):
    llm_server.push(
        tool_calls_reply(
            [
                ("calculator", '{"expression": "2*21"}', "call_ours"),
                ("lookup_order", '{"order": "A-42"}', "call_theirs"),
            ]
        ),
        text_reply("Order A-42 ships 42 items tomorrow."),
    )
    messages = [{"role": "user", "content": "How many items in order A-42, times 2*21?"}]
    response = post(v1, messages, tools=[CLIENT_TOOL])
    assert response.status_code == 200, response.json()
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"] == [
        {
            "id": "call_theirs",
            "type": "function",
            "function": {"name": "lookup_order", "arguments": '{"order": "A-42"}'},
        }
    ]
    first_run = Run.objects.get(pk=response["X-Toolchat-Run-Id"])
    assert first_run.status == RunStatus.COMPLETED
    assert first_run.client_tools == [CLIENT_TOOL]
    statuses = dict(ToolExecution.objects.values_list("name", "status"))
    assert statuses == {"calculator": "succeeded", "lookup_order": "client"}
    # Toolchat offered the model its own tools and the client's.
    offered = {t["function"]["name"] for t in llm_server.requests[0]["tools"]}
    assert {"calculator", "lookup_order"} <= offered

    messages += [
        choice["message"],
        {"role": "tool", "tool_call_id": "call_theirs", "content": '{"items": 42}'},
    ]
    response = post(v1, messages, tools=[CLIENT_TOOL])
    assert response.status_code == 200, response.json()
    assert response.json()["choices"][0]["message"]["content"] == (
        "Order A-42 ships 42 items tomorrow."
    )
    conversation = Conversation.objects.get(owner=user)
    execution = ToolExecution.objects.get(name="lookup_order")
    assert (execution.status, execution.content) == (ExecutionStatus.SUCCEEDED, '{"items": 42}')
    assert_valid_history(history_for_model(conversation=conversation))
    # The model read both results, each answering its own call.
    sent = llm_server.requests[1]["messages"]
    answers = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    assert answers["call_theirs"] == '{"items": 42}'
    assert "42" in answers["call_ours"]


@pytest.mark.django_db(transaction=True)
def test_a_client_call_without_its_result_is_refused_and_nothing_is_stored(v1, llm_server):
    llm_server.push(
        tool_calls_reply(
            [
                ("lookup_order", '{"order": "A"}', "call_1"),
                ("lookup_order", '{"order": "B"}', "call_2"),
            ]
        )
    )
    messages = [{"role": "user", "content": "Orders A and B?"}]
    choice = post(v1, messages, tools=[CLIENT_TOOL]).json()["choices"][0]
    assert len(choice["message"]["tool_calls"]) == 2
    stored = Message.objects.count()
    messages += [choice["message"], {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]
    response = post(v1, messages, tools=[CLIENT_TOOL])
    assert response.status_code == 400
    error = error_of(response)
    assert "call_2" in error["message"]
    assert error["param"] == "messages"
    assert Message.objects.count() == stored
    assert Run.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_follow_up_that_answers_no_client_call_is_refused_and_the_call_still_waits(
    v1, llm_server
):
    llm_server.push(tool_calls_reply([("lookup_order", '{"order": "A"}', "call_1")]))
    messages = [{"role": "user", "content": "Order A?"}]
    choice = post(v1, messages, tools=[CLIENT_TOOL]).json()["choices"][0]
    stored = Message.objects.count()
    # The client skips the result and just writes again.
    messages += [choice["message"], {"role": "user", "content": "Never mind, hello?"}]
    response = post(v1, messages, tools=[CLIENT_TOOL])
    assert response.status_code == 400, response.json()
    error = error_of(response)
    assert "call_1" in error["message"]
    assert error["param"] == "messages"
    assert (Message.objects.count(), Run.objects.count()) == (stored, 1)
    assert ToolExecution.objects.get().status == ExecutionStatus.CLIENT
    # Answered, the turn goes on.
    llm_server.push(text_reply("Order A has 3 items."))
    messages[-1:] = [{"role": "tool", "tool_call_id": "call_1", "content": "3 items"}]
    response = post(v1, messages, tools=[CLIENT_TOOL])
    assert response.json()["choices"][0]["message"]["content"] == "Order A has 3 items."
    assert ToolExecution.objects.get().status == ExecutionStatus.SUCCEEDED


@pytest.mark.django_db(transaction=True)
def test_a_client_tool_named_like_one_of_ours_takes_the_name_for_its_request(v1, llm_server):
    theirs = {
        "type": "function",
        "function": {
            "name": "search_notes",
            "description": "Search the notes of the client's own app.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
    llm_server.push(tool_calls_reply([("search_notes", '{"query": "milk"}', "call_n")]))
    response = post(v1, [{"role": "user", "content": "Any notes on milk?"}], tools=[theirs])
    assert response.status_code == 200, response.json()
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "search_notes"
    # The model was offered one search_notes, the client's; toolchat's others as usual.
    offered = [t["function"] for t in llm_server.requests[0]["tools"]]
    named = [f for f in offered if f["name"] == "search_notes"]
    assert [f["description"] for f in named] == ["Search the notes of the client's own app."]
    assert "calculator" in {f["name"] for f in offered}
    run = Run.objects.get(pk=response["X-Toolchat-Run-Id"])
    assert run.client_options["shadowed_tools"] == ["search_notes"]
    assert list(ToolExecution.objects.values_list("name", "status")) == [
        ("search_notes", ExecutionStatus.CLIENT)
    ]
    # A request that does not declare it has toolchat's own again.
    llm_server.push(text_reply("Hello."))
    post(v1, [{"role": "user", "content": "Hello"}])
    assert "search_notes" in {t["function"]["name"] for t in llm_server.requests[1]["tools"]}


# --- errors ----------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
        ({"model": MODEL, "messages": []}, "messages"),
        ({"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        (
            {
                "model": MODEL,
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "input_audio", "input_audio": {"data": "x"}}],
                    }
                ],
            },
            "messages[0].content[0]",
        ),
        ({"model": MODEL, "messages": [{"role": "user", "content": "a\x00b"}]}, "content"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "\ud800"}]}, "content"),
        (
            {"model": MODEL, "messages": [{"role": "tool", "tool_call_id": "x", "content": "r"}]},
            "messages",
        ),
        (
            {
                "model": MODEL,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello"},
                ],
            },
            "messages[1]",
        ),
        ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "n": 2}, "n"),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "temperature": 9},
            "temperature",
        ),
        ({"model": MODEL, "messages": "hi"}, "messages"),
    ],
)
def test_bad_requests_are_openai_400s_naming_the_param_and_store_nothing(
    v1, body, param, llm_server
):
    # Sent as JSON text: a lone surrogate travels as its escape, as a client would send it.
    response = v1.post(URL, json.dumps(body), content_type="application/json")
    assert response.status_code == 400, response.json()
    error = error_of(response)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert not Conversation.objects.exists()
    assert not Message.objects.exists()


@pytest.mark.django_db
def test_a_body_that_is_not_json_is_an_openai_400(v1):
    response = v1.post(URL, "{not json", content_type="application/json")
    assert response.status_code == 400
    assert error_of(response)["type"] == "invalid_request_error"


@pytest.mark.django_db
def test_an_unknown_model_is_a_404_model_not_found(v1, llm_server):
    response = post(v1, [{"role": "user", "content": "hi"}], model="elsewhere/gpt-9")
    assert response.status_code == 404
    error = error_of(response)
    assert (error["code"], error["param"]) == ("model_not_found", "model")


@pytest.mark.django_db(transaction=True)
def test_a_failed_run_is_a_502_with_its_reason(v1, llm_server, settings):
    settings.LLM_MAX_RETRIES = 0
    llm_server.push(error_reply(400, "context too long"))
    response = post(v1, [{"role": "user", "content": "hi"}])
    assert response.status_code == 502
    error = error_of(response)
    assert error["code"] == "run_failed"
    assert error["type"] == "server_error"
    assert error["message"] == Run.objects.get().error
    assert response["X-Toolchat-Run-Id"] == str(Run.objects.get().pk)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_same_request_again_after_a_failed_turn_retries_it_in_its_conversation(
    v1, user, llm_server, settings, stream
):
    """A client that sends its request again after a 502 (or an error event) is retrying
    that turn: the same conversation answers it, with the failed attempt superseded (kept
    in the record), not a second conversation nor the question twice in a row."""
    settings.LLM_MAX_RETRIES = 0
    llm_server.push(
        text_reply("Paris."), error_reply(400, "context too long"), text_reply("2.1 million.")
    )
    first = [{"role": "user", "content": "Capital of France?"}]
    answer = post(v1, first).json()["choices"][0]["message"]["content"]
    request = [*first, {"role": "assistant", "content": answer}]
    request.append({"role": "user", "content": "How many people live there?"})
    failed = post(v1, request, stream=stream)
    if stream:
        assert b'"error"' in async_to_sync(_body)(failed)
    else:
        assert failed.status_code == 502
    retried = post(v1, request)
    assert retried.status_code == 200, retried.json()
    assert retried.json()["choices"][0]["message"]["content"] == "2.1 million."
    conversation = Conversation.objects.get(owner=user)
    assert retried["X-Toolchat-Conversation-Id"] == str(conversation.pk)
    current = Message.objects.filter(conversation=conversation, superseded_at__isnull=True)
    assert [(m.role, m.content) for m in current.order_by("position")] == [
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
        ("user", "How many people live there?"),
        ("assistant", "2.1 million."),
    ]
    assert Run.objects.filter(conversation=conversation, status=RunStatus.FAILED).count() == 1
    # The model was asked the question once more, not twice in a row.
    asked = [m["content"] for m in llm_server.requests[-1]["messages"] if m["role"] == "user"]
    assert asked == ["Capital of France?", "How many people live there?"]


@pytest.mark.django_db(transaction=True)
def test_a_first_request_whose_turn_failed_is_retried_in_the_same_conversation(
    v1, user, llm_server, settings
):
    settings.LLM_MAX_RETRIES = 0
    llm_server.push(error_reply(400, "context too long"), text_reply("Hello!"))
    request = [{"role": "user", "content": "hi"}]
    assert post(v1, request).status_code == 502
    retried = post(v1, request)
    assert retried.status_code == 200, retried.json()
    conversation = Conversation.objects.get(owner=user)
    current = Message.objects.filter(conversation=conversation, superseded_at__isnull=True)
    assert [(m.role, m.content) for m in current.order_by("position")] == [
        ("user", "hi"),
        ("assistant", "Hello!"),
    ]


@pytest.mark.django_db
def test_posting_is_throttled_with_the_rest_apis_budget(v1, llm_server, monkeypatch):
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"messages": "0/min"})
    response = post(v1, [{"role": "user", "content": "hi"}])
    assert response.status_code == 429
    assert error_of(response)["type"] == "rate_limit_error"
    assert int(response["Retry-After"]) > 0


@pytest.mark.django_db(transaction=True)
def test_a_call_that_needs_approval_answers_how_to_decide_it(v1, user, llm_server):
    llm_server.push(tool_calls_reply([("delete_notes", '{"note_ids": ["a", "b"]}', "call_d")]))
    response = post(v1, [{"role": "user", "content": "Delete both notes."}])
    assert response.status_code == 200, response.json()
    text = response.json()["choices"][0]["message"]["content"]
    execution = ToolExecution.objects.get()
    assert execution.status == ExecutionStatus.AWAITING_APPROVAL
    assert f"/api/v1/tool-executions/{execution.pk}/approve/" in text
    assert Run.objects.get().status == RunStatus.AWAITING_APPROVAL
    # While it waits, the conversation takes no other message.
    follow = [
        {"role": "user", "content": "Delete both notes."},
        {"role": "assistant", "content": text},
        {"role": "user", "content": "Well?"},
    ]
    response = post(v1, follow)
    assert response.status_code == 409
    assert error_of(response)["type"] == "conflict_error"


@pytest.mark.django_db(transaction=True)
def test_a_streamed_call_that_needs_approval_finishes_saying_how_to_decide_it(v1, user, llm_server):
    llm_server.push(tool_calls_reply([("delete_notes", '{"note_ids": ["a", "b"]}', "call_d")]))
    response = post(v1, [{"role": "user", "content": "Delete both notes."}], stream=True)
    assert response.status_code == 200
    lines = async_to_sync(_body)(response).decode().splitlines()
    chunks = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    assert lines[-2:] == ["data: [DONE]", ""] or lines[-1] == "data: [DONE]"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    execution = ToolExecution.objects.get()
    assert f"/api/v1/tool-executions/{execution.pk}/approve/" in text
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert not any("error" in c for c in chunks)
    assert Run.objects.get().status == RunStatus.AWAITING_APPROVAL


# --- hostile input ---------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "tool", "tool_call_id": "call\x00x", "content": "r"}],
        [{"role": "tool", "tool_call_id": "call\ud800", "content": "r"}],
        [
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c\x00",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                    }
                ],
            },
            {"role": "user", "content": "hi"},
        ],
    ],
)
def test_call_ids_no_column_can_store_are_refused(v1, messages, llm_server):
    response = v1.post(
        URL, json.dumps({"model": MODEL, "messages": messages}), content_type="application/json"
    )
    assert response.status_code == 400, response.json()
    assert error_of(response)["type"] == "invalid_request_error"
    assert not Message.objects.exists()


@pytest.mark.django_db
def test_deep_nesting_and_too_many_messages_are_400s(v1, llm_server):
    deep = "[" * 100_000 + "]" * 100_000
    body = '{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "tools": %s}'
    response = v1.post(URL, body % (MODEL, deep), content_type="application/json")
    assert response.status_code == 400
    error_of(response)
    many = [{"role": "user", "content": "hi"}] * 2001
    response = post(v1, many)
    assert response.status_code == 400
    assert error_of(response)["param"] == "messages"
    assert not Conversation.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_naming_another_users_conversation_reaches_none_of_it(v1, other_user, user, llm_server):
    theirs = Conversation.objects.create(owner=other_user, title="secret")
    llm_server.push(text_reply("Hello."))
    response = v1.post(
        URL,
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        format="json",
        HTTP_X_TOOLCHAT_CONVERSATION=str(theirs.pk),
    )
    assert response.status_code == 200
    assert response["X-Toolchat-Conversation-Id"] != str(theirs.pk)
    assert not Message.objects.filter(conversation=theirs).exists()
    assert Conversation.objects.get(owner=user).client_ref == str(theirs.pk)


@pytest.mark.django_db(transaction=True)
def test_the_run_api_and_the_audit_show_what_the_client_asked(v1, user, llm_server, client):
    llm_server.push(tool_calls_reply([("lookup_order", '{"order": "A"}', "call_1")]))
    response = post(v1, [{"role": "user", "content": "Order A?"}], tools=[CLIENT_TOOL], user="u-1")
    run_id = response["X-Toolchat-Run-Id"]
    run = token_client(user).get(f"/api/v1/runs/{run_id}/").json()
    assert run["client_options"] == {"user": "u-1"}
    assert run["client_tools"] == [CLIENT_TOOL]
    assert run["tool_executions"][0]["status"] == "client"
    user.is_staff = True
    user.save()
    client.force_login(user)
    page = client.get(f"/audit/runs/{run_id}/").content.decode()
    assert "/v1/chat/completions" in page
    assert "<code>lookup_order</code>" in page
    assert "Returned to the client" in page


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/v1/models/%0A", "/v1/models/a%0Ab", "/v1/%0A"])
def test_paths_with_a_newline_are_json_404s(v1, path, llm_server):
    response = v1.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    error_of(response)
