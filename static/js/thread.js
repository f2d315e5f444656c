// @ts-check
/* The open conversation's thread as plain data, and the small updates on it.
 *
 * A thread is a list of items in reading order (messages, tool cards that came
 * without their message, notices), each keyed: a message by its id, or, while
 * the user's message waits for the server, by a local key that it keeps once
 * the server names it. Every update returns a new thread and shares the parts
 * that did not change, so that render.js redraws only what did.
 */

/**
 * @typedef {{prompt_tokens?: number | null, completion_tokens?: number | null, cost_usd?: number | null}} Usage
 * @typedef {{id: string, kind?: string, title?: string, created_at?: string, created_by_execution_id?: string | null}} Resource
 * @typedef {{id: string, type?: string, function?: {name?: string, arguments?: string}, custom?: {name?: string, input?: unknown}}} ToolCall
 * @typedef {{status?: string, run_id?: string | null, error?: string | null, latency_ms?: number | null, model_calls?: number}} TurnOutcome
 * @typedef {{
 *   id: string, role: string, content?: string | null, html?: string | null, run_id?: string | null,
 *   turn?: TurnOutcome | null, tool_calls?: ToolCall[] | null, tool_call_id?: string, name?: string,
 *   resource?: Resource | null, tool_execution_id?: string | null, latency_ms?: number | null,
 *   usage?: Usage | null, model?: string | null, suggestions?: string[] | null,
 *   reasoning?: string | null, created_at?: string, images?: ImageFacts[] | null
 * }} StoredMessage
 * @typedef {{resource_id: string, media_type?: string, bytes?: number, width?: number | null,
 *   height?: number | null, url?: string, detail?: string | null}} ImageFacts
 * @typedef {{id: string, tool_call_id: string, name: string, status: string, arguments?: unknown,
 *   duration_ms?: number | null, truncated?: boolean}} Execution
 * @typedef {{type: "ack", action?: string, run_id?: string, message_id?: string}} Ack
 */

/**
 * The live events, one type each, as docs/events.md declares them; each comes in
 * the envelope `{seq, type, run_id, ts, data}`.
 * @template {string} T
 * @template D
 * @typedef {{seq: number, type: T, run_id?: string | null, ts?: string, data: D}} Envelope
 */

/**
 * @typedef {{message_id: string, role: "user", message?: StoredMessage}} UserMessageCreated
 * @typedef {{message_id: string, role?: "assistant", purpose?: string, step?: number, model?: string}} AssistantMessageCreated
 * @typedef {{execution_id?: string, tool_call_id: string, name?: string, arguments?: unknown}} CallData
 *
 * @typedef {Envelope<"run.started", {mode?: string}>
 *   | Envelope<"message.created", UserMessageCreated | AssistantMessageCreated>
 *   | Envelope<"messages.superseded", {message_ids?: string[], after_message_id?: string}>
 *   | Envelope<"message.delta", {message_id: string, text?: string, reset?: boolean}>
 *   | Envelope<"message.completed", {message?: StoredMessage}>
 *   | Envelope<"message.suggestions", {message_id: string, suggestions?: string[]}>
 *   | Envelope<"tool_call.started", CallData & {attempt?: number}>
 *   | Envelope<"tool_call.approval_requested", CallData & {description?: string}>
 *   | Envelope<"tool_call.approval_decided", CallData & {approved?: boolean, reason?: string}>
 *   | Envelope<"tool.progress", {tool_call_id: string, name?: string, percent?: number, message?: string}>
 *   | Envelope<"tool.event", {tool_call_id: string, name?: string, type?: string, data?: unknown}>
 *   | Envelope<"tool_call.completed", CallData & {status?: string, duration_ms?: number | null,
 *       truncated?: boolean, message?: StoredMessage}>
 *   | Envelope<"tools.ended", {message_id: string}>
 *   | Envelope<"budget.warning", {limit?: import("./budget.js").BudgetLimit, message?: string}>
 *   | Envelope<"run.completed", {message_id?: string, latency_ms?: number | null, model_calls?: number, steps?: number}>
 *   | Envelope<"run.failed", {error?: string}>
 *   | Envelope<"run.cancelled", {cancelled_tool_calls?: (string | {tool_call_id?: string})[]}>} RunEvent
 */

