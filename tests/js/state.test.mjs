// The chat page's reducer (static/js/state.js): live events and API answers in,
// what the thread shows out. Run with `node --test tests/js/`.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { reduce } from "../../static/js/state.js";
import { emptyThread, lastOnes, messageById } from "../../static/js/thread.js";
import {
  ANSWER, CALL, EXECUTION, QUESTION, RUN, TOOLS_MESSAGE,
  answerMessage, envelope, toolMessage, toolsMessage, turnEvents, userMessage,
} from "./events.mjs";

/** Applies events (or actions) in order; events are wrapped as `{type: "event"}`. */
function apply(thread, ...steps) {
  return steps.reduce((t, step) => reduce(t, "seq" in step ? { type: "event", event: step } : step), thread);
}

/** Freezes a value and everything in it, so that a reducer that writes to it throws. */
function deepFreeze(value) {
  if (value && typeof value === "object" && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const key of Object.keys(value)) deepFreeze(value[key]);
  }
  return value;
}

/** What a reader sees, in order: one line per item. */
function shown(thread) {
  return thread.items.map((item) => {
    if (item.kind === "notice") return "notice " + thread.notices[item.key].text;
    if (item.kind === "card") return "card " + thread.cards[item.key].name;
    const view = thread.messages[item.key];
    return view.role + " " + (view.text || "").slice(0, 20) + (view.cards.length ? " [" + view.cards.join(",") + "]" : "");
  });
}

describe("a whole turn, live", () => {
  test("ends as the page should show it", () => {
    const t = apply(emptyThread(), ...turnEvents());
    assert.deepEqual(shown(t), ["user What is 2**10?", "assistant  [" + CALL + "]", "assistant 2**10 is **1024**."]);
    assert.equal(t.lastSeq, 15);
    assert.equal(t.activeRunId, null);
    assert.deepEqual(t.ended, { [RUN]: true });

    const card = t.cards[CALL];
    assert.equal(card.name, "calculator");
    assert.equal(card.status, "succeeded");
    assert.equal(card.durationMs, 3);
    assert.equal(card.progress, null, "a finished call shows no progress");
    assert.deepEqual(card.args, { value: { expression: "2**10" } });
    assert.equal(card.result.content, toolMessage().content);
    assert.equal(card.parent, TOOLS_MESSAGE);

    const tools = messageById(t, TOOLS_MESSAGE);
    assert.equal(tools.bubbleHidden, true, "a message that only calls tools has no bubble");
    assert.equal(tools.actions, false);

    const answer = messageById(t, ANSWER);
    assert.equal(answer.html, answerMessage().html);
    assert.equal(answer.streaming, false);
    assert.deepEqual(answer.suggestions, ["Why 1024?", "And 2**20?"], "message.suggestions has the final list");
    assert.deepEqual(answer.message.suggestions, ["Why 1024?", "And 2**20?"]);
    assert.deepEqual(answer.turn, { status: "completed", message_id: ANSWER, latency_ms: 1234, model_calls: 2, steps: 2 });
    assert.deepEqual(lastOnes(t), { lastAnswer: ANSWER, lastQuestion: QUESTION, lastFailure: null });
  });

  test("each step on the way", () => {
    const events = turnEvents();
    let t = apply(emptyThread(), ...events.slice(0, 2));
    assert.equal(t.activeRunId, RUN, "run.started makes the run active");
    assert.deepEqual(lastOnes(t), { lastAnswer: null, lastQuestion: null, lastFailure: null }, "nothing to redo while it runs");

    t = apply(t, events[2]);
    assert.equal(messageById(t, TOOLS_MESSAGE).streaming, true);

    t = apply(t, events[3], events[4], events[5]);
    assert.equal(t.cards[CALL].status, "running");
    assert.deepEqual(t.cards[CALL].progress, { percent: 50, message: "halfway" });

    const before = t;
    t = apply(t, events[6], events[8]);
    assert.equal(t.cards, before.cards, "tool.event and tools.ended change nothing shown");
    assert.equal(t.messages, before.messages);

    t = apply(t, events[9], events[10]);
    const streaming = messageById(t, ANSWER);
    assert.equal(streaming.streaming, true);
    assert.equal(streaming.text, "2**10 is ");
    assert.equal(streaming.bubbleHidden, false);
    assert.equal(streaming.html, null, "a streaming answer is text");
  });

  test("a message.delta with reset starts the text over", () => {
    const t = apply(
      emptyThread(),
      envelope(1, "message.created", { message_id: ANSWER, role: "assistant", purpose: "compose" }),
      envelope(2, "message.delta", { message_id: ANSWER, text: "half an ans" }),
      envelope(3, "message.delta", { message_id: ANSWER, text: "The answer", reset: true })
    );
    assert.equal(messageById(t, ANSWER).text, "The answer");
  });

  test("the reducer changes nothing it was given, and shares what did not change", () => {
    const events = turnEvents();
    const before = deepFreeze(apply(emptyThread(), ...events.slice(0, 9)));
    const after = apply(before, events[9], events[10]);
    assert.notEqual(after, before);
    assert.equal(after.cards[CALL], before.cards[CALL]);
    assert.equal(after.messages[QUESTION], before.messages[QUESTION]);
  });
});

