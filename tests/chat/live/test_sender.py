"""Events go to the channel layer from one loop per process, in the order they were queued."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

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
