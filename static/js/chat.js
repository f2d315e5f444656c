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
 *   socket.js, live.js   the WebSocket and its reconnection; what its events do
 *   composer.js          the message box
 *   sending.js           messages, edits and Regenerate sent, and their refusals
 *   sidebar.js           the conversation list and the mode of new ones; listitem.js an
 *                        item, clients.js API clients' shown or not, drawer.js narrow screens
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
import { openLive } from "./live.js";
import { createPicker } from "./picker.js";
import { createRenderer } from "./render.js";
import { createReplayPanel } from "./replay.js";
import { createSending } from "./sending.js";
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
  /** @type {ReturnType<typeof openLive> | null} */
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
    post: (content, images) => sending.post(content, images),
    resend: (content, replaces) => sending.resend(content, replaces),
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
    regenerate: () => sending.regenerate(),
    startEdit: (view) => composer.startEdit(view),
    sendSuggestion: (text) => composer.sendText(text),
    modeName: () => sidebar.modeName(sidebar.mode()),
    dismiss: (key) => {
      dispatch({ type: "notice.dismissed", key });
      composer.focus(); // its button is gone: the focus goes where one types next
    },
    replayPanel: (runId, answeredBy) => createReplayPanel(runId, { api, staff: STAFF, answeredBy }),
    decide: (executionId, action, reason, scope) =>
      api(
        "POST",
        "/tool-executions/" + encodeURIComponent(executionId) + "/" + action + "/",
        scope === "conversation" ? { reason, scope } : { reason }
      ).then(
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

  const sending = createSending({
    api,
    dispatch,
    thread: () => thread,
    current: () => current,
    generation: () => generation,
    socket: () => socket,
    isDraft: () => draft,
    setDraft: (on) => {
      draft = on;
    },
    fields: () => ({ mode: sidebar.mode(), ...picker.fields(), ...settings.draft() }),
    select: (id) => selectConversation(id, true, true),
    titled: (name) => {
      title.textContent = name;
    },
    composer,
    sidebar,
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



  // ------------------------------------------------------------------- socket

  /** @param {number} opened the generation that opened it */
  function connect(opened) {
    if (opened !== generation || !current) return;
    socket = openLive(current, {
      wsPath: WS_PATH,
      thread: () => thread,
      dispatch,
      status: setConnection,
      error: showError,
      sending,
      sidebar,
      approvals,
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
