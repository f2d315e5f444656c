"""Images a user's message carries: read from a client's content parts, checked, stored, sent.

A client attaches an image to a user message as a content part, in the shape
of its API: Chat Completions' `{"type": "image_url", "image_url": {"url",
"detail"}}`, or Responses' `{"type": "input_image", "image_url", "detail"}`.
The url is either a `data:` URL (the image itself, base64) or an `https:` URL.

- A data URL's bytes are decoded (strict base64), must be a PNG, JPEG, GIF or
  WebP image (its first bytes say which, and its size is read from its header
  where that is cheap), and at most `TOOLCHAT_IMAGE_MAX_BYTES`.
- An https URL is kept as the URL and sent to the model as it is: toolchat
  never fetches it (a model server that accepts URLs does).
- At most `TOOLCHAT_IMAGE_MAX_COUNT` images a message; anything else (another
  scheme, a NUL, a non-string, an unknown `detail`) is InvalidInput naming the
  part, before anything is stored.

Each image is stored as a Resource of kind `image` (its bytes, base64, in
`data`), owned by the message's author, so the audit shows it and it is
deleted with its owner; the message keeps, in `Message.images`, what each one
is (`ImageFacts` and the resource's id) in order. A model call sends the
message's content as OpenAI's parts: the text, then each image as an
`image_url` part (`image_parts`).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import ipaddress
import re
import struct
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from chat.exceptions import InvalidInput

IMAGE_KIND = "image"  # Resource.kind of a message's image
MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
DETAILS = ("auto", "low", "high")
MAX_URL_CHARS = 2048
_DATA_URL = re.compile(r"^data:(?P<type>[^;,]*)(?P<params>(;[^;,]*)*),", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class ImageFacts:
    """What an image is: its media type, byte size and pixel size, as far as its header says."""

    media_type: str
    size: int  # bytes
    width: int | None = None
    height: int | None = None

    def said(self) -> str:
        """The image in words: `image/png, 64x64` (or its byte size when its size is unknown)."""
        if self.width and self.height:
            return f"{self.media_type}, {self.width}x{self.height}"
        return f"{self.media_type}, {self.size:,} bytes"


@dataclasses.dataclass(frozen=True)
class ImageInput:
    """One image of a user message as a client sent it, checked: its bytes, or its https URL."""

    data: bytes | None = None
    url: str | None = None
    facts: ImageFacts | None = None  # for data
    detail: str | None = None

    def key(self) -> str:
        """What a digest of the message covers of the image: its bytes' hash, or its URL."""
        if self.data is not None:
            return "sha256:" + hashlib.sha256(self.data).hexdigest()
        return str(self.url)

    def data_url(self) -> str:
        """The image as the URL a model is sent: a data URL of its bytes, or its https URL."""
        if self.data is None:
            return str(self.url)
        assert self.facts is not None
        return f"data:{self.facts.media_type};base64,{base64.b64encode(self.data).decode()}"


def image_facts(data: bytes) -> ImageFacts | None:
    """The facts of an image's bytes, from its signature and header; None if not an image."""
    size = len(data)
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        if len(data) >= 24 and data[12:16] == b"IHDR":
            width, height = struct.unpack(">II", data[16:24])
            return ImageFacts("image/png", size, width, height)
        return ImageFacts("image/png", size)
    if data[:6] in (b"GIF87a", b"GIF89a"):
        if len(data) >= 10:
            width, height = struct.unpack("<HH", data[6:10])
            return ImageFacts("image/gif", size, width, height)
        return ImageFacts("image/gif", size)
    if data.startswith(b"\xff\xd8\xff"):
        return ImageFacts("image/jpeg", size, *_jpeg_size(data))
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return ImageFacts("image/webp", size, *_webp_size(data))
    return None