describe("resuming", () => {
  test("a replay that overlaps what was seen changes nothing, and the rest comes once", () => {
    const events = turnEvents();
    const once = apply(emptyThread(), ...events);
    // The socket dropped after the first delta (seq 11); the new one replays from `?after=9`.
    let t = apply(emptyThread(), ...events.slice(0, 11));
    assert.equal(t.lastSeq, 11);
    t = apply(t, ...events.slice(9, 12));
    assert.equal(messageById(t, ANSWER).text, "2**10 is **1024**.", "no delta twice, none missing");
    t = apply(t, ...events.slice(5));
    assert.deepEqual(t, once);
  });

  test("every event delivered twice shows as once", () => {
    const events = [...turnEvents().slice(0, 12), envelope(13, "run.failed", { error: "boom" })];
    const twice = events.flatMap((event) => [event, { ...event }]);
    const t = apply(emptyThread(), ...twice);
    assert.deepEqual(t, apply(emptyThread(), ...events));
    assert.equal(messageById(t, ANSWER).text, "2**10 is **1024**.");
    assert.equal(Object.keys(t.notices).length, 1);
  });

  test("history, then the events after its seq, equal the live view", () => {
    const events = turnEvents();
    const live = apply(emptyThread(), ...events);
    const history = {
      type: "history",
      messages: [
        { ...userMessage(), turn: { run_id: RUN, status: "completed", error: null, latency_ms: 1234, model_calls: 2 } },
        toolsMessage(),
        toolMessage(),
        answerMessage(["Why 1024?", "And 2**20?"]),
      ],
      executions: [{ id: EXECUTION, tool_call_id: CALL, name: "calculator", status: "succeeded", duration_ms: 3 }],
      activeRunId: null,
      lastSeq: 15,
    };
    const loaded = apply(emptyThread(), history, ...events);
    assert.deepEqual(shown(loaded), shown(live));
    assert.equal(loaded.lastSeq, 15);
    assert.equal(messageById(loaded, ANSWER).turn.latency_ms, 1234);
    assert.equal(loaded.cards[CALL].status, "succeeded");
    assert.equal(loaded.cards[CALL].durationMs, 3);
  });

  test("a run in progress is left out of the history and replayed from its first event", () => {
    const events = turnEvents();
    const history = {
      type: "history",
      messages: [userMessage(), toolsMessage(), toolMessage()], // stored so far; the run goes on
      executions: [],
      activeRunId: RUN,
      lastSeq: 1, // the run's first event is seq 2
    };
    let t = apply(emptyThread(), history);
    assert.deepEqual(shown(t), ["user What is 2**10?"]);
    assert.equal(t.activeRunId, RUN);
    t = apply(t, ...events.slice(1));
    assert.deepEqual(shown(t), shown(apply(emptyThread(), ...events)));
  });
});

