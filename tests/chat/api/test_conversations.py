"""Conversations over the REST API: list, create, read, change, delete."""

from __future__ import annotations

import uuid

import pytest

from chat.llm.endpoints import default_model
from chat.models import Conversation, Message, Run, RunStatus, ToolExecution
from tests.chat.api.conftest import stored_turn
from tests.factories import ConversationFactory, RunFactory

pytestmark = pytest.mark.django_db

URL = "/api/v1/conversations/"


def detail(conversation_id) -> str:
    return f"{URL}{conversation_id}/"


# --- list ---------------------------------------------------------------------------------


def test_the_list_shows_only_your_own_conversations_newest_first(api, user, other_user):
    first = ConversationFactory(owner=user, title="first")
    second = ConversationFactory(owner=user, title="second")
    ConversationFactory(owner=other_user, title="not yours")

    response = api.get(URL)

    assert response.status_code == 200
    body = response.json()
    assert [c["title"] for c in body["results"]] == ["second", "first"]
    assert body["next"] is None
    assert body["previous"] is None
    assert body["results"][0] == {
        "id": str(second.id),
        "title": "second",
        "mode": "two_pass",
        "max_steps": 5,
        "model": default_model(),  # the model it uses, not "" (none of its own)
        "system_prompt": "",
        "active_run_id": None,
        "last_event_seq": 0,
        "replay_of": None,
        "source": "api",
        "created_at": body["results"][0]["created_at"],
        "updated_at": body["results"][0]["updated_at"],
    }
    assert first.id  # created, listed second


def test_the_list_names_the_active_run(api, conversation):
    run = RunFactory(conversation=conversation, status=RunStatus.RUNNING)
    (item,) = api.get(URL).json()["results"]
    assert item["active_run_id"] == str(run.id)


def test_the_list_pages_with_a_cursor(api, user):
    for n in range(5):
        ConversationFactory(owner=user, title=f"c{n}")
    seen = []
    url = f"{URL}?page_size=2"
    while url:
        body = api.get(url).json()
        assert len(body["results"]) <= 2
        seen.extend(c["title"] for c in body["results"])
        url = body["next"]
    assert seen == ["c4", "c3", "c2", "c1", "c0"]


def test_a_bad_cursor_is_a_400_naming_it(api):
    response = api.get(f"{URL}?cursor=garbage")
    assert response.status_code == 400
    assert response.json()["field"] == "cursor"


def test_listing_costs_the_same_queries_for_3_or_30_conversations(
    api, user, django_assert_max_num_queries
):
    for n in range(30):
        conversation = ConversationFactory(owner=user)
        if n % 3 == 0:
            RunFactory(conversation=conversation, status=RunStatus.RUNNING)
    # The token lookup, and one query for the page with its active runs.
    with django_assert_max_num_queries(2):
        response = api.get(URL)
    assert len(response.json()["results"]) == 30


# --- create -------------------------------------------------------------------------------


def test_create_with_defaults(api, user):
    response = api.post(URL, {}, format="json")
    assert response.status_code == 201
    body = response.json()
    conversation = Conversation.objects.get(pk=body["id"])
    assert conversation.owner == user
    assert (body["mode"], body["max_steps"], body["title"]) == ("two_pass", 5, "")
    assert body["active_run_id"] is None


def test_create_with_every_field(api, settings):
    settings.LLM_ALLOWED_MODELS = ["offline", "gpt-4o-mini"]
    payload = {
        "title": "Kitchen maths",
        "mode": "loop",
        "max_steps": 50,
        "system_prompt": "  Be brief.  ",
        "model": "gpt-4o-mini",
    }
    response = api.post(URL, payload, format="json")
    assert response.status_code == 201
    body = response.json()
    # The model is stored, and shown, as its id: `<provider>/<model>`.
    assert {key: body[key] for key in payload} == {**payload, "model": "offline/gpt-4o-mini"}
    stored = Conversation.objects.get(pk=body["id"])
    assert (stored.mode, stored.max_steps, stored.system_prompt) == ("loop", 50, "  Be brief.  ")


