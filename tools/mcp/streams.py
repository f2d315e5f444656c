"""The plumbing under an MCP connection: when its stream ends, a request that stops waiting then, and readable reasons.

tools/mcp/connection.py holds the connection; these are the pieces it is
built from, each small and about the SDK's streams and exceptions, not about
a server: the read stream watched for its end (`EndWatch`), a request raced
against that end (`until_lost`), and one line of text for what anyio's task
groups raise (`reason`, `innermost`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

import anyio
import httpx2
from mcp import MCPError

T = TypeVar("T")


class ConnectionLost(Exception):
    """The connection ended while a request waited for its answer."""


class EndWatch:
    """A transport's read stream, as the SDK's session reads it, that says when it ends.

    The SDK answers the requests waiting on a stream that ended, but a request sent
    afterwards fails with the same error, as if it had been in flight: told here
    first, the connection knows it is gone before the next call is sent.
    """

    def __init__(self, stream: Any, on_end: Callable[[], None]) -> None:
        self._stream = stream
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        # The context of the last message's sender, which the SDK runs its handling in.
        return getattr(self._stream, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


async def until_lost(request: Coroutine[Any, Any, T], lost: asyncio.Future[str] | None) -> T:
    """The request's answer, or ConnectionLost as soon as the connection ends."""
    task = asyncio.ensure_future(request)
    if lost is None:
        return await task
    waiters: set[asyncio.Future[Any]] = {task, lost}
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
    if task.done() and not task.cancelled():
        return task.result()
    raise ConnectionLost(lost.result() if lost.done() else "the connection was closed")


def innermost(exc: BaseException) -> BaseException | None:
    """The one exception inside the task groups anyio raises, or None when there are several."""
    while isinstance(exc, BaseExceptionGroup):
        if len(exc.exceptions) != 1:
            return None
        exc = exc.exceptions[0]
    return exc


def reason(exc: BaseException) -> str:
    """One readable line for an exception, looking inside the task groups anyio raises."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(reason(inner) for inner in exc.exceptions)
    if isinstance(exc, MCPError):
        return exc.message
    if isinstance(exc, httpx2.HTTPStatusError):
        # Its text holds the whole URL; the status is what matters.
        return f"HTTP {exc.response.status_code} {exc.response.reason_phrase}".strip()
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
