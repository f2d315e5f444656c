"""The offline model's answer to one request: tool calls, JSON, or text streamed word by word.

What it says depends on where the conversation stands:

- the last message is the user's and tools are offered: the calls the
  message asks for, several in one step when it asks several things
  (requests.py);
- tool results came back and tools are still offered (a loop): what the
  message asks for that this turn has not run yet, such as deleting what a
  search found (and nothing more once something was deleted); when nothing
  is left, the answer;
- tool results came back: the answer written from them (answers.py);
- none of these: what it can do (answers.py).

A text answer to a user message with images begins by saying what it was
shown: "I see 1 image (image/png, 64x64)." (history.py `images_seen`).

It honours the request as a model does: `tool_choice` "none" calls nothing,
"required" calls a tool (the one the words ask for, else one named for the
answer, pydantic-ai's `final_result`, else the last offered), a named
function calls that function, and "auto" calls what the words ask for. A
forced call's arguments, and an answer to a `response_format` of
`json_schema`, validate against their schema (structured.py: filled from the
words, the tool results and the answer); `json_object` is answered with
`{"answer": ...}`. The engine's own formats are answered as it asks: follow-up
suggestions (suggestions.py) and the `llm` decider's next step. `stop` (a
request option) ends the text before the first stop sequence, and
`max_tokens` after that many tokens, with `finish_reason` "length".

Text streams word by word, `word_delay_s` apart (TOOLCHAT_OFFLINE_WORD_DELAY_MS),
so that the app shows its streaming; JSON answers are for the engine, not the
user, and arrive at once.

Usage is counted with a stand-in tokenizer (`token_count`): every word (a run
of letters, digits and underscores) and every other non-space character is
one token. It is deterministic and of the same order as a real tokenizer's
count. The prompt counts every message's role, text and tool calls, the
offered tools' schemas and the response format; the completion counts the
answer's text and its tool calls' names and arguments.

The model that answered, as a server would report it, is the one asked; an
offline provider named otherwise than `offline` answers as `<name>/<model>`,
so that two of them are told apart on the messages they wrote (a badge, the
audit). The code it shows names the model by that id too.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

from chat.llm.base import (
    DECISION_FORMAT_NAME,
    SUGGESTIONS_FORMAT_NAME,
    ChatRequest,
    Completion,
    Done,
    ProviderStopped,
    StreamEvent,
    TextDelta,
    ToolCall,
)
from chat.llm.offline.answers import (
    answer_compose,
    answer_no_earlier_result,
    answer_small_talk,
)
from chat.llm.offline.choosing import call_make
from chat.llm.offline.history import (
    Message,
    TurnResult,
    images_seen,
    last_number,
    last_user_text,
    message_text,
    turn_results,
)
from chat.llm.offline.requests import calls_plan, refers_back
from chat.llm.offline.structured import conversation_of, schema_value
from chat.llm.offline.suggestions import suggestions_make
from chat.llm.offline.words import destroys

TOKEN = re.compile(r"\w+|[^\w\s]")


def token_count(text: str) -> int:
    """Tokens as the offline model counts them: each word and each other non-space character."""
    return len(TOKEN.findall(text))


class OfflineProvider:
    """A deterministic stand-in for a tool-calling model."""

    def __init__(self, *, word_delay_s: float = 0.0, name: str = "offline") -> None:
        self.word_delay_s = word_delay_s
        self.name = name

    def stream(
        self, request: ChatRequest, *, stop: threading.Event | None = None
    ) -> Iterator[StreamEvent]:
        """Answer the request: tool calls, JSON, or text streamed word by word."""
        started = time.monotonic()
        completion = _limited(self._answer(request), request)
        completion.model = self.answers_as(request.model)
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

    def answers_as(self, model: str) -> str:
        """The model a completion says answered: `model`, named by its provider if not `offline`."""
        return model if self.name == "offline" else f"{self.name}/{model}"

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
        if _format_name(request) == SUGGESTIONS_FORMAT_NAME:
            content = json.dumps({"suggestions": suggestions_make(messages)})
            return Completion(content=content, finish_reason="stop", model=request.model)
        if _format_name(request) == DECISION_FORMAT_NAME:
            return self._decide(request)
        results = turn_results(messages)
        calls = _calls_chosen(request, results)
        if calls:
            return Completion(
                content=None, tool_calls=calls, finish_reason="tool_calls", model=request.model
            )
        text = _in_words(request, results, f"{self.name}/{request.model}")
        seen = images_seen(messages)
        if seen and not request.response_format:
            text = f"{seen} {text}"
        if request.response_format:
            text = _formatted(request, results, text)
        return Completion(content=text, finish_reason="stop", model=request.model)

    def _decide(self, request: ChatRequest) -> Completion:
        """Answer the `llm` decider's structured request: {done, next_tool, arguments, final_output}.

        The decider runs one tool at a time: the next of the calls the message
        asks for that has not run yet in this turn, and none once a tool that
        destroys has run (as in a loop).
        """
        results = turn_results(request.messages)
        ran = {(result.name, json.dumps(result.arguments, sort_keys=True)) for result in results}
        tools = request.tools or _tools_in_prompt(request)
        stopped = any(destroys(result.name) for result in results)
        planned = calls_plan(request.messages, tools) if tools and not stopped else []
        following = next(
            (
                call
                for call in planned
                if (call.name, json.dumps(json.loads(call.arguments), sort_keys=True)) not in ran
            ),
            None,
        )
        decision: dict[str, Any] = {
            "done": True,
            "next_tool": None,
            "arguments": {},
            "final_output": None,
        }
        if following:
            decision.update(
                done=False, next_tool=following.name, arguments=json.loads(following.arguments)
            )
        elif results:
            decision["final_output"] = answer_compose(
                results, asked=last_user_text(request.messages)
            )
        else:
            decision["final_output"] = _without_tools(request, f"{self.name}/{request.model}")
        return Completion(content=json.dumps(decision), finish_reason="stop", model=request.model)


def _calls_next(
    messages: list[Message], tools: list[dict[str, Any]], results: list[TurnResult]
) -> list[ToolCall]:
    """The calls the user's message asks for that this turn has not made yet.

    After tool results (a loop), only a tool this turn has not run yet is
    called: the next step of the plan, such as deleting what a search found.
    Once a tool that destroys has run, the turn calls nothing more: the ids it
    deleted are gone, and a search for others is not what was asked.
    """
    if any(destroys(result.name) for result in results):
        return []
    ran = {result.name for result in results}
    return [call for call in calls_plan(messages, tools) if call.name not in ran]


# The name pydantic-ai gives the tool that takes an agent's typed output (`final_result`,
# `final_result_<Type>`).
_OUTPUT_TOOL = re.compile(r"^final_result(?:_|$)")


def _calls_chosen(request: ChatRequest, results: list[TurnResult]) -> list[ToolCall]:
    """The calls to make as `tool_choice` says: none, what the words ask, or a forced one."""
    tools, choice, messages = request.tools or [], request.tool_choice, request.messages
    if not tools or choice == "none":
        return []
    named = _choice_named(choice)
    if named is not None:
        tool = next((t for t in tools if t.get("function", {}).get("name") == named), None)
        if tool is None:
            return []
        planned = calls_plan(messages, [tool])
        return [_forced(request, results, tool, planned[0] if planned else None)]
    last = messages[-1] if messages else {}
    calls = _calls_next(messages, tools, results) if last.get("role") in ("user", "tool") else []
    if choice != "required":
        return calls
    by_name = {t.get("function", {}).get("name"): t for t in tools}
    if calls:
        return [_forced(request, results, by_name[call.name], call) for call in calls]
    return [_forced(request, results, _output_tool(tools), None)]


def _choice_named(choice: Any) -> str | None:
    """The function a `tool_choice` names, or None."""
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


def _output_tool(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The tool a forced call goes to when the words ask for none.

    The one that takes the answer (pydantic-ai's output tool), else the last
    offered: a /v1 client's own tools come after toolchat's.
    """
    for tool in tools:
        if _OUTPUT_TOOL.match(str(tool.get("function", {}).get("name", ""))):
            return tool
    return tools[-1]


