// @ts-check
/* Draws the thread (state.js) in the message log.
 *
 * `render(thread)` brings the log to what the thread says: it makes the
 * elements of new items, updates those whose data changed (the reducer gives a
 * changed message or card a new object, and shares the rest), removes those
 * that went, and keeps them in the thread's order. Everything a model, a tool or
 * a user wrote is inserted as text, with one exception: a complete answer's
 * `html`, which the server rendered from Markdown and sanitized (chat/markdown.py).
 * An answer still streaming is drawn by markdown.js from a safe subset, as nodes.
 */

import { createCard } from "./cards.js";
import { copyText, decorateCode, h } from "./dom.js";
import { parse, toNodes } from "./markdown.js";
import { drawMeta, drawReasoning, drawTime } from "./meta.js";
import { lastOnes } from "./thread.js";

/**
 * @typedef {import("./thread.js").Thread} Thread
 * @typedef {import("./thread.js").MessageView} MessageView
 * @typedef {import("./thread.js").Notice} Notice
 * @typedef {import("./thread.js").TurnOutcome} TurnOutcome
 * @typedef {import("./cards.js").CardNode} CardNode
 * @typedef {import("./cards.js").CardOptions} CardOptions
 * @typedef {import("./meta.js").MessageNode} MessageNode
 *
 * @typedef {Object} RenderHooks
 * @property {() => void} regenerate answer the last question again
 * @property {(view: MessageView) => void} startEdit put the last question in the composer
 * @property {(text: string) => void} sendSuggestion send a chip's text
 * @property {() => string} modeName the mode a draft will be created with
 * @property {(runId: string, answeredBy: string) => HTMLElement} replayPanel "Try with another model…" for a
 *   turn (replay.js); `answeredBy` is the model that wrote the answer, which the picker does not pick first
 * @property {(key: string) => void} dismiss the reader closed a notice (a budget warning)
 *
 */

const EXAMPLES = [
  "What is 2**10 and what time is it in London?",
  "Note that the boiler was serviced today",
  "Generate a dataset of 2000 rows",
];

/**
 * The log's renderer.
 * @param {HTMLElement} log
 * @param {CardOptions & RenderHooks} options
 */
