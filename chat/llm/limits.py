"""What a model server cannot do, learned from its answers and remembered in the process.

Real OpenAI-compatible servers differ from the API they copy. Some cannot
stream an answer that calls tools (llama-cpp-python's server answers such a
request with an error and drops the stream; LiteLLM relays the refusal as an
empty answer); some refuse a parameter they do not know (`max_completion_tokens`,
`parallel_tool_calls`, `stream_options`, `temperature`). A call asks
again the way the server can answer (chat/llm/openai_call.py) and records
here what it learned (`refusal_learned`, `streaming_tools_refused`,
`images_refused`), per base URL and model, so that later calls ask that way
at once. Each limit is logged once, when it is learned.

Also here: which errors will not change on a retry (`final_error`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import re
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from chat.llm.base import FORWARDED, ChatRequest

logger = logging.getLogger(__name__)

# The optional parameters a server may refuse, in the order they are given up;
# A token limit is asked once more under its other name (`OTHER_NAMES`).
REFUSABLE = (
    "max_completion_tokens",
    "max_tokens",
    "stream_options",
    "temperature",
    *FORWARDED,
)
# Names that are also words of an error's prose ("stop", "user"): an error names one of these
# only quoted ('stop', `user`) or as the argument it does not know ("supplied: seed").
_WORDS = frozenset({"stop", "seed", "user", "prediction"})
# A token limit refused under one name is asked under the other, once.
OTHER_NAMES = {"max_completion_tokens": "max_tokens", "max_tokens": "max_completion_tokens"}
# Hosts that take OpenAI's newer name for the token limit (`max_tokens` is refused by
# its reasoning models); every other OpenAI-compatible server takes `max_tokens`,
# and several silently ignore `max_completion_tokens` (llama-cpp-python, Ollama).
_NEWER_NAME_HOSTS = re.compile(r"(^|\.)(api\.openai\.com|openai\.azure\.com)$")

# Words of an error that a retry will not change: the server refuses what was asked, or
# fails on it in its own code (a chat template's "'dict object' has no attribute ...").
_REFUSAL = re.compile(
    r"not supported|unsupported|not implemented|not allowed|unrecognized|unknown parameter"
    r"|validation error|has no attribute",
    re.IGNORECASE,
)


@dataclasses.dataclass
class ServerLimits:
    """What one server (base URL) cannot do with one model."""

    stream_tools: bool = True  # False: a request that offers tools is asked without streaming
    stream_tools_seen: bool = False  # a streamed answer with tool calls came from it
    # True: an assistant message's null `content` (beside its tool calls) is sent as "".
    content_text: bool = False
    # False: the model refused a request with images (`images_refused`); a request with
    # images is refused at once, without asking it again.
    images: bool = True
    renamed: dict[str, str] = dataclasses.field(default_factory=dict)
    dropped: set[str] = dataclasses.field(default_factory=set)
    refused: set[str] = dataclasses.field(default_factory=set)  # every name refused so far

    def arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The request's optional arguments as this server takes them."""
        shaped: dict[str, Any] = {}
        for name, value in arguments.items():
            name = self.renamed.get(name, name)
            if name not in self.dropped:
                shaped[name] = value
        return shaped


_limits: dict[tuple[str, str], ServerLimits] = {}
_lock = threading.Lock()


def server_limits(base_url: str, model: str) -> ServerLimits:
    """The limits learned so far for this server and model (none at first)."""
    with _lock:
        return _limits.setdefault((base_url, model), ServerLimits())


def server_limits_reset() -> None:
    """Forget every learned limit (tests)."""
    with _lock:
        _limits.clear()


def streaming_tools_refused(base_url: str, model: str, why: str) -> None:
    """Remember that this server cannot stream an answer that calls tools."""
    limits = server_limits(base_url, model)
    with _lock:
        learned, limits.stream_tools = limits.stream_tools, False
    if learned:
        logger.warning(
            "%s (%s) cannot stream tool calls (%s): requests with tools are no longer streamed",
            base_url,
            model,
            why,
        )


