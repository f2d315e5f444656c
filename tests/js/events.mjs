// Builders for the live events and API answers the chat page gets, in the shapes
// docs/events.md and chat/history.py (message_to_api) give them.

export const RUN = "7a1c2f0e-0000-4000-8000-000000000001";
export const QUESTION = "11111111-0000-4000-8000-000000000001";
export const TOOLS_MESSAGE = "22222222-0000-4000-8000-000000000002";
export const ANSWER = "33333333-0000-4000-8000-000000000003";
export const TOOL_MESSAGE = "44444444-0000-4000-8000-000000000004";
export const EXECUTION = "55555555-0000-4000-8000-000000000005";
export const CALL = "call_calc_1";

/** An envelope: `{"seq", "type", "run_id", "ts", "data"}`. */
export function envelope(seq, type, data, runId = RUN) {
  return { seq, type, run_id: runId, ts: "2026-11-22T10:00:00.123456Z", data };
}

/** A stored message as the history endpoint (and message.completed) shows it. */
export function stored(fields) {
  return {
    position: 0,
    created_at: "2026-11-22T10:00:00+00:00",
    run_id: RUN,
    resource_id: null,
    latency_ms: null,
    model: null,
    usage: null,
    finish_reason: null,
    ...fields,
  };
}

export function userMessage(id = QUESTION, content = "What is 2**10?") {
  return stored({ id, role: "user", content });
}

export function toolsMessage() {
  return stored({
    id: TOOLS_MESSAGE,
    role: "assistant",
    content: null,
    tool_calls: [{ id: CALL, type: "function", function: { name: "calculator", arguments: '{"expression": "2**10"}' } }],
    latency_ms: 8,
    model: "offline",
    usage: { prompt_tokens: 942, completion_tokens: 7 },
    finish_reason: "tool_calls",
    html: null,
    suggestions: null,
  });
}

export function toolMessage() {
  return stored({
    id: TOOL_MESSAGE,
    role: "tool",
    tool_call_id: CALL,
    name: "calculator",
    content: '{"result": 1024, "message": "2**10 = 1024"}',
    tool_execution_id: EXECUTION,
  });
}

export function answerMessage(suggestions = null) {
  return stored({
    id: ANSWER,
    role: "assistant",
    content: "2**10 is **1024**.",
    html: "<p>2**10 is <strong>1024</strong>.</p>",
    latency_ms: 12,
    model: "offline",
    usage: { prompt_tokens: 1000, completion_tokens: 9 },
    finish_reason: "stop",
    suggestions,
  });
}

/** One whole turn's events, as the server publishes them, from `first` on. */
export function turnEvents(first = 1) {
  const events = [
    ["message.created", { message_id: QUESTION, role: "user", message: userMessage() }],
    ["run.started", { mode: "two_pass" }],
    ["message.created", { message_id: TOOLS_MESSAGE, role: "assistant", purpose: "tools", step: 1, model: "offline" }],
    ["message.completed", { message: toolsMessage() }],
    ["tool_call.started", {
      execution_id: EXECUTION, tool_call_id: CALL, name: "calculator",
      arguments: { expression: "2**10" }, attempt: 1,
    }],
    ["tool.progress", { tool_call_id: CALL, name: "calculator", percent: 50, message: "halfway" }],
    ["tool.event", { tool_call_id: CALL, name: "calculator", type: "note", data: { x: 1 } }],
    ["tool_call.completed", {
      execution_id: EXECUTION, tool_call_id: CALL, name: "calculator", status: "succeeded",
      duration_ms: 3, truncated: false, message: toolMessage(),
    }],
    ["tools.ended", { message_id: TOOLS_MESSAGE }],
    ["message.created", { message_id: ANSWER, role: "assistant", purpose: "compose", step: 2, model: "offline" }],
    ["message.delta", { message_id: ANSWER, text: "2**10 is " }],
    ["message.delta", { message_id: ANSWER, text: "**1024**." }],
    ["message.completed", { message: answerMessage(["Why 1024?"]) }],
    ["message.suggestions", { message_id: ANSWER, suggestions: ["Why 1024?", "And 2**20?"] }],
    ["run.completed", { message_id: ANSWER, latency_ms: 1234, model_calls: 2, steps: 2 }],
  ];
  return events.map(([type, data], index) => envelope(first + index, type, data));
}
