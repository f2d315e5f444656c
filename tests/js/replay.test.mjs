// What the chat page's "Try with another model…" panel says of a comparison
// (static/js/replay.js). Run with `node --test tests/js/`.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { answeredBy, comparisonLines, sameModel } from "../../static/js/replay.js";

/** @param {object} fields */
function run(fields) {
  return {
    id: "r", status: "completed", models: ["openai/test-model"], answer: "I noted it.",
    tool_calls: [], latency_ms: 600, prompt_tokens: 20, completion_tokens: 10, ...fields,
  };
}

describe("the replay panel's comparison", () => {
  test("it shows the other answer with its new words, its calls and the figures", () => {
    const lines = comparisonLines({
      runs: [
        run({ tool_calls: [{ name: "record_note", arguments: { title: "Milk" }, match: "live" }] }),
        run({
          models: ["local/qwen3"], answer: "I noted it, and 6.", latency_ms: 1500, completion_tokens: 14,
          tool_calls: [
            { name: "record_note", arguments: { title: "Milk" }, match: "matched" },
            { name: "calculator", arguments: { expression: "2*3" }, match: "unmatched" },
          ],
        }),
      ],
      answer_similarity: 0.5,
      answer_diff: [
        { op: "equal", text: "I noted " },
        { op: "delete", text: "it." },
        { op: "insert", text: "it, and 6." },
      ],
      same_tool_calls: false,
    });
    assert.equal(lines.heading, "On local/qwen3:");
    assert.deepEqual(lines.diff, [
      { op: "equal", text: "I noted " },
      { op: "insert", text: "it, and 6." },
    ]);
    assert.deepEqual(lines.calls, [
      'record_note {"title":"Milk"} (recorded result reused)',
      'calculator {"expression":"2*3"} (no recorded result)',
    ]);
    assert.equal(lines.figures, "Latency 600 ms → 1.5 s, 30 tokens → 34 tokens, answers 50% alike.");
  });

  test("answers too long to compare whole say their similarity is a lower bound", () => {
    const lines = comparisonLines({
      runs: [run({}), run({ answer: "Another answer." })],
      answer_similarity: 0.05,
      answer_diff: [{ op: "delete", text: "I noted it." }, { op: "insert", text: "Another answer." }],
      answer_diff_limited: true,
      same_tool_calls: true,
    });
    assert.equal(
      lines.figures,
      "Latency 600 ms → 600 ms, 30 tokens → 30 tokens, answers 5% alike at least (too long to compare whole)."
    );
  });

  test("a replay that failed or called nothing says so", () => {
    const lines = comparisonLines({
      runs: [
        run({ tool_calls: [{ name: "calculator", arguments: {}, match: "live" }] }),
        run({ status: "failed", answer: null, latency_ms: null, prompt_tokens: null, completion_tokens: null }),
      ],
      answer_similarity: null,
      answer_diff: [],
      same_tool_calls: false,
    });
    assert.deepEqual(lines.diff, [{ op: "equal", text: "The replay failed." }]);
    assert.deepEqual(lines.calls, ["No tool call (the original made 1)."]);
    assert.equal(lines.figures, "Latency 600 ms → —, 30 tokens → tokens not reported.");
  });
});

describe("the model a replay is tried on first", () => {
  test("is not the one that wrote the answer, named by id or by its server's name", () => {
    assert.equal(sameModel("local/qwen3", "qwen3"), true);
    assert.equal(sameModel("local/qwen3", "local/qwen3"), true);
    assert.equal(sameModel("openai/gpt-4.1-mini", "qwen3"), false);
    assert.equal(sameModel("offline/offline", ""), false);
  });

  test("of two offline providers, is the other one", () => {
    const ids = ["offline/offline", "second/offline"];
    assert.equal(answeredBy(ids, "offline"), "offline/offline");
    assert.equal(answeredBy(ids, "second/offline"), "second/offline");
    assert.equal(answeredBy(["second/offline", "offline/offline"], "offline"), "offline/offline");
    assert.equal(answeredBy(["local/qwen3", "cloud/big"], "qwen3"), "local/qwen3");
    assert.equal(answeredBy(["local/qwen3"], "gpt-4"), "");
  });
});

describe("a failed replay", () => {
  test("it says why, in the run's own words", () => {
    const lines = comparisonLines({
      runs: [
        run({}),
        run({ status: "failed", answer: null, error: "The model server at :8001 did not answer after 4 attempts." }),
      ],
      answer_similarity: null, answer_diff: [], answer_diff_limited: false, same_tool_calls: false, steps: [],
    });
    assert.deepEqual(lines.diff, [
      { op: "equal", text: "The replay failed: The model server at :8001 did not answer after 4 attempts." },
    ]);
  });
});
