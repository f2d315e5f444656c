"""Fixtures for the OpenAI-compatible surface: clients with Bearer tokens."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient


@pytest.fixture(autouse=True)
def _fresh_throttle_counts():
    cache.clear()
    yield
    cache.clear()


def bearer_client(user) -> APIClient:
    """An API client that sends the user's REST token as OpenAI clients send a key."""
    token, _ = Token.objects.get_or_create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.key}")
    return client


@pytest.fixture
def v1(user) -> APIClient:
    return bearer_client(user)


@pytest.fixture
def other_v1(other_user) -> APIClient:
    return bearer_client(other_user)
