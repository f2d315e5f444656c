"""One MCP server's connection: opened on first use, reused, and reopened after it dies.

Everything here runs on the hub's event loop (tools/mcp/hub.py). The
transport and the `ClientSession` are entered and left in one task (anyio's
cancel scopes belong to the task that entered them), which holds them open
until the connection is closed; calls from other tasks share the session.

A stdio server that exits is noticed by the SDK: its pending requests end
with CONNECTION_CLOSED, and later writes fail at once. The first is an error
for the call in flight (it may have had effects: it is not repeated); the
second never reached the server, so the call is sent again on a new
connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any

import anyio
import httpx
from mcp import ClientSession, McpError, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.session import ProgressFnT
from mcp.types import CONNECTION_CLOSED

from tools.mcp.config import McpServerConfig

logger = logging.getLogger("tools.mcp")


# Errors that mean the connection is gone (not that the server refused a call).
_TRANSPORT_ERRORS = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    httpx.TransportError,
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
        self.on_tools_changed: Callable[[], None] | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None
        self._alive = False

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
        self._holder = asyncio.create_task(self._hold(ready, self._stop), name=f"mcp-{self.name}")
        started = time.monotonic()
        try:
            session = await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout)
        except TimeoutError:
            await self._close()
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

    async def _hold(self, ready: asyncio.Future[ClientSession], stop: asyncio.Event) -> None:
        try:
            async with AsyncExitStack() as stack:
                read, write = await self._transport(stack)
                session = await stack.enter_async_context(
                    ClientSession(read, write, message_handler=self._on_message)
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
            reason = _reason(exc)
            if not ready.done():
                ready.set_exception(
                    McpServerError(
                        f"The MCP server {self.name!r} ({self.config.where}) could not be "
                        f"started: {reason}"
                    )
                )
            else:
                logger.warning("MCP server %s: its connection ended: %s", self.name, reason)
        finally:
            self._alive = False

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
            create_mcp_http_client(
                headers=dict(config.headers) or None,
                timeout=httpx.Timeout(self.connect_timeout, read=max(300.0, config.timeout)),
            )
        )
        read, write, _session_id = await stack.enter_async_context(
            streamable_http_client(config.url, http_client=client)
        )
        return read, write

    async def _on_message(self, message: Any) -> None:
        # The server says its tools changed: the hub lists them again.
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
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
        tools: list[types.Tool] = []
        cursor: str | None = None
        try:
            while True:
                page = await session.list_tools(
                    params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
                )
                tools.extend(page.tools)
                cursor = page.nextCursor
                if not cursor:
                    return tools
        except McpError as exc:
            raise McpServerError(
                f"The MCP server {self.name!r} refused to list its tools: {exc.error.message}"
            ) from exc
        except _TRANSPORT_ERRORS as exc:
            self._alive = False
            raise McpServerError(
                f"The MCP server {self.name!r} was lost while listing its tools: {_reason(exc)}"
            ) from exc

    async def call_tool(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        timeout: float,
        progress: ProgressFnT | None = None,
    ) -> types.CallToolResult:
        """Call one tool; a connection found dead before the request was sent is reopened once."""
        for attempt in (1, 2):
            session = await self.open_session()
            try:
                return await session.call_tool(
                    tool,
                    arguments,
                    read_timeout_seconds=timedelta(seconds=timeout),
                    progress_callback=progress,
                )
            except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
                # Raised by the write: the request never reached the server.
                self._alive = False
                logger.warning(
                    "MCP server %s had stopped before a call to %s; restarting it", self.name, tool
                )
                if attempt == 2:
                    raise McpServerError(
                        f"The MCP server {self.name!r} stopped again right after a restart: "
                        f"{_reason(exc)}"
                    ) from exc
            except McpError as exc:
                if exc.error.code != CONNECTION_CLOSED:
                    raise McpServerError(
                        f"The MCP server {self.name!r} answered the call with an error: "
                        f"{exc.error.message}"
                    ) from exc
                self._alive = False
                logger.warning(
                    "MCP server %s closed its connection during a call to %s", self.name, tool
                )
                raise McpServerError(
                    f"The MCP server {self.name!r} closed its connection during the call (it "
                    "stopped or crashed), so the call may or may not have taken effect. The "
                    "server is restarted for the next call."
                ) from exc
            except _TRANSPORT_ERRORS as exc:
                self._alive = False
                raise McpServerError(
                    f"The MCP server {self.name!r} could not be reached: {_reason(exc)}"
                ) from exc
        raise AssertionError("unreachable")  # pragma: no cover


def _reason(exc: BaseException) -> str:
    """One readable line for an exception, looking inside the task groups anyio raises."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(inner) for inner in exc.exceptions)
    if isinstance(exc, McpError):
        return exc.error.message
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
