// Budgets on the chat page (static/js/budget.js, and the reducer's budget.warning): figures
// with thousands separators, "no price" for a null cost (never $0), a reset in the reader's
// zone, a refusal in words, and a soft limit's warning shown once per limit a page load.
// Run with `node --test tests/js/`; TZ is set below.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { capText, count, gauges, limitTitle, refusal, resetTime, usd, utcTime, warningKey } from "../../static/js/budget.js";
import { reduce } from "../../static/js/state.js";
import { emptyThread, lastOnes } from "../../static/js/thread.js";
import { envelope } from "./events.mjs";

process.env.TZ = "Europe/Paris"; // read by V8 when the first Date is made

// As chat/budgets.py writes them: a refusal's details.limit, and a usage's limit.
const HARD = {
  id: 2, period: "day", tokens: 200000, cost_usd: 5.0, model_calls: null, tool_calls: null, seconds: null,
  hard: true, note: "interns", figure: "tokens", used: 200512, resets_at: "2026-12-03T00:00:00Z",
};
const SOFT = { ...HARD, id: 3, hard: false, note: "" };

describe("figures", () => {
  test("counts have thousands separators", () => {
    assert.equal(count(200512), "200,512");
    assert.equal(count(0), "0");
    assert.equal(count(null), "?");
  });

  test("dollars: no price is said, never a made-up $0", () => {
    assert.equal(usd(null), "no price");
    assert.equal(usd(undefined), "no price");
    assert.equal(usd(0), "$0.00");
    assert.equal(usd(0.0241), "$0.0241");
    assert.equal(usd(0.0024), "$0.0024");
    assert.equal(usd(0.00045), "$0.00045");
    assert.equal(usd(0.0000004), "< $0.000001"); // something, never $0
    assert.equal(usd(1234.5), "$1,234.50");
  });

  test("a cap in words", () => {
    assert.equal(capText("tokens", 200000), "200,000 tokens");
    assert.equal(capText("cost_usd", 5), "$5.00");
    assert.equal(capText("model_calls", 12), "12 model calls");
  });

  test("a limit's title says its period and whether it refuses or warns", () => {
    assert.equal(limitTitle(HARD), "Daily limit 2 · hard: refuses");
    assert.equal(limitTitle({ id: 4, period: "month", hard: false }), "Monthly limit 4 · soft: warns");
    assert.equal(limitTitle({ id: 5, period: "run", hard: true }), "Per-run limit 5 · hard: refuses");
  });

  test("a usage limit's gauges: used / cap for each figure it caps, and the share", () => {
    const limit = { ...HARD, used_tokens: 50000, used_cost_usd: 0.0265 };
    assert.deepEqual(gauges(limit), [
      { figure: "tokens", name: "tokens", cap: "200,000 tokens", used: "50,000 / 200,000", share: 0.25 },
      { figure: "cost_usd", name: "cost", cap: "$5.00", used: "$0.0265 / $5.00", share: 0.0053 },
    ]);
    // A run's limit has no use of its own to show: its caps only.
    const run = { id: 6, period: "run", tokens: 60000, model_calls: 12, hard: true };
    assert.deepEqual(
      gauges(run).map((g) => [g.cap, g.used, g.share]),
      [["60,000 tokens", null, null], ["12 model calls", null, null]]
    );
  });
});

describe("times", () => {
  const now = Date.parse("2026-12-02T18:30:00Z"); // 19:30 in Paris

  test("a reset is in the reader's zone, on the 24-hour clock, saying which day", () => {
    assert.equal(resetTime("2026-12-03T00:00:00Z", now), "tomorrow 01:00");
    assert.equal(resetTime("2026-12-02T20:00:00Z", now), "today 21:00");
    assert.equal(resetTime("2027-01-01T00:00:00Z", now), "1 Jan 2027 01:00");
    assert.equal(resetTime("2026-12-10T00:00:00Z", now), "10 Dec 01:00");
    assert.equal(resetTime("", now), "");
  });

  test("its tooltip is the UTC instant", () => {
    assert.equal(utcTime("2026-12-03T00:00:00Z"), "2026-12-03 00:00:00 UTC");
    assert.equal(utcTime("nonsense"), "");
  });
});

describe("a post refused over a hard limit", () => {
  const now = Date.parse("2026-12-02T18:30:00Z");

  test("says which limit, what was used and when it resets", () => {
    assert.deepEqual(refusal({ message: "…", details: { limit: HARD, retry_after: 41417 } }, now), {
      title: "Your daily budget is used up.",
      limit: "The daily limit is 200,000 tokens (budget limit 2);",
      used: "200,512 used.",
      resetsAt: "2026-12-03T00:00:00Z",
      resets: "tomorrow 01:00",
      note: "interns",
    });
  });

  test("in dollars", () => {
    const said = refusal({ details: { limit: { ...HARD, figure: "cost_usd", used: 5.0012 } } }, now);
    assert.equal(said.limit, "The daily limit is $5.00 (budget limit 2);");
    assert.equal(said.used, "$5.00 used.");
  });

  test("without details, the server's message", () => {
    const said = refusal({ message: "The daily limit is reached." }, now);
    assert.equal(said.limit, "The daily limit is reached.");
    assert.equal(said.resets, "");
  });
});

describe("a soft limit's warning in the thread", () => {
  const warning = (seq, limit = SOFT) =>
    envelope(seq, "budget.warning", { limit, message: "The daily limit of 200,000 tokens (budget limit 3) is reached (200,512 used); this is a warning." });
  const warnings = (t) => t.items.filter((item) => item.kind === "notice").map((item) => t.notices[item.key]);
  const apply = (t, ...events) => events.reduce((next, event) => reduce(next, { type: "event", event }), t);

  test("shows once per limit, dismissible, with the server's message", () => {
    let t = apply(emptyThread(), warning(1), warning(5));
    assert.deepEqual(
      warnings(t).map((n) => [n.level, n.dismissible, n.retry, n.text]),
      [["warning", true, false, "The daily limit of 200,000 tokens (budget limit 3) is reached (200,512 used); this is a warning."]]
    );
    t = apply(t, warning(6, { ...SOFT, id: 9, period: "month" }));
    assert.equal(warnings(t).length, 2); // another limit warns of itself
  });

  test("a dismissed one stays dismissed, in this conversation and the next one opened", () => {
    let t = apply(emptyThread(), warning(1));
    t = reduce(t, { type: "notice.dismissed", key: warnings(t)[0].key });
    assert.equal(warnings(t).length, 0);
    t = apply(t, warning(2));
    assert.equal(warnings(t).length, 0);
    // Another conversation opens (a new thread, the page's warned limits kept), and its run's
    // events are replayed from their first: the warning is not shown again.
    const next = apply(emptyThread(null, undefined, t.warned), warning(1), warning(3));
    assert.equal(warnings(next).length, 0);
  });

  test("an event replayed (its seq already seen) changes nothing", () => {
    const t = apply(emptyThread(), warning(4));
    assert.equal(apply(t, warning(4)), t);
  });

  test("a warning does not take a failed turn's Retry", () => {
    let t = apply(emptyThread(), envelope(1, "run.failed", { error: "boom" }));
    const failure = lastOnes(t).lastFailure;
    assert.ok(failure);
    t = apply(t, warning(2));
    assert.equal(lastOnes(t).lastFailure, failure);
  });

  test("limits are told apart by id, or by message without one", () => {
    assert.equal(warningKey({ limit: SOFT }), "limit-3");
    assert.equal(warningKey({ message: "m" }), "message-m");
  });
});
