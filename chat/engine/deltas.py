"""A model step's text, as live events: the first words at once, then one event per interval.

While the database cannot be reached, the text is kept here instead: a stream
is not given up for its live events (they could only be had again by asking
the model again), and once one publish has failed the buffer stops trying, so
the stream is not held up by a wait for the database at every interval. What
was kept goes out with the answer (`take`), stored with it once the database
is back.

The events themselves are the ledger's (chat/engine/ledger/messages.py
`answer_streamed`, `answer_restarted`): the text streamed is the answer the
ledger stores once the call is over, shown ahead, and the module that writes
a run's messages is the one that says what they are, streamed or stored.
This buffer only decides when a part goes out.
"""

from __future__ import annotations

import time
import uuid
from types import TracebackType

from django.conf import settings

from chat.database import database_unreachable
from chat.engine.ledger import answer_restarted, answer_streamed
from chat.live.event_types import Event
from chat.live.events import event_publish
from chat.llm.base import Completion, StreamRestart, TextDelta
from chat.models import Run


class DeltaBuffer:
    """Publishes the first text delta at once, then one `message.delta` event per interval.

    Used as a context manager around the call: what was shown stays shown
    when the call raises (the pending text is published on the way out).
    `shown=False` for a call whose stream is not text for the user (a
    decider's JSON): its answer's text is shown at the end instead (`end`).
    """

    def __init__(self, run: Run, message_id: uuid.UUID, *, shown: bool = True) -> None:
        self.run = run
        self.message_id = str(message_id)
        self.shown = shown
        self.pending: list[str] = []
        self.flushed_at = -float("inf")  # the first token is worth a statement of its own
        self.unreachable = False  # a publish found the database gone: keep the rest

    def __enter__(self) -> DeltaBuffer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None:
            self.flush()  # what was shown stays shown

    def on_delta(self, event: TextDelta | StreamRestart) -> None:
        """A streamed event of the call: text to show, or a restart that takes it back."""
        if isinstance(event, StreamRestart):
            self.reset(event.reason)
        elif self.shown:
            self.add(event.text)

    def end(self, completion: Completion | None) -> list[Event]:
        """The call is over: the events its answer's batch takes, or none for a failed call.

        A failed call's text is published now (what was shown stays shown); an
        answer's rest goes out with the answer, and so does the whole text of one
        whose stream was not shown.
        """
        if completion is None:
            self.flush()
            return []
        if not self.shown and completion.content:
            self.add(completion.content)
        return self.take()

    def add(self, text: str) -> None:
        self.pending.append(text)
        if self.unreachable:
            return
        if time.monotonic() - self.flushed_at >= settings.TOOLCHAT_DELTA_INTERVAL_S:
            self.flush()

    def reset(self, reason: str) -> None:
        self.pending.clear()
        event_publish(
            run=self.run,
            event=answer_restarted(self.message_id, reason),
        )

    def take(self) -> list[Event]:
        """The text not yet published, as an event for the caller's batch (or none)."""
        if not self.pending:
            return []
        text = "".join(self.pending)
        self.pending.clear()
        return [answer_streamed(self.message_id, text)]

    def flush(self) -> None:
        if self.pending and not self.unreachable:
            text = "".join(self.pending)
            try:
                event_publish(run=self.run, event=answer_streamed(self.message_id, text))
            except Exception as exc:
                if not database_unreachable(exc):
                    raise
                self.unreachable = True  # kept in `pending`, for `take`
                return
            self.pending.clear()
        self.flushed_at = time.monotonic()