@pytest.mark.parametrize("mode", ["two_pass", "loop", "direct", "llm"])
def test_every_mode_is_accepted(api, mode):
    assert api.post(URL, {"mode": mode}, format="json").json()["mode"] == mode


BAD_INPUT = [
    ({"mode": "agentic"}, "mode"),
    ({"mode": None}, "mode"),
    ({"max_steps": 0}, "max_steps"),
    ({"max_steps": 51}, "max_steps"),
    ({"max_steps": "many"}, "max_steps"),
    ({"max_steps": True}, "max_steps"),
    ({"max_steps": 2.5}, "max_steps"),
    ({"title": "x" * 201}, "title"),
    ({"title": 12}, "title"),
    ({"title": "nul\x00byte"}, "title"),
    ({"model": "m" * 129}, "model"),
    ({"system_prompt": ["a"]}, "system_prompt"),
    ({"system_prompt": None}, "system_prompt"),
    ({"system_prompt": 12}, "system_prompt"),
    ({"system_prompt": "be\x00brief"}, "system_prompt"),
    ({"titel": "typo"}, "titel"),
    # Not settings: no request may set them.
    ({"owner": 1}, "owner"),
    ({"id": "7c9e6679-7425-40de-944b-e07fc1f90ae7"}, "id"),
    ({"created_at": "2020-01-01T00:00:00Z"}, "created_at"),
]


@pytest.mark.parametrize(("payload", "field"), BAD_INPUT)
def test_bad_input_is_a_400_naming_the_field_and_stores_nothing(api, payload, field):
    response = api.post(URL, payload, format="json")
    assert response.status_code == 400, response.json()
    body = response.json()
    assert body["code"] == "invalid"
    assert body["field"] == field
    assert body["message"].startswith(f"{field}: ")
    assert field in body["details"]["errors"]
    assert not Conversation.objects.exists()