def _jpeg_size(data: bytes) -> tuple[int | None, int | None]:
    """A JPEG's size, from its first start-of-frame segment (SOF0..SOF15 but DHT, JPG, DAC)."""
    at = 2
    while at + 9 <= len(data):
        if data[at] != 0xFF:
            return None, None
        marker = data[at + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return width, height
        at += 2 + length
    return None, None


def _webp_size(data: bytes) -> tuple[int | None, int | None]:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None, None


# --- a client's parts ---------------------------------------------------------------


def image_part(part: dict[str, Any], where: str) -> ImageInput | None:
    """The image of a content part (either API's shape), checked; None if it is no image part."""
    kind = part.get("type")
    if kind == "image_url":
        wrapper = part.get("image_url")
        if isinstance(wrapper, str):  # some clients send the URL itself
            return image_read(wrapper, None, f"{where}.image_url")
        if not isinstance(wrapper, dict):
            raise InvalidInput(
                f"{where}.image_url must be an object with a url.", field=f"{where}.image_url"
            )
        return image_read(wrapper.get("url"), wrapper.get("detail"), f"{where}.image_url.url")
    if kind == "input_image":
        if part.get("file_id") is not None and part.get("image_url") is None:
            raise InvalidInput(
                f"{where}.file_id: files are not supported; send the image as image_url "
                "(a data: URL or an https: URL).",
                field=f"{where}.file_id",
            )
        return image_read(part.get("image_url"), part.get("detail"), f"{where}.image_url")
    return None


def image_read(url: Any, detail: Any, where: str) -> ImageInput:
    """One image's URL and detail, checked; InvalidInput names `where` (the url's field)."""
    if detail is not None and detail not in DETAILS:
        field = where.rsplit(".", 1)[0] + ".detail" if where.endswith(".url") else f"{where}.detail"
        raise InvalidInput(f"{field} must be one of {', '.join(DETAILS)}.", field=field)
    if not isinstance(url, str) or not url:
        raise InvalidInput(f"{where} must be a data: or https: URL (a string).", field=where)
    if "\x00" in url:
        raise InvalidInput(f"{where} contains a NUL character.", field=where)
    if url[:5].lower() == "data:":
        data, facts = _data_read(url, where)
        return ImageInput(data=data, facts=facts, detail=detail)
    return ImageInput(url=_url_checked(url, where), detail=detail)


def _data_read(url: str, where: str) -> tuple[bytes, ImageFacts]:
    match = _DATA_URL.match(url)
    if match is None or ";base64" not in match["params"].lower():
        raise InvalidInput(
            f"{where}: a data URL must be data:<image type>;base64,<data>.", field=where
        )
    declared = match["type"].strip().lower()
    if declared not in MEDIA_TYPES:
        raise InvalidInput(
            f"{where}: {declared or 'no media type'!r} is not an image type toolchat takes "
            f"({', '.join(MEDIA_TYPES)}).",
            field=where,
        )
    payload = url[match.end() :]
    limit = settings.TOOLCHAT_IMAGE_MAX_BYTES
    # Refused before decoding: base64 holds 3 bytes in 4 characters.
    if len(payload) > (limit + 2) // 3 * 4 + 4:
        raise _too_big(where, len(payload) * 3 // 4, limit)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"{where}: the data is not valid base64.", field=where) from None
    if len(data) > limit:
        raise _too_big(where, len(data), limit)
    facts = image_facts(data)
    if facts is None:
        raise InvalidInput(f"{where}: the data is not a PNG, JPEG, GIF or WebP image.", field=where)
    return data, facts


def _too_big(where: str, size: int, limit: int) -> InvalidInput:
    return InvalidInput(
        f"{where}: the image is {size:,} bytes; the limit is {limit:,} (TOOLCHAT_IMAGE_MAX_BYTES).",
        field=where,
        details={"max_bytes": limit, "bytes": size},
    )


def _url_checked(url: str, where: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or parts.scheme.lower() != "https" or not parts.hostname:
        raise InvalidInput(
            f"{where}: only data: and https: URLs are accepted (toolchat never fetches an image; "
            "the model server does).",
            field=where,
        )
    if len(url) > MAX_URL_CHARS or any(ord(c) < 0x21 or c == "\x7f" for c in url):
        raise InvalidInput(
            f"{where}: the URL is over {MAX_URL_CHARS} characters or holds spaces or controls.",
            field=where,
        )
    if parts.username is not None or parts.password is not None:
        raise InvalidInput(
            f"{where}: an image URL may not carry a user name or password.", field=where
        )
    if not _public_host(parts.hostname):
        raise InvalidInput(
            f"{where}: the image's host must be a public name or address (the model's server "
            "fetches it from inside its own network: no private, loopback or link-local "
            "address, no localhost or .internal name).",
            field=where,
        )
    return url


# Names that reach the fetching server itself or its private network, whatever DNS says.
_PRIVATE_NAMES = re.compile(r"(?:^|\.)(?:localhost|local|internal|localdomain|home\.arpa)$")


def _public_host(host: str) -> bool:
    """Whether an image URL's host names the public internet, as far as its text can tell.

    An address is checked as one (dotted, IPv6, or a bare number such as
    2130706433, which resolvers read as 127.0.0.1); a name must have a dot and
    no private suffix. A public name that resolves to a private address is the
    model server's to refuse: toolchat never resolves or fetches it.
    """
    host = host.lower().rstrip(".")
    try:
        address = ipaddress.ip_address(int(host) if host.isdigit() else host)
    except ValueError:
        # A last label of digits (127.1, 0x7f.1) is an address a resolver would read, not
        # a name: no top-level domain is a number.
        last = host.rsplit(".", 1)[-1]
        numeric = last.isdigit() or last.startswith("0x")
        return "." in host and not numeric and not _PRIVATE_NAMES.search(host)
    return address.is_global and not address.is_multicast


def images_checked(images: Sequence[ImageInput], field: str) -> None:
    """Refuse a message with more images than `TOOLCHAT_IMAGE_MAX_COUNT`."""
    limit = settings.TOOLCHAT_IMAGE_MAX_COUNT
    if len(images) > limit:
        raise InvalidInput(
            f"{field} holds {len(images)} images; at most {limit} a message are accepted "
            "(TOOLCHAT_IMAGE_MAX_COUNT).",
            field=field,
            details={"max_images": limit},
        )


# --- stored, and sent -------------------------------------------------------------------


def image_resource_data(image: ImageInput) -> dict[str, Any]:
    """What an image's Resource holds: its facts and bytes (base64), or its URL."""
    data: dict[str, Any] = {"detail": image.detail}
    if image.data is not None:
        assert image.facts is not None
        data.update(_facts_dict(image.facts), data=base64.b64encode(image.data).decode())
    else:
        data["url"] = image.url
    return data


def image_entry(image: ImageInput, resource_id: str) -> dict[str, Any]:
    """What `Message.images` keeps of one image (no bytes): its resource, facts, detail, URL."""
    entry: dict[str, Any] = {"resource_id": resource_id, "detail": image.detail}
    if image.facts is not None:
        entry.update(_facts_dict(image.facts))
    else:
        entry["url"] = image.url
    return entry


def image_title(image: ImageInput) -> str:
    """The resource's title: what the image is, in words."""
    return image.facts.said() if image.facts is not None else str(image.url)[:255]


def _facts_dict(facts: ImageFacts) -> dict[str, Any]:
    return {
        "media_type": facts.media_type,
        "bytes": facts.size,
        "width": facts.width,
        "height": facts.height,
    }


def image_url_of(entry: dict[str, Any], data: dict[str, Any] | None) -> str | None:
    """The URL a model is sent for a stored image: its data URL, its https URL, or None (gone)."""
    if entry.get("url"):
        return str(entry["url"])
    if data is None or not data.get("data"):
        return None
    return f"data:{entry.get('media_type')};base64,{data['data']}"


def image_parts(text: str, images: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """A user message's content as OpenAI's parts: its text (if any), then its images.

    Each image entry holds `url` (resolved: chat/history_rows.py) and `detail`;
    one whose resource was deleted is said in words instead.
    """
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for entry in images:
        url = entry.get("url")
        if entry.get("left_out"):
            # Older than the newest TOOLCHAT_HISTORY_MAX_IMAGES (chat/history_rows.py).
            parts.append({"type": "text", "text": "[an earlier image, left out of this request]"})
            continue
        if not url:
            parts.append({"type": "text", "text": "[an image, since deleted]"})
            continue
        image: dict[str, Any] = {"url": url}
        if entry.get("detail"):
            image["detail"] = entry["detail"]
        parts.append({"type": "image_url", "image_url": image})
    return parts or [{"type": "text", "text": ""}]
