"""Shared fixtures: users and conversations from the factories."""

from __future__ import annotations

import pytest

from tests.factories import ConversationFactory, UserFactory


@pytest.fixture
def user(db):
    return UserFactory()


@pytest.fixture
def other_user(db):
    return UserFactory()


@pytest.fixture
def conversation(user):
    return ConversationFactory(owner=user)
