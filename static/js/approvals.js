// @ts-check
/* The approvals inbox: every call that waits for the user, across conversations.
 *
 * The header's "Approvals" shows how many wait; its panel lists them (newest
 * first, as GET /api/v1/approvals/ answers) and decides each in place: approve
 * as asked, with other arguments, or for the whole conversation, or reject with
 * a reason. The list is read again whenever it may have changed: on a decision
 * here, on one in another tab of this browser (a BroadcastChannel), on an
 * approval event of the open conversation, when the page comes back into view,
 * and every POLL_MS while it is in view (for calls of other conversations).
 */

import { byId, h } from "./dom.js";

/**
 * @typedef {Object} Approval
 * @property {string} id the tool execution
 * @property {string} conversation_id
 * @property {string} conversation_title
 * @property {string} run_id
 * @property {string} tool
 * @property {any} arguments
 * @property {string} description
 * @property {string} requested_at
 * @property {number} waited_ms
 *
 * @typedef {Object} ApprovalHooks
 * @property {(method: string, path: string, body?: unknown) => Promise<any>} api
 * @property {(conversationId: string) => void} open open a conversation of the list
 * @property {(executionId: string) => void} decided a call was decided here (the thread clears its card)
 *
 * @typedef {{reason: string, arguments?: any, scope?: "call" | "conversation"}} Decision
 */

const POLL_MS = 20000;
const CHANNEL = "toolchat-approvals";

