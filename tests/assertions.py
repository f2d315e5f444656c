"""Assertions shared across the suite."""

from __future__ import annotations

from typing import Any


def assert_paired(messages: list[dict[str, Any]]) -> None:
    """Every assistant tool call is answered right after it, and no tool message is stray."""
    pending: list[str] = []
    for message in messages:
        if pending:
            assert message["role"] == "tool", f"unanswered calls {pending} before {message}"
            pending.remove(message["tool_call_id"])
            continue
        assert message["role"] != "tool", f"stray tool message {message}"
        pending = [call["id"] for call in message.get("tool_calls") or []]
    assert not pending, f"unanswered calls {pending}"


def assert_valid_history(messages: list[dict[str, Any]]) -> None:
    """Valid for the OpenAI API: the openai package's own types accept it, and calls pair up."""
    from openai.types.chat import ChatCompletionMessageParam
    from pydantic import TypeAdapter

    TypeAdapter(list[ChatCompletionMessageParam]).validate_python(messages)
    assert_paired(messages)
