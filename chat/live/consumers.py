"""The WebSocket consumer of /ws/conversations/{id}/: a conversation's live events.

Thin: it authenticates (chat/live/ws_auth.py did the work), checks ownership before
joining anything, reads each frame (chat/live/frames.py), and forwards client
messages to the same services the REST API uses, on the sockets' own threads
(chat/live/socket_calls.py). Delivery is chat/live/streams.py's cursor over the stored events, so a
client that resumes with the last seq it saw gets everything after it, in
order, exactly once.

Client messages: {"type": "resume", "after": SEQ}, {"type": "message",
"content": ...} (counted against the same per-user message rate as the REST
API), {"type": "cancel", "run_id": ...}, and {"type": "approve" or
"reject", "execution_id": ..., "reason": ...} for a tool call of this
conversation that waits for a decision. Server messages: event
envelopes ({"seq", "type", "run_id", "ts", "data"}), plus {"type": "ping"},
{"type": "ack", ...} and {"type": "error", "code", "message"}, which carry no
seq because they are not run events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from typing import Any
from urllib.parse import parse_qs

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from chat.database import database_unreachable
from chat.exceptions import ToolchatError
from chat.inputs import MessageInput, validation_error_body
from chat.live.frames import APPROVAL_CHOICES, FrameRefused, frame_read
from chat.live.slots import slot_give_back, slot_renew, slot_take
from chat.live.socket_calls import (
    socket_conversation_get,
    socket_run_cancel,
    socket_run_start,
    socket_tool_call_decide,
)
from chat.live.streams import MAX_SEQ, conversation_cursor, event_stream, stored_between
from chat.live.ws_auth import CLOSE_TRY_AGAIN_LATER
from chat.telemetry.propagation import caller_context

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_TOO_MANY = 4429
# Without ?after= in the URL, a client may still send `resume` as its first
# message; live events wait this long for it, so that the replay comes first.
RESUME_GRACE_S = 0.3


class UnroutedConsumer(AsyncWebsocketConsumer):
    """Any other path (or a malformed conversation id): refused with 4404, nothing logged."""

    channel_layer_alias = "none: this socket only says no"

    async def connect(self) -> None:
        await self.accept()
        await self.close(code=CLOSE_NOT_FOUND)


class ConversationConsumer(AsyncWebsocketConsumer):
    """One socket: one user watching one of their conversations."""

    # No channel of the socket's own: nothing is ever sent to one, since
    # event_stream subscribes for the socket (and outlives layer errors). A failed
    # receive on a consumer's channel ends the whole application, which is how
    # idle sockets died under redis-py 8's 5 s read timeout. An alias that
    # CHANNEL_LAYERS does not name gives no layer (get_channel_layer returns None).
    channel_layer_alias = "none: event_stream subscribes for the socket"

    conversation_id: Any
    user_id: int | None = None
    socket_id: str = ""
    pump: asyncio.Task[None] | None = None
    pinger: asyncio.Task[None] | None = None
    starter: asyncio.Task[None] | None = None
    delivered: int = 0
    first_sent: int | None = None

    async def connect(self) -> None:
        # Custom close codes need an accepted socket, so refusals accept first.
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        conversation_id = self.scope["url_route"]["kwargs"]["conversation_id"]
        try:
            conversation = await socket_conversation_get(conversation_id, user)
        except ToolchatError:
            await self.accept()
            await self.close(code=CLOSE_NOT_FOUND)
            return
        # Counted across the web processes (chat/live/slots.py).
        socket_id = uuid.uuid4().hex
        if not await slot_take(user.pk, socket_id):
            await self.accept()
            await self.close(code=CLOSE_TOO_MANY)
            return
        self.socket_id = socket_id
        self.user_id = user.pk
        after = _after_from_query(self.scope.get("query_string", b""))
        # "Live from now on" means from before the client can see the socket open:
        # whatever is published from here on is the client's.
        start = after if after is not None else await conversation_cursor(conversation.pk)
        self.conversation = conversation
        self.conversation_id = conversation.pk
        self.delivered = 0
        await self.accept()
        self.pinger = asyncio.create_task(self._ping())
        if after is not None:
            self._start(after)
        else:
            self.starter = asyncio.create_task(self._start_after_grace(start))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            # `disconnect` runs only when the client or server closes the socket;
            # when the application itself fails, this is the one way out left.
            await self._release()

    async def disconnect(self, code: int) -> None:
        await self._release()

    async def _release(self) -> None:
        """Stop the socket's tasks and give its slot back (once, whichever way it ends)."""
        for task in (self.pump, self.pinger, self.starter):
            if task is not None:
                task.cancel()
        if self.user_id is not None:
            user_id, self.user_id = self.user_id, None
            await slot_give_back(user_id, self.socket_id)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.user_id is None:
            return
        message = frame_read(text_data, bytes_data)
        if isinstance(message, FrameRefused):
            refused = message
            await self._error(
                refused.code, refused.message, field=refused.field, details=refused.details
            )
            return
        kind = message.get("type")
        if kind == "resume":
            await self._resume(message.get("after"))
        elif kind == "message":
            await self._post({key: value for key, value in message.items() if key != "type"})
        elif kind == "cancel":
            await self._cancel(message.get("run_id"))
        elif kind in ("approve", "reject"):
            choices = {key: message[key] for key in APPROVAL_CHOICES if key in message}
            await self._decide(
                message.get("execution_id"),
                approve=kind == "approve",
                reason=message.get("reason"),
                choices=choices,
            )
        else:
            await self._error(
                "unknown_type",
                f"Unknown message type {kind!r}; use resume, message, cancel, approve or reject.",
            )

    # --- client requests ------------------------------------------------------------

    async def _resume(self, after: Any) -> None:
        if isinstance(after, bool) or not isinstance(after, int) or not 0 <= after < MAX_SEQ:
            await self._error("invalid_after", "`after` must be a seq number (an integer >= 0).")
            return
        if self.starter is not None:
            self.starter.cancel()
            self.starter = None
        if self.pump is None or self.first_sent is None or after >= self.delivered:
            # Nothing delivered yet, or the client is ahead of this socket: (re)start
            # the stream at the client's cursor.
            if self.pump is not None:
                self.pump.cancel()
            self.delivered = max(self.delivered, after)
            self._start(after)
            return
        if after < self.first_sent - 1:
            # A late resume: live events already went out, but the client missed
            # some before them. Send those now (older seqs after newer ones, but
            # nothing missing and nothing twice); the live stream goes on as it is.
            missed = await stored_between(self.conversation_id, after, self.first_sent)
            self.first_sent = after + 1
            for envelope in missed:
                await self._send(envelope)

    async def _post(self, body: dict[str, Any]) -> None:
        # The REST post's own serializer: the same fields, the same errors.
        message = MessageInput(data=body)
        if not message.is_valid():
            await self._invalid(validation_error_body(message.errors))
            return
        try:
            # A socket opened with a W3C traceparent: its turns join the caller's trace.
            with caller_context(_handshake_headers(self.scope)):
                run = await socket_run_start(
                    self.conversation,
                    message.validated_data["content"],
                    self.scope["user"],
                    message.validated_data.get("replaces"),
                    message.validated_data.get("images") or (),
                )
        except ToolchatError as exc:
            await self._error(exc.code, exc.message, field=exc.field, details=exc.details)
            return
        await self._send(
            {
                "type": "ack",
                "action": "message",
                "run_id": str(run.pk),
                "message_id": str(run.trigger_message_id),
            }
        )

    async def _cancel(self, run_id: Any) -> None:
        if not isinstance(run_id, str):
            await self._error("invalid_run_id", "`run_id` must be a run id string.", field="run_id")
            return
        try:
            run = await socket_run_cancel(self.conversation_id, run_id)
        except ToolchatError as exc:
            await self._error(exc.code, exc.message, field=exc.field, details=exc.details)
            return
        await self._send({"type": "ack", "action": "cancel", "run_id": str(run.pk)})

    async def _decide(
        self, execution_id: Any, *, approve: bool, reason: Any, choices: dict[str, Any]
    ) -> None:
        if not isinstance(execution_id, str):
            await self._error(
                "invalid_execution_id",
                "`execution_id` must be a tool execution id string.",
                field="execution_id",
            )
            return
        if reason is None:
            reason = ""
        if not isinstance(reason, str):
            await self._error("invalid_reason", "`reason` must be a string.", field="reason")
            return
        try:
            execution = await socket_tool_call_decide(
                self.conversation_id, execution_id, self.scope["user"], approve, reason, choices
            )
        except ToolchatError as exc:
            await self._error(exc.code, exc.message, field=exc.field, details=exc.details)
            return
        action = "approve" if approve else "reject"
        await self._send({"type": "ack", "action": action, "execution_id": str(execution.pk)})

    # --- delivery --------------------------------------------------------------------

    def _start(self, after: int) -> None:
        self.pump = asyncio.create_task(self._pump(after))

    async def _start_after_grace(self, start: int) -> None:
        await asyncio.sleep(RESUME_GRACE_S)
        self.starter = None
        if self.pump is None:
            self._start(start)

    async def _pump(self, after: int) -> None:
        try:
            async for envelope in event_stream(conversation_id=self.conversation_id, after=after):
                if envelope["seq"] <= self.delivered:
                    continue
                await self._send(envelope)
                self.delivered = envelope["seq"]
                if self.first_sent is None:
                    self.first_sent = envelope["seq"]
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            code = 1011  # internal error
            if database_unreachable(exc):
                # As the handshake refuses one (chat/live/ws_auth.py): come back later.
                logger.warning("socket closed, the database is unreachable: %s", exc)
                code = CLOSE_TRY_AGAIN_LATER
            else:
                logger.exception("event stream of conversation %s failed", self.conversation_id)
            with contextlib.suppress(Exception):
                await self.close(code=code)

    async def _ping(self) -> None:
        while True:
            await asyncio.sleep(settings.TOOLCHAT_WS_PING_S)
            await self._send({"type": "ping"})
            if self.user_id is not None:
                await slot_renew(self.user_id, self.socket_id)

    async def _send(self, payload: dict[str, Any]) -> None:
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: a frame must be UTF-8, JSON escapes it
            text = json.dumps(payload, separators=(",", ":"))
        await self.send(text_data=text)

    async def _invalid(self, error: dict[str, Any]) -> None:
        """Input refused by the REST API's rules, in the error body they give (chat/inputs.py)."""
        await self._error(
            error["code"], error["message"], field=error.get("field"), details=error["details"]
        )

    async def _error(self, code: str, message: str, **extra: Any) -> None:
        payload: dict[str, Any] = {"type": "error", "code": code, "message": message}
        payload.update({k: v for k, v in extra.items() if v})
        await self._send(payload)


def _after_from_query(query_string: bytes) -> int | None:
    values = parse_qs(query_string.decode("latin1")).get("after")
    if not values:
        return None
    try:
        after = int(values[0])
    except ValueError:
        return None
    return after if 0 <= after < MAX_SEQ else None


def _handshake_headers(scope: dict[str, Any]) -> dict[str, str]:
    """The socket's opening request's headers, by lower-case name."""
    return {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in scope.get("headers") or ()
    }
