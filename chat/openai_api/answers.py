"""What a client of /v1/chat/completions is answered: the request read, the run's outcome, the shapes.

The run does the work; this module says what the client sees of it, in the
OpenAI shapes (`chat.completion`, `chat.completion.chunk`, the error object):
the final text of a run that answered, the client's own tool calls of a run
that handed them over (`finish_reason: "tool_calls"`), a text that says which
call waits for a person's approval, or an error with the run's reason.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

from django.db import connection
from rest_framework import status

from chat.engine.request import client_tool_names
from chat.exceptions import ImagesRefused, InvalidInput, NotFound
from chat.llm import model_images_refused
from chat.llm.endpoints import ModelChoice, UnknownModel, model_allowed
from chat.llm.limits import IMAGES_REFUSED
from chat.models import (
    ExecutionStatus,
    Message,
    Mode,
    ModelCall,
    Role,
    Run,
    RunStatus,
    ToolExecution,
)
from chat.openai_api.options import depth_check, options_read, stream_options_read
from chat.statements import model_columns, row_instance
from tools.registry import registry as tool_registry
from tools.schema import parameters_problem
from tools.spec import TOOL_NAME_RE

DEFAULT_MODE = Mode.LOOP
# What clients that route by a provider prefix put before a model id (`v1_model`).
CLIENT_PREFIX = "openai"

# The OpenAI error `type` of each status.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
}


class ModelNotFound(NotFound):
    """The request names a model the user may not choose (404 `model_not_found`)."""

    code = "model_not_found"


@dataclasses.dataclass(frozen=True)
class CompletionRequest:
    """A /v1/chat/completions body, checked: what toolchat does with it."""

    model: str  # `<provider>/<model>`
    messages: list[dict[str, Any]] | Any
    tools: list[dict[str, Any]] | None
    options: dict[str, Any]
    mode: str | None  # None when the request names none: a conversation keeps its own
    stream: bool
    include_usage: bool
    metadata: dict[str, Any] | None


def request_read(body: Any, meta: dict[str, Any]) -> CompletionRequest:
    """Check a request body (unknown fields are ignored); InvalidInput names the field at fault."""
    if not isinstance(body, dict):
        raise InvalidInput("The body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidInput("model is required.", field="model")
    try:
        model = v1_model(model).id
    except UnknownModel:
        raise ModelNotFound(
            f"The model {body['model']!r} does not exist or you do not have access to it; "
            "GET /v1/models lists those you can use.",
            field="model",
        ) from None
    n = body.get("n", 1)
    if isinstance(n, bool) or n != 1:
        raise InvalidInput("Only n=1 is supported.", field="n")
    options = options_read(body)
    metadata = options.get("metadata")
    include_usage = stream_options_read(body.get("stream_options"))
    tools = _tools_read(body.get("tools"))
    # A tool list's item and its function come above the parameters _tool_read counts;
    # messages are read field by field (chat/openai_api/threads.py), the rest is dropped.
    depth_check(body, envelopes={"tools": 3}, skip=("messages",))
    shadowed = shadowed_tools(tools)
    if shadowed:
        options["shadowed_tools"] = shadowed
    return CompletionRequest(
        model=model,
        messages=body.get("messages"),
        tools=tools,
        options=options,
        mode=_mode_read(meta, metadata),
        stream=bool(body.get("stream")),
        include_usage=include_usage,
        metadata=metadata,
    )


def v1_model(name: str) -> ModelChoice:
    """The model a /v1 request names: an id GET /v1/models lists, or that id after `openai/`.

    The openai-agents SDK and LiteLLM read what comes before a model's first `/`
    as their own provider (`Unknown prefix: offline`), and both send the rest
    of `openai/<id>` to an OpenAI-compatible server. So `openai/offline/offline`
    is one string that works in them and, verbatim, in every other client. An
    id that is itself a model (a provider named `openai`) keeps its meaning.
    """
    try:
        return model_allowed(name)
    except UnknownModel:
        prefix, _, rest = name.partition("/")
        if prefix != CLIENT_PREFIX or not rest:
            raise
        return model_allowed(rest)


def _mode_read(meta: dict[str, Any], metadata: dict[str, Any] | None) -> str | None:
    mode = meta.get("HTTP_X_TOOLCHAT_MODE") or (metadata or {}).get("toolchat_mode")
    if not mode:
        return None
    if mode not in Mode.values:
        raise InvalidInput(
            f"The toolchat mode must be one of {', '.join(Mode.values)}, not {mode!r}.",
            field="metadata.toolchat_mode",
        )
    return str(mode)


def _tools_read(tools: Any) -> list[dict[str, Any]] | None:
    """The client's own tools (it runs their calls), each checked before anything is stored."""
    if not tools:
        return None
    if not isinstance(tools, list) or len(tools) > 128:
        raise InvalidInput("tools must be an array of at most 128 tools.", field="tools")
    return [_tool_read(tool, f"tools[{index}].function") for index, tool in enumerate(tools)]


