"""The MCP servers of one process: their connections, on one event loop thread, and their tools.

The hub is a source of the tool registry: `registry.get()` and
`registry.specs()` reach its tools beside the Python ones, so the turn engine
and the executor never know a tool is remote. Nothing connects until a tool
list or a call is wanted; then each server is listed once (the caller waits,
at most the connect timeout), again in the background every `refresh_s`, when
the server says its list changed, and on demand (`refresh()`). A server that
cannot be listed is tried again, in the background, `retry_s` later: a down
server costs one wait, not one per turn.

A call runs on the tool's executor thread (tools/running.py) and waits here
for the loop, so the executor's deadline and cancellation apply as to any
tool. Progress notifications become `tool.progress` events.

Celery's prefork children inherit no thread: the loop is started in the
process that first needs it (the process id is checked).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from tools.context import ToolCancelled, ToolContext
from tools.mcp.config import McpServerConfig
from tools.mcp.connection import McpServerError, ServerConnection
from tools.mcp.results import server_failure, tool_output
from tools.mcp.specs import SEPARATOR, Listing, build_specs
from tools.results import ToolOutput
from tools.spec import ToolSpec

logger = logging.getLogger("tools.mcp")

T = TypeVar("T")

# While a call runs, how often its waiter looks whether the call was cancelled.
CANCEL_POLL_S = 0.1


@dataclass
class ServerState:
    """What is known of one server's tools."""

    config: McpServerConfig
    listing: Listing = field(default_factory=Listing)
    listed_at: datetime | None = None
    error: str = ""
    failed_at: float | None = None  # monotonic
    pending: concurrent.futures.Future[None] | None = None

    def status(self, connection: ServerConnection | None) -> dict[str, Any]:
        """The server as the API and `manage.py mcp_servers` show it (no secrets)."""
        return {
            "name": self.config.name,
            "transport": self.config.transport,
            "where": self.config.where,
            "state": "error" if self.error else "ready" if self.listed_at else "not connected",
            "error": self.error,
            "listed_at": self.listed_at.isoformat() if self.listed_at else None,
            "tools": sorted(self.listing.specs),
            "skipped": dict(self.listing.skipped),
            "connections": connection.started if connection else 0,
        }


