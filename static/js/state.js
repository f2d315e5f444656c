// @ts-check
/* What the open conversation's thread shows: a pure reducer.
 *
 * `reduce(thread, action)` takes the thread and one thing that happened (a live
 * event, the history the API answered, a message the user sent, the socket's
 * ack) and returns the next thread. render.js draws a thread; nothing here
 * touches the page, so node's test runner checks it (tests/js/).
 */

import { warningKey } from "./budget.js";
import { argumentsSummary, parseJSON } from "./format.js";
import {
  addItem,
  addNotice,
  endRun,
  ensureCard,
  ensureMessage,
  failureText,
  newCard,
  newMessage,
  putCard,
  putMessage,
  removeItems,
  setApproval,
  setResource,
  setResult,
  setStatus,
  stopStreaming,
  updateCard,
} from "./thread.js";

/**
 * @typedef {import("./thread.js").Thread} Thread
 * @typedef {import("./thread.js").RunEvent} RunEvent
 * @typedef {import("./thread.js").Ack} Ack
 * @typedef {import("./thread.js").StoredMessage} StoredMessage
 * @typedef {import("./thread.js").Execution} Execution
 * @typedef {import("./thread.js").TurnOutcome} TurnOutcome
 * @typedef {import("./thread.js").Pending} Pending
 *
 * @typedef {{type: "event", event: RunEvent}
 *   | {type: "history", messages: StoredMessage[], executions: Execution[], activeRunId: string | null, lastSeq: number}
 *   | {type: "send", content: string, images?: string[]}
 *   | {type: "sent"}
 *   | {type: "ack", ack: Ack}
 *   | {type: "send.failed", runId?: string | null}
 *   | {type: "notice", level: "error" | "info", text: string, retry?: boolean}
 *   | {type: "notice.dismissed", key: string}
 *   | {type: "run.adopt", runId: string | null | undefined}
 *   | {type: "approval.cleared", callId: string}
 *   | {type: "edit", id: string | null}
 *   | {type: "opening", on: boolean}
 *   | {type: "requesting", on: boolean}} Action
 */

export const TERMINAL = ["run.completed", "run.failed", "run.cancelled"];

/**
 * The next thread after one action.
 * @param {Thread} thread
 * @param {Action} action
 * @returns {Thread}
 */
export function reduce(thread, action) {
  switch (action.type) {
    case "event":
      return applyEvent(thread, action.event);
    case "history":
      return applyHistory(thread, action);
    case "send": {
      const key = "local-" + (thread.counter + 1);
      /** @type {import("./thread.js").Pending} */
      const pending = { key, content: action.content, sent: false };
      if (action.images && action.images.length) pending.images = action.images;
      /** @type {Thread} */
      let next = { ...thread, counter: thread.counter + 1, pending };
      next = putMessage(next, { ...newMessage(key, null, "user"), text: action.content, pending: true });
      return addItem(next, { kind: "message", key });
    }
    case "sent":
      return thread.pending ? { ...thread, pending: { ...thread.pending, sent: true } } : thread;
    case "ack":
      return applyAck(thread, action.ack);
    case "send.failed": {
      let next = thread;
      if (thread.pending) next = removeItems(thread, [thread.pending.key]);
      next = { ...next, pending: null };
      return action.runId ? { ...next, activeRunId: action.runId } : next;
    }
    case "notice":
      return addNotice(thread, action.level, action.text, Boolean(action.retry));
    case "notice.dismissed":
      return thread.notices[action.key] ? removeItems(thread, [action.key]) : thread;
    case "run.adopt":
      // A run the REST API started: its events may have come (even its end) before the answer.
      if (action.runId && !thread.activeRunId && !thread.ended[action.runId]) {
        return { ...thread, activeRunId: action.runId };
      }
      return thread;
    case "approval.cleared":
      return updateCard(thread, action.callId, { approval: null });
    case "edit":
      return { ...thread, editing: action.id };
    case "opening":
      return { ...thread, opening: action.on };
    case "requesting":
      return { ...thread, requesting: action.on };
    default:
      return thread;
  }
}

/**
 * A live event. Each applies once: an event at or below `lastSeq` changes nothing.
 * @param {Thread} thread
 * @param {RunEvent} event
 * @returns {Thread}
 */