/**
 * @typedef {Object} MessageView
 * @property {string} key
 * @property {string | null} id the server's id (null while a sent message waits)
 * @property {string} role
 * @property {string} text plain text: what streamed, or the stored content
 * @property {string | null} html a complete answer rendered and sanitized by the server
 * @property {StoredMessage | null} message the stored message, once complete
 * @property {boolean} streaming
 * @property {boolean} bubbleHidden
 * @property {boolean} pending the user's message, not yet accepted
 * @property {boolean} actions Copy (and Regenerate or Edit) are shown under it
 * @property {string[]} suggestions follow-ups, as chips
 * @property {TurnOutcome | null} turn the finished turn's totals, on its answer
 * @property {string[]} cards tool_call_ids of the calls shown inside it, in order
 *
 * @typedef {Object} CardView
 * @property {string} callId
 * @property {string | null} name
 * @property {string} status
 * @property {{value: unknown} | null} args
 * @property {{executionId: string, description: string | null} | null} approval
 * @property {{percent: number, message: string} | null} progress
 * @property {number | null} durationMs
 * @property {boolean} truncated
 * @property {{content: unknown} | null} result
 * @property {{resource: Resource, executionId: string | null} | null} resource
 * @property {string | null} parent the key of the message it shows in (null: in the log)
 *
 * A notice: an error (a failed turn's, with Retry), an info (a cancelled turn's), or a
 * warning (a soft budget limit reached), which the reader may dismiss.
 * @typedef {{key: string, level: "error" | "info" | "warning", text: string, retry: boolean, dismissible: boolean}} Notice
 * @typedef {{kind: "message" | "card" | "notice", key: string}} Item
 * @typedef {{key: string, content: string, sent: boolean, images?: string[]}} Pending
 *
 * @typedef {Object} Thread
 * @property {number} lastSeq the newest event applied
 * @property {string | null} activeRunId
 * @property {Record<string, true>} ended runs whose end event came
 * @property {Item[]} items
 * @property {Record<string, MessageView>} messages by key
 * @property {Record<string, string>} keyOf message id -> key
 * @property {Record<string, CardView>} cards by tool_call_id
 * @property {Record<string, Notice>} notices by key
 * @property {Record<string, true>} warned the budget limits already warned of (budget.js `warningKey`):
 *   a page shows each once, whatever conversation it opens next
 * @property {Pending | null} pending the user's message until its ack
 * @property {"draft" | "empty" | null} intro what an empty thread says
 * @property {string | null} editing the id of the user message being edited
 * @property {boolean} opening a conversation is being created or loaded
 * @property {boolean} requesting a regenerate or an edit is on its way
 * @property {number} counter numbers local keys
 */

/**
 * An empty thread; `pending` carries a message typed while its conversation was created,
 * and `warned` the budget limits the page warned of already (they are not warned of again).
 * @param {"draft" | "empty" | null} [intro]
 * @param {Thread} [keepPendingOf]
 * @param {Record<string, true>} [warned]
 * @returns {Thread}
 */
export function emptyThread(intro = null, keepPendingOf, warned = keepPendingOf ? keepPendingOf.warned : {}) {
  /** @type {Thread} */
  let thread = {
    lastSeq: 0,
    activeRunId: null,
    ended: {},
    items: [],
    messages: {},
    keyOf: {},
    cards: {},
    notices: {},
    warned,
    pending: null,
    intro,
    editing: null,
    opening: false,
    requesting: false,
    counter: keepPendingOf ? keepPendingOf.counter : 0,
  };
  const pending = keepPendingOf && keepPendingOf.pending;
  if (pending && !pending.sent) {
    thread = addItem(thread, { kind: "message", key: pending.key });
    thread = { ...thread, pending, messages: { [pending.key]: keepPendingOf.messages[pending.key] } };
  }
  return thread;
}

