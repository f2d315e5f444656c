"""What a failed model call says: the server's own words, the reason, the attempts made.

A call (chat/llm/openai_call.py, chat/llm/streamed.py) turns what the SDK
raised, or what a server sent in its stream, into one ProviderError whose message a user can
read ("The model call failed (HTTP 400) after 1 attempt: ...").
"""

from __future__ import annotations

from typing import Any

import openai

from chat.llm.base import ProviderError, ProviderStopped
from chat.llm.watch import Interrupted, Stopped, Unanswered

# Why a request asked without streaming that timed out is not asked again, and what to set.
UNANSWERED = (
    "asked without streaming, an answer comes whole, so a model still writing sends nothing "
    "until it ends; set LLM_MAX_TOKENS to bound what it writes (llama-cpp-python heeds none "
    "when tools are offered: give it a smaller --n_ctx), or raise LLM_TIMEOUT_S"
)


def stream_error(exc: Exception) -> dict[str, Any] | None:
    """The error object a server sent in its stream (an `error` event or chunk), if it did."""
    if isinstance(exc, openai.APIError) and not isinstance(
        exc, openai.APIConnectionError | openai.APIStatusError
    ):
        body = exc.body if isinstance(exc.body, dict) else {}
        return {"message": exc.message, **body}
    return None


def ended(exc: Interrupted, attempts: int) -> Exception:
    """The error for a call its watch ended: a stop for the run, or a deadline's failure."""
    if isinstance(exc, Stopped):
        return ProviderStopped(str(exc))
    if isinstance(exc, Unanswered):
        return ProviderError(
            failure_message("timed out", f"{exc}, and was not asked again: {UNANSWERED}", attempts),
            attempts=attempts,
        )
    return ProviderError(failure_message("deadline", str(exc), attempts), attempts=attempts)


def error_object(exc: openai.APIStatusError) -> dict[str, Any]:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    return error if isinstance(error, dict) else {"message": str(error)}


def error_message(exc: openai.APIStatusError) -> str:
    message = error_object(exc).get("message")
    return message if isinstance(message, str) and message else exc.message


def failure_reason(exc: openai.OpenAIError) -> str:
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {error_message(exc)}"
    return f"{type(exc).__name__}: {exc}"


def failed(exc: openai.OpenAIError, attempts: int, said: str = "") -> Exception:
    """The ProviderError for a request the SDK gave up on, with the server's own words.

    When the last attempt got no answer (a connection error, a timeout) but an
    earlier one did, the server's words are told too: they say more.
    """
    if isinstance(exc, Interrupted):
        return ended(exc, attempts)
    status: int | None = None
    detail = str(exc)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        reason = f"HTTP {status}"
        detail = error_message(exc)
    elif isinstance(exc, openai.APITimeoutError):
        reason = "timed out"
    elif isinstance(exc, openai.APIConnectionError):
        reason = "connection error"
    else:
        reason = type(exc).__name__
    if said and status is None:
        detail = f"{detail} (before that, the server said: {said})"
    return ProviderError(
        failure_message(reason, detail, attempts), status=status, attempts=attempts
    )


def failure_message(reason: str, detail: str, attempts: int) -> str:
    tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
    return f"The model call failed ({reason}) after {tries}: {detail}"
