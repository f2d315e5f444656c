// @ts-check
/* A tool call's card: its name, arguments, status, duration, progress, result
 * (expandable), the record it made or read, and Approve / Reject when it waits
 * for the user. A card is drawn once and then updated in place, so that what
 * the user opened or typed in it stays.
 */

import { h } from "./dom.js";
import { argumentsSummary, clip, formatMs, parseJSON, pretty, setTime, shortTime } from "./format.js";

const RESULT_PREVIEW_CHARS = 400; // the line's width cuts it first (an ellipsis)
const RESULT_FULL_CHARS = 20000;

/**
 * @typedef {import("./thread.js").CardView} CardView
 * @typedef {import("./thread.js").Resource} Resource
 *
 * @typedef {Object} CardOptions
 * @property {boolean} staff links go to the admin rather than the API
 * @property {string} api the API's root path
 * @property {(executionId: string, action: "approve" | "reject", reason: string, scope: "call" | "conversation") => Promise<void>} decide
 *   sends the decision (`conversation`: a standing approval, later calls of the tool in this
 *   conversation run without asking); rejects (and the buttons come back) if it did not go through
 *
 * @typedef {{node: HTMLElement, update: (card: CardView) => void}} CardNode
 */

/**
 * A card's element, to be updated with each new view of the call.
 * @param {CardView} first
 * @param {CardOptions} options
 * @returns {CardNode}
 */
export function createCard(first, options) {
  const wrap = h("div", "tool-card");
  wrap.dataset.toolCallId = first.callId;
  const details = h("details");
  const summary = h("summary");
  const head = h("span", "tool-head");
  head.appendChild(h("span", "tool-icon", "ƒ"));
  const nameNode = h("code", "tool-name", "tool");
  head.appendChild(nameNode);
  const argsNode = h("span", "tool-args");
  head.appendChild(argsNode);
  const statusNode = h("span", "tool-status status-pending", "pending");
  head.appendChild(statusNode);
  const durationNode = h("span", "tool-duration");
  head.appendChild(durationNode);
  summary.appendChild(head);
  const previewNode = h("span", "tool-preview");
  previewNode.hidden = true;
  summary.appendChild(previewNode);
  details.appendChild(summary);

  const body = h("div", "tool-body");
  body.appendChild(h("div", "tool-label", "Arguments"));
  const argsFull = h("pre", "tool-pre");
  body.appendChild(argsFull);
  const resultLabel = h("div", "tool-label", "Result");
  resultLabel.hidden = true;
  body.appendChild(resultLabel);
  const resultFull = h("pre", "tool-pre");
  resultFull.hidden = true;
  body.appendChild(resultFull);
  details.appendChild(body);
  wrap.appendChild(details);

  const progress = h("div", "tool-progress");
  progress.hidden = true;
  const bar = h("progress");
  bar.max = 100;
  bar.value = 0;
  const progressText = h("span", "tool-progress-text");
  const progressId = "progress-" + first.callId.replace(/[^A-Za-z0-9_-]/g, "");
  progressText.id = progressId;
  bar.setAttribute("aria-labelledby", progressId);
  progress.appendChild(bar);
  progress.appendChild(progressText);
  wrap.appendChild(progress);

  /** @type {HTMLElement | null} */
  let approvalNode = null;
  /** @type {CardView | null} */
  let shown = null;

  /** @param {CardView} card */
  function update(card) {
    const was = shown;
    shown = card;
    if (was === card) return;
    nameNode.textContent = card.name || "tool";
    if (card.args && (!was || was.args !== card.args)) {
      const value = card.args.value;
      argsNode.textContent = clip(argumentsSummary(value), 80);
      argsFull.textContent = clip(pretty(value === undefined ? "" : value), RESULT_FULL_CHARS);
    }
    statusNode.textContent = card.status.replace("_", " ");
    statusNode.className = "tool-status status-" + card.status;
    durationNode.textContent = formatMs(card.durationMs);
    progress.hidden = !card.progress;
    if (card.progress) {
      bar.value = card.progress.percent;
      progressText.textContent = (card.progress.message ? card.progress.message + " · " : "") +
        Math.round(card.progress.percent) + "%";
    }
    if (card.truncated && !wrap.querySelector(".tool-truncated")) {
      body.appendChild(h("p", "tool-truncated muted", "The result was truncated before it was sent to the model."));
    }
    if (card.result && (!was || was.result !== card.result)) showResult(card.result.content);
    if (card.resource && !wrap.querySelector(".resource-card")) {
      wrap.insertBefore(resourceCard(card.resource.resource, card.resource.executionId, options), progress);
    }
    if (card.approval && !approvalNode) {
      const tool = nameNode.textContent || "";
      approvalNode = approvalBox(card.approval.executionId, card.approval.description || tool, tool, options);
      wrap.appendChild(approvalNode);
    } else if (!card.approval && approvalNode) {
      approvalNode.remove();
      approvalNode = null;
    }
  }

  /** @param {unknown} content */
  function showResult(content) {
    const parsed = parseJSON(content);
    const record = parsed && typeof parsed === "object" ? /** @type {Record<string, unknown>} */ (parsed) : null;
    const preview = record && typeof record.message === "string"
      ? record.message
      : record && record.error
        ? String(record.error)
        : String(content);
    previewNode.textContent = clip(preview.replace(/\s+/g, " "), RESULT_PREVIEW_CHARS);
    previewNode.hidden = false;
    resultFull.textContent = clip(pretty(content), RESULT_FULL_CHARS);
    resultFull.hidden = false;
    resultLabel.hidden = false;
  }

  update(first);
  return { node: wrap, update };
}

