"""An MCP tool result as a toolchat ToolOutput: the audit keeps it all, the model reads its text.

- Text items are what the model reads, joined (a server that sends
  `structuredContent` sends its serialization as text too, as the MCP spec
  asks; when it sends no text, the model reads the structured content as JSON).
- Images and audio are stored as the user's Resources (up to
  MAX_MEDIA_BYTES; larger ones are summarised) and the model reads a line
  naming them; the audit keeps the item without its base64 data.
- An embedded text resource is read with its URI; a blob is summarised.
- `isError` is a failed call: the model reads `{"success": false, "error": ...}`.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from typing import Any

from mcp import types

from tools.context import ToolContext
from tools.results import ToolOutput

logger = logging.getLogger("tools.mcp")

MAX_MEDIA_BYTES = 1_000_000


def tool_output(
    result: types.CallToolResult, *, server: str, tool: str, context: ToolContext
) -> ToolOutput:
    """What the audit keeps and what the model reads of one result."""
    items: list[dict[str, Any]] = []
    texts: list[str] = []
    notes: list[str] = []  # lines about items that are not text
    for item in result.content:
        if isinstance(item, types.TextContent):
            items.append({"type": "text", "text": item.text})
            texts.append(item.text)
        elif isinstance(item, types.ImageContent | types.AudioContent):
            entry, note = _media(item, server=server, tool=tool, context=context)
            items.append(entry)
            notes.append(note)
        elif isinstance(item, types.EmbeddedResource):
            entry, text = _embedded(item.resource)
            items.append(entry)
            texts.append(text)
        elif isinstance(item, types.ResourceLink):
            items.append(item.model_dump(mode="json", by_alias=True, exclude_none=True))
            notes.append(f"[resource link: {item.uri} ({item.name})]")
        else:  # a content type newer than this code
            kind = str(getattr(item, "type", type(item).__name__))  # type: ignore[unreachable]
            items.append({"type": kind})
            notes.append(f"[{kind} content, not shown]")

    raw: dict[str, Any] = {"content": items}
    if result.structured_content is not None:
        raw["structuredContent"] = result.structured_content
    if result.is_error:
        raw["isError"] = True
        message = "\n".join(texts + notes).strip() or f"{tool} reported an error with no message."
        content = json.dumps({"success": False, "error": message}, ensure_ascii=False)
        return ToolOutput(result=raw, content=content, error=message)

    if not texts and result.structured_content is not None:
        texts = [json.dumps(result.structured_content, ensure_ascii=False)]
    content = "\n\n".join(part for part in texts + notes if part) or f"{tool} returned no content."
    return ToolOutput(result=raw, content=content)


def server_failure(message: str) -> ToolOutput:
    """A call the server never answered (unreachable, crashed, stopped): the model reads why."""
    content = json.dumps({"success": False, "error": message}, ensure_ascii=False)
    return ToolOutput(result=None, content=content, error=message)


def _media(
    item: types.ImageContent | types.AudioContent,
    *,
    server: str,
    tool: str,
    context: ToolContext,
) -> tuple[dict[str, Any], str]:
    try:
        size = len(base64.b64decode(item.data, validate=True))
    except (binascii.Error, ValueError):
        invalid = {"type": item.type, "mimeType": item.mime_type, "error": "invalid base64 data"}
        return invalid, f"[{item.type} {item.mime_type}: its data was not valid base64]"
    entry: dict[str, Any] = {"type": item.type, "mimeType": item.mime_type, "bytes": size}
    if size > MAX_MEDIA_BYTES or getattr(context.user, "pk", None) is None:
        return entry, f"[{item.type} {item.mime_type}, {size} bytes, not stored]"
    resource = context.resources.create(
        kind=item.type,
        title=f"{item.type.capitalize()} from {server}__{tool}",
        data={"mimeType": item.mime_type, "data": item.data, "server": server, "tool": tool},
    )
    entry["resource_id"] = str(resource.pk)
    return entry, f"[{item.type} {item.mime_type}, {size} bytes, stored as resource {resource.pk}]"


def _embedded(
    contents: types.TextResourceContents | types.BlobResourceContents,
) -> tuple[dict[str, Any], str]:
    entry: dict[str, Any] = {"type": "resource", "uri": str(contents.uri)}
    if contents.mime_type:
        entry["mimeType"] = contents.mime_type
    if isinstance(contents, types.TextResourceContents):
        entry["text"] = contents.text
        return entry, f"[resource {contents.uri}]\n{contents.text}"
    try:
        entry["bytes"] = len(base64.b64decode(contents.blob, validate=True))
    except (binascii.Error, ValueError):
        entry["error"] = "invalid base64 data"
    return entry, f"[resource {contents.uri}: {contents.mime_type or 'binary'}, not shown]"
