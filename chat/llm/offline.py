"""The embedded offline model: deterministic, no network, good enough for the demo tools.

It reads the request the way a real model would and answers through the same
interface:

- when the last message is the user's and tools are offered, it picks the tool
  whose name, description and parameter names best match the user's words (an
  arithmetic expression in the message matches a tool with an `expression`
  parameter), and fills the arguments from the message according to the schema
  (the expression, numbers, quoted strings, and the remaining text);
- after tool results, it writes the answer from them (their `message` fields
  first);
- for a structured-output request (the `llm` decider) it answers the JSON the
  schema asks for.

It streams word by word and reports usage as word counts.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from chat.llm.base import (
    ChatRequest,
    Completion,
    Done,
    ProviderStopped,
    StreamEvent,
    TextDelta,
    ToolCall,
)

WORD = re.compile(r"[A-Za-z0-9_']+")
QUOTED = re.compile(r"\"([^\"]+)\"|'([^']+)'|“([^”]+)”")
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
# An arithmetic expression: numbers joined by at least one operator.
EXPRESSION = re.compile(r"[-(\s]*\d[\d.\s]*(?:(?:\*\*|[-+*/%^x\u00d7\u00f7])[\s(]*-?[\d.]+[\s)]*)+")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "from",
        "by",
        "with",
        "about",
        "as",
        "into",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "am",
        "do",
        "does",
        "did",
        "what",
        "whats",
        "what's",
        "which",
        "who",
        "whom",
        "how",
        "when",
        "where",
        "why",
        "it",
        "its",
        "it's",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "me",
        "my",
        "mine",
        "i",
        "you",
        "your",
        "we",
        "our",
        "us",
        "please",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "let",
        "lets",
        "let's",
        "tell",
        "show",
        "give",
        "get",
        "find",
        "me",
        "now",
        "some",
        "any",
        "all",
        "just",
        "up",
        "out",
        "over",
        "tell",
        "know",
    ]
)
FILLERS = frozenset(
    [
        "that",
        "about",
        "for",
        "my",
        "the",
        "a",
        "an",
        "please",
        "of",
        "on",
        "in",
        "to",
        "me",
        "is",
        "it",
    ]
)


def _stem(word: str) -> str:
    word = word.lower().strip("'")
    for suffix in ("ing", "es", "ed", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


@dataclass(frozen=True)
class _Tool:
    name: str
    description: str
    parameters: dict[str, Any]

    @property
    def name_words(self) -> list[str]:
        return [w.lower() for w in re.split(r"[_\-\s]+", self.name) if w]

    @property
    def param_names(self) -> list[str]:
        return list((self.parameters.get("properties") or {}).keys())

    def vocabulary(self) -> set[str]:
        words = set(self.name_words) | {p.lower() for p in self.param_names}
        words |= {w.lower() for w in WORD.findall(self.description)}
        return {_stem(w) for w in words} - {_stem(s) for s in STOPWORDS}


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
        pieces = re.findall(r"\S+\s*", text)
        for piece in pieces:
            if completion.first_token_ms is None:
                completion.first_token_ms = int((time.monotonic() - started) * 1000)
            if stop is not None and stop.wait(self.word_delay_s):
                raise ProviderStopped("the run stopped the model call")
            if stop is None and self.word_delay_s:
                time.sleep(self.word_delay_s)
            yield TextDelta(piece)
        completion.prompt_tokens = sum(
            len(str(m.get("content") or "").split()) for m in request.messages
        )
        completion.completion_tokens = len(pieces) + sum(
            len(c.arguments.split()) for c in completion.tool_calls
        )
        completion.latency_ms = int((time.monotonic() - started) * 1000)
        if completion.first_token_ms is None:
            completion.first_token_ms = completion.latency_ms
        yield Done(completion)

    # --- deciding what to say ------------------------------------------------------

    def _answer(self, request: ChatRequest) -> Completion:
        messages = request.messages
        last = messages[-1] if messages else {}
        user_text = self._last_user_text(messages)
        if request.response_format:
            return self._decide(request, user_text)
        if last.get("role") == "user" and request.tools:
            call = self._pick_tool(user_text, request.tools)
            if call:
                return Completion(
                    content=None, tool_calls=[call], finish_reason="tool_calls", model=request.model
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

    def _pick_tool(self, text: str, tools: list[dict[str, Any]]) -> ToolCall | None:
        candidates = [
            _Tool(
                name=t["function"]["name"],
                description=t["function"].get("description") or "",
                parameters=t["function"].get("parameters") or {},
            )
            for t in tools
            if t.get("type") == "function"
        ]
        words = list(WORD.findall(text))
        exact = {w.lower() for w in words}
        stems = {_stem(w) for w in words} - {_stem(s) for s in STOPWORDS}
        expression = self._expression(text)
        best: tuple[float, _Tool] | None = None
        for tool in candidates:
            score = 0.0
            name_words = set(tool.name_words)
            score += 3 * len(exact & name_words)  # the exact word of the tool's name
            score += 2 * len(stems & {_stem(w) for w in name_words})
            score += 1.5 * len(stems & {_stem(p) for p in tool.param_names})
            score += 0.5 * len(stems & tool.vocabulary())
            if expression and "expression" in tool.param_names:
                score += 6
            if score > 0 and (best is None or score > best[0]):
                best = (score, tool)
        if best is None or best[0] < 2:
            return None
        tool = best[1]
        arguments = self._fill(tool, text, expression)
        return ToolCall(
            id=f"call_{uuid.uuid4().hex[:24]}", name=tool.name, arguments=json.dumps(arguments)
        )

    @staticmethod
    def _expression(text: str) -> str | None:
        found = [m.group(0).strip() for m in EXPRESSION.finditer(text)]
        found = [f for f in found if re.search(r"\d\s*(\*\*|[-+*/%^x\u00d7\u00f7])\s*[\d(-]", f)]
        if not found:
            return None
        expression = max(found, key=len)
        return (
            expression.replace("\u00d7", "*")
            .replace("\u00f7", "/")
            .replace("^", "**")
            .replace("x", "*")
        )

    def _fill(self, tool: _Tool, text: str, expression: str | None) -> dict[str, Any]:
        properties: dict[str, Any] = tool.parameters.get("properties") or {}
        required = set(tool.parameters.get("required") or [])
        quoted = [next(g for g in m.groups() if g) for m in QUOTED.finditer(text)]
        numbers = [] if expression else NUMBER.findall(text)
        rest = self._remaining_text(text, tool)
        arguments: dict[str, Any] = {}
        used_rest = False
        # Required parameters first: the remaining text goes where it is needed most.
        order = sorted(properties, key=lambda p: p not in required)
        for name in order:
            schema = properties[name]
            kind = schema.get("type")
            if name == "expression" and expression:
                arguments[name] = expression
            elif kind in {"integer", "number"} and numbers:
                value = numbers.pop(0)
                arguments[name] = int(float(value)) if kind == "integer" else float(value)
            elif kind == "string" and schema.get("enum"):
                lowered = text.lower()
                match = next((v for v in schema["enum"] if str(v).lower() in lowered), None)
                if match is not None:
                    arguments[name] = match
            elif kind == "string" and quoted:
                arguments[name] = quoted.pop(0)
            elif (
                kind == "string" and rest and not used_rest and (name in required or not arguments)
            ):
                arguments[name] = rest
                used_rest = True
        return arguments

    @staticmethod
    def _remaining_text(text: str, tool: _Tool) -> str:
        """The user's words without the leading ones that only asked for the tool."""
        vocabulary = tool.vocabulary()
        words = text.strip().rstrip("?.!").split()
        while words:
            word = re.sub(r"[^\w']", "", words[0]).lower()
            if word in STOPWORDS or word in FILLERS or _stem(word) in vocabulary or not word:
                words.pop(0)
                continue
            break
        return " ".join(words).strip(" ,:;")

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
            call = self._pick_tool(user_text, request.tools or self._tools_in_prompt(request))
            if call:
                decision.update(
                    done=False, next_tool=call.name, arguments=json.loads(call.arguments)
                )
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