def shadowed_tools(tools: list[dict[str, Any]] | None) -> list[str]:
    """toolchat's own tools whose names the client's declarations take for this request.

    The client's declaration wins: it knows what its user set up (Open WebUI
    declares a `search_notes` of its own), and a name means one tool to the
    model. toolchat's tool of that name is not offered to the run's model
    (chat/engine/request.py), its calls are the client's, and the run keeps
    the names in `client_options.shadowed_tools`.
    """
    names = [tool["function"]["name"] for tool in tools or ()]
    return sorted({name for name in names if tool_registry.get(name) is not None})


def _tool_read(tool: Any, where: str) -> dict[str, Any]:
    """One client tool: a function, a valid name, and parameters a model can be offered."""
    kind = tool.get("type", "function") if isinstance(tool, dict) else "function"
    if kind != "function":
        at = where.removesuffix(".function")
        raise InvalidInput(f'{at}.type must be "function".', field=f"{at}.type")
    function = tool.get("function") if isinstance(tool, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not TOOL_NAME_RE.match(name):
        raise InvalidInput(f"{where}.name is not a valid tool name.", field=f"{where}.name")
    assert isinstance(function, dict)
    # No parameters (or `{}`) is a function without any, as OpenAI reads it.
    parameters = function.get("parameters")
    parameters = {"type": "object"} if parameters is None or parameters == {} else parameters
    problem = parameters_problem(parameters, f"{where}.parameters")
    if problem is not None:
        raise InvalidInput(problem, field=f"{where}.parameters")
    kept = {"name": name, "parameters": parameters}
    for key, kind, what in (("description", str, "a string"), ("strict", bool, "a boolean")):
        value = function.get(key)
        if value is None:
            continue
        if not isinstance(value, kind):
            raise InvalidInput(f"{where}.{key} must be {what}.", field=f"{where}.{key}")
        kept[key] = value
    return {"type": "function", "function": kept}


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What the client is answered once the run has ended, stopped, or the wait passed."""

    content: str | None = None
    tool_calls: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    finish_reason: str = "stop"
    usage: dict[str, int] = dataclasses.field(default_factory=dict)
    error: dict[str, Any] | None = None  # the error object of a failed request
    status: int = status.HTTP_200_OK
    waiting: bool = False  # the run waits for a person's approval: the text says so
    # The answer's token log probabilities (`logprobs.content`), when asked and given.
    logprobs: list[Any] | None = None


def run_outcome(run_id: Any) -> Outcome:
    """The client's answer from the run as stored now."""
    run, usage, answer = _run_read(run_id)
    if run.status == RunStatus.COMPLETED:
        final = answer
        assert final is not None
        names = client_tool_names(run)
        calls = [c for c in final.tool_calls or [] if c["function"]["name"] in names]
        if calls:
            return Outcome(final.content, calls, "tool_calls", usage)
        finish = "length" if final.finish_reason == "length" else "stop"
        return Outcome(final.content or "", [], finish, usage, logprobs=_logprobs(run, final))
    if run.status == RunStatus.AWAITING_APPROVAL:
        return Outcome(approval_text(run), usage=usage, waiting=True)
    if run.status == RunStatus.FAILED:
        if IMAGES_REFUSED in run.error:
            # The model refused the message's images: the client's to change, a 400. This
            # process remembers it too (the run's worker may be another), so that the next
            # request with images is refused at once (chat/openai_api/turns.py).
            model_images_refused(run.conversation.model, run.error)
            return _failed(400, run.error, ImagesRefused.code, usage)
        return _failed(502, run.error or "The run failed.", "run_failed", usage)
    if run.status == RunStatus.CANCELLED:
        return _failed(500, "The run was cancelled.", "run_cancelled", usage)
    return _failed(
        504,
        f"The run {run.pk} did not end in time; it goes on, and its answer will be in the "
        "conversation.",
        "timeout",
        usage,
    )


def _logprobs(run: Run, final: Message) -> list[Any] | None:
    """The log probabilities of the call that wrote the answer, when the client asked."""
    if not (run.client_options or {}).get("logprobs"):
        return None
    rows = ModelCall.objects.filter(run=run, response_message=final)
    return rows.values_list("logprobs", flat=True).first()


def _failed(code: int, message: str, reason: str, usage: dict[str, int]) -> Outcome:
    return Outcome(error=error_object(code, message, code=reason), status=code, usage=usage)


def approval_text(run: Run) -> str:
    """The answer of a run that waits for a person: which call, and how to decide it."""
    waiting = ToolExecution.objects.filter(run=run, status=ExecutionStatus.AWAITING_APPROVAL)
    lines = [
        f"toolchat is waiting for approval of `{e.name}` before it goes on: approve or reject "
        f"it on toolchat's chat page, or with POST /api/v1/tool-executions/{e.pk}/approve/ "
        "(or /reject/)."
        for e in waiting
    ]
    return "\n".join(lines or ["toolchat is waiting for an approval."]) + f" (run {run.pk})"


def _run_read(run_id: Any) -> tuple[Run, dict[str, int], Message | None]:
    """The run, its usage (every model call of the turn summed) and its last answer, in one
    statement built once.

    Every /v1 answer reads it: the ORM's `get` and `aggregate` were two round
    trips and two queries compiled each time (docs/gateway.md, round fifteen),
    and the answer (chat/selectors.py `run_final_message`) a third.
    """
    pk: Any = Run._meta.pk
    with connection.cursor() as cursor:
        cursor.execute(_run_with_usage(), [pk.get_db_prep_value(pk.to_python(run_id), connection)])
        row = cursor.fetchone()
    if row is None:
        raise Run.DoesNotExist(f"no run {run_id}")
    values = iter(row)
    run: Run = row_instance(Run, "chat_run", values)
    prompt, completion = int(next(values)), int(next(values))
    columns = list(values)
    # None when the run has no answer (yet): the LEFT JOIN's columns are all NULL.
    answer = row_instance(Message, "answer", iter(columns)) if columns[_ANSWER_PK] else None
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    return run, usage, answer


# Where the answer's primary key is among its columns.
_ANSWER_PK = [field.primary_key for field in Message._meta.concrete_fields].index(True)


@functools.cache
def _run_with_usage() -> str:
    calls = connection.ops.quote_name(ModelCall._meta.db_table)
    summed = "(SELECT COALESCE(SUM({column}), 0) FROM {calls} WHERE {calls}.run_id = chat_run.id)"
    return (
        f"SELECT {model_columns(Run)}, "  # noqa: S608 (built from the models)
        f"{summed.format(column='prompt_tokens', calls=calls)}, "
        f"{summed.format(column='completion_tokens', calls=calls)}, "
        f"{model_columns(Message, 'answer')} "
        "FROM chat_run LEFT JOIN chat_message AS answer ON answer.id = ("
        "SELECT latest.id FROM chat_message AS latest WHERE latest.run_id = chat_run.id "
        f"AND latest.role = '{Role.ASSISTANT.value}' ORDER BY latest.position DESC LIMIT 1) "
        "WHERE chat_run.id = %s"
    )


def error_object(
    status_code: int, message: str, *, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """OpenAI's error object: {"message", "type", "param", "code"}."""
    kind = ERROR_TYPES.get(
        status_code, "server_error" if status_code >= 500 else "invalid_request_error"
    )
    return {"message": message, "type": kind, "param": param, "code": code}


def completion_body(run: Run, model: str, outcome: Outcome) -> dict[str, Any]:
    """The `chat.completion` object of a run's outcome."""
    message: dict[str, Any] = {"role": "assistant", "content": outcome.content, "refusal": None}
    if outcome.tool_calls:
        message["tool_calls"] = outcome.tool_calls
    return {
        "id": completion_id(run),
        "object": "chat.completion",
        "created": int(run.created_at.timestamp()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": outcome.finish_reason,
                "logprobs": _logprobs_object(outcome.logprobs),
            }
        ],
        "usage": outcome.usage,
    }


def _logprobs_object(logprobs: list[Any] | None) -> dict[str, Any] | None:
    return None if logprobs is None else {"content": logprobs, "refusal": None}


def completion_id(run: Run) -> str:
    return f"chatcmpl-{run.pk.hex}"


def chunk(
    run: Run,
    model: str,
    delta: dict[str, Any] | None,
    finish: str | None = None,
    *,
    usage: dict[str, int] | None = None,
    logprobs: list[Any] | None = None,
) -> str:
    """One `chat.completion.chunk` as an SSE data line (no choice when `delta` is None).

    The last chunk of a stream that asked for usage has no choice and the usage.
    The finishing chunk carries the answer's `logprobs`, when the client asked.
    """
    choices: list[dict[str, Any]] = []
    if delta is not None:
        choices = [{"index": 0, "delta": delta, "finish_reason": finish}]
        if logprobs is not None:
            choices[0]["logprobs"] = _logprobs_object(logprobs)
    body: dict[str, Any] = {
        "id": completion_id(run),
        "object": "chat.completion.chunk",
        "created": int(run.created_at.timestamp()),
        "model": model,
        "choices": choices,
    }
    if usage is not None:
        body["usage"] = usage
    return sse_data(body)


def sse_data(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body, ensure_ascii=False, separators=(',', ':'))}\n\n"
