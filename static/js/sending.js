// @ts-check
/* What the user sends from the open conversation: a message (it waits in the thread
 * until the socket is open), an edit (a REST post that `replaces`), a Regenerate, and
 * the title an untitled conversation takes from its first message; and what the
 * page says when one is refused (the box gets its text back; a run in progress
 * elsewhere is followed until it ends; a hard budget limit has its own notice).
 * chat.js owns the session this reads through its hooks.
 */

import { titleFrom } from "./format.js";

/**
 * @typedef {import("./state.js").Action} Action
 * @typedef {import("./thread.js").Thread} Thread
 * @typedef {import("./sidebar.js").Conversation} Conversation
 * @typedef {import("./api.js").ApiError} ApiError
 *
 * @typedef {Object} SendingHooks
 * @property {(method: string, path: string, body?: unknown) => Promise<any>} api
 * @property {(action: Action, follow?: boolean) => void} dispatch the session's one way to change the thread
 * @property {() => Thread} thread
 * @property {() => Conversation | null} current the open conversation
 * @property {() => number} generation bumps on every open: a late answer of an old one is ignored
 * @property {() => ReturnType<typeof import("./socket.js").openSocket> | null} socket
 * @property {() => boolean} isDraft a draft's first message creates its conversation
 * @property {(on: boolean) => void} setDraft
 * @property {() => object} fields what a new conversation is created with (mode, model, prompt)
 * @property {(id: string) => void} select opens the conversation just created, its message kept
 * @property {(title: string) => void} titled the open conversation was named
 * @property {ReturnType<typeof import("./composer.js").createComposer>} composer
 * @property {ReturnType<typeof import("./sidebar.js").createSidebar>} sidebar
 */

