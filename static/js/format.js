// @ts-check
/* Text for the page: durations, dates, clipped strings, a call's arguments. */

/**
 * JSON text parsed, or undefined; anything else as it is.
 * @param {unknown} text
 * @returns {unknown}
 */
export function parseJSON(text) {
  if (typeof text !== "string") return text;
  try {
    return JSON.parse(text);
  } catch (e) {
    return undefined;
  }
}

/**
 * `name="x", n=2`: a call's arguments on one line.
 * @param {unknown} args
 * @returns {string}
 */
export function argumentsSummary(args) {
  if (args && typeof args === "object" && !Array.isArray(args)) {
    const record = /** @type {Record<string, unknown>} */ (args);
    return Object.keys(record)
      .map((key) => key + "=" + JSON.stringify(record[key]))
      .join(", ");
  }
  return args === undefined || args === null ? "" : String(args);
}

/**
 * The text, cut to `limit` characters with an ellipsis.
 * @param {unknown} text
 * @param {number} limit
 */
export function clip(text, limit) {
  const value = String(text);
  return value.length > limit ? value.slice(0, limit - 1) + "…" : value;
}

/**
 * "8 ms", "1.2 s", "14 s", "1,235 s" (thousands separated, as the audit writes figures);
 * nothing for no figure.
 * @param {number | null | undefined} ms
 */
export function formatMs(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return ms + " ms";
  const digits = ms >= 10000 ? 0 : 1;
  return (ms / 1000).toLocaleString("en", { minimumFractionDigits: digits, maximumFractionDigits: digits }) + " s";
}

/**
 * JSON (or JSON text) indented; other text as it is.
 * @param {unknown} value
 * @returns {string}
 */
export function pretty(value) {
  if (typeof value === "string") {
    const parsed = parseJSON(value);
    if (parsed !== undefined && typeof parsed === "object") return JSON.stringify(parsed, null, 2);
    return value;
  }
  return String(JSON.stringify(value, null, 2));
}

/**
 * How the page writes a number, the one way the staff pages do too (chat/templatetags/
 * figures.py): whole, with thousands separators ("200,512"); "?" for none.
 * @param {number | null | undefined} value
 */
export function count(value) {
  return typeof value === "number" && isFinite(value) ? Math.round(value).toLocaleString("en") : "?";
}

/**
 * A token count, or "?" when the provider did not say.
 * @param {number | null | undefined} value
 */
export function tokens(value) {
  return count(value);
}

/**
 * US dollars: "$1,234.56" from a dollar up, "$0.0241" from a cent, "$0.0024" or "$0.00045"
 * under one (to six decimals at most),
 * "$0.00" for nothing; "no price" where the server has none (null), never a made-up $0.
 * @param {number | null | undefined} value
 */
export function dollars(value) {
  if (typeof value !== "number" || !isFinite(value)) return "no price";
  if (value === 0) return "$0.00";
  const abs = Math.abs(value);
  if (abs < 0.000001) return "< $0.000001"; // something, if not worth a figure
  const least = abs >= 1 ? 2 : 4;
  const most = abs >= 1 ? 2 : abs >= 0.01 ? 4 : 6;
  return "$" + value.toLocaleString("en", { minimumFractionDigits: least, maximumFractionDigits: most });
}

/**
 * "just now", "5 min ago", "3 h ago", "yesterday", "Mon", "12 Nov", "12 Nov 2025".
 * @param {string} iso
 * @param {number} [now]
 */
export function relativeTime(iso, now = Date.now()) {
  const then = new Date(iso);
  if (isNaN(then.getTime())) return "";
  const seconds = (now - then.getTime()) / 1000;
  if (seconds < 60) return "just now";
  if (seconds < 3600) return Math.floor(seconds / 60) + " min ago";
  const today = new Date(now);
  today.setHours(0, 0, 0, 0);
  if (then >= today) return Math.floor(seconds / 3600) + " h ago";
  const yesterday = new Date(today.getTime() - 86400000);
  if (then >= yesterday) return "yesterday";
  if (seconds < 6 * 86400) return then.toLocaleDateString(undefined, { weekday: "short" });
  const sameYear = then.getFullYear() === today.getFullYear();
  return then.toLocaleDateString(
    undefined,
    sameYear ? { day: "numeric", month: "short" } : { day: "numeric", month: "short", year: "numeric" }
  );
}

/**
 * @param {number} n
 */
function two(n) {
  return String(n).padStart(2, "0");
}

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/**
 * A message's or a record's time on the chat page, in the reader's zone: "16:04" today,
 * "yesterday 16:04", "12 Nov 16:04", "12 Nov 2025 16:04". The 24-hour clock, as the
 * audit and the admin write it (docs/chat-page.md, "Times").
 * @param {string | null | undefined} iso
 * @param {number} [now]
 */
export function shortTime(iso, now = Date.now()) {
  const then = new Date(iso || "");
  if (isNaN(then.getTime())) return "";
  const clock = two(then.getHours()) + ":" + two(then.getMinutes());
  const today = new Date(now);
  today.setHours(0, 0, 0, 0);
  if (then >= today) return clock;
  if (then.getTime() >= today.getTime() - 86400000) return "yesterday " + clock;
  const day = then.getDate() + " " + MONTHS[then.getMonth()];
  return (then.getFullYear() === today.getFullYear() ? day : day + " " + then.getFullYear()) + " " + clock;
}

/**
 * The exact time with the zone, for a tooltip: "2026-11-26 16:04:38 GMT+1" (the admin's
 * and the audit's "Y-m-d H:i:s" and zone, in the reader's zone).
 * @param {string | null | undefined} iso
 */
export function exactTime(iso) {
  const then = new Date(iso || "");
  if (isNaN(then.getTime())) return "";
  const zone = new Intl.DateTimeFormat("en-US", { timeZoneName: "shortOffset" })
    .formatToParts(then)
    .find((part) => part.type === "timeZoneName");
  return (
    then.getFullYear() + "-" + two(then.getMonth() + 1) + "-" + two(then.getDate()) + " " +
    two(then.getHours()) + ":" + two(then.getMinutes()) + ":" + two(then.getSeconds()) +
    (zone ? " " + zone.value : "")
  );
}

/**
 * A <time> element's text and its exact time on hover.
 * @param {HTMLElement} node a <time>
 * @param {string} iso
 * @param {string} text
 * @param {string} [prefix] what the tooltip says before the time
 */
export function setTime(node, iso, text, prefix = "") {
  node.textContent = text;
  node.setAttribute("datetime", iso);
  node.title = prefix + exactTime(iso);
}

/**
 * The first message names an untitled conversation.
 * @param {string} content
 */
export function titleFrom(content) {
  return clip(content.replace(/\s+/g, " ").trim(), 60);
}

/**
 * Characters as the server counts them (code points); short texts by length, for speed.
 * @param {string} text
 * @param {number} max
 */
export function charCount(text, max) {
  return text.length > max / 2 ? Array.from(text).length : text.length;
}