# What an error that refuses images as such says: OpenAI's ("image_url is only
# supported by certain models"), vLLM's ("is not a multimodal model"), llama.cpp's
# ("image input is not supported", "mmproj"), Ollama's and LM Studio's ("does not
# support images"). Only these: a refusal is remembered for everyone who uses the model,
# so an error about one person's image ("you uploaded an unsupported image") or one that
# repeats a URL they chose must not read as one (the URLs are taken out first).
_IMAGE_REFUSALS = re.compile(
    r"only supported by certain models|not an? multi-?modal model|mmproj"
    r"|\b(?:image|vision)s?(?: input)? (?:is |are )?not supported"
    r"|(?:does not|doesn't|do not|cannot) (?:support|accept|take) (?:image|vision)",
    re.IGNORECASE,
)
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
# Words that say the image itself is at fault (it could not be read, or is too big):
# another image may do, so the model is not marked as refusing them.
_IMAGE_FAULT = re.compile(
    r"too large|too big|exceeds|could not (be )?(download|fetch|process|decode)|invalid image"
    r"|unable to (download|fetch|decode)|timed? ?out",
    re.IGNORECASE,
)
# What the error of a model that refuses images says, whoever reads it (chat/openai_api/).
IMAGES_REFUSED = "does not accept images"


def images_sent(messages: list[dict[str, Any]]) -> bool:
    """Whether a request's messages hold an image part."""
    return any(_has_image(m) for m in messages)


def images_asked(messages: list[dict[str, Any]]) -> bool:
    """Whether the request's last user message (the one being answered) holds an image."""
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    return last is not None and _has_image(last)