export function applyEvent(thread, event) {
  if (typeof event.seq !== "number" || event.seq <= thread.lastSeq) return thread;
  let t = { ...thread, lastSeq: event.seq };
  // An event without data (not one the server sends) moves the cursor and nothing else.
  if (!event.data || typeof event.data !== "object") return t;
  const runId = event.run_id || null;
  switch (event.type) {
    case "run.started":
      t = { ...t, activeRunId: runId };
      break;
    case "message.created":
      t = event.data.role === "user" ? receiveUserMessage(t, event.data, runId) : startMessage(t, event.data);
      break;
    case "messages.superseded":
      t = removeSuperseded(t, event.data);
      break;
    case "message.suggestions": {
      const key = t.keyOf[event.data.message_id];
      const view = key ? t.messages[key] : null;
      if (view) {
        const suggestions = event.data.suggestions || [];
        const message = view.message ? { ...view.message, suggestions } : null;
        t = putMessage(t, { ...view, message, suggestions });
      }
      break;
    }
    case "message.delta": {
      t = ensureMessage(t, event.data.message_id, "assistant");
      const view = t.messages[t.keyOf[event.data.message_id]];
      let text = event.data.reset ? "" : view.text;
      let bubbleHidden = view.bubbleHidden;
      if (event.data.text) {
        text += event.data.text;
        bubbleHidden = false;
      }
      t = putMessage(t, { ...view, text, html: event.data.reset ? null : view.html, bubbleHidden });
      break;
    }
    case "message.completed":
      if (event.data.message) t = applyMessage(t, event.data.message);
      break;
    case "tool_call.started":
      t = ensureCard(t, event.data.tool_call_id, event.data.name);
      t = updateCard(t, event.data.tool_call_id, {
        ...(event.data.name ? { name: event.data.name } : {}),
        ...(event.data.arguments !== undefined ? { args: { value: event.data.arguments } } : {}),
      });
      t = setStatus(t, event.data.tool_call_id, "running");
      break;
    case "tool_call.approval_requested": {
      t = ensureCard(t, event.data.tool_call_id, event.data.name);
      if (event.data.arguments !== undefined) t = updateCard(t, event.data.tool_call_id, { args: { value: event.data.arguments } });
      t = setStatus(t, event.data.tool_call_id, "awaiting_approval");
      t = setApproval(t, event.data.tool_call_id, event.data.execution_id, event.data.description);
      break;
    }
    case "tool_call.approval_decided":
      if (t.cards[event.data.tool_call_id]) {
        t = updateCard(t, event.data.tool_call_id, { approval: null });
        if (event.data.approved) t = setStatus(t, event.data.tool_call_id, "pending");
      }
      break;
    case "tool.progress": {
      t = ensureCard(t, event.data.tool_call_id, event.data.name);
      const card = t.cards[event.data.tool_call_id];
      // A progress event that crossed the cancel on the way: the call is over.
      if (card.status === "running" || card.status === "pending") {
        const percent = Math.max(0, Math.min(100, Number(event.data.percent) || 0));
        t = updateCard(t, event.data.tool_call_id, { progress: { percent, message: event.data.message || "" } });
      }
      break;
    }
    case "tool_call.completed": {
      t = ensureCard(t, event.data.tool_call_id, event.data.name);
      t = setStatus(t, event.data.tool_call_id, event.data.status || "succeeded");
      t = updateCard(t, event.data.tool_call_id, { durationMs: event.data.duration_ms ?? null });
      if (event.data.truncated) t = updateCard(t, event.data.tool_call_id, { truncated: true });
      if (event.data.message) {
        t = setResult(t, event.data.tool_call_id, event.data.message.content);
        if (event.data.message.resource) t = setResource(t, event.data.tool_call_id, event.data.message.resource, event.data.execution_id);
      }
      break;
    }
    case "budget.warning": {
      // Once per limit a page load: every post over a soft limit warns again, and a
      // conversation opened anew replays its run's events.
      const key = warningKey(event.data);
      if (t.warned[key]) break;
      t = { ...t, warned: { ...t.warned, [key]: true } };
      t = addNotice(t, "warning", event.data.message || "A budget limit is reached.", false, true);
      break;
    }
    case "run.completed": {
      const key = event.data.message_id && t.keyOf[event.data.message_id];
      if (key) {
        const view = t.messages[key];
        t = putMessage(t, { ...view, turn: { status: "completed", ...event.data } });
      }
      t = endRun(t, runId);
      break;
    }
    case "run.failed":
      t = addNotice(t, "error", failureText(event.data.error), true);
      t = endRun(t, runId);
      break;
    case "run.cancelled":
      t = addNotice(t, "info", "The run was cancelled.", true);
      for (const call of event.data.cancelled_tool_calls || []) {
        const callId = typeof call === "string" ? call : call && call.tool_call_id;
        if (callId && t.cards[callId]) t = setStatus(t, callId, "cancelled");
      }
      t = endRun(t, runId);
      break;
    default:
      break;
  }
  if (TERMINAL.indexOf(event.type) !== -1) t = stopStreaming(t);
  return t;
}

