"""Server-Sent Events: the framing of an event stream, its keep-alive, and the response.

The REST API's `Accept: text/event-stream` answers (a run's events, a post
with `?stream`) and the OpenAI-compatible API's stream both go through here;
the events themselves come from chat/live/streams.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from django.http import StreamingHttpResponse


def sse_format(envelope: dict[str, Any]) -> str:
    """One event in Server-Sent Events framing: id is the seq, event is the type."""
    data = json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)
    return f"id: {envelope['seq']}\nevent: {envelope['type']}\ndata: {data}\n\n"


async def sse_body(
    events: AsyncIterator[dict[str, Any]], *, keepalive_s: float = 15.0
) -> AsyncIterator[str]:
    """Frame the events as SSE, with a comment line when nothing happened for a while."""
    yield ": connected\n\n"
    async for envelope in with_keepalive(events, keepalive_s):
        # A proxy would close a silent connection; a comment keeps it open.
        yield ": keep-alive\n\n" if envelope is None else sse_format(envelope)


async def with_keepalive(
    events: AsyncIterator[dict[str, Any]], seconds: float
) -> AsyncIterator[dict[str, Any] | None]:
    """The events, with a None whenever none came for `seconds` (for a stream's keep-alive)."""
    iterator = aiter(events)
    pending: asyncio.Future[dict[str, Any]] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait({pending}, timeout=seconds)
            if not done:
                yield None
                continue
            try:
                envelope = pending.result()
            except StopAsyncIteration:
                return
            finally:
                pending = None
            yield envelope
    finally:
        if pending is not None:
            pending.cancel()
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


def sse_response(
    events: AsyncIterator[dict[str, Any]], *, keepalive_s: float = 15.0, status: int = 200
) -> StreamingHttpResponse:
    """A streaming text/event-stream response over an event iterator."""
    response = StreamingHttpResponse(
        sse_body(events, keepalive_s=keepalive_s), content_type="text/event-stream", status=status
    )
    response["Cache-Control"] = "no-cache"
    # nginx and similar proxies buffer responses unless told not to.
    response["X-Accel-Buffering"] = "no"
    return response
