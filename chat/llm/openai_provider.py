"""The OpenAI-compatible provider: every request to a model server goes through it.

One provider per endpoint (its SDK client from chat/llm/openai_client.py,
what its configuration says the server cannot do); each completion it is
asked for is one `Call` (chat/llm/openai_call.py), which does the
requests, their retries and deadlines, and reads the answer. The call knows
its provider only as a `Server` (a Protocol of openai_call.py), so the
import runs one way: this module imports the call, never the reverse.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping

from chat.llm.base import ChatRequest, StreamEvent
from chat.llm.limits import token_limit_name
from chat.llm.openai_call import Call
from chat.llm.openai_client import openai_client
from chat.llm.request_body import Known
from chat.llm.watch import Watch


class OpenAIProvider:
    """Streams chat completions from any OpenAI-compatible endpoint."""

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        call_deadline_s: float = 600.0,
        attempt_deadline_s: float = 300.0,
        token_limit_param: str | None = None,
        name: str = "openai",
        headers: Mapping[str, str] | None = None,
        known: Known | None = None,
    ) -> None:
        max_retries = max(0, max_retries)
        self.name = name
        self.known = known or Known()
        self.client = openai_client(
            api_key=api_key,
            base_url=base_url,
            timeout_s=timeout_s,
            max_retries=max_retries,
            headers=headers,
        )
        self.base_url = str(self.client.base_url)
        self.max_attempts = max_retries + 1
        self.timeout_s = timeout_s  # the read timeout: how long the server may be silent
        self.call_deadline_s = call_deadline_s
        self.attempt_deadline_s = attempt_deadline_s
        # The name the token limit is sent under (`limits.token_limit_name` by default).
        self.token_limit_param = token_limit_param or token_limit_name(base_url)

    def stream(
        self, request: ChatRequest, *, stop: threading.Event | None = None
    ) -> Iterator[StreamEvent]:
        """Stream one completion; the SDK retries failed requests, this retries cut streams."""
        return Call(self, request, Watch(stop, self.call_deadline_s, self.attempt_deadline_s)).run()