class McpHub:
    """The MCP servers of this process and the tools they offer."""

    def __init__(
        self,
        servers: Sequence[McpServerConfig],
        *,
        connect_timeout: float = 10.0,
        refresh_s: float = 300.0,
        retry_s: float = 30.0,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.refresh_s = refresh_s
        self.retry_s = retry_s
        self._states = {s.name: ServerState(s) for s in servers if s.enabled}
        self.disabled = [s.name for s in servers if not s.enabled]
        self._lock = threading.Lock()  # the loop
        self._listing_lock = threading.Lock()  # each state's pending listing
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid: int | None = None
        self._connections: dict[str, ServerConnection] = {}
        self._closed = False

    # --- The registry's view --------------------------------------------------------------

    def specs(self) -> list[ToolSpec]:
        """Every tool of every server, listing the servers first if they never were."""
        if not self._states:
            return []
        self._ensure_listed()
        return [spec for state in self._states.values() for spec in state.listing.specs.values()]

    def get(self, name: str) -> ToolSpec | None:
        """The tool called `name`, or None (a name of no configured server never connects)."""
        server, separator, _tool = name.partition(SEPARATOR)
        state = self._states.get(server) if separator else None
        if state is None:
            return None
        spec = state.listing.specs.get(name)
        if spec is None:
            self._ensure_listed([server])
            spec = state.listing.specs.get(name)
        return spec

    def refresh(self, servers: Sequence[str] | None = None, *, wait: bool = True) -> None:
        """List the servers' tools again now (all when None); wait for them unless told not to."""
        names = list(self._states) if servers is None else [s for s in servers if s in self._states]
        futures = [self._start_listing(name) for name in names]
        if wait:
            concurrent.futures.wait(futures, timeout=self.connect_timeout * 2 + 1)

    def status(self) -> list[dict[str, Any]]:
        """Each configured server, whether it answered, and its tools."""
        return [state.status(self._connections.get(name)) for name, state in self._states.items()]

    # --- Listing ----------------------------------------------------------------------------

    def _ensure_listed(self, names: Sequence[str] | None = None) -> None:
        waits = []
        now = time.monotonic()
        for name in names if names is not None else list(self._states):
            state = self._states[name]
            first = state.listed_at is None and state.failed_at is None
            if state.pending is not None and not state.pending.done():
                if first:
                    waits.append(state.pending)
                continue
            retry = state.failed_at is not None and now - state.failed_at >= self.retry_s
            if first:
                waits.append(self._start_listing(name))
            elif retry:
                self._start_listing(name)
        if waits:
            concurrent.futures.wait(waits, timeout=self.connect_timeout * 2 + 1)

    def _start_listing(self, name: str) -> concurrent.futures.Future[None]:
        state = self._states[name]
        with self._listing_lock:
            if state.pending is not None and not state.pending.done():
                return state.pending
            listing = self._list(name)
            try:
                state.pending = self._submit(listing)
            except McpServerError:  # closed: nothing is listed any more
                listing.close()
                done: concurrent.futures.Future[None] = concurrent.futures.Future()
                done.set_result(None)
                return done
            return state.pending

    async def _list(self, name: str) -> None:
        state = self._states[name]
        connection = self._connection(name)
        try:
            # The whole listing, connecting included, within one bound: a server that
            # never answers is an error (retried later), not a wait on every turn.
            tools = await asyncio.wait_for(connection.list_tools(), self.connect_timeout * 2)
        except TimeoutError:
            state.error = (
                f"The MCP server {name!r} did not list its tools within "
                f"{self.connect_timeout * 2:g} s."
            )
            state.failed_at = time.monotonic()
            logger.warning("%s (tried again in %g s)", state.error, self.retry_s)
            await connection.close()
            return
        except McpServerError as exc:
            state.error = str(exc)
            state.failed_at = time.monotonic()
            logger.warning("MCP server %s: %s (tried again in %g s)", name, exc, self.retry_s)
            return
        except Exception as exc:
            state.error = state.config.redact(f"The MCP server {name!r} could not be listed: {exc}")
            state.failed_at = time.monotonic()
            logger.exception("MCP server %s: listing its tools failed", name)
            return
        listing = build_specs(state.config, tools, self.call)
        # One assignment: a reader on another thread sees the old list or the new one.
        state.listing = listing
        state.listed_at = datetime.now(UTC)
        state.error = ""
        state.failed_at = None
        logger.info(
            "MCP server %s: %d tool(s) offered%s",
            name,
            len(listing.specs),
            f", {len(listing.skipped)} left out" if listing.skipped else "",
        )

    def _connection(self, name: str) -> ServerConnection:
        connection = self._connections.get(name)
        if connection is None:
            connection = ServerConnection(
                self._states[name].config, connect_timeout=self.connect_timeout
            )
            connection.on_tools_changed = lambda: self._start_listing(name)
            self._connections[name] = connection
        return connection

    # --- Calls ------------------------------------------------------------------------------

    def call(
        self,
        config: McpServerConfig,
        tool: str,
        context: ToolContext,
        arguments: dict[str, Any],
    ) -> ToolOutput:
        """Call a server's tool from the executor's thread; its result as a ToolOutput."""

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            percent = progress / total * 100 if total else progress
            try:
                context.emit_progress(percent, message or "")
            except (ToolCancelled, TypeError, ValueError):
                logger.debug("MCP server %s: a progress report was dropped", config.name)

        # The loop first: in a forked child it starts afresh, without the parent's connections.
        try:
            loop = self._running_loop()
        except McpServerError as exc:
            return server_failure(str(exc))
        # The executor's deadline ends the call first; the SDK's is a backstop.
        request = self._connection(config.name).call_tool(
            tool,
            arguments,
            timeout=config.timeout + 5,
            progress=progress,
            trace=context.trace_headers,
        )
        future = asyncio.run_coroutine_threadsafe(request, loop)
        while True:
            try:
                result = future.result(timeout=CANCEL_POLL_S)
                break
            except concurrent.futures.TimeoutError:
                if context.cancelled:
                    future.cancel()
                    raise ToolCancelled(
                        f"the call of {config.name}{SEPARATOR}{tool} was abandoned"
                    ) from None
            except concurrent.futures.CancelledError:
                return server_failure("The call was stopped: the process is shutting down.")
            except McpServerError as exc:
                # Already logged where it happened; the model reads it as the call's error.
                return server_failure(str(exc))
        return tool_output(result, server=config.name, tool=tool, context=context)

    # --- The loop ---------------------------------------------------------------------------

    def _submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, self._running_loop())

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is not None and self._pid == os.getpid():
                return self._loop
            if self._closed:
                raise McpServerError("The MCP servers were closed: the process is shutting down.")
            # First use in this process (or a forked child's: the parent's thread is not here).
            self._connections = {}
            for state in self._states.values():
                state.pending = None
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                refreshing = loop.create_task(self._refresh_periodically())
                loop.run_forever()
                refreshing.cancel()
                loop.run_until_complete(asyncio.gather(refreshing, return_exceptions=True))
                loop.close()

            self._thread = threading.Thread(target=serve, name="mcp-hub", daemon=True)
            self._thread.start()
            ready.wait()
            self._loop, self._pid = loop, os.getpid()
            return loop

    async def _refresh_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_s)
            for name in self._states:
                self._start_listing(name)

    def close(self, timeout: float = 10.0) -> None:
        """Close every connection (stdio servers are stopped) and the loop; idempotent."""
        with self._lock:
            self._closed = True
            loop, self._loop = self._loop, None
            thread, self._thread = self._thread, None
            if loop is None or self._pid != os.getpid():
                return

        async def close_all() -> None:
            await asyncio.gather(
                *(connection.close() for connection in self._connections.values()),
                return_exceptions=True,
            )

        try:
            asyncio.run_coroutine_threadsafe(close_all(), loop).result(timeout)
        except Exception:
            logger.warning("MCP servers did not all close within %g s", timeout, exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout)
        self._connections = {}