/**
 * Which of the buttons that apply to one message only are shown: Regenerate and
 * the chips under the last answer, Edit under the last question, Retry on the
 * last error after it. None while something is on its way.
 * @param {Thread} t
 * @returns {{lastAnswer: string | null, lastQuestion: string | null, lastFailure: string | null}}
 */
export function lastOnes(t) {
  const none = { lastAnswer: null, lastQuestion: null, lastFailure: null };
  if (busy(t)) return none;
  let question = -1;
  let answer = -1;
  let notice = -1;
  t.items.forEach((item, index) => {
    if (item.kind === "notice" && t.notices[item.key].level !== "warning") notice = index;
    if (item.kind !== "message") return;
    const view = t.messages[item.key];
    if (view.role === "user" && view.id) question = index;
    if (view.role === "assistant" && view.actions) answer = index;
  });
  // An answer older than the last question is not what Regenerate would replace.
  if (answer < question) answer = -1;
  const failure = notice !== -1 && notice > question && t.notices[t.items[notice].key].retry ? notice : -1;
  return {
    lastAnswer: answer === -1 ? null : t.items[answer].key,
    lastQuestion: question === -1 || t.editing ? null : t.items[question].key,
    lastFailure: failure === -1 ? null : t.items[failure].key,
  };
}

/**
 * Something is on its way: a run, a message, an open, a regenerate or an edit.
 * @param {Thread} t
 */
export function busy(t) {
  return Boolean(t.activeRunId || t.pending || t.opening || t.requesting);
}

/**
 * The message with this server id, or null.
 * @param {Thread} t
 * @param {string | null | undefined} id
 */
export function messageById(t, id) {
  const key = id ? t.keyOf[id] : null;
  return key ? t.messages[key] || null : null;
}

// ------------------------------------------------------------- small parts

/** @param {unknown} error */
export function failureText(error) {
  return "The run failed: " + (error || "unknown error");
}

/**
 * @param {string} key
 * @param {string | null} id
 * @param {string} role
 * @returns {MessageView}
 */
export function newMessage(key, id, role) {
  return {
    key, id, role, text: "", html: null, message: null, streaming: false, bubbleHidden: false,
    pending: false, actions: false, suggestions: [], turn: null, cards: [],
  };
}

/**
 * @param {string} callId
 * @param {string | null | undefined} name
 * @param {string | null} parent
 * @returns {CardView}
 */
export function newCard(callId, name, parent) {
  return {
    callId, name: name || null, status: "pending", args: null, approval: null, progress: null,
    durationMs: null, truncated: false, result: null, resource: null, parent,
  };
}

/**
 * @param {Thread} t
 * @param {Item} item
 * @returns {Thread}
 */
export function addItem(t, item) {
  return { ...t, items: t.items.concat([item]), intro: null };
}

/**
 * Removes items (and the cards inside removed messages); `keepMessages` leaves their data.
 * @param {Thread} t
 * @param {string[]} keys
 * @param {boolean} [keepMessages]
 * @returns {Thread}
 */
export function removeItems(t, keys, keepMessages = false) {
  if (!keys.length) return t;
  const messages = { ...t.messages };
  const keyOf = { ...t.keyOf };
  const cards = { ...t.cards };
  const notices = { ...t.notices };
  for (const item of t.items) {
    if (keys.indexOf(item.key) === -1 || keepMessages) continue;
    if (item.kind === "message") {
      const view = messages[item.key];
      if (view.id) delete keyOf[view.id];
      for (const callId of view.cards) delete cards[callId];
      delete messages[item.key];
    } else if (item.kind === "card") {
      delete cards[item.key];
    } else {
      delete notices[item.key];
    }
  }
  const items = t.items.filter((item) => keys.indexOf(item.key) === -1);
  return { ...t, items, messages, keyOf, cards, notices };
}

/**
 * @param {Thread} t
 * @param {MessageView} view
 * @returns {Thread}
 */
