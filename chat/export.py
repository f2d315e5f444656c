"""A conversation as OpenAI fine-tuning chat examples (`GET …/export/`, JSONL).

A read like those of chat/selectors.py, with its own shaping: the history
repaired, each example's system prompt as its run sent it, and the tools the
model was offered, described as the registry describes them now.
"""

from __future__ import annotations

from typing import Any

from chat.history import message_to_openai
from chat.history_guards import repair
from chat.history_rows import HISTORY_COLUMNS
from chat.models import ACTIVE_RUN_STATUSES, Conversation, Message, ModelCall, Role, Run, RunStatus
from chat.prompts import system_prompt_for
from chat.selectors import current_messages
from tools.registry import registry as tool_registry

# Only what message_to_openai reads, plus the run the message belongs to.
EXPORT_COLUMNS = (*HISTORY_COLUMNS, "run_id")


def conversation_export(
    *, conversation: Conversation, per_run: bool = False, include_reasoning: bool = False
) -> list[dict[str, Any]]:
    """The conversation as OpenAI fine-tuning chat examples: {"messages": [...], "tools": [...]}.

    One example for the whole conversation, or with `per_run` one per completed
    run: the history up to and including that run's last message. Messages of
    a run still in progress are left out, since its answer is not known yet.
    Each example begins with the system prompt its newest run sent (chat/prompts.py).
    Each example's history is repaired (every tool call answered), and its
    `tools` are the tools offered to the model, plus any the messages call,
    described as the registry describes them now. With `include_reasoning`, an
    assistant message the model reasoned before carries it as `reasoning`.
    """
    columns = (*EXPORT_COLUMNS, "reasoning") if include_reasoning else EXPORT_COLUMNS
    rows = list(
        current_messages(conversation.pk)
        .exclude(run__status__in=ACTIVE_RUN_STATUSES)
        .order_by("position")
        .only(*columns)
    )
    offered: dict[Any, list[str]] = {}
    for run_id, names in (
        ModelCall.objects.filter(run__conversation_id=conversation.pk)
        .order_by("started_at")
        .values_list("run_id", "tools_offered")
    ):
        offered.setdefault(run_id, []).extend(names or [])
    runs = {
        pk: (status, prompt)
        for pk, status, prompt in Run.objects.filter(conversation_id=conversation.pk).values_list(
            "pk", "status", "system_prompt"
        )
    }

    def exported(message: Message) -> dict[str, Any]:
        data = message_to_openai(message)
        if include_reasoning and message.role == Role.ASSISTANT and message.reasoning:
            data["reasoning"] = message.reasoning
        return data

    def system(run_ids: list[Any]) -> list[dict[str, Any]]:
        # What the newest of the example's runs told the model (runs older than that
        # record: what a new run would be told).
        told = [runs[pk][1] for pk in run_ids if pk in runs and runs[pk][1] is not None]
        prompt = told[-1] if told else system_prompt_for(conversation)
        return [{"role": "system", "content": prompt}] if prompt else []

    def example(messages: list[Message], run_ids: list[Any]) -> dict[str, Any]:
        history = repair([*system(run_ids), *(exported(m) for m in messages)])
        names = [name for run_id in run_ids for name in offered.get(run_id, [])]
        for message in history:
            names.extend(
                str((call.get("function") or {}).get("name") or "")
                for call in message.get("tool_calls") or []
            )
        line: dict[str, Any] = {"messages": history}
        tools = [_export_tool(name) for name in dict.fromkeys(n for n in names if n)]
        if tools:
            line["tools"] = tools
        return line

    if not per_run:
        return [example(rows, list(dict.fromkeys(m.run_id for m in rows)))] if rows else []
    completed = {pk for pk, (status, _) in runs.items() if status == RunStatus.COMPLETED}
    last_index: dict[Any, int] = {}
    for index, message in enumerate(rows):
        if message.run_id in completed:
            last_index[message.run_id] = index
    examples = []
    for run_id, index in sorted(last_index.items(), key=lambda item: item[1]):
        prefix = rows[: index + 1]
        examples.append(example(prefix, [run_id]))
    return examples


def _export_tool(name: str) -> dict[str, Any]:
    """A tool as the OpenAI `tools` entry; a tool no longer registered keeps only its name."""
    spec = tool_registry.get(name)
    if spec is not None:
        return spec.openai_tool()
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": "(no longer registered)",
            "parameters": {"type": "object", "properties": {}},
        },
    }