/**
 * The socket's answer to a sent message; it may come before or after the message's event.
 * @param {Thread} thread
 * @param {Ack} ack
 * @returns {Thread}
 */
function applyAck(thread, ack) {
  if (ack.action !== "message" || !thread.pending) return thread;
  const pending = thread.pending;
  /** @type {Thread} */
  let t = { ...thread, pending: null };
  const view = t.messages[pending.key];
  if (ack.message_id && view && !view.id) t = adoptPending(t, pending, ack.message_id);
  if (ack.run_id && !t.activeRunId) t = { ...t, activeRunId: ack.run_id };
  return t;
}

/**
 * The conversation's stored messages and tool executions, as the API answered them.
 * Each finished turn ends as it ended live: the totals badge on its answer, or its
 * error or the cancel notice (each with Retry). The messages of the run in progress are
 * left out: its events are replayed from its first one.
 * @param {Thread} thread
 * @param {{messages: StoredMessage[], executions: Execution[], activeRunId: string | null, lastSeq: number}} history
 * @returns {Thread}
 */
function applyHistory(thread, history) {
  const pendingKey = thread.pending ? thread.pending.key : null;
  let t = pendingKey ? removeItems(thread, [pendingKey], true) : thread;
  const activeRunId = history.activeRunId;
  /** @type {{runId: string | null | undefined, outcome: TurnOutcome, answer?: string} | null} */
  let turn = null;
  const endTurn = () => {
    if (!turn) return;
    const outcome = turn.outcome;
    if (outcome.status === "completed" && turn.answer) {
      t = putMessage(t, { ...t.messages[turn.answer], turn: outcome });
    } else if (outcome.status === "failed") {
      t = addNotice(t, "error", failureText(outcome.error), true);
    } else if (outcome.status === "cancelled") {
      t = addNotice(t, "info", "The run was cancelled.", true);
    }
    turn = null;
  };
  for (const message of history.messages) {
    if (activeRunId && message.run_id === activeRunId && message.role !== "user") continue;
    if (message.role === "system") continue;
    if (message.role === "user") {
      endTurn();
      // Its turn is the newest run it triggered (a regenerated answer's).
      const turnRun = (message.turn && message.turn.run_id) || message.run_id;
      if (message.turn && turnRun !== activeRunId) turn = { runId: turnRun, outcome: message.turn };
    }
    t = applyMessage(t, message);
    if (turn && message.role === "assistant" && message.run_id === turn.runId) turn.answer = t.keyOf[message.id];
  }
  endTurn();
  for (const execution of history.executions) {
    if (!t.cards[execution.tool_call_id]) continue;
    t = setStatus(t, execution.tool_call_id, execution.status);
    if (execution.status === "awaiting_approval") {
      const description = execution.name + "(" + argumentsSummary(execution.arguments) + ")";
      t = setApproval(t, execution.tool_call_id, execution.id, description);
    }
    t = updateCard(t, execution.tool_call_id, { durationMs: execution.duration_ms ?? null });
    if (execution.truncated) t = updateCard(t, execution.tool_call_id, { truncated: true });
  }
  if (!history.messages.length) t = { ...t, intro: "empty" };
  if (pendingKey) t = addItem(t, { kind: "message", key: pendingKey }); // after the history
  return { ...t, lastSeq: history.lastSeq, activeRunId: activeRunId || null };
}

/**
 * A user's message from the live events: this tab's own (its event may come before
 * the ack: the waiting message takes its id), or one sent from another tab or client.
 * @param {Thread} t
 * @param {import("./thread.js").UserMessageCreated} data
 * @param {string | null} runId
 * @returns {Thread}
 */
function receiveUserMessage(t, data, runId) {
  const id = data.message_id;
  if (!id) return t;
  if (t.keyOf[id]) return data.message ? storedUserMessage(t, id, data.message) : t;
  const pending = t.pending;
  const waiting = pending && t.messages[pending.key];
  if (pending && pending.sent && waiting && !waiting.id && data.message && data.message.content === pending.content) {
    t = adoptPending(t, pending, id, data.message);
  } else if (data.message) {
    t = applyMessage(t, data.message);
  }
  if (runId && !t.activeRunId) t = { ...t, activeRunId: runId };
  return t;
}