export function createRenderer(log, options) {
  /** @type {Map<string, MessageNode>} */
  let messages = new Map();
  /** @type {Map<string, CardNode>} */
  let cards = new Map();
  /** @type {Map<string, HTMLElement>} */
  let notices = new Map();
  /** @type {HTMLElement | null} */
  let intro = null;
  /** @type {"draft" | "empty" | null} */
  let introKind = null;
  /** @type {Thread | null} */
  let current = null;

  function nearEnd() {
    return log.scrollHeight - log.scrollTop - log.clientHeight < 80;
  }

  function scrollToEnd() {
    log.scrollTop = log.scrollHeight;
  }

  /** Empties the log (a conversation opens, or a draft starts). */
  function reset() {
    log.textContent = "";
    messages = new Map();
    cards = new Map();
    notices = new Map();
    intro = null;
    introKind = null;
    current = null;
  }

  /**
   * Brings the log to the thread; it stays at its end if it was there (or if `follow`).
   * @param {Thread} thread
   * @param {boolean} [follow]
   */
  function render(thread, follow = false) {
    const stick = nearEnd(); // measured before anything makes the log taller
    const previous = current;
    current = thread;
    if (!previous || previous.items !== thread.items || previous.intro !== thread.intro) removeGone(thread);
    if (thread.intro !== introKind) showIntro(thread.intro);
    /** @type {Element | null} */
    let cursor = intro;
    for (const item of thread.items) {
      let node;
      if (item.kind === "message") node = drawMessage(thread, thread.messages[item.key]).node;
      else if (item.kind === "card") node = drawCard(thread, item.key).node;
      else node = drawNotice(thread.notices[item.key]);
      const expected = cursor ? cursor.nextElementSibling : log.firstElementChild;
      if (expected !== node) log.insertBefore(node, expected);
      cursor = node;
    }
    showLastOnes(thread);
    if (stick || follow) scrollToEnd();
  }

  /** @param {Thread} thread */
  function removeGone(thread) {
    for (const [key, entry] of messages) {
      if (!thread.messages[key]) {
        entry.node.remove();
        messages.delete(key);
      }
    }
    for (const [callId, card] of cards) {
      if (!thread.cards[callId]) {
        card.node.remove();
        cards.delete(callId);
      }
    }
    for (const [key, node] of notices) {
      if (!thread.notices[key]) {
        node.remove();
        notices.delete(key);
      }
    }
  }

  /** @param {"draft" | "empty" | null} kind */
  function showIntro(kind) {
    if (intro) intro.remove();
    intro = null;
    introKind = kind;
    if (!kind) return;
    const box = h("div", "empty-state");
    box.id = "thread-empty";
    if (kind === "draft") {
      box.appendChild(h("p", "", "Ask anything: the model calls tools and you watch them run."));
      box.appendChild(h("p", "muted", "Mode: " + options.modeName() + ". Try one of these:"));
      const list = h("div", "suggestion-chips");
      EXAMPLES.forEach((text) => list.appendChild(suggestionChip(text)));
      box.appendChild(list);
    } else {
      box.appendChild(h("p", "", "No messages yet."));
      box.appendChild(h("p", "muted", "Ask something; tool calls and the answer appear here as they happen."));
    }
    log.insertBefore(box, log.firstChild);
    intro = box;
  }

  /** The draft's intro again (its mode changed). */
  function redrawIntro() {
    const kind = introKind;
    if (kind) showIntro(kind);
  }

  /**
   * @param {Thread} thread
   * @param {MessageView} view
   * @returns {MessageNode}
   */
  function drawMessage(thread, view) {
    let entry = messages.get(view.key);
    /** @type {MessageView | null} */
    let was = entry ? entry.view : null;
    if (!entry) {
      entry = messageNode(view);
      messages.set(view.key, entry);
      was = null;
    }
    if (was !== view) updateMessage(entry, view, was);
    entry.view = view;
    for (const callId of view.cards) {
      const card = drawCard(thread, callId);
      if (card.node.parentNode !== entry.tools) entry.tools.appendChild(card.node);
    }
    entry.node.classList.toggle("editing", Boolean(view.id) && view.id === thread.editing);
    return entry;
  }

  /**
   * @param {MessageView} view
   * @returns {MessageNode}
   */
  function messageNode(view) {
    const node = h("article", "msg msg-" + view.role);
    const bubble = h("div", "bubble");
    const text = h("div", "text");
    bubble.appendChild(text);
    node.appendChild(bubble);
    const tools = h("div", "tools");
    node.appendChild(tools);
    // The call's figures and the message's actions share one line under it.
    const footer = h("div", "msg-footer");
    const meta = h("div", "meta");
    footer.appendChild(meta);
    node.appendChild(footer);
    return { node, text, bubble, tools, meta, footer, actions: null, view };
  }

  /**
   * @param {MessageNode} entry
   * @param {MessageView} view
   * @param {MessageView | null} was
   */
  function updateMessage(entry, view, was) {
    if (view.id) entry.node.dataset.id = view.id;
    entry.node.classList.toggle("pending", view.pending);
    entry.node.classList.toggle("streaming", view.streaming);
    if (view.streaming) entry.node.setAttribute("aria-busy", "true");
    else entry.node.removeAttribute("aria-busy");
    entry.bubble.hidden = view.bubbleHidden;
    if (!was || was.html !== view.html || was.text !== view.text) {
      if (view.html) {
        entry.text.innerHTML = view.html; // sanitized by the server (chat/markdown.py)
        entry.text.classList.add("markdown");
        decorateCode(entry.text);
      } else if (view.streaming && view.role === "assistant" && view.text) {
        // Drawn as it arrives from a safe subset (markdown.js), replaced by the server's HTML at the end.
        entry.text.replaceChildren(...toNodes(parse(view.text), document));
        entry.text.classList.add("markdown");
        decorateCode(entry.text);
      } else {
        entry.text.classList.remove("markdown");
        entry.text.textContent = view.text;
      }
    }
    if (view.role === "assistant" && (!was || was.message !== view.message || was.turn !== view.turn)) {
      drawMeta(entry.meta, view, Boolean(options.staff));
    }
    if (!was || was.message !== view.message) drawTime(entry, view);
    if (view.role === "assistant" && (!was || was.message !== view.message)) drawReasoning(entry, view);
    if (view.role === "user" && (!was || was.message !== view.message)) drawImages(entry, view);
    if (!was || was.suggestions !== view.suggestions) drawSuggestions(entry, view.suggestions);
    if (view.actions && !entry.actions) addActions(entry);
    const replay = entry.actions && entry.actions.querySelector("[data-replay]");
    if (replay instanceof HTMLElement) replay.hidden = !replayableRun(view);
  }

  /**
   * A user message's images, each said in words (its type and size, or its URL as text:
   * the page fetches no image a message names).
   * @param {MessageNode} entry
   * @param {MessageView} view
   */
  function drawImages(entry, view) {
    const images = (view.message && view.message.images) || [];
    let list = entry.bubble.querySelector(".msg-images");
    if (!images.length) {
      if (list) list.remove();
      return;
    }
    if (!list) {
      list = h("ul", "msg-images");
      entry.bubble.appendChild(list);
    }
    list.replaceChildren(...images.map((image) => {
      const size = image.width && image.height ? ", " + image.width + "x" + image.height : "";
      const said = image.url ? image.url : (image.media_type || "image") + size;
      const item = h("li", "msg-image", "Image: " + said);
      item.title = image.url ? "Sent as a link; toolchat does not fetch it" : "Sent with the message";
      return item;
    }));
  }

  /**
   * @param {MessageNode} entry
   * @param {string[]} suggestions
   */
  function drawSuggestions(entry, suggestions) {
    const old = entry.node.querySelector(".suggestion-chips");
    if (old) old.remove();
    if (!suggestions.length) return;
    const box = h("div", "suggestion-chips");
    box.setAttribute("role", "group");
    box.setAttribute("aria-label", "Suggested follow-ups");
    suggestions.forEach((text) => box.appendChild(suggestionChip(text)));
    entry.node.appendChild(box);
  }

  /** @param {string} text */
  function suggestionChip(text) {
    const chip = h("button", "suggestion-chip", text);
    chip.type = "button";
    chip.title = "Send: " + text;
    chip.addEventListener("click", () => options.sendSuggestion(text));
    return chip;
  }

  /**
   * Copy on every message; Regenerate on the last answer, Edit on the last question
   * (showLastOnes shows those where they apply).
   * @param {MessageNode} entry
   */
  function addActions(entry) {
    const bar = h("div", "msg-actions");
    bar.appendChild(actionButton("Copy", "Copy this message", (button) => {
      const message = entry.view.message;
      copyText((message && message.content) || entry.text.textContent || "", button);
    }));
    if (entry.view.role === "assistant") {
      const again = actionButton("Regenerate", "Answer the last question again (this answer stays in the audit)",
        () => options.regenerate());
      again.dataset.only = "last-answer";
      bar.appendChild(again);
      bar.appendChild(tryAnother(entry));
    } else if (entry.view.role === "user") {
      const change = actionButton("Edit", "Edit and resend your last message", () => options.startEdit(entry.view));
      change.dataset.only = "last-question";
      bar.appendChild(change);
    }
    entry.footer.appendChild(bar);
    entry.actions = bar;
  }

  /**
   * "Try with another model…": opens (or closes) the replay panel under the answer.
   * Shown once the answer is a stored final answer of a run (replayable).
   * @param {MessageNode} entry
   */
  function tryAnother(entry) {
    /** @type {HTMLElement | null} */
    let panel = null;
    const button = actionButton("Try with another model…", "Replay this turn on another model and compare (the tools do not run again)", () => {
      const runId = replayableRun(entry.view);
      if (!runId) return;
      if (panel) {
        panel.hidden = !panel.hidden;
      } else {
        panel = options.replayPanel(runId, (entry.view.message && entry.view.message.model) || "");
        entry.node.appendChild(panel);
      }
      button.setAttribute("aria-expanded", String(!panel.hidden));
    });
    button.dataset.replay = "1";
    button.setAttribute("aria-expanded", "false");
    button.hidden = !replayableRun(entry.view);
    return button;
  }

  /**
   * @param {Thread} thread
   * @param {string} callId
   * @returns {CardNode}
   */
  function drawCard(thread, callId) {
    const view = thread.cards[callId];
    let card = cards.get(callId);
    if (!card) {
      card = createCard(view, options);
      cards.set(callId, card);
    } else {
      card.update(view);
    }
    return card;
  }

  /**
   * A notice; a failed or cancelled turn's has a Retry that answers its question again (a new run
   * on the same message: the question is not posted twice).
   * @param {Notice} notice
   */
  function drawNotice(notice) {
    let node = notices.get(notice.key);
    if (node) return node;
    node = h("div", "notice notice-" + notice.level);
    if (notice.level === "error") node.setAttribute("role", "alert");
    if (notice.level === "warning") node.setAttribute("role", "status");
    const label = notice.level === "error" ? "Error: " : notice.level === "warning" ? "Budget: " : "";
    node.appendChild(h("strong", "", label));
    node.appendChild(document.createTextNode(notice.text));
    if (notice.dismissible) {
      const close = h("button", "icon-button notice-dismiss", "×");
      close.type = "button";
      close.setAttribute("aria-label", "Dismiss this warning");
      close.title = "Dismiss";
      close.addEventListener("click", () => options.dismiss(notice.key));
      node.appendChild(close);
    }
    if (notice.retry) {
      const retry = h("button", "button-small button-ghost notice-action", "Retry");
      retry.type = "button";
      retry.dataset.only = "last-failure";
      retry.addEventListener("click", () => options.regenerate());
      node.appendChild(retry);
    }
    notices.set(notice.key, node);
    return node;
  }

  /** @param {Thread} thread */
  function showLastOnes(thread) {
    const last = lastOnes(thread);
    for (const [key, entry] of messages) {
      if (entry.actions) {
        entry.actions.querySelectorAll("[data-only]").forEach((node) => {
          const button = /** @type {HTMLElement} */ (node);
          const only = button.dataset.only;
          button.hidden = only === "last-answer" ? key !== last.lastAnswer : key !== last.lastQuestion;
        });
      }
      const chips = entry.node.querySelector(".suggestion-chips");
      if (chips instanceof HTMLElement) chips.hidden = key !== last.lastAnswer;
    }
    for (const [key, node] of notices) {
      const retry = node.querySelector('[data-only="last-failure"]');
      if (retry instanceof HTMLElement) retry.hidden = key !== last.lastFailure;
    }
  }

  return { render, reset, redrawIntro, scrollToEnd };
}

/**
 * @param {string} label
 * @param {string} title
 * @param {(button: HTMLButtonElement) => void} onClick
 */
function actionButton(label, title, onClick) {
  const button = h("button", "msg-action", label);
  button.type = "button";
  button.title = title;
  button.addEventListener("click", () => onClick(button));
  return button;
}

/**
 * The run whose final answer the view is, if it is one (a stored answer without calls).
 * @param {MessageView} view
 * @returns {string | null}
 */
function replayableRun(view) {
  const message = view.message;
  if (view.role !== "assistant" || !message || (message.tool_calls || []).length) return null;
  return message.run_id || null;
}
