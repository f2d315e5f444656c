// What a message's model badge calls the model that wrote it (static/js/meta.js).
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { modelLabel } from "../../static/js/meta.js";

const CHOICES = [
  { id: "offline/offline", label: "First demo" },
  { id: "second/offline", label: "Second demo" },
  { id: "local/qwen3", label: "qwen3 · local" },
];

describe("the model badge", () => {
  test("says the label the picker gives the model that wrote the answer", () => {
    assert.equal(modelLabel("second/offline", CHOICES, "offline/offline"), "Second demo");
    assert.equal(modelLabel("local/qwen3", CHOICES, "offline/offline"), "qwen3 · local");
  });

  test("a model stored as its server names it is the default provider's", () => {
    assert.equal(modelLabel("offline", CHOICES, "offline/offline"), "First demo");
    assert.equal(modelLabel("qwen3", CHOICES, "local/qwen3"), "qwen3 · local");
  });

  test("a model the page lists no label for keeps its name", () => {
    assert.equal(modelLabel("gone/offline", CHOICES, "offline/offline"), "gone/offline");
    assert.equal(modelLabel("qwen3", CHOICES, "offline/offline"), "qwen3");
    assert.equal(modelLabel("offline", [], ""), "offline");
  });
});
