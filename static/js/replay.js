// @ts-check
/*
 * "Try with another model…" under an answer: replays its turn on a model the user picks
 * (POST /api/v1/runs/{id}/replay/, recorded tools: nothing runs again), waits for the
 * replay to end, and shows the comparison (GET /api/v1/runs/{id}/compare/?with=) under
 * the answer: the other model's answer with the words that changed, its tool calls
 * (matched, unmatched), and the two runs' latency and tokens. The replay lives in its
 * own conversation, which the sidebar does not list (docs/replay.md).
 *
 * `comparisonLines` is pure (tests/js/replay.test.mjs); the panel draws what it says,
 * as text nodes only.
 */

import { h } from "./dom.js";
import { formatMs, tokens as formatTokens } from "./format.js";

/**
 * @typedef {{name: string, arguments?: unknown, match: string, step?: number}} ComparedCall
 * @typedef {{id: string, status: string, models?: string[], answer: string | null,
 *   tool_calls: ComparedCall[], latency_ms: number | null, first_token_ms?: number | null,
 *   prompt_tokens: number | null, completion_tokens: number | null, model_calls?: number,
 *   error?: string | null}} ComparedRun
 * @typedef {{runs: ComparedRun[], answer_similarity: number | null,
 *   answer_diff: {op: string, text: string}[], answer_diff_limited?: boolean,
 *   same_tool_calls: boolean}} Comparison
 *
 * @typedef {Object} ReplayHooks
 * @property {(method: string, path: string, body?: object) => Promise<any>} api
 * @property {boolean} staff links to the audit's comparison
 * @property {string} [answeredBy] the model that wrote the answer: another is picked first
 * @property {number} [pollMs] how often the replay's status is read
 *
 * @typedef {Object} ComparisonLines
 * @property {string} heading "On local/qwen3:"
 * @property {{op: string, text: string}[]} diff the other answer, its new words marked
 * @property {string[]} calls one line per tool call of the replay
 * @property {string} figures latency and tokens, the original's then the replay's
 */

const GIVE_UP_MS = 5 * 60 * 1000;

/**
 * What the panel says of a comparison (the original first, the replay second).
 * @param {Comparison} compared
 * @returns {ComparisonLines}
 */
export function comparisonLines(compared) {
  const [original, replay] = compared.runs;
  const model = (replay.models && replay.models[0]) || "the other model";
  const calls = replay.tool_calls.map((call) => {
    const how = call.match === "matched" ? "recorded result reused" : call.match === "unmatched" ? "no recorded result" : "ran";
    return call.name + " " + JSON.stringify(call.arguments ?? {}) + " (" + how + ")";
  });
  if (!calls.length) calls.push(original.tool_calls.length ? "No tool call (the original made " + original.tool_calls.length + ")." : "No tool call.");
  else if (compared.same_tool_calls) calls.push("The same tool calls as the original.");
  /** @param {ComparedRun} run */
  const tokens = (run) =>
    run.prompt_tokens == null && run.completion_tokens == null
      ? "tokens not reported"
      : formatTokens((run.prompt_tokens ?? 0) + (run.completion_tokens ?? 0)) + " tokens";
  /** @param {number | null} ms */
  const took = (ms) => (ms == null ? "—" : formatMs(ms));
  // Answers too long to diff whole: the similarity counts what was not diffed as different.
  const alike = compared.answer_diff_limited ? "% alike at least (too long to compare whole)" : "% alike";
  const similarity = compared.answer_similarity == null ? "" : ", answers " + Math.round(compared.answer_similarity * 100) + alike;
  const figures =
    "Latency " + took(original.latency_ms) + " → " + took(replay.latency_ms) +
    ", " + tokens(original) + " → " + tokens(replay) + similarity + ".";
  /** @type {{op: string, text: string}[]} */
  const diff = replay.answer == null
    ? [{ op: "equal", text: unanswered(replay) }]
    : compared.answer_diff.filter((part) => part.op !== "delete");
  return { heading: "On " + model + ":", diff, calls, figures };
}

/**
 * What a replay without an answer says: "(no answer)", or that it failed and why (its error).
 * @param {ComparedRun} replay
 * @returns {string}
 */
function unanswered(replay) {
  if (replay.status === "completed") return "(no answer)";
  return "The replay " + replay.status + (replay.error ? ": " + replay.error : ".");
}

/**
 * Whether a model id (`provider/model`) names the model a message says wrote it (its name
 * on its server, or the id itself).
 * @param {string} id
 * @param {string} model
 * @returns {boolean}
 */
export function sameModel(id, model) {
  if (!model) return false;
  return id === model || id.slice(id.indexOf("/") + 1) === model;
}

/**
 * Which of the ids wrote a message that says `model` wrote it: the id itself, else the
 * one of that server name; of several (two offline providers both serve `offline`), the
 * one whose provider has the model's name (`offline/offline`: an offline provider of
 * another name says `<name>/offline`). "" when none.
 * @param {string[]} ids
 * @param {string} model
 * @returns {string}
 */
export function answeredBy(ids, model) {
  if (ids.includes(model)) return model;
  const named = ids.filter((id) => sameModel(id, model));
  return named.find((id) => id === model + "/" + model) || named[0] || "";
}