def _forced(
    request: ChatRequest, results: list[TurnResult], tool: dict[str, Any], planned: ToolCall | None
) -> ToolCall:
    """A call that must be made: its arguments complete and valid for the tool's schema."""
    function = tool.get("function", {})
    parameters = function.get("parameters") or {"type": "object"}
    seed = json.loads(planned.arguments) if planned is not None else {}
    conversation = conversation_of(request.messages, results, _in_words(request, results))
    arguments = schema_value(parameters, conversation, seed=seed)
    return call_make(
        str(function.get("name", "")), arguments if isinstance(arguments, dict) else {}
    )


def _in_words(request: ChatRequest, results: list[TurnResult], model_id: str = "") -> str:
    """The answer as text: written from this turn's results, or without any.

    `model_id` is the answering model's, as its code example names it.
    """
    if results:
        return answer_compose(results, asked=last_user_text(request.messages))
    return _without_tools(request, model_id or f"offline/{request.model}")


def _formatted(request: ChatRequest, results: list[TurnResult], text: str) -> str:
    """The answer in the `response_format` asked for: JSON that fits its schema."""
    response_format = request.response_format or {}
    wrapper = response_format.get("json_schema")
    schema = wrapper.get("schema") if isinstance(wrapper, dict) else None
    if response_format.get("type") == "json_schema" and isinstance(schema, dict):
        conversation = conversation_of(request.messages, results, text)
        return json.dumps(schema_value(schema, conversation), ensure_ascii=False)
    if response_format.get("type") in ("json_object", "json_schema"):
        return json.dumps({"answer": text}, ensure_ascii=False)
    return text


