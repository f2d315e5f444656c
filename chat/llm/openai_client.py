"""The `openai` SDK's clients: one per process and endpoint, so one connection pool each.

Every request goes through a watched transport (chat/llm/watch.py), which
ends a call its run no longer wants or whose deadline passed. A client made
before a fork (Celery's prefork pool) is not used by the child: the process
id is part of the cache's key.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

import httpx2
import openai
from django.core.signals import setting_changed
from django.dispatch import receiver

from chat.llm.watch import WatchedTransport

# The settings that shape a client; a change to any of them (in tests) drops the cache.
CLIENT_SETTINGS = frozenset(
    {"OPENAI_API_KEY", "OPENAI_BASE_URL", "LLM_TIMEOUT_S", "LLM_MAX_RETRIES"}
)

_ClientKey = tuple[int, str, str | None, float, int, tuple[tuple[str, str], ...]]
_clients: dict[_ClientKey, openai.OpenAI] = {}
_clients_lock = threading.Lock()


def openai_client(
    *,
    api_key: str,
    base_url: str | None,
    timeout_s: float,
    max_retries: int,
    headers: Mapping[str, str] | None = None,
) -> openai.OpenAI:
    """The client for these settings, made once per process: one connection pool for all calls."""
    # The pid is part of the key: a client made before a fork (Celery prefork)
    # holds the parent's sockets, which a child must not read from.
    key = (
        os.getpid(),
        api_key,
        base_url,
        timeout_s,
        max_retries,
        tuple(sorted((headers or {}).items())),
    )
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = openai.OpenAI(
                api_key=api_key or "not-needed",
                base_url=base_url or None,
                timeout=openai.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
                max_retries=max_retries,
                default_headers=dict(headers or {}),
                http_client=openai.DefaultHttpxClient(
                    transport=WatchedTransport(
                        httpx2.HTTPTransport(limits=openai.DEFAULT_CONNECTION_LIMITS)
                    )
                ),
            )
        return client


def openai_clients_reset() -> None:
    """Drop the cached clients; each closes its pool when its last call lets go of it."""
    with _clients_lock:
        _clients.clear()


@receiver(setting_changed)
def _client_settings_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in CLIENT_SETTINGS:
        openai_clients_reset()


def _after_fork_in_child() -> None:
    # Another thread of the parent may have held the lock at the fork: the child's copy
    # would then stay locked for ever.
    global _clients_lock
    _clients_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def server_models(
    *, api_key: str, base_url: str, headers: Mapping[str, str], timeout_s: float
) -> tuple[str, ...]:
    """The ids of the models a server lists (`GET /models`), in its order.

    Asked once, not retried: a page waits for it, and an unlisted provider is
    asked again soon (`endpoints.UNLISTED_FOR_S`).
    """
    client = openai_client(
        api_key=api_key, base_url=base_url, timeout_s=timeout_s, max_retries=0, headers=headers
    )
    return tuple(dict.fromkeys(model.id for model in client.models.list() if model.id))
