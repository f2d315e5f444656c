// @ts-check
/* toolchat's chat page: plain ES modules, no dependencies and no build step.
 *
 * Reads go to the REST API (session auth); messages and cancels go through the
 * conversation's WebSocket, which also carries the live events. What the thread
 * shows is one value, changed only by state.js's reducer and drawn by
 * render.js; this module opens conversations, talks to the server and passes
 * what it hears to the reducer.
 *
 *   state.js, thread.js  the thread as data, and the reducer (tested by node)
 *   render.js, cards.js  the message log and the tool cards
 *   socket.js            the WebSocket and its reconnection
 *   composer.js          the message box
 *   sidebar.js           the conversation list and the mode of new ones
 *   picker.js            the model the open conversation talks to
 *   settings.js          the open conversation's settings (its system prompt)
 *   usage.js, budget.js  the Settings panel's Usage section; budgets in words and figures
 *   shortcuts.js         the keyboard shortcuts and their help panel
 *   replay.js            "Try with another model…": a turn replayed and compared
 *   approvals.js         the calls waiting for the user, across conversations
 *   api.js, dom.js, format.js  the REST client, DOM helpers, text formatting
 */

import { createApi } from "./api.js";
import { createApprovals } from "./approvals.js";
import { createComposer } from "./composer.js";
import { byId } from "./dom.js";
import { titleFrom } from "./format.js";
import { createPicker } from "./picker.js";
import { createRenderer } from "./render.js";
import { createReplayPanel } from "./replay.js";
import { openSocket } from "./socket.js";
import { conversationLabel, createSidebar } from "./sidebar.js";
import { createSettings } from "./settings.js";
import { createShortcuts } from "./shortcuts.js";
import { reduce } from "./state.js";
import { emptyThread, lastOnes } from "./thread.js";
import { createUsage } from "./usage.js";

/**
 * @typedef {import("./state.js").Action} Action
 * @typedef {import("./thread.js").Thread} Thread
 * @typedef {import("./sidebar.js").Conversation} Conversation
 * @typedef {import("./api.js").ApiError} ApiError
 */

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const root = document.getElementById("chat");
if (root) start(root);