/**
 * A call that waits for the user: what it will do, an optional reason, and Approve /
 * Approve for this conversation / Reject, as the Approvals panel offers them. The
 * decision goes to the REST API; every tab hears of it through tool_call.approval_decided.
 * @param {string} executionId
 * @param {string} description
 * @param {string} tool
 * @param {CardOptions} options
 */
function approvalBox(executionId, description, tool, options) {
  const box = h("div", "tool-approval");
  box.setAttribute("role", "group");
  box.setAttribute("aria-label", "Approve this tool call?");
  box.appendChild(h("p", "tool-approval-text", description));
  const reason = h("input", "tool-approval-reason");
  reason.type = "text";
  reason.maxLength = 2000;
  reason.placeholder = "Reason (optional)";
  reason.setAttribute("aria-label", "Reason (optional)");
  const approve = h("button", "button-primary button-small", "Approve");
  const always = h("button", "button-ghost button-small", "Approve for this conversation");
  always.title = "Later calls of " + tool + " in this conversation run without asking";
  const reject = h("button", "button-danger button-small", "Reject");
  const buttons = [approve, always, reject];
  const row = h("div", "tool-approval-actions");
  row.appendChild(reason);
  for (const button of buttons) {
    button.type = "button";
    row.appendChild(button);
  }
  box.appendChild(row);
  /**
   * @param {"approve" | "reject"} action
   * @param {"call" | "conversation"} scope
   */
  function decide(action, scope) {
    for (const button of buttons) button.disabled = true;
    options.decide(executionId, action, reason.value, scope).catch(() => {
      for (const button of buttons) button.disabled = false;
    });
  }
  approve.addEventListener("click", () => decide("approve", "call"));
  always.addEventListener("click", () => decide("approve", "conversation"));
  reject.addEventListener("click", () => decide("reject", "call"));
  return box;
}

/**
 * The record the call made or read: "Note recorded: Boiler serviced · 14:02".
 * @param {Resource} resource
 * @param {string | null} executionId
 * @param {CardOptions} options
 */
function resourceCard(resource, executionId, options) {
  const made = Boolean(executionId) && resource.created_by_execution_id === executionId;
  let kind = String(resource.kind || "record");
  kind = kind.charAt(0).toUpperCase() + kind.slice(1);
  const node = h("div", "resource-card");
  node.appendChild(h("span", "resource-kind", kind + (made ? " recorded:" : ":")));
  const link = h("a", "resource-title", resource.title || "(untitled)");
  link.href = options.staff
    ? "/admin/tools/resource/" + encodeURIComponent(resource.id) + "/change/"
    : options.api + "/resources/" + encodeURIComponent(resource.id) + "/";
  link.target = "_blank";
  link.rel = "noopener";
  link.title = options.staff ? "Open it in the admin" : "Open it in the API";
  node.appendChild(link);
  const text = shortTime(resource.created_at);
  if (text) {
    const time = h("time", "resource-when");
    setTime(time, resource.created_at || "", text, "Recorded ");
    node.appendChild(time);
  }
  return node;
}