/** @param {ApprovalHooks} hooks */
export function createApprovals(hooks) {
  const el = {
    panel: byId("approvals", HTMLDetailsElement),
    count: byId("approvals-count", HTMLElement),
    list: byId("approvals-list", HTMLElement),
    empty: byId("approvals-empty", HTMLElement),
  };
  /** @type {BroadcastChannel | null} */
  const channel = typeof BroadcastChannel === "function" ? new BroadcastChannel(CHANNEL) : null;
  let reading = 0; // bumps on every read, so that a late answer does not undo a newer one
  /** @type {Approval[]} */
  let waiting = [];

  function refresh() {
    const asked = ++reading;
    return hooks.api("GET", "/approvals/?page_size=100").then(
      (page) => {
        if (asked !== reading) return;
        waiting = page && Array.isArray(page.results) ? page.results : [];
        draw();
      },
      () => {} // the next trigger reads it again
    );
  }

  function draw() {
    const n = waiting.length;
    el.count.textContent = String(n);
    el.count.hidden = n === 0;
    el.panel.classList.toggle("has-waiting", n > 0);
    el.panel.querySelector("summary")?.setAttribute(
      "aria-label",
      n === 1 ? "Approvals: 1 call waits for you" : "Approvals: " + n + " calls wait for you"
    );
    el.empty.hidden = n > 0;
    // Keep the rows being edited: only rows of calls that no longer wait go, new ones come.
    const keep = new Set(waiting.map((a) => a.id));
    for (const row of Array.from(el.list.children)) {
      if (row instanceof HTMLElement && !keep.has(row.dataset.executionId || "")) row.remove();
    }
    let before = /** @type {Element | null} */ (el.list.firstElementChild);
    for (const approval of waiting) {
      const existing = el.list.querySelector('[data-execution-id="' + CSS.escape(approval.id) + '"]');
      if (existing) {
        before = existing.nextElementSibling;
        continue;
      }
      el.list.insertBefore(approvalRow(approval), before);
    }
  }

  /**
   * @param {string} executionId
   * @param {"approve" | "reject"} action
   * @param {Decision} decision
   */
  function decide(executionId, action, decision) {
    return hooks
      .api("POST", "/tool-executions/" + encodeURIComponent(executionId) + "/" + action + "/", decision)
      .then(() => {
        hooks.decided(executionId);
        changed();
      });
  }

  /** Something changed here: read the list again, and tell the other tabs. */
  function changed() {
    refresh();
    if (channel) channel.postMessage({ type: "changed" });
  }

  /** @param {Approval} approval */
  function approvalRow(approval) {
    const row = h("li", "approval");
    row.dataset.executionId = approval.id;
    row.dataset.testid = "approval";
    const head = h("div", "approval-head");
    const link = h("a", "approval-conversation", approval.conversation_title || "Untitled conversation");
    link.href = "#" + approval.conversation_id;
    link.addEventListener("click", (event) => {
      event.preventDefault();
      hooks.open(approval.conversation_id);
      el.panel.open = false;
    });
    head.appendChild(link);
    head.appendChild(h("span", "approval-tool", approval.tool));
    row.appendChild(head);
    row.appendChild(h("p", "approval-description", approval.description));

    const argumentsId = "approval-arguments-" + approval.id;
    const label = h("label", "approval-label", "Arguments (JSON; change them to approve other ones)");
    label.setAttribute("for", argumentsId);
    const args = h("textarea", "approval-arguments");
    args.id = argumentsId;
    args.rows = 3;
    args.spellcheck = false;
    const shown = JSON.stringify(approval.arguments === null ? {} : approval.arguments, null, 2);
    args.value = shown;
    row.appendChild(label);
    row.appendChild(args);

    const reason = h("input", "approval-reason");
    reason.type = "text";
    reason.maxLength = 2000;
    reason.placeholder = "Reason (optional)";
    reason.setAttribute("aria-label", "Reason (optional)");
    row.appendChild(reason);

    const problem = h("p", "approval-error");
    problem.setAttribute("role", "alert");
    problem.hidden = true;

    const actions = h("div", "approval-actions");
    const approve = h("button", "button-primary button-small", "Approve");
    const always = h("button", "button-ghost button-small", "Approve for this conversation");
    always.title = "Later calls of " + approval.tool + " in this conversation run without asking";
    const reject = h("button", "button-danger button-small", "Reject");
    const buttons = [approve, always, reject];
    for (const button of buttons) {
      button.type = "button";
      actions.appendChild(button);
    }
    row.appendChild(actions);
    row.appendChild(problem);

    /**
     * @param {"approve" | "reject"} action
     * @param {"call" | "conversation"} scope
     */
    function send(action, scope) {
      /** @type {Decision} */
      const decision = { reason: reason.value };
      if (action === "approve") {
        if (args.value.trim() !== shown.trim()) {
          try {
            decision.arguments = JSON.parse(args.value);
          } catch (e) {
            show("The arguments are not valid JSON.");
            args.focus();
            return;
          }
        }
        if (scope === "conversation") decision.scope = "conversation";
      }
      for (const button of buttons) button.disabled = true;
      show("");
      decide(approval.id, action, decision).catch((/** @type {any} */ error) => {
        for (const button of buttons) button.disabled = false;
        if (error && error.status === 409) return changed(); // decided elsewhere meanwhile
        show((error && error.message) || "The decision was not stored.");
      });
    }

    /** @param {string} text */
    function show(text) {
      problem.textContent = text;
      problem.hidden = !text;
    }

    approve.addEventListener("click", () => send("approve", "call"));
    always.addEventListener("click", () => send("approve", "conversation"));
    reject.addEventListener("click", () => send("reject", "call"));
    return row;
  }

  if (channel) channel.onmessage = () => refresh();
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") refresh();
  });
  window.setInterval(() => {
    if (document.visibilityState === "visible") refresh();
  }, POLL_MS);
  el.panel.addEventListener("toggle", () => {
    if (el.panel.open) refresh();
  });
  refresh();

  return {
    refresh,
    /** A decision made elsewhere on the page (a thread's approval card): the other tabs hear of it. */
    changed,
    /** @param {{type?: string}} event a live event of the open conversation */
    event: (event) => {
      if (event.type === "tool_call.approval_requested" || event.type === "tool_call.approval_decided") refresh();
    },
  };
}
