"""An MCP tool result: the audit keeps every item, the model reads text, media become Resources."""

from __future__ import annotations

import base64
import json

import pytest
from mcp import types

from tools.context import ToolContext
from tools.mcp.results import MAX_MEDIA_BYTES, server_failure, tool_output
from tools.models import Resource
from tools.results import ToolOutput

# A 1x1 PNG.
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
PIXEL_BYTES = len(base64.b64decode(PIXEL))


def text(value: str) -> types.TextContent:
    return types.TextContent(type="text", text=value)


def image(data: str = PIXEL, mime: str = "image/png") -> types.ImageContent:
    return types.ImageContent(type="image", data=data, mime_type=mime)


def output(*content, context=None, **fields) -> ToolOutput:
    result = types.CallToolResult(content=list(content), **fields)
    return tool_output(
        result, server="shop", tool="snap", context=context or ToolContext(user=None)
    )


# --- Text and structured content --------------------------------------------------------------


def test_text_items_are_what_the_model_reads_joined():
    out = output(text("first"), text("second"))
    assert out.content == "first\n\nsecond"
    assert out.error == ""
    assert out.result == {
        "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    }


def test_structured_content_is_kept_and_the_model_reads_the_text_beside_it():
    out = output(text('{"total": 3}'), structured_content={"total": 3, "unit": "€"})
    assert out.content == '{"total": 3}'
    assert out.result["structuredContent"] == {"total": 3, "unit": "€"}


def test_structured_content_alone_is_read_as_json():
    out = output(structured_content={"total": 3, "unit": "€"})
    assert json.loads(out.content) == {"total": 3, "unit": "€"}
    assert "€" in out.content  # readable, not \\u escapes
    assert out.result == {"content": [], "structuredContent": {"total": 3, "unit": "€"}}


def test_an_empty_result_says_the_tool_returned_no_content():
    out = output()
    assert out.content == "snap returned no content."
    assert out.result == {"content": []}
    assert out.error == ""


# --- Errors -------------------------------------------------------------------------------


def test_an_error_result_is_a_failure_the_model_reads_as_such():
    out = output(text("repository not found"), is_error=True)
    assert out.error == "repository not found"
    assert json.loads(out.content) == {"success": False, "error": "repository not found"}
    assert out.result == {
        "content": [{"type": "text", "text": "repository not found"}],
        "isError": True,
    }


def test_an_error_result_without_a_message_still_says_it_failed():
    out = output(is_error=True)
    assert out.error == "snap reported an error with no message."
    assert json.loads(out.content)["success"] is False


def test_a_server_failure_is_a_failure_with_no_result():
    out = server_failure("The MCP server 'shop' is not running.")
    assert out.result is None
    assert out.error == "The MCP server 'shop' is not running."
    assert json.loads(out.content) == {
        "success": False,
        "error": "The MCP server 'shop' is not running.",
    }


# --- Images and audio ---------------------------------------------------------------------------


def test_an_image_without_a_user_is_summarised_and_its_data_left_out():
    out = output(text("here it is"), image())
    assert out.content == f"here it is\n\n[image image/png, {PIXEL_BYTES} bytes, not stored]"
    assert out.result["content"][1] == {
        "type": "image",
        "mimeType": "image/png",
        "bytes": PIXEL_BYTES,
    }
    assert PIXEL not in json.dumps(out.result)


@pytest.mark.django_db
def test_an_image_is_stored_as_a_resource_of_the_user(user, other_user):
    context = ToolContext(user=user)
    out = output(image(), context=context)
    resource = Resource.objects.get()
    assert resource.owner == user
    assert resource.kind == "image"
    assert resource.title == "Image from shop__snap"
    assert resource.data == {
        "mimeType": "image/png",
        "data": PIXEL,
        "server": "shop",
        "tool": "snap",
    }
    entry = out.result["content"][0]
    assert entry["resource_id"] == str(resource.pk)
    assert "data" not in entry
    assert PIXEL not in json.dumps(out.result)
    assert f"stored as resource {resource.pk}" in out.content
    assert context.last_resource_id == str(resource.pk)
    assert not other_user.resources.exists()


@pytest.mark.django_db
def test_audio_is_stored_like_an_image(user):
    audio = types.AudioContent(
        type="audio", data=base64.b64encode(b"RIFF0000").decode(), mime_type="audio/wav"
    )
    out = output(audio, context=ToolContext(user=user))
    resource = Resource.objects.get()
    assert resource.kind == "audio"
    assert out.content == f"[audio audio/wav, 8 bytes, stored as resource {resource.pk}]"


@pytest.mark.django_db
def test_an_image_over_the_limit_is_not_stored(user):
    big = base64.b64encode(b"\0" * (MAX_MEDIA_BYTES + 1)).decode()
    out = output(image(big), context=ToolContext(user=user))
    assert not Resource.objects.exists()
    assert out.content == f"[image image/png, {MAX_MEDIA_BYTES + 1} bytes, not stored]"
    assert out.result["content"][0] == {
        "type": "image",
        "mimeType": "image/png",
        "bytes": MAX_MEDIA_BYTES + 1,
    }


@pytest.mark.django_db
def test_invalid_base64_is_reported_not_raised(user):
    out = output(text("done"), image("not base64 at all!"), context=ToolContext(user=user))
    assert not Resource.objects.exists()
    assert out.content == "done\n\n[image image/png: its data was not valid base64]"
    assert out.result["content"][1] == {
        "type": "image",
        "mimeType": "image/png",
        "error": "invalid base64 data",
    }


# --- Resources --------------------------------------------------------------------------------


def test_an_embedded_text_resource_is_read_with_its_uri():
    resource = types.EmbeddedResource(
        type="resource",
        resource=types.TextResourceContents(
            uri="file:///notes/todo.md", mime_type="text/markdown", text="- buy tea"
        ),
    )
    out = output(resource)
    assert out.content == "[resource file:///notes/todo.md]\n- buy tea"
    assert out.result["content"] == [
        {
            "type": "resource",
            "uri": "file:///notes/todo.md",
            "mimeType": "text/markdown",
            "text": "- buy tea",
        }
    ]


def test_an_embedded_blob_is_summarised_not_shown():
    blob = base64.b64encode(b"%PDF-1.7 ...").decode()
    resource = types.EmbeddedResource(
        type="resource",
        resource=types.BlobResourceContents(
            uri="file:///report.pdf", mime_type="application/pdf", blob=blob
        ),
    )
    out = output(resource)
    assert out.content == "[resource file:///report.pdf: application/pdf, not shown]"
    entry = out.result["content"][0]
    assert entry["uri"] == "file:///report.pdf"
    assert entry["mimeType"] == "application/pdf"
    assert blob not in json.dumps(out.result)


def test_an_embedded_blob_records_its_decoded_size():
    resource = types.EmbeddedResource(
        type="resource",
        resource=types.BlobResourceContents(
            uri="file:///x.bin", blob=base64.b64encode(b"hi").decode()
        ),
    )
    assert output(resource).result["content"][0]["bytes"] == 2


def test_a_resource_link_is_named_for_the_model_and_kept_for_the_audit():
    link = types.ResourceLink(
        type="resource_link",
        uri="https://example.com/r/42",
        name="invoice-42",
        mime_type="text/csv",
    )
    out = output(text("Exported."), link)
    assert out.content == "Exported.\n\n[resource link: https://example.com/r/42 (invoice-42)]"
    assert out.result["content"][1] == {
        "type": "resource_link",
        "uri": "https://example.com/r/42",
        "name": "invoice-42",
        "mimeType": "text/csv",
    }
