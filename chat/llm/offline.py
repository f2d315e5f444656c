"""The embedded offline model: deterministic, no network, good enough for the demo tools.

It reads the request the way a real model would and answers through the same
interface:

- when the last message is the user's and tools are offered, it picks the tool
  whose name, description and parameter names best match the user's words, and
  fills the arguments from the message by the schema (chat/llm/offline_tools.py);
- after tool results, it writes the answer from them (their `message` fields
  first);
- for a structured-output request (the `llm` decider) it answers the JSON the
  schema asks for.

Text streams word by word, `word_delay_s` apart (TOOLCHAT_OFFLINE_WORD_DELAY_MS),
so that the app shows its streaming; JSON answers are for the engine, not the
user, and arrive at once.

Usage is counted with a stand-in tokenizer (`token_count`): every word (a run
of letters, digits and underscores) and every other non-space character is
one token. It is deterministic and of the same order as a real tokenizer's
count. The prompt counts every message's role, text and tool calls, the
offered tools' schemas and the response format; the completion counts the
answer's text and its tool calls' names and arguments.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

from chat.llm.base import (
    ChatRequest,
    Completion,
    Done,
    ProviderStopped,
    StreamEvent,
    TextDelta,
)
from chat.llm.offline_tools import call_make, tool_pick

TOKEN = re.compile(r"\w+|[^\w\s]")


def token_count(text: str) -> int:
    """Tokens as the offline model counts them: each word and each other non-space character."""
    return len(TOKEN.findall(text))


class OfflineProvider:
    """A deterministic stand-in for a tool-calling model."""

    name = "offline"

    def __init__(self, *, word_delay_s: float = 0.0) -> None:
        self.word_delay_s = word_delay_s

    def stream(
        self, request: ChatRequest, *, stop: threading.Event | None = None
    ) -> Iterator[StreamEvent]:
        """Answer the request: tool calls, a decision, or text streamed word by word."""
        started = time.monotonic()
        completion = self._answer(request)
        text = completion.content or ""
        structured = request.response_format is not None
        pieces = ([text] if text else []) if structured else re.findall(r"\s*\S+\s*", text)
        for piece in pieces:
            self._pause(0.0 if structured else self.word_delay_s, stop)
            if completion.first_token_ms is None:
                completion.first_token_ms = int((time.monotonic() - started) * 1000)
            yield TextDelta(piece)
        completion.prompt_tokens = _prompt_tokens(request)
        completion.completion_tokens = token_count(text) + sum(
            token_count(call.name) + token_count(call.arguments) for call in completion.tool_calls
        )
        completion.latency_ms = int((time.monotonic() - started) * 1000)
        if completion.first_token_ms is None:
            completion.first_token_ms = completion.latency_ms
        yield Done(completion)

    @staticmethod
    def _pause(delay_s: float, stop: threading.Event | None) -> None:
        """Wait before the next word; a set `stop` ends the call at once."""
        if stop is not None:
            if stop.wait(delay_s) if delay_s > 0 else stop.is_set():
                raise ProviderStopped("the run stopped the model call")
        elif delay_s > 0:
            time.sleep(delay_s)

    # --- deciding what to say ------------------------------------------------------

    def _answer(self, request: ChatRequest) -> Completion:
        messages = request.messages
        last = messages[-1] if messages else {}
        user_text = self._last_user_text(messages)
        if request.response_format:
            return self._decide(request, user_text)
        if last.get("role") == "user" and request.tools:
            pick = tool_pick(user_text, request.tools)
            if pick:
                # "What time is it in London and Paris" is one call for each city.
                calls = [call_make(pick.name, arguments) for arguments in pick.calls]
                return Completion(
                    content=None, tool_calls=calls, finish_reason="tool_calls", model=request.model
                )
        results = self._results_since_user(messages)
        text = self._compose(results) if results else self._small_talk(user_text, request.tools)
        return Completion(content=text, finish_reason="stop", model=request.model)

    @staticmethod
    def _last_user_text(messages: list[dict[str, Any]]) -> str:
        for message in reversed(messages):
            if message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, list):
                    return " ".join(part.get("text", "") for part in content)
                return str(content or "")
        return ""

    @staticmethod
    def _results_since_user(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        for message in reversed(messages):
            if message.get("role") == "user":
                break
            if message.get("role") == "tool":
                results.append(message)
        return list(reversed(results))

    @staticmethod
    def _compose(results: list[dict[str, Any]]) -> str:
        sentences = []
        for message in results:
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            try:
                data = json.loads(text)
            except ValueError:
                sentences.append(text.strip())
                continue
            if not isinstance(data, dict):
                sentences.append(f"The result is {json.dumps(data)}.")
            elif data.get("success") is False or ("error" in data and "message" not in data):
                sentences.append(
                    f"Sorry, that did not work: {data.get('error') or 'unknown error'}."
                )
            elif data.get("message"):
                sentences.append(str(data["message"]))
            elif "result" in data:
                sentences.append(f"The result is {data['result']}.")
            else:
                sentences.append("Done: " + json.dumps(data)[:300])
        return " ".join(s if s.endswith((".", "!", "?")) else s + "." for s in sentences if s)

    @staticmethod
    def _small_talk(text: str, tools: list[dict[str, Any]] | None) -> str:
        if not text:
            return "Hello! How can I help?"
        names = [t["function"]["name"] for t in tools or [] if t.get("type") == "function"]
        hint = (
            f' I can use these tools: {", ".join(names)}. Try "what is 12*7" or '
            '"note that the boiler was serviced today".'
            if names
            else ""
        )
        return f"I am the offline model, so I only understand requests for my tools.{hint}"

    def _decide(self, request: ChatRequest, user_text: str) -> Completion:
        """Answer the `llm` decider's structured request: {done, next_tool, arguments, final_output}."""
        results = self._results_since_user(request.messages)
        decision: dict[str, Any] = {
            "done": True,
            "next_tool": None,
            "arguments": {},
            "final_output": None,
        }
        if results:
            decision["final_output"] = self._compose(results)
        else:
            pick = tool_pick(user_text, request.tools or self._tools_in_prompt(request))
            if pick:
                decision.update(done=False, next_tool=pick.name, arguments=pick.calls[0])
            else:
                decision["final_output"] = self._small_talk(user_text, request.tools)
        return Completion(content=json.dumps(decision), finish_reason="stop", model=request.model)

    @staticmethod
    def _tools_in_prompt(request: ChatRequest) -> list[dict[str, Any]]:
        """The decider lists the tools in its system message as JSON; read them back."""
        for message in request.messages:
            if message.get("role") == "system":
                match = re.search(r"<tools>(.*?)</tools>", str(message.get("content") or ""), re.S)
                if match:
                    try:
                        tools = json.loads(match.group(1))
                    except ValueError:
                        return []
                    if not isinstance(tools, list):
                        return []
                    return [
                        {"type": "function", "function": f} for f in tools if isinstance(f, dict)
                    ]
        return []


def _prompt_tokens(request: ChatRequest) -> int:
    """The request as the model reads it: messages, tool calls, tool schemas, response format."""
    count = 0
    for message in request.messages:
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(str(part.get("text", "")) for part in content)
        count += token_count(str(message.get("role") or "")) + token_count(str(content or ""))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            count += token_count(str(function.get("name") or ""))
            count += token_count(str(function.get("arguments") or ""))
    if request.tools:
        count += token_count(json.dumps(request.tools))
    if request.response_format:
        count += token_count(json.dumps(request.response_format))
    return count
