"""One MCP server's connection: opened on first use, reused, and reopened after it dies.

Everything here runs on the hub's event loop (tools/mcp/hub.py). The
transport and the `ClientSession` are entered and left in one task (anyio's
cancel scopes belong to the task that entered them), which holds them open
until the connection is closed; calls from other tasks share the session.

The end of a connection is seen where the SDK reads it: the transport's read
stream is watched (`EndWatch`, tools/mcp/streams.py), so a stdio server that exits (or an HTTP
transport that fails) ends the calls waiting on it at once, and the next call
opens a new connection first. A call in flight when its server went away is
an error (it may have had effects: it is not repeated); one the server never
received (an HTTP server that restarted and forgot the session) is sent
again on a new connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from typing import Any, cast

import anyio
import httpx2
from mcp import ClientSession, MCPError, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import MCP_SESSION_ID, streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.types import CONNECTION_CLOSED, INTERNAL_ERROR

from tools.mcp.config import McpServerConfig
from tools.mcp.streams import ConnectionLost, EndWatch, innermost, reason, until_lost

logger = logging.getLogger("tools.mcp")

# The SDK's answer to a request an HTTP server refused with an error status it does not say.
HTTP_REFUSED = (INTERNAL_ERROR, "Server returned an error response")
# While an HTTP call waits, how often the server is pinged to see that it is still there.
PING_INTERVAL_S = 1.0
# A tool list over more pages than this is a server's bug, not a list.
MAX_PAGES = 50


# Errors that mean the connection is gone (not that the server refused a call).
_TRANSPORT_ERRORS = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    httpx2.TransportError,
    OSError,
)


class McpServerError(Exception):
    """The server could not be reached, or its connection broke; the message says which."""


class ServerConnection:
    """The session with one server, and what happened to it."""

    def __init__(self, config: McpServerConfig, *, connect_timeout: float) -> None:
        self.config = config
        self.connect_timeout = connect_timeout
        self.session: ClientSession | None = None
        self.started: int = 0  # how many times a connection was opened (restarts + 1)
        self.on_tools_changed: Callable[[], object] | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None
        self._alive = False
        # Set, with the reason, when the open connection ends: requests in flight stop waiting.
        self._lost: asyncio.Future[str] | None = None
        # The last HTTP error status the server answered with, e.g. "HTTP 401 Unauthorized".
        self._refused = ""
        # An HTTP server answered 404 to our session: it no longer knows it (it restarted).
        self._session_gone = False

    @property
    def name(self) -> str:
        return self.config.name

    # --- Opening and closing -----------------------------------------------------------

    async def open_session(self) -> ClientSession:
        """The live session, opening (or reopening) the connection when there is none."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.session is not None and self._alive:
                return self.session
            await self._close()
            self.session = await self._open()
            return self.session

    async def _open(self) -> ClientSession:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[ClientSession] = loop.create_future()
        self._stop = asyncio.Event()
        self._lost = lost = loop.create_future()
        self._refused = ""
        self._session_gone = False
        self._holder = asyncio.create_task(
            self._hold(ready, self._stop, lost), name=f"mcp-{self.name}"
        )
        started = time.monotonic()
        try:
            session = await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout)
        except TimeoutError:
            # Stuck before it was ready (in `initialize`), where asking it to stop does
            # not reach it: cancelled (the SDK still ends a stdio server's process).
            holder, self._holder = self._holder, None
            if holder is not None:
                holder.cancel()
                await asyncio.wait({holder}, timeout=5)
            raise McpServerError(
                f"The MCP server {self.name!r} ({self.config.where}) did not answer within "
                f"{self.connect_timeout:g} s of being started."
            ) from None
        except McpServerError:
            await self._close()
            raise
        self.started += 1
        self._alive = True
        logger.info(
            "MCP server %s connected over %s in %d ms (%s)%s",
            self.name,
            self.config.transport,
            (time.monotonic() - started) * 1000,
            self.config.where,
            f", restart {self.started - 1}" if self.started > 1 else "",
        )
        return session

    async def _hold(
        self, ready: asyncio.Future[ClientSession], stop: asyncio.Event, lost: asyncio.Future[str]
    ) -> None:
        why = "the connection was closed"
        try:
            async with AsyncExitStack() as stack:
                read, write = await self._transport(stack)
                session = await stack.enter_async_context(
                    ClientSession(
                        EndWatch(read, lambda: self._ended(lost, stop)),
                        write,
                        message_handler=self._on_message,
                    )
                )
                await session.initialize()
                if not ready.done():
                    ready.set_result(session)
                await stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as exc:
            why = self._reason(exc)
            if not ready.done():
                ready.set_exception(
                    McpServerError(
                        f"The MCP server {self.name!r} ({self.config.where}) could not be "
                        f"started: {why}"
                    )
                )
            else:
                logger.warning("MCP server %s: its connection ended: %s", self.name, why)
        finally:
            self._alive = False
            if not lost.done():
                lost.set_result(why)

    def _ended(self, lost: asyncio.Future[str], stop: asyncio.Event) -> None:
        # The server closed the connection (a stdio server exited), or we did: the calls
        # waiting on it end now, and the next one opens a new connection.
        self._alive = False
        if not lost.done():
            lost.set_result(
                "the connection was closed" if stop.is_set() else "it closed the connection"
            )

    async def _transport(self, stack: AsyncExitStack) -> tuple[Any, Any]:
        config = self.config
        if config.transport == "stdio":
            parameters = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=config.cwd,
            )
            read, write = await stack.enter_async_context(stdio_client(parameters))
            return read, write
        client = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=dict(config.headers),
                timeout=httpx2.Timeout(self.connect_timeout, read=max(300.0, config.timeout)),
                event_hooks={"response": [self._note_refusal]},
            )
        )
        read, write = await stack.enter_async_context(
            streamable_http_client(config.url, http_client=client)
        )
        return read, write

    async def _note_refusal(self, response: httpx2.Response) -> None:
        # The SDK turns an HTTP error into a JSON-RPC error, whose code and message are the
        # server's or its own, never the status: what the status says is kept here.
        if response.status_code >= 400:
            self._refused = f"HTTP {response.status_code} {response.reason_phrase}".strip()
        if response.status_code == 404 and MCP_SESSION_ID in response.request.headers:
            # As MCP asks, a 404 to a request in a session means the server ended the
            # session (or restarted, forgetting it): the request was refused, not run.
            self._session_gone = True
            self._alive = False

    async def _on_message(self, message: Any) -> None:
        # The server says its tools changed: the hub lists them again.
        if isinstance(message, types.ToolListChangedNotification):
            logger.info("MCP server %s: its tool list changed", self.name)
            if self.on_tools_changed is not None:
                self.on_tools_changed()

    async def close(self) -> None:
        """Close the connection (a stdio server is stopped); the next use reopens it."""
        if self._lock is None:
            await self._close()
            return
        async with self._lock:
            await self._close()

    async def _close(self) -> None:
        self._alive = False
        self.session = None
        holder, self._holder = self._holder, None
        if holder is None:
            return
        if self._stop is not None:
            self._stop.set()
        try:
            # The SDK gives a stdio server a moment to exit on its own, then ends it.
            await asyncio.wait_for(holder, timeout=5)
        except BaseException:
            holder.cancel()
            logger.debug("MCP server %s: closing took too long", self.name, exc_info=True)

    # --- Requests --------------------------------------------------------------------------

    async def list_tools(self) -> list[types.Tool]:
        """Every tool the server lists (all pages)."""
        session = await self.open_session()
        lost = self._lost
        tools: list[types.Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        try:
            while True:
                if len(seen) >= MAX_PAGES:
                    raise McpServerError(
                        f"The MCP server {self.name!r} lists its tools over more than "
                        f"{MAX_PAGES} pages; it was not listed."
                    )
                page = await until_lost(
                    session.list_tools(
                        params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    ),
                    lost,
                )
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor or cursor in seen:
                    return tools
                seen.add(cursor)
        except MCPError as exc:
            raise McpServerError(
                f"The MCP server {self.name!r} refused to list its tools: {self._reason(exc)}"
            ) from exc
        except (*_TRANSPORT_ERRORS, ConnectionLost) as exc:
            self._alive = False
            raise McpServerError(
                f"The MCP server {self.name!r} was lost while listing its tools: {self._reason(exc)}"
            ) from exc

    async def call_tool(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        timeout: float,
        progress: ProgressFnT | None = None,
        trace: Mapping[str, str] | None = None,
    ) -> types.CallToolResult:
        """Call one tool; a request the server never received is sent again on a new connection.

        `trace` (the call's `traceparent`, when traces are on) goes in the request's
        `_meta`, where MCP carries W3C trace context over every transport.
        """
        retry: BaseException
        for attempt in (1, 2):
            session = await self.open_session()
            watch = self._watch(session) if self.config.transport == "http" else None
            try:
                return await until_lost(
                    session.call_tool(
                        tool,
                        arguments,
                        read_timeout_seconds=timeout,
                        progress_callback=progress,
                        meta=cast(Any, dict(trace)) if trace else None,
                    ),
                    self._lost,
                )
            except MCPError as exc:
                if self._session_gone:
                    # An HTTP server that restarted refused the old session, and the call.
                    retry = exc
                elif exc.code == CONNECTION_CLOSED:
                    raise self._lost_during(tool, "it closed the connection") from exc
                else:
                    raise McpServerError(
                        f"The MCP server {self.name!r} answered the call with an error: "
                        f"{self._reason(exc)}"
                    ) from exc
            except ConnectionLost as exc:
                raise self._lost_during(tool, str(exc)) from exc
            except _TRANSPORT_ERRORS as exc:
                self._alive = False
                raise McpServerError(
                    f"The MCP server {self.name!r} could not be reached: {self._reason(exc)}"
                ) from exc
            finally:
                if watch is not None:
                    watch.cancel()
            self._alive = False
            logger.warning(
                "MCP server %s had stopped before a call to %s (%s); reconnecting",
                self.name,
                tool,
                self._reason(retry),
            )
            if attempt == 2:
                raise McpServerError(
                    f"The MCP server {self.name!r} stopped again right after a restart: "
                    f"{self._reason(retry)}"
                ) from retry
        raise AssertionError("unreachable")  # pragma: no cover

    def _watch(self, session: ClientSession) -> asyncio.Task[None]:
        """Ping an HTTP server while a call waits: one that died mid-call is noticed in seconds.

        (A stdio server's exit is seen at once; an HTTP response stream that breaks
        is not, and the call would wait for its timeout.) A ping that is merely
        slow is no sign of death: a busy server may answer late.
        """
        lost = self._lost

        async def watch() -> None:
            while lost is not None and not lost.done():
                await asyncio.sleep(PING_INTERVAL_S)
                try:
                    await asyncio.wait_for(session.send_ping(), PING_INTERVAL_S * 5)
                except (TimeoutError, MCPError):
                    continue
                except Exception as exc:
                    if not lost.done():
                        lost.set_result(f"it stopped answering: {self._reason(exc)}")
                    return

        return asyncio.create_task(watch(), name=f"mcp-{self.name}-watch")

    def _reason(self, exc: BaseException) -> str:
        inner = innermost(exc)
        if isinstance(inner, MCPError) and (inner.code, inner.message) == HTTP_REFUSED:
            return self.config.redact(self._refused or inner.message)
        return self.config.redact(reason(exc))

    def _lost_during(self, tool: str, reason: str) -> McpServerError:
        self._alive = False
        logger.warning("MCP server %s was lost during a call to %s: %s", self.name, tool, reason)
        return McpServerError(
            f"The MCP server {self.name!r} was lost during the call ({reason}), so the call "
            "may or may not have taken effect. It is restarted for the next call."
        )
