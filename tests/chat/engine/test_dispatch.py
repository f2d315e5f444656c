"""The in-process task threads (no Redis): what they do with their database connections.

Opening a SQLite connection took 2 to 4 ms at every task, more than a step's
own statements; the threads live as long as the process, so each keeps its
SQLite connection. A pooled PostgreSQL connection still goes back between
jobs: the pool, not the threads, bounds the connections.
"""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.backends.signals import connection_created

from chat.database import connections_tidy
from chat.services.runs import run_start
from tests.factories import ConversationFactory, UserFactory
from tests.llm_server import text_reply
from tests.stack import wait_for_run


@pytest.mark.django_db(transaction=True)
def test_task_threads_keep_a_sqlite_connection_and_give_a_pooled_one_back(llm_server, user):
    opened: list[int] = []  # the thread of each connection opened by a task thread

    def created(sender, connection, **kwargs):
        if threading.current_thread().name.startswith("toolchat-task"):
            opened.append(threading.get_ident())

    connection_created.connect(created)
    try:
        conversation = ConversationFactory(owner=user)
        for number in range(4):
            llm_server.push(text_reply(f"answer {number}"))
            run = wait_for_run(run_start(conversation=conversation, content="hello"), 15)
            assert run.status == "completed", run.error
    finally:
        connection_created.disconnect(created)
    threads = set(opened)
    if connection.vendor == "sqlite":
        assert len(opened) == len(threads), "a task thread opened its connection again"
    else:
        assert len(opened) > len(threads), "a task thread held on to a pooled connection"


@pytest.mark.django_db(transaction=True)
def test_an_idle_connection_is_kept_and_one_left_in_a_transaction_or_after_an_error_is_not():
    connection.ensure_connection()
    idle = connection.connection
    connections_tidy()
    if connection.vendor != "sqlite":
        assert connection.connection is None  # given back to the pool
        return
    assert connection.connection is idle

    def left(state: str) -> None:
        """A job that ends with its connection in `state`."""
        connection.ensure_connection()
        if state == "autocommit off":
            connection.set_autocommit(False)
            UserFactory()
        elif state == "raw BEGIN":
            with connection.cursor() as cursor:
                cursor.execute("BEGIN")
        elif state == "a statement failed":
            connection.errors_occurred = True  # as Django's error wrapper marks it

    for state in ("autocommit off", "raw BEGIN", "a statement failed"):
        left(state)
        connections_tidy()
        assert connection.connection is None, state
        assert User.objects.filter(username="nobody").count() == 0  # a new one, which works
        assert connection.get_autocommit(), state
        assert not connection.connection.in_transaction, state