describe("the user's own message", () => {
  const sent = () => apply(emptyThread(), { type: "send", content: "What is 2**10?" }, { type: "sent" });
  const created = envelope(1, "message.created", { message_id: QUESTION, role: "user", message: userMessage() });
  const ack = { type: "ack", ack: { type: "ack", action: "message", run_id: RUN, message_id: QUESTION } };

  test("waits, greyed, with a local key", () => {
    const t = sent();
    assert.equal(t.items.length, 1);
    const view = t.messages[t.items[0].key];
    assert.equal(view.pending, true);
    assert.equal(view.id, null);
    assert.deepEqual(t.pending, { key: view.key, content: "What is 2**10?", sent: true });
  });

  test("its event before the ack: the waiting message takes the id, nothing is shown twice", () => {
    let t = apply(sent(), created);
    assert.deepEqual(shown(t), ["user What is 2**10?"]);
    const view = messageById(t, QUESTION);
    assert.equal(view.pending, false);
    assert.equal(view.actions, true);
    assert.equal(t.activeRunId, RUN);
    assert.ok(t.pending, "still waiting for the ack");
    t = apply(t, ack);
    assert.equal(t.pending, null);
    assert.deepEqual(shown(t), ["user What is 2**10?"]);
  });

  test("the ack before its event: the same thread", () => {
    const ackFirst = apply(sent(), ack, created);
    const eventFirst = apply(sent(), created, ack);
    assert.deepEqual(ackFirst, eventFirst);
    assert.equal(messageById(ackFirst, QUESTION).key, ackFirst.items[0].key);
  });

  test("a refusal takes it out; a conflict names the run that is busy", () => {
    const t = apply(sent(), { type: "send.failed", runId: RUN });
    assert.deepEqual(t.items, []);
    assert.equal(t.pending, null);
    assert.equal(t.activeRunId, RUN);
  });

  test("a message typed while the conversation was created stays, after its history", () => {
    const draft = apply(emptyThread("draft"), { type: "send", content: "hello" });
    assert.equal(draft.intro, null);
    let t = emptyThread(null, draft);
    assert.equal(t.pending.content, "hello");
    t = apply(t, { type: "history", messages: [userMessage()], executions: [], activeRunId: null, lastSeq: 3 });
    assert.deepEqual(shown(t), ["user What is 2**10?", "user hello"]);
  });

  test("a second tab sees the message another tab sent", () => {
    const other = envelope(1, "message.created", {
      message_id: QUESTION, role: "user", message: userMessage(QUESTION, "from the other tab"),
    });
    const t = apply(emptyThread(), other);
    assert.deepEqual(shown(t), ["user from the other tab"]);
    assert.equal(messageById(t, QUESTION).actions, true);
    assert.equal(t.activeRunId, RUN);
  });

  test("a message from another tab while this one waits does not take this one's place", () => {
    const other = envelope(1, "message.created", {
      message_id: QUESTION, role: "user", message: userMessage(QUESTION, "something else"),
    });
    const t = apply(sent(), other);
    assert.deepEqual(shown(t), ["user What is 2**10?", "user something else"]);
    assert.equal(t.messages[t.pending.key].pending, true);
  });
});

