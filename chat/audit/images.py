"""A user message's images as the audit shows them: what each is, a thumbnail of its bytes.

A data image is shown from its stored bytes (a `data:` URL: the page fetches
nothing); an https image by its URL as text, never as an `<img>`, which
would have the auditor's browser fetch it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.urls import reverse

from chat.images import IMAGE_KIND, image_url_of
from chat.models import Message, Role
from tools.models import Resource


def images_shown(messages: Iterable[Message]) -> dict[Any, list[dict[str, Any]]]:
    """Each user message's images (by message id), as the page shows them; one query at most."""
    with_images = [m for m in messages if m.role == Role.USER and m.images]
    ids = {
        entry.get("resource_id")
        for message in with_images
        for entry in message.images or []
        if not entry.get("url")
    }
    stored = (
        dict(Resource.objects.filter(pk__in=ids, kind=IMAGE_KIND).values_list("pk", "data"))
        if ids
        else {}
    )
    data = {str(pk): value for pk, value in stored.items()}
    return {
        message.pk: [
            _shown(entry, data.get(str(entry.get("resource_id")))) for entry in message.images
        ]
        for message in with_images
    }


def _shown(entry: dict[str, Any], data: dict[str, Any] | None) -> dict[str, Any]:
    resource_id = entry.get("resource_id")
    if entry.get("url"):
        said = "an https image, not fetched"
    elif entry.get("width") and entry.get("height"):
        said = f"{entry.get('media_type')}, {entry['width']}x{entry['height']}, {entry.get('bytes', 0):,} bytes"
    else:
        said = f"{entry.get('media_type')}, {entry.get('bytes', 0):,} bytes"
    if entry.get("detail"):
        said += f", detail {entry['detail']}"
    thumbnail = None if entry.get("url") else image_url_of(entry, data)
    return {
        "said": said,
        "url": entry.get("url"),
        "thumbnail": thumbnail,
        "gone": not entry.get("url") and thumbnail is None,
        "admin_url": (
            reverse("admin:tools_resource_change", args=[resource_id]) if resource_id else None
        ),
    }