def images_left_out(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history with each image said in words: for a model that refuses images.

    Only earlier messages' images: a question with images is refused outright.
    """
    return [
        {**m, "content": [_image_said(p) for p in m["content"]]} if _has_image(m) else m
        for m in messages
    ]


def _image_said(part: Any) -> Any:
    if isinstance(part, dict) and part.get("type") == "image_url":
        return {"type": "text", "text": "[an image this model cannot be shown]"}
    return part


def _has_image(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") == "image_url" for p in content
    )


def image_input_refused(status: int | None, message: str) -> bool:
    """Whether a model server's error to a request with images refuses images as such."""
    if status is None or not (400 <= status < 500 or _REFUSAL.search(message)):
        return False
    words = _URL.sub("", message)
    return bool(_IMAGE_REFUSALS.search(words)) and not _IMAGE_FAULT.search(words)


def images_refused(base_url: str, model: str, why: str) -> None:
    """Remember that this server's model refuses images."""
    limits = server_limits(base_url, model)
    with _lock:
        learned, limits.images = limits.images, False
    if learned:
        logger.warning("%s (%s) refuses images (%s)", base_url, model, why)


def images_refusal(model_id: str, why: str = "") -> str:
    """The error of a request with images to a model that refuses them, naming the model."""
    said = f" (its server said: {why})" if why else " (its server refused images before)"
    return (
        f"The model {model_id} {IMAGES_REFUSED}{said}. Send the message without images, "
        "or choose a model that accepts them."
    )


def token_limit_name(base_url: str | None) -> str:
    """The name a server takes the token limit under: OpenAI's newer one, or `max_tokens`.

    OpenAI's own API (and Azure's) wants `max_completion_tokens`; every other
    OpenAI-compatible server takes `max_tokens`, and some silently ignore the
    newer name, which lets a small model write until its context is full.
    """
    host = (urlsplit(base_url).hostname or "") if base_url else "api.openai.com"
    return "max_completion_tokens" if _NEWER_NAME_HOSTS.search(host) else "max_tokens"


# Host names of servers on this machine or its network: `localhost`, a name without a
# dot (a docker-compose service, `ollama`), and the suffixes kept for local names.
_LOCAL_NAMES = re.compile(r"^[^.]+$|\.(localhost|local|internal|lan|home\.arpa)$")


def local_server(base_url: str | None) -> bool:
    """Whether a server is on this machine or its network (a loopback or private address).

    Such servers (llama.cpp's llama-server, llama-cpp-python, Ollama, vLLM) let a
    model write until its context is full, or without end, when a request sets no
    token limit; hosted APIs bound a model's answer themselves.
    """
    host = (urlsplit(base_url).hostname or "") if base_url else ""
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return bool(_LOCAL_NAMES.search(host.lower()))
    return address.is_loopback or address.is_private or address.is_link_local


def parameter_refused(base_url: str, model: str, name: str) -> str:
    """Remember that the server refused the parameter `name`; what it is sent as now, or ""."""
    limits = server_limits(base_url, model)
    original = next((key for key, value in limits.renamed.items() if value == name), name)
    with _lock:
        limits.refused.add(name)
        older = OTHER_NAMES.get(name, "")
        if older in limits.refused:
            older = ""
        if older:
            limits.renamed[original] = older
        else:
            limits.dropped.add(name)
    logger.warning(
        "%s (%s) refused the parameter %s: %s",
        base_url,
        model,
        name,
        f"sent as {older} from now on" if older else "no longer sent",
    )
    return older


def refused_parameter(message: str, error: Mapping[str, Any], sent: Mapping[str, Any]) -> str:
    """The parameter sent that a 400 names as unsupported, or ""."""
    param = error.get("param")
    if isinstance(param, str) and param in sent and param in REFUSABLE:
        return param
    text = message.lower()
    for name in REFUSABLE:
        # `max_tokens` is a part of `max_completion_tokens`: the longer name is tried first.
        if name not in sent:
            continue
        if name in _WORDS:
            named = rf"['\"`]{name}['\"`]|(supplied|parameter|argument|field|property):? {name}\b"
        else:
            named = rf"(?<![a-z_]){name}(?![a-z_])"
        if re.search(named, text):
            return name
    return ""


def null_content_refused(message: str, messages: list[dict[str, Any]]) -> bool:
    """Whether an error refuses an assistant message's null `content` (llama-cpp-python).

    Asked directly, llama-cpp-python refuses the null in a validation error
    naming the assistant message. Through the LiteLLM proxy, which leaves a null
    `content` out, its chat template fails instead: "'dict object' has no
    attribute 'content'". Both are mended by sending "".
    """
    text = message.lower()
    return (
        "content" in text
        and ("assistant" in text or "no attribute 'content'" in text)
        and any(m.get("role") == "assistant" and m.get("content") is None for m in messages)
    )


def refusal_learned(
    limits: ServerLimits,
    base_url: str,
    request: ChatRequest,
    status: int,
    message: str,
    error: Mapping[str, Any],
    sent: Mapping[str, Any],
) -> str:
    """What an error answer taught, remembered (the call's note), or "" when it taught nothing.

    A null assistant content refused is sent as "" from now on (llama-cpp-python
    validates an assistant message's content as a string); a parameter a 400 or
    422 names as unsupported is sent under its other name, or left out.
    """
    if not limits.content_text and null_content_refused(message, request.messages):
        limits.content_text = True
        logger.warning(
            '%s (%s) refuses a null assistant content: sent as "" from now on',
            base_url,
            request.model,
        )
        return 'null assistant content refused: sent as ""'
    refused = refused_parameter(message, error, sent) if status in (400, 422) else ""
    if not refused:
        return ""
    older = parameter_refused(base_url, request.model, refused)
    return f"{refused} refused: " + (f"sent as {older}" if older else "left out")


def error_status(error: Mapping[str, Any]) -> int | None:
    """The HTTP-like status an error object carries (`code` or `status`), if any."""
    for key in ("code", "status", "status_code"):
        value = error.get(key)
        if isinstance(value, int) and 100 <= value < 600:
            return value
        if isinstance(value, str) and value.isdigit() and 100 <= int(value) < 600:
            return int(value)
    return None


def final_error(status: int | None, error: Mapping[str, Any]) -> bool:
    """Whether an error will come back the same on a retry: a refusal, a 4xx, not a hiccup.

    A rate limit (429), a timeout (408) and a conflict (409) are worth a retry;
    any other 4xx is not; a 5xx is, unless its words say the server refuses
    what was asked (llama-cpp-python's "... is not supported", a gateway's
    relayed 400).
    """
    if status is None:
        status = error_status(error)
    if status is not None and 400 <= status < 500:
        return status not in (408, 409, 429)
    kind = str(error.get("type") or "")
    if kind in {"invalid_request_error", "authentication_error", "permission_error"}:
        return True
    message = error.get("message")
    return isinstance(message, str) and bool(_REFUSAL.search(message))