/** @param {HTMLElement} root */
function start(root) {
  const API = root.dataset.api || "/api/v1";
  const WS_PATH = root.dataset.wsPath || "/ws/conversations/";
  const MAX_CHARS = parseInt(root.dataset.maxChars || "", 10) || 32000;
  const STAFF = root.dataset.staff === "1";
  const title = byId("thread-title", HTMLElement);
  const connection = byId("connection", HTMLElement);
  const exportLink = byId("export", HTMLAnchorElement);
  const { api, apiAll } = createApi(API);

  // The page's session: the thread (changed only through dispatch) and what surrounds it.
  let thread = emptyThread();
  /** @type {Conversation | null} */
  let current = null; // the open conversation, as the API answered it
  let draft = false; // a new conversation not created yet: the first message creates it
  let generation = 0; // bumps on every open, so that late answers of an old open are ignored
  /** @type {ReturnType<typeof openSocket> | null} */
  let socket = null;

  /**
   * The one way the thread changes: the reducer, then the page.
   * @param {Action} action
   * @param {boolean} [follow] scroll to the end whatever the reader's position
   */
  function dispatch(action, follow = false) {
    const previous = thread;
    thread = reduce(thread, action);
    if (previous.editing && !thread.editing && action.type !== "edit") composer.editEnded();
    // "Still in progress" is true no longer once the run it meant has ended.
    if (previous.activeRunId && !thread.activeRunId) composer.clearError("busy");
    renderer.render(thread, follow);
    composer.update();
  }

  const composer = createComposer({
    maxChars: MAX_CHARS,
    maxImageBytes: parseInt(root.dataset.maxImageBytes || "", 10) || undefined,
    maxImages: parseInt(root.dataset.maxImages || "", 10) || undefined,
    thread: () => thread,
    ready: () => Boolean(current) || thread.opening || draft,
    post,
    resend,
    editing: (id) => dispatch({ type: "edit", id }),
    cancelRun,
    lastQuestion: () => {
      const key = lastOnes(thread).lastQuestion;
      return key ? thread.messages[key] : null;
    },
  });

  /** Stops the run in progress; false when there is none to stop. */
  function cancelRun() {
    if (!thread.activeRunId || !socket) return false;
    socket.send({ type: "cancel", run_id: thread.activeRunId });
    return true;
  }
  const showError = composer.showError;

  const renderer = createRenderer(byId("log", HTMLElement), {
    staff: STAFF,
    api: API,
    regenerate,
    startEdit: (view) => composer.startEdit(view),
    sendSuggestion: (text) => composer.sendText(text),
    modeName: () => sidebar.modeName(sidebar.mode()),
    dismiss: (key) => {
      dispatch({ type: "notice.dismissed", key });
      composer.focus(); // its button is gone: the focus goes where one types next
    },
    replayPanel: (runId, answeredBy) => createReplayPanel(runId, { api, staff: STAFF, answeredBy }),
    decide: (executionId, action, reason) =>
      api("POST", "/tool-executions/" + encodeURIComponent(executionId) + "/" + action + "/", { reason }).then(
        () => {
          clearApproval(executionId);
          approvals.changed();
        },
        (/** @type {ApiError} */ error) => {
          if (error.status === 409) return clearApproval(executionId); // decided elsewhere
          showError(error.message);
          throw error;
        }
      ),
  });

  const sidebar = createSidebar(root, {
    api,
    apiAll,
    currentId: () => (current ? current.id : null),
    select: (id) => selectConversation(id),
    newDraft: () => startDraft(true),
    modeChanged: () => {
      if (draft) renderer.redrawIntro();
    },
    renamed: (updated) => {
      if (current && current.id === updated.id) {
        current = updated;
        title.textContent = conversationLabel(updated);
      }
    },
    deleted: (conversation) => {
      if (current && current.id === conversation.id) startDraft(false);
    },
    error: showError,
  });

  /** @param {Conversation} updated the conversation as the server now has it */
  function saved(updated) {
    if (current && current.id === updated.id) current = updated;
    sidebar.upsert(updated);
  }
  const approvals = createApprovals({
    api,
    open: (id) => selectConversation(id),
    decided: (executionId) => clearApproval(executionId),
  });
  const picker = createPicker({ api, current: () => current, saved, error: showError });
  const settings = createSettings({ api, current: () => current, saved });
  createUsage({ api });
  createShortcuts({
    newConversation: () => {
      sidebar.close();
      startDraft(true);
    },
    focusComposer: () => composer.focus(),
    stop: cancelRun,
  });

  /** @param {string} executionId */
  function clearApproval(executionId) {
    for (const callId of Object.keys(thread.cards)) {
      const approval = thread.cards[callId].approval;
      if (approval && approval.executionId === executionId) dispatch({ type: "approval.cleared", callId });
    }
  }

  /**
   * @param {string} text
   * @param {string} kind
   */
  function setConnection(text, kind) {
    connection.textContent = text;
    connection.className = "connection" + (kind ? " connection-" + kind : "");
  }

  // ------------------------------------------------------------ conversations

  /**
   * A new thread in the log; `keep` carries a message typed while it was created.
   * @param {"draft" | "empty" | null} intro
   * @param {boolean} [keep]
   */
  function resetThread(intro, keep = false) {
    if (socket) socket.close();
    socket = null;
    composer.cancelEdit();
    showError("");
    renderer.reset();
    thread = emptyThread(intro, keep ? thread : undefined, thread.warned); // a limit is warned of once
    renderer.render(thread);
    composer.update();
  }

  /**
   * Export: the API's JSONL of the open conversation, as a download (none for a draft).
   * @param {string | null} id
   */
  function showExport(id) {
    exportLink.hidden = !id;
    if (id) exportLink.href = API + "/conversations/" + encodeURIComponent(id) + "/export/";
    else exportLink.removeAttribute("href");
  }

  /**
   * "New conversation" opens a draft: nothing is created until its first message,
   * so that unused conversations do not pile up.
   * @param {boolean} focusComposer
   */
  function startDraft(focusComposer) {
    ++generation;
    resetThread("draft");
    current = null;
    showExport(null);
    draft = true;
    if (window.location.hash) window.history.pushState(null, "", window.location.pathname);
    title.textContent = "New conversation";
    document.title = "New conversation · toolchat";
    picker.show(null);
    settings.show(null);
    setConnection("", "");
    sidebar.render();
    composer.enable(true);
    composer.update();
    if (focusComposer) composer.focus();
  }

  /**
   * @param {string} id
   * @param {boolean} [focusComposer]
   * @param {boolean} [keepPending]
   */
  function selectConversation(id, focusComposer = false, keepPending = false) {
    if (window.location.hash !== "#" + id) window.history.pushState(null, "", "#" + id);
    sidebar.close();
    openConversation(id, focusComposer, keepPending);
  }

  /**
   * Loads a conversation: its history, the run in progress (replayed from its first
   * event, so its streamed text is complete), then the socket from there.
   * `keepPending`: a message typed while it was being created is sent once it is open.
   * @param {string} id
   * @param {boolean} [focusComposer]
   * @param {boolean} [keepPending]
   */
  function openConversation(id, focusComposer = false, keepPending = false) {
    const opened = ++generation;
    resetThread(null, keepPending);
    draft = false;
    showExport(null);
    dispatch({ type: "opening", on: true });
    title.textContent = "Loading…";
    /** @type {Conversation} */
    let conversation;
    let from = 0;
    api("GET", "/conversations/" + id + "/")
      .then((data) => {
        conversation = data;
        from = data.last_event_seq || 0;
        if (!data.active_run_id) return null;
        return api("GET", "/runs/" + data.active_run_id + "/events/?limit=1").then((events) => {
          if (events.events && events.events.length) from = events.events[0].seq - 1;
        });
      })
      .then(() =>
        Promise.all([
          apiAll("/conversations/" + id + "/messages/?page_size=1000"),
          apiAll("/tool-executions/?conversation=" + id + "&page_size=200", 10).catch(() => []),
        ])
      )
      .then(([messages, executions]) => {
        if (opened !== generation) return;
        current = conversation;
        showExport(conversation.id);
        settings.show(conversation);
        sidebar.upsert(conversation);
        title.textContent = conversationLabel(conversation);
        document.title = conversationLabel(conversation) + " · toolchat";
        picker.show(conversation);
        const activeRunId = conversation.active_run_id || null;
        dispatch({ type: "history", messages, executions, activeRunId, lastSeq: from });
        dispatch({ type: "opening", on: false }, true);
        composer.enable(true);
        composer.update();
        connect(opened);
        if (focusComposer) composer.focus();
      })
      .catch((/** @type {ApiError} */ error) => {
        if (opened !== generation) return;
        title.textContent = "Chat";
        current = null;
        dispatch({ type: "opening", on: false });
        const text = error.status === 404 ? "This conversation does not exist." : error.message;
        dispatch({ type: "notice", level: "error", text });
      });
  }

  /** The draft's first message: create the conversation, then send it once its socket is open. */
  function createFromDraft() {
    draft = false;
    dispatch({ type: "opening", on: true });
    const created = generation;
    const content = thread.pending && thread.pending.content;
    api("POST", "/conversations/", { mode: sidebar.mode(), ...picker.fields(), ...settings.draft() })
      .then((conversation) => {
        sidebar.created(conversation.id);
        sidebar.upsert(conversation);
        if (created === generation) {
          selectConversation(conversation.id, true, true);
          return;
        }
        // The user went elsewhere meanwhile: the message still goes to its conversation.
        if (!content) return;
        api("POST", "/conversations/" + conversation.id + "/messages/", { content })
          .then(() => {
            sidebar.touch(conversation.id);
            return api("PATCH", "/conversations/" + conversation.id + "/", { title: titleFrom(content) });
          })
          .then(sidebar.upsert)
          .catch((error) => showError("Your message to the new conversation was not sent: " + error.message));
      })
      .catch((error) => {
        if (created !== generation) return;
        draft = true;
        dispatch({ type: "opening", on: false });
        failSend("Could not create a conversation: " + error.message);
      });
  }

  // ------------------------------------------------------------------ sending

  /**
   * A new message: it waits in the thread (greyed) until the socket is open, so that
   * typing and pressing Enter right after opening a conversation just works.
   * @param {string} content
   * @param {string[]} [images] data: URLs of the images it carries
   */
  function post(content, images) {
    dispatch({ type: "send", content, images }, true);
    if (draft) createFromDraft();
    else flushPending();
  }

  function flushPending() {
    const pending = thread.pending;
    if (!pending || pending.sent || !socket || !socket.isOpen()) return;
    dispatch({ type: "sent" });
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
    const pending = thread.pending;
    const conflict = refusal && refusal.code === "conflict" && refusal.details && refusal.details.run_id;
    dispatch({ type: "send.failed", runId: conflict || null });
    if (pending) composer.restore(pending.content);
    if (conflict) showBusy(message, conflict);
    else if (refusal && refusal.code === "budget_exceeded") composer.showBudget(refusal);
    else showError(message);
    composer.update();
  }

  /**
   * A refusal because another run (another tab's, another client's) is in progress:
   * the page follows that run, and the error goes when it ends.
   * @param {string} message
   * @param {string | null | undefined} runId
   */
  function showBusy(message, runId) {
    if (runId) dispatch({ type: "run.adopt", runId });
    if (thread.activeRunId) showError(message, "busy");
  }

  /**
   * A REST request's error: a 409 names the run in progress.
   * @param {ApiError} error
   * @param {string} [prefix]
   */
  function showRequestError(error, prefix = "") {
    const details = error.data && error.data.details;
    if (error.status === 409 && details && details.run_id) showBusy(prefix + error.message, details.run_id);
    else if (error.data && error.data.code === "budget_exceeded") composer.showBudget(error.data);
    else showError(prefix + error.message);
  }

  /**
   * An edit goes through the REST API (`replaces`); its events arrive on the socket.
   * @param {string} content
   * @param {string} replaces
   */
  function resend(content, replaces) {
    if (thread.requesting || !current) return;
    const id = current.id;
    const sent = generation;
    dispatch({ type: "requesting", on: true });
    api("POST", "/conversations/" + id + "/messages/", { content, replaces })
      .then((data) => {
        sidebar.touch(id);
        if (sent !== generation) return;
        if (thread.editing === replaces) composer.cancelEdit();
        dispatch({ type: "run.adopt", runId: data.run && data.run.id });
      })
      .catch((error) => {
        if (sent === generation) showRequestError(error);
      })
      .then(() => dispatch({ type: "requesting", on: false }));
  }

  /** Answers the last question again (Regenerate, or a failed turn's Retry). */
  function regenerate() {
    if (!current || thread.activeRunId || thread.pending || thread.requesting) return;
    showError("");
    const id = current.id;
    const sent = generation;
    dispatch({ type: "requesting", on: true });
    api("POST", "/conversations/" + id + "/regenerate/")
      .then((data) => {
        sidebar.touch(id);
        if (sent === generation) dispatch({ type: "run.adopt", runId: data.run && data.run.id });
      })
      .catch((error) => {
        if (sent === generation) showRequestError(error, "Could not regenerate: ");
      })
      .then(() => dispatch({ type: "requesting", on: false }));
  }

  /**
   * The first message names an untitled conversation (a PATCH, like any client could).
   * @param {string} content
   */
  function maybeTitle(content) {
    const conversation = current;
    if (!conversation || conversation.title) return;
    const name = titleFrom(content);
    conversation.title = name;
    title.textContent = name;
    sidebar.render();
    api("PATCH", "/conversations/" + conversation.id + "/", { title: name })
      .then(sidebar.upsert)
      .catch(() => {
        /* a title is a nicety; the message went through */
      });
  }

  // ------------------------------------------------------------------- socket

  /** @param {number} opened the generation that opened it */
  function connect(opened) {
    if (opened !== generation || !current) return;
    const conversation = current;
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    socket = openSocket({
      url: () => scheme + window.location.host + WS_PATH + conversation.id + "/?after=" + thread.lastSeq,
      status: setConnection,
      open: flushPending,
      event: (event) => {
        const fresh = typeof event.seq === "number" && event.seq > thread.lastSeq;
        // A user's message (this tab's, or another's) moves its conversation up the list;
        // one that was not on the page yet, and a complete message, bring the log to its end.
        const user = event.type === "message.created" && event.data && event.data.role === "user" ? event.data : null;
        if (user && fresh) sidebar.touch(conversation.id);
        const shown = Boolean(user && user.message_id && !thread.keyOf[user.message_id]);
        dispatch({ type: "event", event }, fresh && (event.type === "message.completed" || shown));
        if (fresh) approvals.event(event);
      },
      ack: (ack) => {
        const pending = thread.pending;
        dispatch({ type: "ack", ack });
        if (ack.action === "message" && pending) maybeTitle(pending.content);
      },
      error: (refusal) => {
        if (thread.pending) failSend(refusal.message || "The message was refused.", refusal);
        else showError(refusal.message || "The server refused the request.");
      },
      // A message that never left waits for the next socket; one that left may or may
      // not have arrived, and the user decides whether to send it again.
      lost: () => {
        if (thread.pending && thread.pending.sent) {
          failSend("The connection closed before the message was accepted; try again.");
        }
      },
      unauthenticated: () => window.location.assign("/login/?next=/"),
      unavailable: () => dispatch({ type: "notice", level: "error", text: "This conversation is not available." }),
    });
  }

  window.addEventListener("popstate", () => {
    const id = window.location.hash.slice(1);
    if (UUID_RE.test(id)) openConversation(id);
    else startDraft(false);
  });

  // -------------------------------------------------------------------- start

  const startGeneration = generation;
  sidebar
    .load()
    .then((items) => {
      // The user started or opened a conversation while the list loaded: theirs stands.
      if (generation !== startGeneration) return;
      const id = window.location.hash.slice(1);
      if (UUID_RE.test(id)) {
        openConversation(id);
      } else if (items.length) {
        window.history.replaceState(null, "", "#" + items[0].id);
        openConversation(items[0].id);
      } else {
        startDraft(true); // type at once: the first message creates the conversation
      }
    })
    .catch((error) => showError("Could not load your conversations: " + error.message));
}
