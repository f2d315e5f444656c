"""Who works on a run: the heartbeat that renews its lease, when a lease is stale, the row locks.

A claim is a compare-and-set on the run row (chat/engine/ledger/runs.py
`run_claim`); the holder renews `heartbeat_at` while it works, and anyone may
take over a lease whose heartbeat went stale. Every write of a step happens
under the run's row lock with the lease checked (chat/engine/ledger/runs.py
`run_write`), so a worker that lost its lease (a cancel, a take-over) changes
nothing.

Lock order everywhere: run, then tool execution, then conversation; and every
row lock is FOR NO KEY UPDATE (or an UPDATE of non-key columns), so that the
foreign-key checks of inserts (a RunEvent or Message pointing at the run)
never wait on it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Self

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections
from django.db.models import QuerySet
from django.utils import timezone

from chat.database import database_unreachable, database_up_since
from chat.engine.dispatch import dispatch_run
from chat.models import Run, RunStatus

logger = logging.getLogger(__name__)


def worker_name() -> str:
    """This process as audit rows name it: host and pid, read when asked.

    Not a module constant: under Celery's prefork pool the children are forked
    after import, and each must record its own pid, not its parent's.
    """
    return f"{socket.gethostname()}:{os.getpid()}"


def connection_release() -> None:
    """Give this thread's database connection back to the pool before a long wait.

    A run waits on its model and its tools for far longer than it talks to the
    database; holding a connection through those waits would make the number
    of runs in flight the number of connections. With PostgreSQL's pool the
    connection goes back (outside a transaction only) and the next query takes
    one again; a SQLite connection is a file handle and stays.
    """
    connection = connections[DEFAULT_DB_ALIAS]
    if connection.in_atomic_block or not connection.settings_dict["OPTIONS"].get("pool"):
        return
    connection.close()


class LeaseLost(Exception):
    """Another worker took the run over, or the run was cancelled: stop quietly."""


def run_recheck_later(*, run_id: Any) -> None:
    """A delivery found the run held by someone: look again once that lease could be stale.

    This is how a run whose worker died mid-step is taken over: the broker
    redelivers its task, possibly before the lease has gone stale, and this
    check comes back when it has. If the holder is alive by then, the run has
    either ended or shows a fresh heartbeat, and the check repeats.
    """
    if settings.TOOLCHAT_TASKS_IN_PROCESS:
        return  # no redelivery without a broker: a lease held here is held by a live thread
    held = Run.objects.filter(pk=run_id, status=RunStatus.RUNNING, lease__isnull=False).values_list(
        "heartbeat_at", flat=True
    )
    heartbeat = next(iter(held), None)
    if heartbeat is None:
        return
    now = timezone.now()
    stale_in = (heartbeat - now).total_seconds() + settings.TOOLCHAT_RUN_STALE_S
    dispatch_run(run_id, delay_s=max(0.5, stale_in, restart_grace_left(now)) + 0.5)


def restart_grace_left(now: datetime) -> float:
    """Seconds left during which nobody is presumed dead, the database having just restarted.

    No worker can renew a heartbeat while the database is down, so every
    worker that lived through an outage looks silent when it ends; this gives
    them TOOLCHAT_RESTART_GRACE_S to renew, or to store what they hold.
    """
    if settings.TOOLCHAT_RESTART_GRACE_S <= 0:
        return 0.0
    up_since = database_up_since()
    if up_since is None:
        return 0.0
    return settings.TOOLCHAT_RESTART_GRACE_S - (now - up_since).total_seconds()


def stale_cutoff(now: datetime) -> datetime | None:
    """A heartbeat older than this was a dead worker's; None: nobody is presumed dead yet."""
    if restart_grace_left(now) > 0:
        return None
    return now - timedelta(seconds=settings.TOOLCHAT_RUN_STALE_S)


