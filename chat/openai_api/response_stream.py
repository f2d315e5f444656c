"""A /v1/responses turn streamed: the Open Responses event sequence, numbered, as SSE.

`response.created` and `response.in_progress` open it. The run's text goes
out as it is written, in a `message` item (`response.output_item.added`,
`response.content_part.added`, `response.output_text.delta`s, then
`.output_text.done`, `.content_part.done`, `.output_item.done`); a call of
toolchat's own tools is an `mcp_call` item, added when the call starts and
done when it ends (text before it closes its message item). When the run
ends, what the stream has not carried (an answer that never streamed, the
client's `function_call`s with their `response.function_call_arguments.delta`
and `.done`) follows, from the run as stored, and then the resource itself
in `response.completed` (or `.incomplete`); a failed turn ends with `error`
and `response.failed`. Each event has its `sequence_number`, its `event:`
line the same as its `type`, and the stream ends with `data: [DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from asgiref.sync import sync_to_async

from chat.engine.request import client_tool_names
from chat.live.sse import with_keepalive
from chat.openai_api.answers import Outcome, run_outcome
from chat.openai_api.response_output import (
    approvals_decided,
    output_text,
    response_resource,
    text_item,
)
from chat.openai_api.turns import Started
from chat.openai_api.views import KEEPALIVE_S, StreamedText, run_events, unanswered

ENDED = {"completed": "response.completed", "incomplete": "response.incomplete"}
# Told the resource a stream ends with, on the request's thread (responses.py `_saw`).
Seen = Callable[[dict[str, Any]], None]


class _Stream:
    """The events sent so far: their numbers, and the output items they opened."""

    def __init__(self) -> None:
        self.sequence = 0
        self.items: list[dict[str, Any]] = []
        self.text: str | None = None  # the text of the message item still open
        self.approvals: dict[str, str] = {}  # calls decided before the stream: their requests

    def event(self, kind: str, **fields: Any) -> str:
        body = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        return f"event: {kind}\ndata: {data}\n\n"

    def added(self, item: dict[str, Any]) -> str:
        self.items.append(item)
        return self.event("response.output_item.added", output_index=len(self.items) - 1, item=item)

    def done(self, item: dict[str, Any]) -> str:
        self.items[-1] = item
        return self.event("response.output_item.done", output_index=len(self.items) - 1, item=item)

    def _part(self) -> dict[str, Any]:
        return {"item_id": self.items[-1]["id"], "output_index": len(self.items) - 1}

    def text_open(self, item_id: str) -> list[str]:
        self.text = ""
        added = self.added(text_item(item_id, "", "in_progress"))
        part = self.event(
            "response.content_part.added", **self._part(), content_index=0, part=output_text("")
        )
        return [added, part]

    def text_delta(self, piece: str) -> str:
        self.text = (self.text or "") + piece
        return self.event(
            "response.output_text.delta", **self._part(), content_index=0, delta=piece, logprobs=[]
        )

    def text_close(self, status: str = "completed") -> list[str]:
        if self.text is None:
            return []
        text, self.text = self.text, None
        where = {**self._part(), "content_index": 0}
        return [
            self.event("response.output_text.done", **where, text=text, logprobs=[]),
            self.event("response.content_part.done", **where, part=output_text(text)),
            self.done(text_item(self.items[-1]["id"], text, status)),
        ]


async def response_events(
    started: Started, echo: dict[str, Any], part: int = 0, *, seen: Seen | None = None
) -> AsyncIterator[str]:
    """The run (or its part after an approval) as the Responses API streams it (see above)."""
    stream = _Stream()
    opening, clients, stream.approvals = await sync_to_async(_opened)(started.run, echo, part)
    opening = {**opening, "status": "in_progress", "output": [], "completed_at": None}
    yield stream.event("response.created", response=opening)
    yield stream.event("response.in_progress", response=opening)
    text = StreamedText()
    async for envelope in with_keepalive(run_events(started.run, started.after), KEEPALIVE_S):
        if envelope is None:
            yield ": toolchat keep-alive\n\n"
            continue
        for line in _live(stream, text, envelope, clients):
            yield line
    outcome, ended = await sync_to_async(_closed)(started, echo, part, seen)
    if outcome.error is not None:
        for line in stream.text_close("incomplete"):
            yield line
        yield stream.event("error", code=outcome.error["code"], message=outcome.error["message"])
        state = "cancelled" if ended["status"] == "cancelled" else "failed"
        yield stream.event("response.failed", response={**ended, "status": state})
        yield "data: [DONE]\n\n"
        return
    for line in stream.text_close():
        yield line
    sent = {item["id"] for item in stream.items}
    for item in [item for item in ended["output"] if item["id"] not in sent]:
        for line in _whole(stream, item):
            yield line
    yield stream.event(ENDED.get(ended["status"], "response.completed"), response=ended)
    yield "data: [DONE]\n\n"


def _opened(
    run: Any, echo: dict[str, Any], part: int
) -> tuple[dict[str, Any], frozenset[str], dict[str, str]]:
    """As the stream opens, in one hand-off: the resource, the client's tools, the calls decided."""
    return response_resource(run, echo, part), client_tool_names(run), approvals_decided(run)


