// The chat page's times (static/js/format.js): one short form on the page, the exact
// time with its zone on hover. Run with `node --test tests/js/`; TZ is set below.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { dollars, exactTime, shortTime } from "../../static/js/format.js";

process.env.TZ = "Europe/Paris"; // read by V8 when the first Date is made

describe("times on the chat page", () => {
  const now = Date.parse("2026-11-26T18:30:00Z"); // 19:30 in Paris

  test("today's time is the local 24-hour clock, no seconds, no AM/PM", () => {
    assert.equal(shortTime("2026-11-26T15:04:38.207Z", now), "16:04");
  });

  test("an earlier day says which", () => {
    assert.equal(shortTime("2026-11-25T15:04:38Z", now), "yesterday 16:04");
    assert.equal(shortTime("2026-11-12T09:00:00Z", now), "12 Nov 10:00");
    assert.equal(shortTime("2025-11-12T09:00:00Z", now), "12 Nov 2025 10:00");
  });

  test("the exact time is the audit's and the admin's format, with the zone", () => {
    assert.equal(exactTime("2026-11-26T15:04:38.207Z"), "2026-11-26 16:04:38 GMT+1");
    assert.equal(exactTime("2026-07-01T15:04:38Z"), "2026-07-01 17:04:38 GMT+2");
  });

  test("no time for a missing or broken value", () => {
    assert.equal(shortTime("", now), "");
    assert.equal(exactTime("not a date"), "");
  });
});

test("a cost is written in dollars as the Usage panel writes it, thousands separated", () => {
  assert.equal(dollars(0.0123456), "$0.0123");
  assert.equal(dollars(0.00045), "$0.00045");
  assert.equal(dollars(0), "$0.00");
  assert.equal(dollars(1234.5), "$1,234.50");
});

test("the chat page writes a number one way, with one formatter", async () => {
  const format = await import("../../static/js/format.js");
  const budget = await import("../../static/js/budget.js");
  assert.equal(budget.count, format.count);
  assert.equal(budget.usd, format.dollars);
  assert.equal(format.count(200512), "200,512");
  assert.equal(format.count(null), "?");
});

describe("figures on the chat page", () => {
  test("durations and tokens are written with thousands separators, as the audit writes them", async () => {
    const { formatMs, tokens } = await import("../../static/js/format.js");
    assert.equal(formatMs(8), "8 ms");
    assert.equal(formatMs(1200), "1.2 s");
    assert.equal(formatMs(1234567), "1,235 s");
    assert.equal(tokens(13774), "13,774");
  });

  test("the replay panel's token totals are thousands separated", async () => {
    const { comparisonLines } = await import("../../static/js/replay.js");
    const side = {
      id: "r", status: "completed", models: ["m"], answer: "a", tool_calls: [],
      latency_ms: 600, prompt_tokens: 13672, completion_tokens: 102,
    };
    const lines = comparisonLines({
      runs: [side, side], answer_similarity: 1, answer_diff: [{ op: "equal", text: "a" }],
      answer_diff_limited: false, same_tool_calls: true, steps: [],
    });
    assert.equal(lines.figures, "Latency 600 ms → 600 ms, 13,774 tokens → 13,774 tokens, answers 100% alike.");
  });
});