describe("approvals", () => {
  const requested = envelope(1, "tool_call.approval_requested", {
    execution_id: EXECUTION, tool_call_id: CALL, name: "delete_notes",
    arguments: { all: true }, description: "Delete every note",
  });

  test("a call waiting for approval shows what it will do, until it is decided", () => {
    let t = apply(emptyThread(), requested);
    assert.equal(t.cards[CALL].status, "awaiting_approval");
    assert.deepEqual(t.cards[CALL].approval, { executionId: EXECUTION, description: "Delete every note" });
    assert.deepEqual(shown(t), ["card delete_notes"]);
    t = apply(t, envelope(2, "tool_call.approval_decided", {
      execution_id: EXECUTION, tool_call_id: CALL, name: "delete_notes", approved: true, reason: "",
    }));
    assert.equal(t.cards[CALL].approval, null);
    assert.equal(t.cards[CALL].status, "pending");
  });

  test("this tab's decision clears the buttons before the event comes", () => {
    const t = apply(emptyThread(), requested, { type: "approval.cleared", callId: CALL });
    assert.equal(t.cards[CALL].approval, null);
    assert.equal(t.cards[CALL].status, "awaiting_approval");
  });

  test("the history shows a call that still waits", () => {
    const t = apply(emptyThread(), {
      type: "history",
      messages: [userMessage(), toolsMessage()],
      executions: [{ id: EXECUTION, tool_call_id: CALL, name: "calculator", status: "awaiting_approval", arguments: { expression: "2**10" } }],
      activeRunId: RUN,
      lastSeq: 4,
    });
    // The run's own messages come from its events; the history had only the question.
    assert.deepEqual(shown(t), ["user What is 2**10?"]);
    const stored = apply(emptyThread(), {
      type: "history",
      messages: [userMessage(), toolsMessage()],
      executions: [{ id: EXECUTION, tool_call_id: CALL, name: "calculator", status: "awaiting_approval", arguments: { expression: "2**10" } }],
      activeRunId: null,
      lastSeq: 4,
    });
    assert.deepEqual(stored.cards[CALL].approval, { executionId: EXECUTION, description: 'calculator(expression="2**10")' });
  });
});

describe("a run's end", () => {
  const started = [
    envelope(1, "message.created", { message_id: QUESTION, role: "user", message: userMessage() }),
    envelope(2, "run.started", { mode: "two_pass" }),
    envelope(3, "message.created", { message_id: TOOLS_MESSAGE, role: "assistant", purpose: "tools" }),
    envelope(4, "message.completed", { message: toolsMessage() }),
    envelope(5, "tool_call.started", { execution_id: EXECUTION, tool_call_id: CALL, name: "calculator", arguments: {}, attempt: 1 }),
  ];

  test("run.failed: the error, with Retry, after the question", () => {
    const t = apply(emptyThread(), ...started, envelope(6, "run.failed", { error: "The model is unreachable." }));
    assert.equal(t.activeRunId, null);
    assert.equal(shown(t).at(-1), "notice The run failed: The model is unreachable.");
    const last = lastOnes(t);
    assert.equal(last.lastFailure, t.items.at(-1).key);
    assert.equal(last.lastQuestion, QUESTION);
    assert.equal(Object.values(t.messages).some((view) => view.streaming), false);
  });

  test("run.cancelled: its calls are cancelled, and a late progress event shows nothing", () => {
    const t = apply(
      emptyThread(),
      ...started,
      envelope(6, "run.cancelled", { cancelled_tool_calls: [CALL] }),
      envelope(7, "tool.progress", { tool_call_id: CALL, name: "calculator", percent: 90, message: "late" })
    );
    assert.equal(t.cards[CALL].status, "cancelled");
    assert.equal(t.cards[CALL].progress, null);
    assert.equal(shown(t).at(-1), "notice The run was cancelled.");
    assert.equal(lastOnes(t).lastFailure, t.items.at(-1).key, "a cancelled turn has Retry, as a failed one");
    assert.equal(lastOnes(t).lastQuestion, QUESTION, "and its question has Edit");
  });

  test("a run the API started is adopted, unless its end came first", () => {
    let t = apply(emptyThread(), { type: "run.adopt", runId: RUN });
    assert.equal(t.activeRunId, RUN);
    t = apply(emptyThread(), envelope(1, "run.completed", { message_id: ANSWER, latency_ms: 5, model_calls: 1, steps: 1 }));
    t = apply(t, { type: "run.adopt", runId: RUN });
    assert.equal(t.activeRunId, null);
  });

  test("the history ends each turn as it ended live", () => {
    const t = apply(emptyThread(), {
      type: "history",
      messages: [
        { ...userMessage(), turn: { run_id: RUN, status: "failed", error: "boom", latency_ms: 10, model_calls: 1 } },
      ],
      executions: [],
      activeRunId: null,
      lastSeq: 9,
    });
    assert.deepEqual(shown(t), ["user What is 2**10?", "notice The run failed: boom"]);
    assert.equal(lastOnes(t).lastFailure, t.items[1].key);
  });

  test("the history ends a cancelled turn with Retry, as it ended live", () => {
    const t = apply(emptyThread(), {
      type: "history",
      messages: [{ ...userMessage(), turn: { run_id: RUN, status: "cancelled", latency_ms: 10, model_calls: 1 } }],
      executions: [],
      activeRunId: null,
      lastSeq: 9,
    });
    assert.deepEqual(shown(t), ["user What is 2**10?", "notice The run was cancelled."]);
    assert.equal(lastOnes(t).lastFailure, t.items[1].key);
  });

  test("an empty conversation says so; a draft has its own intro", () => {
    const t = apply(emptyThread(), { type: "history", messages: [], executions: [], activeRunId: null, lastSeq: 0 });
    assert.equal(t.intro, "empty");
    assert.equal(emptyThread("draft").intro, "draft");
  });
});