/** @param {SendingHooks} hooks */
export function createSending(hooks) {
  /**
   * A new message: it waits in the thread (greyed) until the socket is open, so that
   * typing and pressing Enter right after opening a conversation just works.
   * @param {string} content
   * @param {string[]} [images] data: URLs of the images it carries
   */
  function post(content, images) {
    hooks.dispatch({ type: "send", content, images }, true);
    if (hooks.isDraft()) createFromDraft();
    else flushPending();
  }

  /** The draft's first message: create the conversation, then send it once its socket is open. */
  function createFromDraft() {
    hooks.setDraft(false);
    hooks.dispatch({ type: "opening", on: true });
    const created = hooks.generation();
    const pending = hooks.thread().pending;
    const content = pending && pending.content;
    hooks.api("POST", "/conversations/", hooks.fields())
      .then((conversation) => {
        hooks.sidebar.created(conversation.id);
        hooks.sidebar.upsert(conversation);
        if (created === hooks.generation()) {
          hooks.select(conversation.id);
          return;
        }
        // The user went elsewhere meanwhile: the message still goes to its conversation.
        if (!content) return;
        hooks.api("POST", "/conversations/" + conversation.id + "/messages/", { content })
          .then(() => {
            hooks.sidebar.touch(conversation.id);
            return hooks.api("PATCH", "/conversations/" + conversation.id + "/", { title: titleFrom(content) });
          })
          .then(hooks.sidebar.upsert)
          .catch((error) => hooks.composer.showError("Your message to the new conversation was not sent: " + error.message));
      })
      .catch((error) => {
        if (created !== hooks.generation()) return;
        hooks.setDraft(true);
        hooks.dispatch({ type: "opening", on: false });
        failSend("Could not create a conversation: " + error.message);
      });
  }
  function flushPending() {
    const pending = hooks.thread().pending;
    const socket = hooks.socket();
    if (!pending || pending.sent || !socket || !socket.isOpen()) return;
    hooks.dispatch({ type: "sent" });
    socket.send(
      pending.images ? { type: "message", content: pending.content, images: pending.images }
        : { type: "message", content: pending.content }
    );
  }

  /**
   * A message that did not go: its text comes back to the box, and the reason shows above it
   * (a hard budget limit's in a notice of its own).
   * @param {string} message
   * @param {import("./socket.js").SocketError} [refusal]
   */
  function failSend(message, refusal) {
    const pending = hooks.thread().pending;
    const conflict = refusal && refusal.code === "conflict" && refusal.details && refusal.details.run_id;
    hooks.dispatch({ type: "send.failed", runId: conflict || null });
    if (pending) hooks.composer.restore(pending.content);
    if (conflict) showBusy(message, conflict);
    else if (refusal && refusal.code === "budget_exceeded") hooks.composer.showBudget(refusal);
    else hooks.composer.showError(message);
    hooks.composer.update();
  }

  /**
   * A refusal because another run (another tab's, another client's) is in progress:
   * the page follows that run, and the error goes when it ends.
   * @param {string} message
   * @param {string | null | undefined} runId
   */
  function showBusy(message, runId) {
    if (runId) hooks.dispatch({ type: "run.adopt", runId });
    if (hooks.thread().activeRunId) hooks.composer.showError(message, "busy");
  }

  /**
   * A REST request's error: a 409 names the run in progress.
   * @param {ApiError} error
   * @param {string} [prefix]
   */
  function showRequestError(error, prefix = "") {
    const details = error.data && error.data.details;
    if (error.status === 409 && details && details.run_id) showBusy(prefix + error.message, details.run_id);
    else if (error.data && error.data.code === "budget_exceeded") hooks.composer.showBudget(error.data);
    else hooks.composer.showError(prefix + error.message);
  }

  /**
   * An edit goes through the REST API (`replaces`); its events arrive on the socket.
   * @param {string} content
   * @param {string} replaces
   */
  function resend(content, replaces) {
    const current = hooks.current();
    if (hooks.thread().requesting || !current) return;
    const id = current.id;
    const sent = hooks.generation();
    hooks.dispatch({ type: "requesting", on: true });
    hooks.api("POST", "/conversations/" + id + "/messages/", { content, replaces })
      .then((data) => {
        hooks.sidebar.touch(id);
        if (sent !== hooks.generation()) return;
        if (hooks.thread().editing === replaces) hooks.composer.cancelEdit();
        hooks.dispatch({ type: "run.adopt", runId: data.run && data.run.id });
      })
      .catch((error) => {
        if (sent === hooks.generation()) showRequestError(error);
      })
      .then(() => hooks.dispatch({ type: "requesting", on: false }));
  }

  /** Answers the last question again (Regenerate, or a failed turn's Retry). */
  function regenerate() {
    const current = hooks.current();
    const thread = hooks.thread();
    if (!current || thread.activeRunId || thread.pending || thread.requesting) return;
    hooks.composer.showError("");
    const id = current.id;
    const sent = hooks.generation();
    hooks.dispatch({ type: "requesting", on: true });
    hooks.api("POST", "/conversations/" + id + "/regenerate/")
      .then((data) => {
        hooks.sidebar.touch(id);
        if (sent === hooks.generation()) hooks.dispatch({ type: "run.adopt", runId: data.run && data.run.id });
      })
      .catch((error) => {
        if (sent === hooks.generation()) showRequestError(error, "Could not regenerate: ");
      })
      .then(() => hooks.dispatch({ type: "requesting", on: false }));
  }

  /**
   * The first message names an untitled conversation (a PATCH, like any client could).
   * @param {string} content
   */
  function maybeTitle(content) {
    const conversation = hooks.current();
    if (!conversation || conversation.title) return;
    const name = titleFrom(content);
    conversation.title = name;
    hooks.titled(name);
    hooks.sidebar.render();
    hooks.api("PATCH", "/conversations/" + conversation.id + "/", { title: name })
      .then(hooks.sidebar.upsert)
      .catch(() => {
        /* a title is a nicety; the message went through */
      });
  }

  return { post, flushPending, failSend, showRequestError, resend, regenerate, maybeTitle };
}
