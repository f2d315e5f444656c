// @ts-check
/* The Settings panel's Usage section: what the user used today or this month, and
 * the budget limits that cover them, from GET /api/v1/usage/ (docs/api.md).
 *
 * Read each time the panel opens (and on Refresh, or when the period changes),
 * so that it says what a post's check would count: the tokens and dollars per
 * model, what runs in flight reserve, and each limit's "used / cap", hard or
 * soft, and when it resets (local time; the UTC instant on hover). A dollar
 * figure the server has no price for says "no price", never $0. Every figure
 * and note is inserted as text.
 */

import { count, gauges, limitTitle, resetTime, usd, utcTime } from "./budget.js";
import { byId, h } from "./dom.js";

/**
 * @typedef {import("./budget.js").BudgetLimit} BudgetLimit
 *
 * @typedef {{model: string, provider: string, calls: number, prompt_tokens: number,
 *   completion_tokens: number, tokens: number, cost_usd: number | null}} ModelUsage
 *
 * @typedef {Object} Usage
 * @property {string} period
 * @property {string} since
 * @property {string} resets_at
 * @property {number} tokens
 * @property {number | null} cost_usd
 * @property {{tokens: number, cost_usd: number}} reserved
 * @property {ModelUsage[]} by_model
 * @property {BudgetLimit[]} limits
 *
 * @typedef {Object} UsageHooks
 * @property {(method: string, path: string, body?: unknown) => Promise<any>} api
 */

/** @param {UsageHooks} hooks */
export function createUsage(hooks) {
  const el = {
    panel: byId("conversation-settings", HTMLDetailsElement),
    form: byId("usage-form", HTMLFormElement),
    status: byId("usage-status", HTMLElement),
    body: byId("usage-body", HTMLElement),
  };
  let reading = 0; // bumps on every read, so that a late answer does not undo a newer one

  function period() {
    const checked = el.form.querySelector("input[name=period]:checked");
    return checked instanceof HTMLInputElement && checked.value === "month" ? "month" : "day";
  }

  /**
   * @param {string} text
   * @param {boolean} [error]
   */
  function status(text, error = false) {
    el.status.textContent = text;
    el.status.className = "settings-status" + (error ? " settings-error" : "");
  }

  function load() {
    const asked = ++reading;
    const chosen = period();
    status("Loading your usage…");
    el.body.setAttribute("aria-busy", "true");
    hooks.api("GET", "/usage/?period=" + chosen).then(
      (/** @type {Usage} */ usage) => {
        if (asked !== reading) return;
        el.body.removeAttribute("aria-busy");
        status("");
        draw(usage);
      },
      (/** @type {Error} */ error) => {
        if (asked !== reading) return;
        el.body.removeAttribute("aria-busy");
        el.body.hidden = true;
        status("Could not load your usage: " + error.message, true);
      }
    );
  }

  /** @param {Usage} usage */
  function draw(usage) {
    const now = Date.now();
    const parts = [totals(usage, now), models(usage), limits(usage.limits || [], now)];
    el.body.replaceChildren(...parts);
    el.body.hidden = false;
  }

  el.panel.addEventListener("toggle", () => {
    if (el.panel.open) load();
  });
  el.form.addEventListener("change", (event) => {
    if (event.target instanceof HTMLInputElement && event.target.name === "period") load();
  });
  el.form.addEventListener("submit", (event) => {
    event.preventDefault();
    load();
  });

  return { load };
}

/**
 * A <time> in the reader's zone, its UTC instant on hover.
 * @param {string} iso
 * @param {number} now
 */
function when(iso, now) {
  const node = h("time", "", resetTime(iso, now));
  node.setAttribute("datetime", iso);
  node.title = utcTime(iso);
  return node;
}

/**
 * @param {string} term
 * @param {string | Node} value
 */
function fact(term, value) {
  const row = h("div", "usage-fact");
  row.appendChild(h("dt", "", term));
  const dd = h("dd");
  dd.append(value);
  row.appendChild(dd);
  return row;
}

/**
 * The period's tokens and dollars, what runs in flight reserve, and when it began and resets.
 * @param {Usage} usage
 * @param {number} now
 */