describe("regenerate and edit", () => {
  const done = () => apply(emptyThread(), ...turnEvents());

  test("a regenerated answer: everything after the question goes, an error included", () => {
    const failed = apply(done(), envelope(16, "run.failed", { error: "x" }, "other-run"));
    const t = apply(failed, envelope(17, "messages.superseded", {
      message_ids: [TOOLS_MESSAGE, ANSWER], after_message_id: QUESTION,
    }, "new-run"));
    assert.deepEqual(shown(t), ["user What is 2**10?"]);
    assert.equal(t.cards[CALL], undefined, "the cards inside the answer go with it");
    assert.equal(messageById(t, ANSWER), null);
  });

  test("an edited question: it goes with its answer, and so does the edit in progress", () => {
    let t = apply(done(), { type: "edit", id: QUESTION });
    assert.equal(lastOnes(t).lastQuestion, null, "no Edit while editing");
    t = apply(t, envelope(16, "messages.superseded", { message_ids: [QUESTION, TOOLS_MESSAGE, ANSWER] }, "new-run"));
    assert.deepEqual(shown(t), []);
    assert.equal(t.editing, null);
  });

  test("a message still waiting for its ack is not superseded", () => {
    let t = apply(done(), { type: "send", content: "again" });
    t = apply(t, envelope(16, "messages.superseded", { message_ids: [ANSWER], after_message_id: QUESTION }, "new-run"));
    assert.deepEqual(shown(t), ["user What is 2**10?", "user again"]);
  });
});

describe("the declared events", () => {
  test("every type docs/events.md lists is declared in thread.js's RunEvent, and no other", async () => {
    const { readFile } = await import("node:fs/promises");
    const docs = await readFile(new URL("../../docs/events.md", import.meta.url), "utf8");
    const table = docs.split("## Types")[1].split("\n## ")[0];
    const documented = [...table.matchAll(/^\| `([a-z_.]+)` \|/gm)].map((match) => match[1]).sort();
    const source = await readFile(new URL("../../static/js/thread.js", import.meta.url), "utf8");
    const declared = [...source.matchAll(/Envelope<"([a-z_.]+)"/g)].map((match) => match[1]).sort();
    assert.ok(documented.length > 10);
    assert.deepEqual(declared, documented);
  });
});

describe("a message with images", () => {
  test("the pending message keeps its images until it is sent; none is no key at all", () => {
    const url = "data:image/png;base64,iVBORw0KGgo=";
    const withImages = apply(emptyThread(), { type: "send", content: "", images: [url] });
    assert.deepEqual(withImages.pending.images, [url]);
    assert.equal(withImages.pending.content, "");
    const sent = apply(withImages, { type: "sent" });
    assert.deepEqual(sent.pending.images, [url]);
    const plain = apply(emptyThread(), { type: "send", content: "hi", images: [] });
    assert.equal("images" in plain.pending, false);
  });
});