class RowHeartbeat:
    """Renews a row's `heartbeat_at` while its worker waits on something.

    `rows` selects the row while it is still this worker's (a run under its
    lease, a call still running). Every TOOLCHAT_HEARTBEAT_S the row is
    renewed, and every second in between it is looked at: once it is not
    there (a cancel, a take-over), `on_lost` is called and the beat ends.

    The beats of a process share one thread (`_Beats`): a thread started and
    joined for every model call and every tool call cost a few milliseconds
    of each turn's critical path.
    """

    def __init__(self, rows: QuerySet[Any], on_lost: Callable[[], None], what: str) -> None:
        self.rows = rows
        self.on_lost = on_lost
        self.what = what
        self.stopped = False
        self.due = 0.0
        self.renewed = 0.0

    def __enter__(self) -> Self:
        self.renewed = time.monotonic()
        self.due = self.renewed + _beat_interval()
        _beats.add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        # No wait: the beats' thread may be waiting for a pooled connection, and the
        # worker must not wait for it. A beat under way sees `stopped` and calls nothing.
        self.stopped = True
        _beats.discard(self)

    def beat(self) -> bool:
        """Renew or look at the row, on the beats' thread; False once this beat is over.

        Raises the database's error when it is unreachable: the beat stays, and is
        renewed as soon as the database is back (a worker alive through an outage
        keeps its work).
        """
        now = time.monotonic()
        self.due = now + _beat_interval()
        if now - self.renewed >= settings.TOOLCHAT_HEARTBEAT_S:
            alive = self.rows.update(heartbeat_at=timezone.now())
            self.renewed = now
        else:
            alive = self.rows.exists()
        if not alive and not self.stopped:
            self.on_lost()
            return False
        return True


def _beat_interval() -> float:
    return min(settings.TOOLCHAT_HEARTBEAT_S, 1.0)


class _Beats:
    """The thread that beats every running heartbeat of this process, each when it is due."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._members: set[RowHeartbeat] = set()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def add(self, beat: RowHeartbeat) -> None:
        with self._lock:
            self._members.add(beat)
            # A forked Celery child inherits the object but not the thread.
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._run, name="toolchat-heartbeats", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def discard(self, beat: RowHeartbeat) -> None:
        with self._lock:
            self._members.discard(beat)

    def _run(self) -> None:
        while True:
            with self._lock:
                members = list(self._members)
            now = time.monotonic()
            next_due = min((beat.due for beat in members), default=now + 60)
            if next_due > now:
                self._wake.wait(next_due - now)
                self._wake.clear()
                continue
            for beat in sorted(members, key=lambda member: member.due):
                if beat.due > time.monotonic():
                    break
                beaten = self._beat_one(beat)
                try:
                    # After each beat, as each beat's own thread did: the beats of
                    # many runs back to back must not keep a connection between them.
                    connection_release()
                except Exception:
                    logger.exception("heartbeats could not give their connection back")
                if not beaten:
                    break  # the database is unreachable: every beat waits a round

    def _beat_one(self, beat: RowHeartbeat) -> bool:
        """One beat; False when the database is unreachable."""
        if beat.stopped:
            return True
        try:
            if not beat.beat():
                self.discard(beat)
        except (OperationalError, InterfaceError) as exc:
            if not database_unreachable(exc):
                logger.exception("heartbeat of %s failed", beat.what)
                self.discard(beat)
                return True
            logger.debug("heartbeat of %s: the database is unreachable", beat.what)
            connections[DEFAULT_DB_ALIAS].close()
            with self._lock:
                for member in self._members:
                    member.due = time.monotonic() + _beat_interval()
            return False
        except Exception:
            logger.exception("heartbeat of %s failed", beat.what)
            self.discard(beat)
        return True


_beats = _Beats()


class Heartbeat(RowHeartbeat):
    """Renews the run's lease while a model call or a tool call is in flight.

    A model may take long to send its first token, and the provider sleeps
    between retries: the stream yields nothing then, so the renewal cannot wait
    for it. A cancel (or a take-over) is noticed within a second and sets
    `lost_event`, which the provider watches (it ends the call), and the
    streaming loop stops at its next event.
    """

    def __init__(self, run: Run, token: uuid.UUID) -> None:
        self.run_id = run.pk
        self.lost_event = threading.Event()
        rows = Run.objects.filter(pk=run.pk, lease=token, status=RunStatus.RUNNING)
        super().__init__(rows, self.lost_event.set, f"run {run.pk}")

    @property
    def lost(self) -> bool:
        return self.lost_event.is_set()

    def check(self) -> None:
        """Raise LeaseLost if the run is no longer ours."""
        if self.lost:
            raise LeaseLost(str(self.run_id))
