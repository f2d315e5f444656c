"""Events go to the channel layer in the order they were committed, and a failed send never fails the caller.

A layer with coroutines only is sent to from one loop per process; one that
can send without a loop, by the committing thread.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import pytest

from chat.live import sender
from chat.live.sender import layer_send
from tests.assertions import wait_until


class RecordingLayer:
    """Records what it is sent, the loop it is sent on, and fails on request."""

    def __init__(self, fail_on: set[str] | None = None) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.loops: set[int] = set()
        self.fail_on = fail_on or set()

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.loops.add(id(asyncio.get_running_loop()))
        await asyncio.sleep(0)  # a send that waits on I/O, as Redis' does
        if group in self.fail_on:
            raise ConnectionError("redis went away")
        self.sent.append((group, message))


def test_batches_from_many_threads_are_sent_in_the_order_queued_on_one_loop():
    layer = RecordingLayer()
    order: list[int] = []
    lock = threading.Lock()

    def publisher(offset: int) -> None:
        for n in range(50):
            with lock:  # the queueing order is what the sends must follow
                number = offset + n
                order.append(number)
                layer_send(layer, [("g", {"n": number}), ("g", {"n": number, "second": True})])

    threads = [threading.Thread(target=publisher, args=(1000 * t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wait_until(lambda: len(layer.sent) == 400, what="every message sent")
    sent = [message["n"] for _, message in layer.sent]
    assert sent == [n for number in order for n in (number, number)]
    assert len(layer.loops) == 1  # one loop, so channels_redis keeps one connection pool


def test_a_failed_send_is_logged_and_the_next_batches_still_go(caplog):
    layer = RecordingLayer(fail_on={"broken"})
    layer_send(layer, [("broken", {"event": {"type": "run.started", "seq": 7}})])
    layer_send(layer, [("fine", {"n": 1})])
    wait_until(lambda: layer.sent == [("fine", {"n": 1})], what="the batch after the failure")
    assert "could not send event run.started #7" in caplog.text


def test_a_forked_process_sends_from_a_loop_of_its_own():
    layer = RecordingLayer()
    layer_send(layer, [("g", {"n": 0})])  # the parent's loop is running
    wait_until(lambda: len(layer.sent) == 1, what="the parent's send")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its parent's sender thread did not survive the fork
        child = RecordingLayer()
        layer_send(child, [("g", {"n": 1})])
        deadline = 5.0
        while not child.sent and deadline > 0:
            threading.Event().wait(0.05)
            deadline -= 0.05
        os.write(write, b"sent" if child.sent else b"lost")
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 16) == b"sent"
    assert status == 0


class BlockingLayer:
    """A layer that sends from the caller's thread (as chat/live/redis_layer.py's does)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, list[tuple[str, dict[str, Any]]]]] = []
        self.failing = False

    def group_send_now(
        self, messages: list[tuple[str, dict[str, Any]]], *, ended_runs: Any = ()
    ) -> int:
        if self.failing:
            raise ConnectionError("redis went away")
        self.calls.append((threading.get_ident(), list(messages)))
        return 0


@pytest.fixture
def sends_resume(monkeypatch):
    """A clean slate for the blocking path's pause, and a short one."""
    monkeypatch.setattr(sender, "_now_skipped_until", 0.0)
    monkeypatch.setattr(sender, "SEND_RETRY_S", 0.3)


def test_a_layer_that_sends_without_a_loop_is_sent_to_by_the_committing_thread(sends_resume):
    layer = BlockingLayer()
    layer_send(layer, [("g", {"n": 1}), ("h", {"n": 1})])
    layer_send(layer, [("g", {"n": 2})])
    # Done when layer_send returns, from this thread: nothing waits for another.
    here = threading.get_ident()
    assert layer.calls == [
        (here, [("g", {"n": 1}), ("h", {"n": 1})]),
        (here, [("g", {"n": 2})]),
    ]


def test_after_a_failed_send_the_live_path_is_skipped_for_a_while_then_tried_again(
    sends_resume, caplog
):
    layer = BlockingLayer()
    layer.failing = True
    layer_send(layer, [("g", {"event": {"type": "run.started", "seq": 7}})])  # does not raise
    assert "could not send events run.started #7" in caplog.text
    layer.failing = False
    layer_send(layer, [("g", {"n": 8})])
    assert layer.calls == []  # skipped: Redis is not asked at every commit while it is down
    time.sleep(0.35)  # the pause (SEND_RETRY_S, 0.3 s here) passing is what is tested
    layer_send(layer, [("g", {"n": 9})])
    assert [call for _, call in layer.calls] == [[("g", {"n": 9})]]
