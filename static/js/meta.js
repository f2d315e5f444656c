// @ts-check
/* The small things around a message's text: its time, the reasoning the model
 * wrote before it (collapsed, as text), and the line of badges under it (the
 * model call's figures, the model, the audit link, the turn's totals).
 * render.js draws the message and calls these.
 */

import { h } from "./dom.js";
import { dollars, formatMs, setTime, shortTime, tokens } from "./format.js";

/**
 * @typedef {import("./thread.js").MessageView} MessageView
 * @typedef {import("./thread.js").TurnOutcome} TurnOutcome
 *
 * @typedef {Object} MessageNode
 * @property {HTMLElement} node
 * @property {HTMLElement} text
 * @property {HTMLElement} bubble
 * @property {HTMLElement} tools
 * @property {HTMLElement} meta
 * @property {HTMLElement} footer
 * @property {HTMLElement | null} actions
 * @property {MessageView} view
 */

/**
 * When the message was stored, in the reader's zone ("16:04"), the exact time on hover.
 * @param {MessageNode} entry
 * @param {MessageView} view
 */
export function drawTime(entry, view) {
  const at = view.message && view.message.created_at;
  let node = entry.footer.querySelector("time.msg-time");
  if (!at || (view.role === "assistant" && !view.message?.content)) {
    if (node) node.remove();
    return;
  }
  if (!node) {
    node = h("time", "msg-time");
    entry.footer.insertBefore(node, entry.footer.firstChild);
  }
  setTime(/** @type {HTMLElement} */ (node), at, shortTime(at), view.role === "user" ? "Sent " : "Answered ");
}

/**
 * What the model wrote before its answer, collapsed above it; inserted as text, never as HTML.
 * @param {MessageNode} entry
 * @param {MessageView} view
 */
export function drawReasoning(entry, view) {
  const reasoning = (view.message && view.message.reasoning) || "";
  const old = entry.node.querySelector(".reasoning");
  if (!reasoning) {
    if (old) old.remove();
    return;
  }
  if (old && old.lastElementChild && old.lastElementChild.textContent === reasoning) return;
  const box = h("details", "reasoning");
  box.appendChild(h("summary", "", "Reasoning"));
  box.appendChild(h("div", "reasoning-text", reasoning));
  if (old instanceof HTMLDetailsElement) box.open = old.open; // a redraw keeps it as the reader left it
  if (old) old.replaceWith(box);
  else entry.node.insertBefore(box, entry.bubble);
}

/**
 * The model call's figures, the model, the audit link (staff), and the turn's totals.
 * @param {HTMLElement} meta
 * @param {MessageView} view
 * @param {boolean} staff whether to link the run's audit page
 */
export function drawMeta(meta, view, staff) {
  meta.textContent = "";
  const message = view.message;
  if (message) {
    const parts = [];
    if (message.latency_ms !== null && message.latency_ms !== undefined) {
      parts.push("model " + formatMs(message.latency_ms));
    }
    const usage = message.usage;
    if (usage && (usage.prompt_tokens !== null || usage.completion_tokens !== null)) {
      parts.push(tokens(usage.prompt_tokens) + " in / " + tokens(usage.completion_tokens) + " out");
    }
    // At the providers file's prices; a model with none shows no cost (never $0).
    if (usage && typeof usage.cost_usd === "number") parts.push(dollars(usage.cost_usd));
    if (parts.length) {
      meta.appendChild(badge("call", parts.join(" · "),
        "This model call: how long it took, the tokens it read (in) and wrote (out), and what it cost"));
    }
    if (message.model) {
      const picker = /** @type {HTMLSelectElement | null} */ (document.getElementById("model-picker"));
      const choices = picker ? Array.from(picker.options, (o) => ({ id: o.value, label: o.text })) : [];
      const label = modelLabel(message.model, choices, picker ? picker.dataset.default || "" : "");
      meta.appendChild(badge("model", label, "The model that wrote this: " + message.model));
    }
    if (staff && message.run_id && message.content) {
      const audit = h("a", "chip chip-link", "audit");
      audit.href = "/audit/runs/" + encodeURIComponent(message.run_id) + "/";
      audit.title = "This run in the audit: every model call and tool execution";
      meta.appendChild(audit);
    }
  }
  if (view.turn) meta.appendChild(turnBadge(view.turn));
}

/**
 * What the model badge calls the model that wrote a message: the label the model picker
 * gives it ("Second demo", as GET /api/v1/models/ lists it), found by its id
 * ("second/offline") or, for a model stored as its server names it ("offline"), the
 * default provider's; its stored name where the page lists no label for it.
 * @param {string} model the message's `model`
 * @param {{id: string, label: string}[]} choices the picker's models
 * @param {string} defaultId the default model's id
 * @returns {string}
 */
export function modelLabel(model, choices, defaultId) {
  const provider = defaultId.split("/")[0];
  const found = choices.find((c) => c.id === model) || choices.find((c) => c.id === provider + "/" + model);
  return found ? found.label : model;
}

/**
 * @param {string} kind
 * @param {string} text
 * @param {string} title
 */
function badge(kind, text, title) {
  const node = h("span", "chip chip-" + kind, text);
  node.title = title;
  return node;
}

/** @param {TurnOutcome} outcome */
function turnBadge(outcome) {
  const calls = outcome.model_calls;
  return badge(
    "run",
    "turn " + formatMs(outcome.latency_ms) + " · " + calls + " model call" + (calls === 1 ? "" : "s"),
    "Whole turn: from posting to the answer; the model calls are all the turn made, the follow-ups call included"
  );
}