def _limited(completion: Completion, request: ChatRequest) -> Completion:
    """The answer's text ended where a model that heeds `stop` and `max_tokens` ends it."""
    text = completion.content
    if not text:
        return completion
    stop = request.options.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    found = [text.find(s) for s in stops if isinstance(s, str) and s and s in text]
    if found:
        text = text[: min(found)]
    if request.max_tokens:
        tokens = list(TOKEN.finditer(text))
        if len(tokens) > request.max_tokens:
            text = text[: tokens[request.max_tokens - 1].end()]
            completion.finish_reason = "length"
    completion.content = text
    return completion


def _without_tools(request: ChatRequest, model_id: str) -> str:
    """The answer when no tool is called and none has answered."""
    text = last_user_text(request.messages)
    if refers_back(text) and last_number(request.messages) is None:
        return answer_no_earlier_result()
    return answer_small_talk(text, request.tools, model_id=model_id)


def _format_name(request: ChatRequest) -> str:
    schema = (request.response_format or {}).get("json_schema")
    return str(schema.get("name") or "") if isinstance(schema, dict) else ""


def _tools_in_prompt(request: ChatRequest) -> list[dict[str, Any]]:
    """The decider lists the tools in its system message as JSON; read them back."""
    for message in request.messages:
        if message.get("role") == "system":
            match = re.search(r"<tools>(.*?)</tools>", message_text(message), re.S)
            if match:
                try:
                    tools = json.loads(match.group(1))
                except ValueError:
                    return []
                if not isinstance(tools, list):
                    return []
                return [{"type": "function", "function": f} for f in tools if isinstance(f, dict)]
    return []


def _prompt_tokens(request: ChatRequest) -> int:
    """The request as the model reads it: messages, tool calls, tool schemas, response format."""
    count = 0
    for message in request.messages:
        count += token_count(str(message.get("role") or "")) + token_count(message_text(message))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            count += token_count(str(function.get("name") or ""))
            count += token_count(str(function.get("arguments") or ""))
    if request.tools:
        count += token_count(json.dumps(request.tools))
    if request.response_format:
        count += token_count(json.dumps(request.response_format))
    return count