/**
 * This tab's message, already acknowledged, as the server stored it (its time, for one).
 * @param {Thread} t
 * @param {string} id
 * @param {import("./thread.js").StoredMessage} stored
 * @returns {Thread}
 */
function storedUserMessage(t, id, stored) {
  const view = t.messages[t.keyOf[id]];
  if (!view || (view.message && view.message.created_at)) return t;
  return putMessage(t, { ...view, message: { ...stored, id, role: "user" } });
}

/**
 * @param {Thread} t
 * @param {Pending} pending
 * @param {string} id
 * @param {import("./thread.js").StoredMessage} [stored]
 * @returns {Thread}
 */
function adoptPending(t, pending, id, stored) {
  const view = t.messages[pending.key];
  const message = { ...stored, id, role: "user", content: pending.content };
  t = { ...t, keyOf: { ...t.keyOf, [id]: pending.key } };
  return putMessage(t, { ...view, id, pending: false, message, actions: true });
}

/**
 * An assistant message about to stream.
 * @param {Thread} t
 * @param {import("./thread.js").AssistantMessageCreated} data
 * @returns {Thread}
 */
function startMessage(t, data) {
  t = ensureMessage(t, data.message_id, data.role || "assistant");
  const view = t.messages[t.keyOf[data.message_id]];
  if (view.text || view.html) return t;
  return putMessage(t, { ...view, streaming: true, bubbleHidden: data.purpose === "tools" });
}

/**
 * A stored message, from the history or complete from the live events.
 * @param {Thread} t
 * @param {StoredMessage} message
 * @returns {Thread}
 */
export function applyMessage(t, message) {
  if (message.role === "tool") {
    const callId = message.tool_call_id || "";
    t = ensureCard(t, callId, message.name);
    t = setResult(t, callId, message.content);
    if (message.resource) t = setResource(t, callId, message.resource, message.tool_execution_id);
    const status = t.cards[callId].status;
    if (status === "pending" || status === "running") t = setStatus(t, callId, "succeeded");
    return t;
  }
  t = ensureMessage(t, message.id, message.role);
  const key = t.keyOf[message.id];
  let view = t.messages[key];
  const html = message.role === "assistant" && typeof message.html === "string" && message.html ? message.html : null;
  const cards = view.cards.slice();
  for (const call of message.tool_calls || []) {
    const fn = call.function || call.custom || {};
    const args = call.function ? parseJSON(call.function.arguments) : call.custom && call.custom.input;
    if (!t.cards[call.id]) {
      t = putCard(t, newCard(call.id, fn.name || null, key));
      cards.push(call.id);
    }
    const value = args === undefined && call.function ? call.function.arguments : args;
    t = updateCard(t, call.id, { args: { value } });
  }
  view = {
    ...view,
    message,
    text: message.content || "",
    html,
    bubbleHidden: !message.content,
    streaming: false,
    cards,
    actions: view.actions || Boolean(message.content),
    suggestions: message.role === "assistant" ? message.suggestions || [] : view.suggestions,
  };
  return putMessage(t, view);
}

/**
 * A regenerated answer or an edited question: what the page showed of the replaced
 * turn goes (answers, tool cards, an error and its Retry); the record keeps it.
 * @param {Thread} t
 * @param {{message_ids?: string[], after_message_id?: string}} data
 * @returns {Thread}
 */
function removeSuperseded(t, data) {
  let start = -1;
  const anchor = data.after_message_id && t.keyOf[data.after_message_id];
  if (anchor) {
    const at = t.items.findIndex((item) => item.key === anchor);
    if (at !== -1) start = at + 1;
  } else {
    const ids = data.message_ids || [];
    start = t.items.findIndex((item) => {
      const view = item.kind === "message" ? t.messages[item.key] : null;
      return Boolean(view && view.id && ids.indexOf(view.id) !== -1);
    });
  }
  if (start !== -1) {
    const pendingKey = t.pending && t.pending.key;
    const gone = t.items.slice(start).map((item) => item.key).filter((key) => key !== pendingKey);
    t = removeItems(t, gone);
  }
  if (t.editing && (data.message_ids || []).indexOf(t.editing) !== -1) t = { ...t, editing: null };
  return t;
}