@pytest.mark.parametrize(
    ("payload", "field"),
    [({"model": "gpt-9-ultra"}, "model"), ({"system_prompt": "x" * 2_000_000}, "system_prompt")],
)
def test_costly_settings_are_bounded(api, conversation, payload, field):
    # An unlisted model and a huge system prompt cost money on every call.
    response = api.post(URL, payload, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["field"] == field
    patched = api.patch(f"{URL}{conversation.pk}/", payload, format="json")
    assert patched.status_code == 400
    assert patched.json()["field"] == field
    assert Conversation.objects.count() == 1


def test_a_system_prompt_over_the_limit_is_a_400_that_names_the_limit(api, conversation):
    at_limit = api.patch(detail(conversation.pk), {"system_prompt": "x" * 8_000}, format="json")
    assert at_limit.status_code == 200, at_limit.json()
    response = api.patch(detail(conversation.pk), {"system_prompt": "y" * 8_001}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "system_prompt"
    assert body["message"] == "system_prompt is 8,001 characters long; the limit is 8,000."
    assert (body["details"]["max_chars"], body["details"]["chars"]) == (8_000, 8_001)
    conversation.refresh_from_db()
    assert conversation.system_prompt == "x" * 8_000


def test_the_system_prompt_round_trips_and_blank_restores_the_default(api):
    created = api.post(URL, {"system_prompt": "Answer in French.\n"}, format="json").json()
    assert created["system_prompt"] == "Answer in French.\n"
    patched = api.patch(detail(created["id"]), {"system_prompt": "Be terse."}, format="json")
    assert patched.json()["system_prompt"] == "Be terse."
    assert api.get(detail(created["id"])).json()["system_prompt"] == "Be terse."
    cleared = api.patch(detail(created["id"]), {"system_prompt": ""}, format="json")
    assert cleared.json()["system_prompt"] == ""
    assert Conversation.objects.get(pk=created["id"]).system_prompt == ""


def test_malformed_json_is_a_400(api):
    response = api.post(URL, '{"title": ', content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"
    assert "JSON parse error" in response.json()["message"]
    assert not Conversation.objects.exists()


def test_a_json_body_that_is_not_an_object_is_a_400(api):
    response = api.post(URL, "[1, 2]", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert "Expected a dictionary" in response.json()["message"]


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("title=x", "application/x-www-form-urlencoded"),
        ("title: x", "text/plain"),
        ('{"title": "x"}', "application/xml"),
    ],
)
def test_a_body_that_is_not_json_is_a_415(api, body, content_type):
    response = api.post(URL, body, content_type=content_type)
    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"
    assert not Conversation.objects.exists()


def test_other_methods_are_a_405_that_lists_the_allowed_ones(api):
    response = api.put(URL, {}, format="json")
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"
    assert response["Allow"] == "GET, POST, HEAD, OPTIONS"


# --- read ---------------------------------------------------------------------------------


def test_read_your_own_conversation(api, conversation):
    response = api.get(detail(conversation.id))
    assert response.status_code == 200
    assert response.json()["id"] == str(conversation.id)


def test_someone_elses_or_a_missing_conversation_is_a_404(api, other_user):
    foreign = ConversationFactory(owner=other_user)
    for conversation_id in (foreign.id, uuid.uuid4()):
        response = api.get(detail(conversation_id))
        assert response.status_code == 404
        assert response.json() == {"code": "not_found", "message": "Conversation not found."}


def test_a_malformed_id_is_a_json_404(api):
    response = api.get(f"{URL}not-a-uuid/")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "not_found"


def test_an_unknown_api_path_is_a_json_404_for_any_method(api):
    for method in (api.get, api.post, api.delete):
        for path in (
            "/api/v1/nothing-here/",
            "/api/v1/conversations/%0A/",
            "/api/v1/conversations",
        ):
            response = method(path)
            assert response.status_code == 404, path
            assert response.json()["code"] == "not_found"


# --- change -------------------------------------------------------------------------------


def test_patch_changes_only_the_fields_sent(api, conversation):
    conversation.system_prompt = "Keep me."
    conversation.save()
    response = api.patch(
        detail(conversation.id), {"title": "Renamed", "mode": "loop"}, format="json"
    )
    assert response.status_code == 200
    assert (response.json()["title"], response.json()["mode"]) == ("Renamed", "loop")
    conversation.refresh_from_db()
    assert (conversation.title, conversation.mode) == ("Renamed", "loop")
    assert conversation.system_prompt == "Keep me."


def test_an_empty_patch_changes_nothing(api, conversation):
    response = api.patch(detail(conversation.id), {}, format="json")
    assert response.status_code == 200
    assert response.json()["title"] == conversation.title


def test_a_bad_patch_changes_nothing(api, conversation):
    response = api.patch(detail(conversation.id), {"title": "New", "max_steps": 99}, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "max_steps"
    conversation.refresh_from_db()
    assert conversation.title != "New"


@pytest.mark.parametrize(("payload", "field"), BAD_INPUT)
def test_a_bad_patch_answers_what_create_answers(api, conversation, payload, field):
    created = api.post(URL, payload, format="json")
    before = api.get(detail(conversation.id)).json()

    response = api.patch(detail(conversation.id), payload, format="json")

    assert response.status_code == created.status_code == 400
    assert response.json() == created.json()
    assert response.json()["field"] == field
    assert api.get(detail(conversation.id)).json() == before


def test_patching_someone_elses_conversation_is_a_404_and_changes_nothing(api, other_user):
    foreign = ConversationFactory(owner=other_user, title="theirs")
    response = api.patch(detail(foreign.id), {"title": "mine now"}, format="json")
    assert response.status_code == 404
    foreign.refresh_from_db()
    assert foreign.title == "theirs"


# --- delete -------------------------------------------------------------------------------


def test_delete_removes_the_conversation_and_its_record(api, conversation):
    run = stored_turn(conversation)
    response = api.delete(detail(conversation.id))
    assert response.status_code == 204
    assert response.content == b""
    assert not Conversation.objects.filter(pk=conversation.id).exists()
    assert not Run.objects.filter(pk=run.id).exists()
    assert not Message.objects.exists()
    assert not ToolExecution.objects.exists()


def test_delete_is_refused_while_a_run_is_active(api, conversation):
    run = RunFactory(conversation=conversation, status=RunStatus.RUNNING)
    response = api.delete(detail(conversation.id))
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "conflict"
    assert body["details"] == {"run_id": str(run.id), "status": "running"}
    assert Conversation.objects.filter(pk=conversation.id).exists()


def test_deleting_someone_elses_conversation_is_a_404_and_deletes_nothing(api, other_user):
    foreign = ConversationFactory(owner=other_user)
    assert api.delete(detail(foreign.id)).status_code == 404
    assert Conversation.objects.filter(pk=foreign.id).exists()


# --- search and order -----------------------------------------------------------------------


@pytest.mark.django_db
def test_the_list_is_by_last_activity_and_searches_titles_and_messages(api, user, other_user):
    from datetime import timedelta

    from django.utils import timezone

    from chat.models import Conversation, Message, Role

    old = ConversationFactory(owner=user, title="Boiler")
    recent = ConversationFactory(owner=user, title="Maths")
    Message.objects.create(
        conversation=recent, position=0, role=Role.USER, content="What is the BOILER pressure?"
    )
    replaced = ConversationFactory(owner=user, title="Other")
    Message.objects.create(
        conversation=replaced,
        position=0,
        role=Role.USER,
        content="boiler, said once",
        superseded_at=timezone.now(),
    )
    ConversationFactory(owner=other_user, title="Their boiler")
    now = timezone.now()
    Conversation.objects.filter(pk=old.pk).update(updated_at=now - timedelta(days=2))
    Conversation.objects.filter(pk=recent.pk).update(updated_at=now - timedelta(hours=1))
    Conversation.objects.filter(pk=replaced.pk).update(updated_at=now)

    everything = [c["id"] for c in api.get("/api/v1/conversations/").json()["results"]]
    assert everything == [str(replaced.pk), str(recent.pk), str(old.pk)]

    found = api.get("/api/v1/conversations/", {"q": "boiler"}).json()["results"]
    # The title, and a message (any case); not a superseded message, not someone else's.
    assert [c["id"] for c in found] == [str(recent.pk), str(old.pk)]
    assert api.get("/api/v1/conversations/", {"q": "zzz"}).json()["results"] == []


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["a\x00b", "x" * 201])
def test_a_bad_search_is_a_400(api, query):
    response = api.get("/api/v1/conversations/", {"q": query})
    assert response.status_code == 400
    assert response.json()["field"] == "q"


@pytest.mark.django_db
def test_a_search_in_broken_utf8_finds_nothing_rather_than_failing(api):
    # A lone surrogate cannot travel in a URL: its UTF-8 bytes arrive, and are replaced.
    response = api.get("/api/v1/conversations/?q=%ED%A0%80")
    assert response.status_code == 200
    assert response.json()["results"] == []


def test_a_conversation_made_without_a_model_says_the_model_it_uses(api, llm_server):
    created = api.post(URL, {"title": "t"}, format="json").json()
    assert created["model"] == "openai/test-model"
    assert api.get(detail(created["id"])).json()["model"] == "openai/test-model"
    # Set back to the default ("" as before), it says the default's id again.
    changed = api.patch(detail(created["id"]), {"model": ""}, format="json").json()
    assert changed["model"] == "openai/test-model"
