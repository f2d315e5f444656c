"""Writes on conversations: create, change (only the settings, checked as at creation)."""

from __future__ import annotations

from typing import Any

import pytest

from chat.exceptions import InvalidInput
from chat.models import MAX_STEPS_LIMIT, Mode
from chat.services.conversations import conversation_create, conversation_update

pytestmark = pytest.mark.django_db


# --- conversation_create --------------------------------------------------------------


def test_conversation_create_with_defaults(user):
    conversation = conversation_create(owner=user)
    conversation.refresh_from_db()
    assert conversation.owner == user
    assert conversation.mode == Mode.TWO_PASS
    assert conversation.max_steps == 5
    assert (conversation.title, conversation.system_prompt, conversation.model) == ("", "", "")


def test_conversation_create_with_everything(user, settings):
    settings.LLM_ALLOWED_MODELS = ["offline", "gpt-test"]
    conversation = conversation_create(
        owner=user,
        title="Groceries",
        mode=Mode.LOOP,
        max_steps=MAX_STEPS_LIMIT,
        system_prompt="Be brief.",
        model="gpt-test",
    )
    conversation.refresh_from_db()
    assert (conversation.title, conversation.mode, conversation.max_steps) == (
        "Groceries",
        "loop",
        MAX_STEPS_LIMIT,
    )
    assert (conversation.system_prompt, conversation.model) == ("Be brief.", "offline/gpt-test")


BAD_SETTINGS: list[tuple[dict[str, Any], str]] = [
    ({"mode": "chaos"}, "mode"),
    ({"max_steps": 0}, "max_steps"),
    ({"max_steps": MAX_STEPS_LIMIT + 1}, "max_steps"),
    ({"max_steps": True}, "max_steps"),
    ({"max_steps": 2.5}, "max_steps"),
    ({"title": "x" * 201}, "title"),
    ({"model": "m" * 129}, "model"),
    # Each model costs money: only the configured ones may be chosen.
    ({"model": "gpt-9-ultra"}, "model"),
    ({"system_prompt": "x" * 8_001}, "system_prompt"),
]


@pytest.mark.parametrize(("fields", "field"), BAD_SETTINGS)
def test_conversation_create_refuses_bad_input(user, fields, field):
    with pytest.raises(InvalidInput) as error:
        conversation_create(owner=user, **fields)
    assert error.value.field == field
    assert error.value.code == "invalid"
    assert not user.conversations.exists()


# --- conversation_update --------------------------------------------------------------


def test_conversation_update_changes_only_what_is_given(conversation):
    conversation.system_prompt = "Keep me."
    conversation.save()
    before = conversation.updated_at

    returned = conversation_update(conversation=conversation, title="Renamed", mode=Mode.LOOP)

    assert returned is conversation
    conversation.refresh_from_db()
    assert (conversation.title, conversation.mode) == ("Renamed", "loop")
    assert (conversation.system_prompt, conversation.max_steps) == ("Keep me.", 5)
    assert conversation.updated_at > before


def test_conversation_update_can_set_every_setting(conversation, settings):
    settings.LLM_ALLOWED_MODELS = ["offline", "gpt-test"]
    conversation_update(
        conversation=conversation,
        title="",
        mode=Mode.DIRECT,
        max_steps=MAX_STEPS_LIMIT,
        system_prompt="Be brief.",
        model="gpt-test",
    )
    conversation.refresh_from_db()
    assert (conversation.title, conversation.mode, conversation.max_steps) == (
        "",
        "direct",
        MAX_STEPS_LIMIT,
    )
    assert (conversation.system_prompt, conversation.model) == ("Be brief.", "offline/gpt-test")


def test_an_update_to_the_same_values_writes_nothing(conversation, django_assert_num_queries):
    before = conversation.updated_at
    with django_assert_num_queries(0):
        conversation_update(conversation=conversation)
        conversation_update(
            conversation=conversation, title=conversation.title, mode=conversation.mode
        )
    conversation.refresh_from_db()
    assert conversation.updated_at == before


@pytest.mark.parametrize("name", ["owner", "owner_id", "id", "created_at", "titel"])
def test_conversation_update_cannot_set_an_unknown_field(conversation, other_user, name):
    value = {"owner": other_user, "owner_id": other_user.pk}.get(name, "x")
    before = (conversation.pk, conversation.owner_id, conversation.created_at)
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
        conversation_update(conversation=conversation, **{name: value})
    conversation.refresh_from_db()
    assert (conversation.pk, conversation.owner_id, conversation.created_at) == before


@pytest.mark.parametrize(("fields", "field"), BAD_SETTINGS)
def test_conversation_update_refuses_what_create_refuses(user, conversation, fields, field):
    with pytest.raises(InvalidInput) as refused_at_create:
        conversation_create(owner=user, **fields)
    before = (conversation.title, conversation.mode, conversation.max_steps, conversation.model)

    # A good field beside the bad one: nothing changes, not even it.
    good = {"title": "Changed?"} if "system_prompt" in fields else {"system_prompt": "Changed?"}
    with pytest.raises(InvalidInput) as refused_at_update:
        conversation_update(conversation=conversation, **good, **fields)

    assert refused_at_update.value.as_dict() == refused_at_create.value.as_dict()
    assert refused_at_update.value.field == field
    conversation.refresh_from_db()
    assert (conversation.title, conversation.mode, conversation.max_steps, conversation.model) == (
        before
    )
    assert conversation.system_prompt == ""