function totals(usage, now) {
  const box = h("div", "usage-totals");
  const facts = h("dl", "usage-facts");
  facts.appendChild(fact("Tokens", count(usage.tokens)));
  const unpriced = (usage.by_model || []).some((row) => row.cost_usd === null);
  let cost = usd(usage.cost_usd);
  if (usage.cost_usd !== null && unpriced) cost += " (and models with no price)";
  facts.appendChild(fact("Cost", cost));
  const reserved = usage.reserved || { tokens: 0, cost_usd: 0 };
  const held = reserved.tokens
    ? count(reserved.tokens) + " tokens" + (reserved.cost_usd ? " · " + usd(reserved.cost_usd) : "")
    : "none";
  facts.appendChild(fact("Reserved by runs in flight", held));
  box.appendChild(facts);
  const span = h("p", "muted usage-span");
  span.append("Since ", when(usage.since, now), "; resets ", when(usage.resets_at, now), ".");
  box.appendChild(span);
  return box;
}

/**
 * Per model: calls, tokens (in and out), cost.
 * @param {Usage} usage
 */
function models(usage) {
  const rows = usage.by_model || [];
  if (!rows.length) {
    return h("p", "muted usage-none", usage.period === "month" ? "No model calls this month." : "No model calls today.");
  }
  const table = h("table", "usage-models");
  table.appendChild(h("caption", "", "By model"));
  const head = h("tr");
  for (const name of ["Model", "Calls", "Tokens", "Cost"]) {
    const th = h("th", "", name);
    th.scope = "col";
    head.appendChild(th);
  }
  table.appendChild(h("thead")).appendChild(head);
  const body = h("tbody");
  for (const row of rows) {
    const tr = h("tr");
    const name = h("th", "usage-model", row.provider ? row.provider + "/" + row.model : row.model);
    name.scope = "row";
    tr.appendChild(name);
    tr.appendChild(h("td", "usage-number", count(row.calls)));
    const tokens = h("td", "usage-number");
    tokens.appendChild(h("span", "", count(row.tokens)));
    tokens.appendChild(h("span", "usage-inout", count(row.prompt_tokens) + " in / " + count(row.completion_tokens) + " out"));
    tr.appendChild(tokens);
    tr.appendChild(h("td", "usage-number" + (row.cost_usd === null ? " usage-unpriced" : ""), usd(row.cost_usd)));
    body.appendChild(tr);
  }
  table.appendChild(body);
  return table;
}

/**
 * Each limit that covers the user: per figure "used / cap" and a bar (a day's or a month's),
 * hard or soft, when it resets, and its note.
 * @param {BudgetLimit[]} list
 * @param {number} now
 */
function limits(list, now) {
  const box = h("div", "usage-limits");
  box.appendChild(h("h3", "usage-subtitle", "Limits"));
  if (!list.length) {
    box.appendChild(h("p", "muted usage-none", "No budget limit covers you."));
    return box;
  }
  const items = h("ul", "usage-limit-list");
  for (const limit of list) {
    const item = h("li", "usage-limit" + (limit.hard === false ? " usage-soft" : " usage-hard"));
    item.dataset.limit = String(limit.id);
    item.appendChild(h("p", "usage-limit-title", limitTitle(limit)));
    for (const gauge of gauges(limit)) {
      const line = h("div", "usage-gauge");
      const label = h("p", "usage-gauge-text");
      label.appendChild(h("span", "usage-gauge-name", gauge.name));
      label.appendChild(h("span", "usage-gauge-figure", gauge.used === null ? gauge.cap + " a run" : gauge.used));
      line.appendChild(label);
      if (gauge.share !== null) {
        const bar = h("div", "usage-bar");
        bar.setAttribute("aria-hidden", "true"); // the figures above say it
        const fill = h("div", "usage-bar-fill" + (gauge.share >= 1 ? " usage-bar-full" : ""));
        fill.style.width = Math.min(100, Math.round(gauge.share * 100)) + "%";
        bar.appendChild(fill);
        line.appendChild(bar);
      }
      item.appendChild(line);
    }
    if (limit.resets_at) {
      const reset = h("p", "muted usage-limit-reset");
      reset.append("Resets ", when(limit.resets_at, now));
      item.appendChild(reset);
    }
    if (limit.note) item.appendChild(h("p", "usage-limit-note", limit.note));
    items.appendChild(item);
  }
  box.appendChild(items);
  return box;
}
