// @ts-check
/* Budgets in words and figures: a limit, what was used of it, when it resets.
 *
 * Pure (no DOM), so that node checks it (tests/js/budget.test.mjs). The page
 * draws what these answer as text: usage.js (the Settings panel's Usage
 * section), composer.js (a post refused over a hard limit) and render.js (a
 * soft limit's warning in the thread). The shapes are the API's
 * (docs/api.md, "Budgets and usage"; docs/governance.md, "Budgets").
 */

import { count, dollars } from "./format.js";

/**
 * A limit as the API and the events carry it: its caps (null: no cap), and, in a refusal
 * or a warning, the `figure` reached and what was `used`; in the usage, `used_tokens` and
 * `used_cost_usd` (a day's or a month's only).
 * @typedef {{
 *   id?: number, period?: string, hard?: boolean, note?: string,
 *   tokens?: number | null, cost_usd?: number | null, model_calls?: number | null,
 *   tool_calls?: number | null, seconds?: number | null,
 *   figure?: string, used?: number, resets_at?: string,
 *   used_tokens?: number, used_cost_usd?: number
 * }} BudgetLimit
 *
 * @typedef {{figure: string, name: string, cap: string, used: string | null, share: number | null}} Gauge
 */

export const FIGURES = ["tokens", "cost_usd", "model_calls", "tool_calls", "seconds"];

/** @type {Record<string, string>} */
const FIGURE_NAMES = {
  tokens: "tokens",
  cost_usd: "US dollars",
  model_calls: "model calls",
  tool_calls: "tool calls",
  seconds: "seconds",
};

/** @type {Record<string, string>} */
const PERIOD_NAMES = { day: "daily", month: "monthly", run: "per-run" };

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

// A number and a cost as the page writes every one (format.js), kept here for usage.js.
export { count, dollars as usd };


/**
 * One figure's amount: tokens and counts as whole numbers, dollars as `usd`.
 * @param {string} figure
 * @param {number | null | undefined} value
 */
export function amount(figure, value) {
  return figure === "cost_usd" ? dollars(value) : count(value);
}

/**
 * A cap in words: "200,000 tokens", "$5.00", "12 model calls".
 * @param {string} figure
 * @param {number | null | undefined} value
 */
export function capText(figure, value) {
  if (figure === "cost_usd") return dollars(value);
  return count(value) + " " + (FIGURE_NAMES[figure] || figure);
}

/**
 * "daily", "monthly", "per-run".
 * @param {string | undefined} period
 */
export function periodName(period) {
  return PERIOD_NAMES[period || ""] || String(period || "");
}

/**
 * "Daily limit 2 · hard" (a hard limit refuses; a soft one warns).
 * @param {BudgetLimit} limit
 */
export function limitTitle(limit) {
  const name = periodName(limit.period);
  const title = name.charAt(0).toUpperCase() + name.slice(1) + " limit" + (limit.id !== undefined ? " " + limit.id : "");
  return title + " · " + (limit.hard === false ? "soft: warns" : "hard: refuses");
}

/**
 * The figures a limit caps, each with what is used of it where the usage says
 * (a day's or a month's tokens and dollars) and the share of the cap (0 to 1 and over).
 * @param {BudgetLimit} limit
 * @returns {Gauge[]}
 */
export function gauges(limit) {
  /** @type {Gauge[]} */
  const found = [];
  for (const figure of FIGURES) {
    const cap = /** @type {number | null | undefined} */ (limit[/** @type {keyof BudgetLimit} */ (figure)]);
    if (typeof cap !== "number") continue;
    const usedValue = figure === "tokens" ? limit.used_tokens : figure === "cost_usd" ? limit.used_cost_usd : undefined;
    const used = typeof usedValue === "number" ? usedValue : null;
    found.push({
      figure,
      name: figure === "cost_usd" ? "cost" : FIGURE_NAMES[figure] || figure,
      cap: capText(figure, cap),
      used: used === null ? null : amount(figure, used) + " / " + amount(figure, cap),
      share: used === null ? null : cap > 0 ? used / cap : 1,
    });
  }
  return found;
}

/**
 * @param {number} n
 */
function two(n) {
  return String(n).padStart(2, "0");
}

/**
 * When a limit resets, in the reader's zone on the 24-hour clock: "today 23:00",
 * "tomorrow 01:00", "3 Dec 01:00", "1 Jan 2027 01:00".
 * @param {string | null | undefined} iso
 * @param {number} [now]
 */
export function resetTime(iso, now = Date.now()) {
  const then = new Date(iso || "");
  if (isNaN(then.getTime())) return "";
  const clock = two(then.getHours()) + ":" + two(then.getMinutes());
  const today = new Date(now);
  today.setHours(0, 0, 0, 0);
  const day = new Date(then.getTime());
  day.setHours(0, 0, 0, 0);
  const days = Math.round((day.getTime() - today.getTime()) / 86400000);
  if (days === 0) return "today " + clock;
  if (days === 1) return "tomorrow " + clock;
  if (days === -1) return "yesterday " + clock;
  const date = then.getDate() + " " + MONTHS[then.getMonth()];
  return (then.getFullYear() === today.getFullYear() ? date : date + " " + then.getFullYear()) + " " + clock;
}

/**
 * The instant in UTC, for a tooltip: "2026-12-03 00:00:00 UTC".
 * @param {string | null | undefined} iso
 */
export function utcTime(iso) {
  const then = new Date(iso || "");
  if (isNaN(then.getTime())) return "";
  return then.toISOString().slice(0, 19).replace("T", " ") + " UTC";
}

/**
 * A post refused over a hard limit (`budget_exceeded`), as the composer says it.
 * `resets` is the local time (`resetsAt` the instant, for a <time>), "" for a per-run limit.
 * @param {{message?: string, details?: {limit?: BudgetLimit, retry_after?: number}}} refusal
 * @param {number} [now]
 * @returns {{title: string, limit: string, used: string, resetsAt: string, resets: string, note: string}}
 */
export function refusal(refusal, now = Date.now()) {
  const limit = (refusal.details && refusal.details.limit) || null;
  if (!limit || !limit.figure) {
    return { title: "A budget limit is reached.", limit: refusal.message || "", used: "", resetsAt: "", resets: "", note: "" };
  }
  const figure = limit.figure;
  const cap = /** @type {number | null | undefined} */ (limit[/** @type {keyof BudgetLimit} */ (figure)]);
  const name = periodName(limit.period);
  return {
    title: "Your " + name + " budget is used up.",
    limit: "The " + name + " limit is " + capText(figure, cap) + (limit.id !== undefined ? " (budget limit " + limit.id + ")" : "") + ";",
    used: amount(figure, limit.used) + " used.",
    resetsAt: limit.resets_at || "",
    resets: limit.resets_at ? resetTime(limit.resets_at, now) : "",
    note: limit.note || "",
  };
}

/**
 * What tells a soft limit's warnings apart: its id (or, without one, its message).
 * @param {{limit?: BudgetLimit, message?: string}} data a `budget.warning` event's data
 */
export function warningKey(data) {
  const limit = data.limit;
  if (limit && limit.id !== undefined && limit.id !== null) return "limit-" + limit.id;
  return "message-" + (data.message || "");
}