def _closed(
    started: Started, echo: dict[str, Any], part: int, seen: Seen | None
) -> tuple[Outcome, dict[str, Any]]:
    """At the run's end, in one hand-off: its outcome (a failed turn recorded), the resource it
    ends with, and that resource told to `seen` (what the client saw, remembered as the
    stream's last events go out, as a response not streamed is before it is sent)."""
    outcome = run_outcome(started.run.pk)
    unanswered(started, outcome)
    ended = response_resource(started.run, echo, part)
    if seen is not None:
        seen(ended)
    return outcome, ended


def _live(
    stream: _Stream, text: StreamedText, envelope: dict[str, Any], clients: frozenset[str]
) -> list[str]:
    """The events one of the run's events makes: text, or a server-side call begun or ended."""
    kind, data = envelope["type"], envelope["data"]
    if kind == "message.delta":
        item_id = f"msg_{str(data.get('message_id') or '').replace('-', '')}"
        if stream.text is not None and stream.items[-1]["id"] != item_id:
            return [*stream.text_close(), *_live(stream, text, envelope, clients)]
        piece = text.add(data).lstrip("\n") if stream.text is None else text.add(data)
        if not piece:
            return []
        lines = stream.text_open(item_id) if stream.text is None else []
        return [*lines, stream.text_delta(piece)]
    if kind == "tool_call.started" and data.get("name") not in clients:
        arguments = json.dumps(data.get("arguments") or {}, ensure_ascii=False)
        approval = stream.approvals.get(str(data.get("execution_id")))
        return [*stream.text_close(), stream.added(_calling(data, arguments, approval))]
    if kind == "tool_call.completed" and data.get("name") not in clients:
        return _call_ended(stream, data)
    return []


def _call_ended(stream: _Stream, data: dict[str, Any]) -> list[str]:
    """A server-side call's end; one that never started (a rejection) is added as it ends."""
    ok = data.get("status") == "succeeded"
    content = (data.get("message") or {}).get("content")
    item = stream.items[-1] if stream.items else None
    lines: list[str] = []
    if item is None or item["type"] != "mcp_call" or item["status"] != "calling":
        if ok:
            return []  # an answer the stream carries as the run's record says it, at its end
        arguments = json.dumps(data.get("arguments") or {}, ensure_ascii=False)
        approval = stream.approvals.get(str(data.get("execution_id")))
        item = _calling(data, arguments, approval)
        lines = [*stream.text_close(), stream.added(item)]
    ended = {**item, "status": "completed" if ok else "failed", "output": content if ok else None}
    if not ok:
        ended["error"] = {
            "type": "mcp_tool_execution_error",
            "content": [{"type": "text", "text": content or ""}],
        }
    return [*lines, stream.done(ended)]


def _calling(data: dict[str, Any], arguments: str, approval: str | None) -> dict[str, Any]:
    return {
        "type": "mcp_call",
        "id": f"mcp_{str(data.get('execution_id', '')).replace('-', '')}",
        "server_label": "toolchat",
        "name": data.get("name", ""),
        "arguments": arguments,
        "output": None,
        "error": None,
        "status": "calling",
        "approval_request_id": approval,
    }


def _whole(stream: _Stream, item: dict[str, Any]) -> list[str]:
    """An output item the stream did not carry as it happened, sent whole."""
    if item["type"] == "message":
        text = item["content"][0]["text"] if item["content"] else ""
        return [
            *stream.text_open(item["id"]),
            stream.text_delta(text),
            *stream.text_close(item["status"]),
        ]
    if item["type"] == "function_call":
        where = {"item_id": item["id"], "output_index": len(stream.items)}
        lines = [stream.added({**item, "arguments": "", "status": "in_progress"})]
        return [
            *lines,
            stream.event(
                "response.function_call_arguments.delta", **where, delta=item["arguments"]
            ),
            stream.event(
                "response.function_call_arguments.done",
                **where,
                name=item["name"],
                arguments=item["arguments"],
            ),
            stream.done(item),
        ]
    if item["type"] == "mcp_approval_request":
        return [stream.added(item), stream.done(item)]
    return [stream.added({**item, "status": "calling"}), stream.done(item)]