export function putMessage(t, view) {
  return { ...t, messages: { ...t.messages, [view.key]: view } };
}

/**
 * The message with this id, created (at the end of the log) if it is new.
 * @param {Thread} t
 * @param {string} id
 * @param {string} role
 * @returns {Thread}
 */
export function ensureMessage(t, id, role) {
  if (t.keyOf[id]) return t;
  t = putMessage({ ...t, keyOf: { ...t.keyOf, [id]: id } }, newMessage(id, id, role));
  return addItem(t, { kind: "message", key: id });
}

/**
 * @param {Thread} t
 * @param {CardView} card
 * @returns {Thread}
 */
export function putCard(t, card) {
  return { ...t, cards: { ...t.cards, [card.callId]: card } };
}

/**
 * The card of a call, created in the log if its message did not show it.
 * @param {Thread} t
 * @param {string} callId
 * @param {string | null | undefined} name
 * @returns {Thread}
 */
export function ensureCard(t, callId, name) {
  if (t.cards[callId]) return t;
  return addItem(putCard(t, newCard(callId, name, null)), { kind: "card", key: callId });
}

/**
 * @param {Thread} t
 * @param {string} callId
 * @param {Partial<CardView>} patch
 * @returns {Thread}
 */
export function updateCard(t, callId, patch) {
  const card = t.cards[callId];
  return card ? putCard(t, { ...card, ...patch }) : t;
}

/**
 * A call's status; a call that stopped running shows no progress.
 * @param {Thread} t
 * @param {string} callId
 * @param {string} status
 * @returns {Thread}
 */
export function setStatus(t, callId, status) {
  const running = status === "running" || status === "pending";
  return updateCard(t, callId, running ? { status } : { status, progress: null });
}

/**
 * @param {Thread} t
 * @param {string} callId
 * @param {string | undefined} executionId
 * @param {string | null | undefined} description
 * @returns {Thread}
 */
export function setApproval(t, callId, executionId, description) {
  const card = t.cards[callId];
  if (!card || card.approval || !executionId) return t;
  return updateCard(t, callId, { approval: { executionId, description: description || null } });
}

/**
 * @param {Thread} t
 * @param {string} callId
 * @param {unknown} content
 * @returns {Thread}
 */
export function setResult(t, callId, content) {
  if (content === null || content === undefined) return t;
  return updateCard(t, callId, { result: { content } });
}

/**
 * The record the call made or read; the first one stays.
 * @param {Thread} t
 * @param {string} callId
 * @param {Resource} resource
 * @param {string | null | undefined} executionId
 * @returns {Thread}
 */
export function setResource(t, callId, resource, executionId) {
  const card = t.cards[callId];
  if (!card || card.resource) return t;
  return updateCard(t, callId, { resource: { resource, executionId: executionId || null } });
}

/**
 * @param {Thread} t
 * @param {"error" | "info" | "warning"} level
 * @param {string} text
 * @param {boolean} retry
 * @param {boolean} [dismissible]
 * @returns {Thread}
 */
export function addNotice(t, level, text, retry, dismissible = false) {
  const key = "notice-" + (t.counter + 1);
  const notice = { key, level, text, retry, dismissible };
  t = { ...t, counter: t.counter + 1, notices: { ...t.notices, [key]: notice } };
  return addItem(t, { kind: "notice", key });
}

/**
 * @param {Thread} t
 * @param {string | null} runId
 * @returns {Thread}
 */
export function endRun(t, runId) {
  const ended = runId ? { ...t.ended, [runId]: /** @type {true} */ (true) } : t.ended;
  const activeRunId = !t.activeRunId || t.activeRunId === runId ? null : t.activeRunId;
  return { ...t, ended, activeRunId };
}

/**
 * @param {Thread} t
 * @returns {Thread}
 */
export function stopStreaming(t) {
  const messages = { ...t.messages };
  for (const key of Object.keys(messages)) {
    if (messages[key].streaming) messages[key] = { ...messages[key], streaming: false };
  }
  return { ...t, messages };
}
