"""Shared fixtures: users and conversations, the scripted model, Celery workers."""

from __future__ import annotations

import os
from typing import Any

import pytest
from asgiref import sync as asgiref_sync

from chat.llm.limits import server_limits_reset
from tests.attack_suite import ATTACKS, matches
from tests.factories import ConversationFactory, UserFactory
from tests.llm_server import ScriptedLLMServer
from tests.stack import CeleryWorker, reset_producer_pool


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the attack suite's tests (tests/attack_suite.py) with `attack`; leave out the
    `long` ones (minutes each) unless TOOLCHAT_LONG_TESTS=1 (`make test-long`)."""
    patterns = [pattern for listed in ATTACKS.values() for pattern in listed]
    for item in items:
        if any(matches(item.nodeid, pattern) for pattern in patterns):
            item.add_marker(pytest.mark.attack)
    if os.environ.get("TOOLCHAT_LONG_TESTS", "") in {"1", "true", "yes"}:
        return
    long = [item for item in items if item.get_closest_marker("long") is not None]
    if long:
        config.hook.pytest_deselected(items=long)
        items[:] = [item for item in items if item.get_closest_marker("long") is None]


@pytest.fixture
def handoffs(monkeypatch) -> list[str]:
    """The functions every `sync_to_async` hands to a thread, by name, in order (counted only)."""
    calls: list[str] = []
    real = asgiref_sync.SyncToAsync.__call__

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(asgiref_sync.SyncToAsync, "__call__", counted)
    return calls


@pytest.fixture
def user(db):
    return UserFactory()


@pytest.fixture
def other_user(db):
    return UserFactory()


@pytest.fixture
def conversation(user):
    return ConversationFactory(owner=user)


@pytest.fixture
def anyio_backend():
    """Async tests run on asyncio (Channels and Django's async ORM need it)."""
    return "asyncio"


@pytest.fixture
def llm_server(settings):
    """A scripted OpenAI-compatible server, with the openai provider pointed at it."""
    server = ScriptedLLMServer().start()
    settings.LLM_PROVIDER = "openai"
    settings.OPENAI_API_KEY = "sk-test"
    settings.OPENAI_BASE_URL = server.base_url
    settings.LLM_MODEL = "test-model"
    settings.LLM_COMPOSE_MODEL = ""
    settings.LLM_MAX_RETRIES = 2
    settings.LLM_TIMEOUT_S = 5
    yield server
    server.stop()
    server_limits_reset()  # what the provider learned of this server goes with it


@pytest.fixture
def celery_env(llm_server, redis_url, settings, transactional_db, tmp_path):
    """Point this process at Redis (tasks go to Celery) and describe the workers' environment."""
    from django.db import connection

    from project.celery import app
    from tests.plugins.servers import database_url, server_environment

    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    settings.TOOLCHAT_TASKS_IN_PROCESS = False
    old_broker = app.conf.broker_url
    app.conf.broker_url = redis_url
    reset_producer_pool(app)
    env = server_environment(
        DATABASE_URL=database_url(connection.settings_dict),
        DATABASE_POOL="0",
        REDIS_URL=redis_url,
        LLM_PROVIDER="openai",
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL=llm_server.base_url,
        LLM_MODEL="test-model",
        LLM_MAX_RETRIES="2",
        TOOLCHAT_TOOL_MODULES=",".join(
            [*settings.TOOLCHAT_TOOL_MODULES, "tests.chat.engine.slow_tools"]
        ),
        TOOLCHAT_TEST_LEDGER=str(ledger),
        # Crash recovery on a test's time scale: redelivery after 3 s, a silent
        # lease is stale after 2 s, a silent tool call is dead 1 s past its timeout.
        CELERY_VISIBILITY_TIMEOUT="3",
        CELERY_RESTORE_INTERVAL="1",
        TOOLCHAT_RUN_STALE_S="2",
        TOOLCHAT_HEARTBEAT_S="0.3",
        TOOLCHAT_TOOL_GRACE_S="1",
    )
    # Tasks queued by a previous test must not leak into this one.
    import redis

    redis.Redis.from_url(redis_url).flushall()
    yield {"env": env, "ledger": ledger, "logs": tmp_path}
    app.conf.broker_url = old_broker
    reset_producer_pool(app)


@pytest.fixture
def start_worker(celery_env):
    """Start real Celery workers; all are stopped at the end of the test."""
    workers: list[CeleryWorker] = []

    def start(
        name: str = "w1", pool: str | None = "threads", options: tuple[str, ...] = ()
    ) -> CeleryWorker:
        worker = CeleryWorker(
            env=celery_env["env"],
            log_path=celery_env["logs"] / f"{name}.log",
            name=name,
            pool=pool,
            options=options,
            concurrency=6 if pool == "threads" else 3,
        )
        workers.append(worker)
        return worker.start()

    yield start
    for worker in workers:
        worker.stop()