/**
 * The panel under an answer: a model picker and a Replay button, then the comparison.
 * @param {string} runId the run that made the answer
 * @param {ReplayHooks} hooks
 * @returns {HTMLElement}
 */
export function createReplayPanel(runId, hooks) {
  const panel = h("div", "replay-panel");
  panel.dataset.testid = "replay-panel";
  const form = h("form", "replay-form");
  const label = h("label", "replay-label", "Replay this turn on ");
  const select = /** @type {HTMLSelectElement} */ (h("select", "replay-model"));
  select.setAttribute("aria-label", "Model to replay on");
  label.appendChild(select);
  // A label longer than the panel's width is whole in the select's title (and its menu).
  const titled = () => {
    const option = select.selectedOptions[0];
    select.title = option ? option.textContent || "" : "";
  };
  select.addEventListener("change", titled);
  const go = /** @type {HTMLButtonElement} */ (h("button", "button-primary button-small", "Replay"));
  go.type = "submit";
  go.disabled = true;
  form.append(label, go);
  const note = h("p", "replay-note muted", "The tools do not run again: their recorded results are reused.");
  const status = h("p", "replay-status muted");
  status.setAttribute("role", "status");
  const earlier = h("p", "replay-earlier muted");
  earlier.hidden = true;
  const result = h("div", "replay-result");
  panel.append(form, note, earlier, status, result);

  // The turn's earlier replays (this page's or another's), each to show again.
  hooks.api("GET", "/runs/" + encodeURIComponent(runId) + "/replays/").then(
    (page) => {
      const ended = (page.results || []).filter((/** @type {any} */ r) => r.status === "completed" || r.status === "failed");
      if (!ended.length) return;
      earlier.hidden = false;
      earlier.appendChild(document.createTextNode("Earlier replays: "));
      ended.forEach((/** @type {any} */ replay, /** @type {number} */ index) => {
        if (index) earlier.appendChild(document.createTextNode(" · "));
        const link = /** @type {HTMLButtonElement} */ (h("button", "replay-earlier-one", replay.model + " (" + replay.status + ")"));
        link.type = "button";
        link.addEventListener("click", () => compare(replay.id));
        earlier.appendChild(link);
      });
    },
    () => {} // the panel works without them
  );

  hooks.api("GET", "/models/").then(
    (page) => {
      for (const model of page.results || []) {
        const option = document.createElement("option");
        option.value = model.id;
        option.textContent = model.label || model.id;
        select.appendChild(option);
      }
      // "Another model": the first one listed that did not write this answer, if any.
      const ids = Array.from(select.options, (option) => option.value);
      const wrote = answeredBy(ids, hooks.answeredBy || "");
      const other = Array.from(select.options).find((option) => option.value !== wrote);
      if (other) select.value = other.value;
      titled();
      go.disabled = select.options.length === 0;
    },
    (/** @type {Error} */ error) => {
      status.textContent = "The models could not be listed: " + error.message;
    }
  );

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    go.disabled = true;
    result.replaceChildren();
    status.textContent = "Replaying on " + select.value + "…";
    hooks
      .api("POST", "/runs/" + encodeURIComponent(runId) + "/replay/", { model: select.value })
      .then((run) => waitForEnd(run.id, Date.now()))
      .then(compare)
      .catch((/** @type {Error} */ error) => {
        status.textContent = "The replay did not work: " + error.message;
      })
      .finally(() => {
        go.disabled = false;
      });
  });

  /**
   * Show how a replay of the turn compares with it.
   * @param {string} replayId
   * @returns {Promise<void>}
   */
  function compare(replayId) {
    return hooks
      .api("GET", "/runs/" + encodeURIComponent(runId) + "/compare/?with=" + encodeURIComponent(replayId))
      .then((compared) => show(compared, replayId));
  }

  /**
   * @param {string} replayId
   * @param {number} since
   * @returns {Promise<string>}
   */
  function waitForEnd(replayId, since) {
    return hooks.api("GET", "/runs/" + encodeURIComponent(replayId) + "/").then((run) => {
      if (!["queued", "running", "awaiting_approval"].includes(run.status)) return replayId;
      if (Date.now() - since > GIVE_UP_MS) throw new Error("it is still " + run.status + ".");
      return new Promise((resolve) => setTimeout(resolve, hooks.pollMs ?? 500)).then(() => waitForEnd(replayId, since));
    });
  }

  /**
   * @param {Comparison} compared
   * @param {string} replayId
   */
  function show(compared, replayId) {
    const lines = comparisonLines(compared);
    status.textContent = lines.heading;
    const answer = h("div", "replay-answer");
    answer.dataset.testid = "replay-answer";
    for (const part of lines.diff) {
      answer.appendChild(part.op === "insert" ? h("ins", "", part.text) : document.createTextNode(part.text));
    }
    const calls = h("ul", "replay-calls");
    for (const line of lines.calls) calls.appendChild(h("li", "", line));
    const figures = h("p", "replay-figures muted", lines.figures);
    result.replaceChildren(answer, calls, figures);
    if (hooks.staff) {
      const link = /** @type {HTMLAnchorElement} */ (h("a", "replay-audit", "Compare in the audit"));
      link.href = "/audit/runs/" + encodeURIComponent(runId) + "/compare/" + encodeURIComponent(replayId) + "/";
      result.appendChild(link);
    }
  }

  return panel;
}
