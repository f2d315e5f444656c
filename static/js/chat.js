/* toolchat chat page: vanilla JS, no dependencies.
 *
 * Reads go to the REST API (session auth); messages and cancels go through the
 * conversation's WebSocket, which also carries the live events. Everything the
 * model or a tool wrote is inserted as text (textContent), never as HTML, with
 * one exception: an assistant message's `html`, which the server rendered from
 * Markdown and sanitized (chat/markdown.py). While it streams it is text too.
 */
(function () {
  "use strict";

  var root = document.getElementById("chat");
  if (!root) return;

  var API = root.dataset.api || "/api/v1";
  var WS_PATH = root.dataset.wsPath || "/ws/conversations/";
  // The server's MAX_MESSAGE_CHARS, counted as it counts: in code points.
  var MAX_CHARS = parseInt(root.dataset.maxChars, 10) || 32000;
  var RESULT_PREVIEW_CHARS = 140;
  var RESULT_FULL_CHARS = 20000;
  var UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
  var TERMINAL = { "run.completed": 1, "run.failed": 1, "run.cancelled": 1 };
  var STAFF = root.dataset.staff === "1";
  var EXAMPLES = [
    "What is 2**10 and what time is it in London?",
    "Note that the boiler was serviced today",
    "Generate a dataset of 2000 rows",
  ];

  var el = {
    sidebar: document.getElementById("sidebar"),
    toggle: document.getElementById("sidebar-toggle"),
    list: document.getElementById("conversation-list"),
    listEmpty: document.getElementById("conversations-empty"),
    newForm: document.getElementById("new-conversation"),
    newMode: document.getElementById("new-mode"),
    title: document.getElementById("thread-title"),
    connection: document.getElementById("connection"),
    log: document.getElementById("log"),
    emptyState: document.getElementById("empty-state"),
    composer: document.getElementById("composer"),
    input: document.getElementById("composer-input"),
    send: document.getElementById("send"),
    cancel: document.getElementById("cancel"),
    error: document.getElementById("composer-error"),
    search: document.getElementById("conversation-search"),
    modeHelp: document.getElementById("mode-help"),
    editing: document.getElementById("composer-editing"),
    editCancel: document.getElementById("edit-cancel"),
  };

  // State of the open conversation; reset by openConversation().
  var state = {
    conversations: [],
    current: null, // the conversation object from the API
    lastSeq: 0,
    socket: null,
    reconnectDelay: 500,
    reconnectTimer: null,
    activeRunId: null,
    pendingSend: null, // {content, node, entry, sent} until the ack; sent when the socket is open
    lastUserContent: null, // what the newest user message said (for Retry)
    opening: false, // a conversation is being created or loaded: a message waits for it
    draft: false, // a new conversation not created yet: the first message creates it
    editing: null, // the id of the user message being edited (sent with `replaces`)
    search: "", // the sidebar's search text
    searchTimer: null,
    listRequest: 0, // numbers the list's loads: a late answer to an older search is dropped
    created: [], // ids of the conversations this page created, in order (a list loaded before keeps them)
    requesting: false, // a regenerate or an edit is on its way to the server
    messages: {}, // message id -> {node, text}
    cards: {}, // tool_call_id -> card object
    generation: 0, // bumps on every open, so late answers of an old open are ignored
    ended: {}, // run id -> true once its end event came
  };

  // ---------------------------------------------------------------- helpers

  function h(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function csrfToken() {
    var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (match) return decodeURIComponent(match[1]);
    var field = document.querySelector("input[name=csrfmiddlewaretoken]");
    return field ? field.value : "";
  }

  function api(method, path, body) {
    var options = { method: method, credentials: "same-origin", headers: { Accept: "application/json" } };
    // Every unsafe method carries the CSRF token, with a body or without (a DELETE).
    if (method !== "GET") options.headers["X-CSRFToken"] = csrfToken();
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    // `path` is relative to the API root, or a full URL (a page's `next`).
    var url = /^https?:/.test(path) ? path : API + path;
    return fetch(url, options).then(function (response) {
      if (response.status === 401) window.location.assign("/login/?next=/");
      return response.text().then(function (text) {
        var data = null;
        try {
          data = text ? JSON.parse(text) : null;
        } catch (e) {
          data = null;
        }
        if (!response.ok) {
          var error = new Error((data && data.message) || "The server answered " + response.status + ".");
          error.status = response.status;
          error.data = data;
          throw error;
        }
        return data;
      });
    });
  }

  // Every page of a paginated list (follows `next` up to a bound).
  function apiAll(path, maxPages) {
    var results = [];
    function step(url, left) {
      return api("GET", url).then(function (page) {
        results = results.concat(page.results || []);
        if (page.next && left > 1) return step(page.next, left - 1);
        return results;
      });
    }
    return step(path, maxPages || 20);
  }

  function parseJSON(text) {
    if (typeof text !== "string") return text;
    try {
      return JSON.parse(text);
    } catch (e) {
      return undefined;
    }
  }

  function clip(text, limit) {
    text = String(text);
    return text.length > limit ? text.slice(0, limit - 1) + "…" : text;
  }

  function formatMs(ms) {
    if (ms === null || ms === undefined) return "";
    return ms >= 1000 ? (ms / 1000).toFixed(ms >= 10000 ? 0 : 1) + " s" : ms + " ms";
  }

  function argumentsSummary(args) {
    if (args && typeof args === "object" && !Array.isArray(args)) {
      return Object.keys(args)
        .map(function (key) {
          var value = args[key];
          return key + "=" + (typeof value === "string" ? JSON.stringify(value) : JSON.stringify(value));
        })
        .join(", ");
    }
    return args === undefined || args === null ? "" : String(args);
  }

  function pretty(value) {
    if (typeof value === "string") {
      var parsed = parseJSON(value);
      if (parsed !== undefined && typeof parsed === "object") return JSON.stringify(parsed, null, 2);
      return value;
    }
    return JSON.stringify(value, null, 2);
  }

  function scrollToEnd() {
    el.log.scrollTop = el.log.scrollHeight;
  }

  function nearEnd() {
    return el.log.scrollHeight - el.log.scrollTop - el.log.clientHeight < 80;
  }

  function showError(message) {
    if (!message) {
      el.error.hidden = true;
      el.error.textContent = "";
      return;
    }
    el.error.textContent = message;
    el.error.hidden = false;
  }

  function setConnection(text, kind) {
    el.connection.textContent = text;
    el.connection.className = "connection" + (kind ? " connection-" + kind : "");
  }

  // ----------------------------------------------------------- conversations

  function conversationLabel(conversation) {
    if (conversation.title) return conversation.title;
    var date = new Date(conversation.created_at);
    return "Untitled · " + date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
  }

  // "just now", "5 min ago", "3 h ago", "yesterday", "Mon", "12 Nov", "12 Nov 2025".
  function relativeTime(iso) {
    var then = new Date(iso);
    if (isNaN(then.getTime())) return "";
    var seconds = (Date.now() - then.getTime()) / 1000;
    if (seconds < 60) return "just now";
    if (seconds < 3600) return Math.floor(seconds / 60) + " min ago";
    var today = new Date();
    today.setHours(0, 0, 0, 0);
    if (then >= today) return Math.floor(seconds / 3600) + " h ago";
    var yesterday = new Date(today.getTime() - 86400000);
    if (then >= yesterday) return "yesterday";
    if (seconds < 6 * 86400) return then.toLocaleDateString(undefined, { weekday: "short" });
    var sameYear = then.getFullYear() === today.getFullYear();
    return then.toLocaleDateString(undefined, sameYear
      ? { day: "numeric", month: "short" }
      : { day: "numeric", month: "short", year: "numeric" });
  }

  function modeName(mode) {
    var option = el.newMode.querySelector('option[value="' + mode + '"]');
    return option ? option.textContent : String(mode || "").replace("_", "-");
  }

  function renderConversationList() {
    el.list.textContent = "";
    el.listEmpty.textContent = state.search ? "No conversation matches “" + state.search + "”." : "No conversations yet.";
    el.listEmpty.hidden = state.conversations.length > 0;
    state.conversations.forEach(function (conversation) {
      var item = h("li", "conversation-item");
      item.dataset.id = conversation.id;
      var link = h("a", "conversation-link");
      link.href = "#" + conversation.id;
      link.dataset.id = conversation.id;
      link.appendChild(h("span", "conversation-title", conversationLabel(conversation)));
      var facts = h("span", "conversation-facts");
      var when = h("time", "conversation-when", relativeTime(conversation.updated_at || conversation.created_at));
      when.dateTime = conversation.updated_at || conversation.created_at;
      when.title = "Last activity: " + new Date(when.dateTime).toLocaleString();
      facts.appendChild(when);
      facts.appendChild(h("span", "conversation-mode", modeName(conversation.mode)));
      link.appendChild(facts);
      if (state.current && state.current.id === conversation.id) link.setAttribute("aria-current", "page");
      item.appendChild(link);
      var actions = h("span", "conversation-actions");
      var rename = h("button", "icon-button", "✎");
      rename.type = "button";
      rename.dataset.action = "rename";
      rename.setAttribute("aria-label", "Rename “" + conversationLabel(conversation) + "”");
      rename.title = "Rename";
      var remove = h("button", "icon-button icon-danger", "×");
      remove.type = "button";
      remove.dataset.action = "delete";
      remove.setAttribute("aria-label", "Delete “" + conversationLabel(conversation) + "”");
      remove.title = "Delete";
      actions.appendChild(rename);
      actions.appendChild(remove);
      item.appendChild(actions);
      el.list.appendChild(item);
    });
  }

  function loadConversations() {
    var query = state.search ? "&q=" + encodeURIComponent(state.search) : "";
    var request = ++state.listRequest;
    var createdBefore = state.created.length;
    return apiAll("/conversations/?page_size=200" + query, 1).then(function (items) {
      if (request !== state.listRequest) return state.conversations;
      // A conversation this page created while the list was on its way is not in it yet.
      if (!state.search) {
        var listed = {};
        items.forEach(function (c) {
          listed[c.id] = true;
        });
        state.conversations.forEach(function (c) {
          if (!listed[c.id] && state.created.indexOf(c.id, createdBefore) !== -1) items.unshift(c);
        });
      }
      state.conversations = items;
      renderConversationList();
      return items;
    });
  }

  function upsertConversation(conversation) {
    var found = false;
    state.conversations = state.conversations.map(function (c) {
      if (c.id === conversation.id) {
        found = true;
        return conversation;
      }
      return c;
    });
    if (!found) state.conversations.unshift(conversation);
    // The most recently active first, as the server lists them.
    state.conversations.sort(function (a, b) {
      return (b.updated_at || "").localeCompare(a.updated_at || "");
    });
    renderConversationList();
  }

  // A conversation moved (a message was posted): it goes to the top, marked "just now".
  function touchConversation(id) {
    var conversation = state.conversations.filter(function (c) {
      return c.id === id;
    })[0];
    if (!conversation) return;
    conversation.updated_at = new Date().toISOString();
    upsertConversation(conversation);
  }

  // "New conversation" opens a draft: nothing is created until its first message,
  // so that unused conversations do not pile up.
  function startDraft(focusComposer) {
    ++state.generation;
    closeSocket();
    resetThread();
    cancelEdit();
    state.current = null;
    state.opening = false;
    state.draft = true;
    if (window.location.hash) window.history.pushState(null, "", window.location.pathname);
    el.title.textContent = "New conversation";
    document.title = "New conversation · toolchat";
    setConnection("", "");
    renderDraftIntro();
    renderConversationList();
    el.input.disabled = false;
    updateComposer();
    if (focusComposer) el.input.focus();
  }

  function renderDraftIntro() {
    var box = h("div", "empty-state");
    box.id = "thread-empty";
    box.appendChild(h("p", "", "Ask anything: the model calls tools and you watch them run."));
    box.appendChild(h("p", "muted", "Mode: " + modeName(el.newMode.value) + ". Try one of these:"));
    var list = h("div", "suggestion-chips");
    EXAMPLES.forEach(function (text) {
      list.appendChild(suggestionChip(text));
    });
    box.appendChild(list);
    el.log.appendChild(box);
  }

  // The draft's first message: create the conversation, then send it once its socket is open.
  function createFromDraft() {
    state.draft = false;
    state.opening = true;
    updateComposer();
    var generation = state.generation;
    var content = state.pendingSend && state.pendingSend.content;
    api("POST", "/conversations/", { mode: el.newMode.value })
      .then(function (conversation) {
        state.created.push(conversation.id);
        upsertConversation(conversation);
        if (generation === state.generation) {
          selectConversation(conversation.id, true, true);
          return;
        }
        // The user went elsewhere meanwhile: the message still goes to its conversation.
        if (content) {
          api("POST", "/conversations/" + conversation.id + "/messages/", { content: content })
            .then(function () {
              touchConversation(conversation.id);
              return api("PATCH", "/conversations/" + conversation.id + "/", { title: titleFrom(content) });
            })
            .then(upsertConversation)
            .catch(function (error) {
              showError("Your message to the new conversation was not sent: " + error.message);
            });
        }
      })
      .catch(function (error) {
        if (generation !== state.generation) return;
        state.opening = false;
        state.draft = true;
        failSend("Could not create a conversation: " + error.message);
      });
  }

  el.newForm.addEventListener("submit", function (event) {
    event.preventDefault();
    closeSidebar(); // on a narrow screen, back to the thread to type
    startDraft(true);
  });

  el.newMode.addEventListener("change", function () {
    var option = el.newMode.options[el.newMode.selectedIndex];
    el.modeHelp.textContent = option ? option.dataset.help || "" : "";
    if (state.draft) {
      var intro = document.getElementById("thread-empty");
      if (intro) intro.remove();
      renderDraftIntro();
    }
  });

  el.search.addEventListener("input", function () {
    clearTimeout(state.searchTimer);
    state.searchTimer = setTimeout(function () {
      state.search = el.search.value.trim();
      loadConversations().catch(function (error) {
        showError("Could not search: " + error.message);
      });
    }, 250);
  });

  function renameConversation(item, conversation) {
    var link = item.querySelector(".conversation-link");
    var input = h("input", "conversation-rename");
    input.type = "text";
    input.maxLength = 200;
    input.value = conversation.title || "";
    input.setAttribute("aria-label", "New title");
    link.hidden = true;
    item.insertBefore(input, link);
    input.focus();
    input.select();
    var done = false;
    function finish(save) {
      if (done) return;
      done = true;
      var title = input.value.replace(/\s+/g, " ").trim();
      input.remove();
      link.hidden = false;
      if (!save || title === (conversation.title || "")) return renderConversationList();
      api("PATCH", "/conversations/" + conversation.id + "/", { title: title })
        .then(function (updated) {
          upsertConversation(updated);
          if (state.current && state.current.id === updated.id) {
            state.current = updated;
            el.title.textContent = conversationLabel(updated);
          }
        })
        .catch(function (error) {
          showError("Could not rename: " + error.message);
          renderConversationList();
        });
    }
    input.addEventListener("keydown", function (event) {
      if (event.key === "Enter") {
        event.preventDefault();
        finish(true);
      } else if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation();
        finish(false);
      }
    });
    input.addEventListener("blur", function () {
      finish(true);
    });
  }

  function deleteConversation(conversation) {
    if (!window.confirm("Delete “" + conversationLabel(conversation) + "” and all its messages?")) return;
    api("DELETE", "/conversations/" + conversation.id + "/")
      .then(function () {
        state.conversations = state.conversations.filter(function (c) {
          return c.id !== conversation.id;
        });
        renderConversationList();
        if (state.current && state.current.id === conversation.id) startDraft(false);
      })
      .catch(function (error) {
        showError("Could not delete: " + error.message);
      });
  }

  el.list.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-action]");
    if (button) {
      var item = button.closest(".conversation-item");
      var conversation = state.conversations.filter(function (c) {
        return c.id === item.dataset.id;
      })[0];
      if (!conversation) return;
      if (button.dataset.action === "rename") renameConversation(item, conversation);
      if (button.dataset.action === "delete") deleteConversation(conversation);
      return;
    }
    var link = event.target.closest("a.conversation-link");
    if (!link) return;
    event.preventDefault();
    selectConversation(link.dataset.id);
  });

  el.toggle.addEventListener("click", function () {
    var open = root.classList.toggle("sidebar-open");
    el.toggle.setAttribute("aria-expanded", open ? "true" : "false");
  });

  // Escape closes the narrow screen's sidebar wherever the focus is (even on nothing).
  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented) return;
    if (event.key === "Escape" && root.classList.contains("sidebar-open")) {
      closeSidebar();
      el.toggle.focus();
    }
  });

  function closeSidebar() {
    root.classList.remove("sidebar-open");
    el.toggle.setAttribute("aria-expanded", "false");
  }

  function selectConversation(id, focusComposer, keepPending) {
    if (window.location.hash !== "#" + id) {
      window.history.pushState(null, "", "#" + id);
    }
    closeSidebar();
    openConversation(id, focusComposer, keepPending);
  }

  window.addEventListener("popstate", function () {
    var id = window.location.hash.slice(1);
    if (UUID_RE.test(id)) openConversation(id);
    else startDraft(false);
  });

  // ------------------------------------------------------------ the thread

  function resetThread() {
    el.log.textContent = "";
    state.messages = {};
    state.cards = {};
    state.lastSeq = 0;
    state.pendingSend = null;
    state.lastUserContent = null;
    setActiveRun(null);
    showError("");
  }

  // `keepPending`: a message typed while this conversation was being created
  // is its first, and is sent once its socket is open.
  function openConversation(id, focusComposer, keepPending) {
    var generation = ++state.generation;
    var pending = keepPending && state.pendingSend && !state.pendingSend.sent ? state.pendingSend : null;
    closeSocket();
    resetThread();
    cancelEdit();
    state.draft = false;
    state.opening = true;
    if (pending) {
      state.pendingSend = pending;
      el.log.appendChild(pending.node);
      state.lastUserContent = pending.content;
    }
    el.title.textContent = "Loading…";
    var conversation;
    var start;
    api("GET", "/conversations/" + id + "/")
      .then(function (data) {
        conversation = data;
        start = data.last_event_seq || 0;
        if (!data.active_run_id) return null;
        // A run is in progress: replay its events from its first one, so its
        // streamed text is complete; its stored messages are then skipped below.
        return api("GET", "/runs/" + data.active_run_id + "/events/?limit=1").then(function (events) {
          if (events.events && events.events.length) start = events.events[0].seq - 1;
        });
      })
      .then(function () {
        return Promise.all([
          apiAll("/conversations/" + id + "/messages/?page_size=1000"),
          apiAll("/tool-executions/?conversation=" + id + "&page_size=200", 10).catch(function () {
            return [];
          }),
        ]);
      })
      .then(function (results) {
        if (generation !== state.generation) return;
        state.current = conversation;
        upsertConversation(conversation);
        el.title.textContent = conversationLabel(conversation);
        document.title = conversationLabel(conversation) + " · toolchat";
        renderHistory(results[0], results[1], conversation.active_run_id);
        if (state.pendingSend) {
          var emptyThread = document.getElementById("thread-empty");
          if (emptyThread) emptyThread.remove();
          el.log.appendChild(state.pendingSend.node);  // after the history
        }
        state.opening = false;
        state.lastSeq = start;
        setActiveRun(conversation.active_run_id);
        el.input.disabled = false;
        updateComposer();
        connect(generation);
        scrollToEnd();
        if (focusComposer) el.input.focus();
      })
      .catch(function (error) {
        if (generation !== state.generation) return;
        el.title.textContent = "Chat";
        state.current = null;
        state.opening = false;
        renderNotice("error", error.status === 404 ? "This conversation does not exist." : error.message);
      });
  }

  function renderHistory(messages, executions, activeRunId) {
    var byCallId = {};
    executions.forEach(function (execution) {
      byCallId[execution.tool_call_id] = execution;
    });
    // Each finished turn ends as it ended live: the totals badge on its answer,
    // or its error (with Retry), or the cancel notice.
    var turn = null;
    function endTurn() {
      if (!turn) return;
      if (turn.outcome.status === "completed" && turn.answer) {
        turn.answer.node.querySelector(".meta").appendChild(turnBadge(turn.outcome));
      } else if (turn.outcome.status === "failed") {
        renderFailure(turn.outcome.error);
      } else if (turn.outcome.status === "cancelled") {
        renderNotice("info", "The run was cancelled.");
      }
      turn = null;
    }
    messages.forEach(function (message) {
      if (activeRunId && message.run_id === activeRunId && message.role !== "user") return;
      if (message.role === "system") return;
      if (message.role === "user") {
        endTurn();
        state.lastUserContent = message.content;
        // Its turn is the newest run it triggered (a regenerated answer's).
        var turnRun = (message.turn && message.turn.run_id) || message.run_id;
        if (message.turn && turnRun !== activeRunId) {
          turn = { runId: turnRun, outcome: message.turn, content: message.content };
        }
      }
      renderMessage(message);
      if (turn && message.role === "assistant" && message.run_id === turn.runId) {
        turn.answer = state.messages[message.id];
      }
    });
    endTurn();
    Object.keys(byCallId).forEach(function (callId) {
      var card = state.cards[callId];
      if (!card) return;
      var execution = byCallId[callId];
      card.setStatus(execution.status);
      if (execution.status === "awaiting_approval") {
        card.setApproval(execution.id, execution.name + "(" + argumentsSummary(execution.arguments) + ")");
      }
      card.setDuration(execution.duration_ms);
      if (execution.truncated) card.setTruncated();
    });
    if (!messages.length) renderEmptyThread();
  }

  function renderEmptyThread() {
    var box = h("div", "empty-state");
    box.appendChild(h("p", "", "No messages yet."));
    box.appendChild(h("p", "muted", "Ask something; tool calls and the answer appear here as they happen."));
    box.id = "thread-empty";
    el.log.appendChild(box);
  }

  function append(node) {
    var stick = nearEnd();
    var empty = document.getElementById("thread-empty");
    if (empty) empty.remove();
    el.log.appendChild(node);
    if (stick) scrollToEnd();
  }

  function turnBadge(outcome) {
    var calls = outcome.model_calls;
    return badge(
      "run",
      "turn " + formatMs(outcome.latency_ms) + " · " + calls + " model call" + (calls === 1 ? "" : "s"),
      "Whole turn: from posting to the answer"
    );
  }

  // A failed turn's error, with a button that answers its question again (a new run on
  // the same message: the question is not posted twice).
  function renderFailure(error) {
    var node = renderNotice("error", "The run failed: " + (error || "unknown error"));
    var retry = h("button", "button-small button-ghost notice-action", "Retry");
    retry.type = "button";
    retry.dataset.only = "last-failure"; // Retry answers the last question: only its turn's
    retry.addEventListener("click", regenerate);
    node.appendChild(retry);
    return node;
  }

  function renderNotice(kind, text) {
    var node = h("div", "notice notice-" + kind);
    if (kind === "error") node.setAttribute("role", "alert");
    node.appendChild(h("strong", "", kind === "error" ? "Error: " : ""));
    node.appendChild(document.createTextNode(text));
    append(node);
    return node;
  }

  // One message element; idempotent by id (history and replay may overlap).
  function messageNode(id, role) {
    var entry = id && state.messages[id];
    if (entry) return entry;
    var node = h("article", "msg msg-" + role);
    if (id) node.dataset.id = id;
    var bubble = h("div", "bubble");
    var text = h("div", "text");
    bubble.appendChild(text);
    node.appendChild(bubble);
    node.appendChild(h("div", "tools"));
    // The call's figures and the message's actions share one line under it.
    var footer = h("div", "msg-footer");
    footer.appendChild(h("div", "meta"));
    node.appendChild(footer);
    entry = { node: node, text: text, bubble: bubble, role: role, footer: footer };
    if (id) state.messages[id] = entry;
    append(node);
    return entry;
  }

  function renderMessage(message) {
    if (message.role === "tool") {
      var card = state.cards[message.tool_call_id] || createCard(message.tool_call_id, message.name, null);
      card.setResult(message.content);
      if (message.resource) card.setResource(message.resource, message.tool_execution_id);
      if (card.status === "pending" || card.status === "running") card.setStatus("succeeded");
      return;
    }
    var entry = messageNode(message.id, message.role);
    entry.message = message;
    setText(entry, message);
    entry.bubble.hidden = !message.content;
    entry.node.classList.remove("streaming");
    entry.node.removeAttribute("aria-busy");
    (message.tool_calls || []).forEach(function (call) {
      var fn = call.function || call.custom || {};
      var args = call.function ? parseJSON(fn.arguments) : fn.input;
      var card = state.cards[call.id] || createCard(call.id, fn.name, entry.node.querySelector(".tools"));
      card.setArguments(args === undefined ? fn.arguments : args);
    });
    if (message.role === "assistant") {
      renderMeta(entry, message);
      renderSuggestions(entry, message.suggestions);
    }
    if (message.content) addActions(entry);
    refreshActions();
  }

  // An answer is Markdown the server rendered and sanitized; anything else is text.
  function setText(entry, message) {
    if (message.role === "assistant" && typeof message.html === "string" && message.html) {
      entry.text.innerHTML = message.html; // sanitized by the server (chat/markdown.py)
      entry.text.classList.add("markdown");
      decorateCode(entry.text);
    } else {
      entry.text.classList.remove("markdown");
      entry.text.textContent = message.content || "";
    }
  }

  // Each code block gets its language and a Copy button.
  function decorateCode(container) {
    container.querySelectorAll("pre").forEach(function (pre) {
      if (pre.parentNode.classList.contains("code-block")) return;
      var code = pre.querySelector("code");
      var language = code && /language-([\w-]+)/.exec(code.className);
      var block = h("div", "code-block");
      var bar = h("div", "code-bar");
      bar.appendChild(h("span", "code-language", language ? language[1] : "code"));
      var copy = h("button", "code-copy", "Copy");
      copy.type = "button";
      copy.setAttribute("aria-label", "Copy the code");
      copy.addEventListener("click", function () {
        copyText((code || pre).textContent, copy);
      });
      bar.appendChild(copy);
      pre.parentNode.insertBefore(block, pre);
      block.appendChild(bar);
      block.appendChild(pre);
    });
  }

  function copyText(text, button) {
    function done(ok) {
      var label = button.textContent;
      button.textContent = ok ? "Copied" : "Copy failed";
      setTimeout(function () {
        button.textContent = label;
      }, 1500);
    }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () {
        done(true);
      }, function () {
        done(false);
      });
      return;
    }
    // Plain http on another host: the old way still works.
    var area = h("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try {
      ok = document.execCommand("copy");
    } catch (e) {
      ok = false;
    }
    area.remove();
    done(ok);
  }

  function actionButton(label, title, onClick) {
    var button = h("button", "msg-action", label);
    button.type = "button";
    button.title = title;
    button.addEventListener("click", function () {
      onClick(button);
    });
    return button;
  }

  // Copy on every message; Regenerate on the last answer, Edit on the last question
  // (refreshActions shows those where they apply).
  function addActions(entry) {
    if (entry.actions) return;
    var bar = h("div", "msg-actions");
    bar.appendChild(actionButton("Copy", "Copy this message", function (button) {
      copyText((entry.message && entry.message.content) || entry.text.textContent, button);
    }));
    if (entry.role === "assistant") {
      var again = actionButton("Regenerate", "Answer the last question again (this answer stays in the audit)", regenerate);
      again.dataset.only = "last-answer";
      bar.appendChild(again);
    } else if (entry.role === "user") {
      var change = actionButton("Edit", "Edit and resend your last message", function () {
        startEdit(entry);
      });
      change.dataset.only = "last-question";
      bar.appendChild(change);
    }
    entry.footer.appendChild(bar);
    entry.actions = bar;
  }

  function lastOf(selector) {
    var nodes = el.log.querySelectorAll(selector);
    return nodes.length ? nodes[nodes.length - 1] : null;
  }

  function refreshActions() {
    var busy = Boolean(state.activeRunId) || Boolean(state.pendingSend) || Boolean(state.opening) ||
      Boolean(state.requesting);
    var lastQuestion = lastOf(".msg-user[data-id]");
    var lastAnswer = lastOf(".msg-assistant .msg-actions");
    lastAnswer = lastAnswer && lastAnswer.closest(".msg");
    // An answer older than the last question is not what Regenerate would replace.
    if (lastAnswer && lastQuestion && lastQuestion.compareDocumentPosition(lastAnswer) & Node.DOCUMENT_POSITION_PRECEDING) {
      lastAnswer = null;
    }
    el.log.querySelectorAll('[data-only="last-answer"]').forEach(function (button) {
      button.hidden = busy || button.closest(".msg") !== lastAnswer;
    });
    el.log.querySelectorAll('[data-only="last-question"]').forEach(function (button) {
      button.hidden = busy || button.closest(".msg") !== lastQuestion || Boolean(state.editing);
    });
    el.log.querySelectorAll(".msg .suggestion-chips").forEach(function (chips) {
      chips.hidden = busy || chips.closest(".msg") !== lastAnswer;
    });
    var notices = el.log.querySelectorAll(".notice");
    var lastNotice = notices.length ? notices[notices.length - 1] : null;
    el.log.querySelectorAll('[data-only="last-failure"]').forEach(function (button) {
      var notice = button.closest(".notice");
      var afterQuestion = !lastQuestion ||
        Boolean(lastQuestion.compareDocumentPosition(notice) & Node.DOCUMENT_POSITION_FOLLOWING);
      button.hidden = busy || notice !== lastNotice || !afterQuestion;
    });
  }

  function suggestionChip(text) {
    var chip = h("button", "suggestion-chip", text);
    chip.type = "button";
    chip.title = "Send: " + text;
    chip.addEventListener("click", function () {
      if (state.activeRunId || state.pendingSend || state.opening) return;
      cancelEdit();
      el.input.value = text;
      checkLength();
      updateComposer();
      send();
    });
    return chip;
  }

  function renderSuggestions(entry, suggestions) {
    var old = entry.node.querySelector(".suggestion-chips");
    if (old) old.remove();
    if (!suggestions || !suggestions.length) return;
    var box = h("div", "suggestion-chips");
    box.setAttribute("role", "group");
    box.setAttribute("aria-label", "Suggested follow-ups");
    suggestions.forEach(function (text) {
      box.appendChild(suggestionChip(text));
    });
    entry.node.appendChild(box);
  }

  function renderMeta(entry, message) {
    var meta = entry.node.querySelector(".meta");
    meta.textContent = "";
    var parts = [];
    if (message.latency_ms !== null && message.latency_ms !== undefined) {
      parts.push("model " + formatMs(message.latency_ms));
    }
    var usage = message.usage;
    if (usage && (usage.prompt_tokens !== null || usage.completion_tokens !== null)) {
      parts.push(tokens(usage.prompt_tokens) + " in / " + tokens(usage.completion_tokens) + " out");
    }
    if (parts.length) {
      meta.appendChild(
        badge("call", parts.join(" · "), "This model call: how long it took, and the tokens it read (in) and wrote (out)")
      );
    }
    if (message.model) meta.appendChild(badge("model", message.model, "The model that wrote this"));
    if (STAFF && message.run_id && message.content) {
      var audit = h("a", "chip chip-link", "audit");
      audit.href = "/audit/runs/" + encodeURIComponent(message.run_id) + "/";
      audit.title = "This run in the audit: every model call and tool execution";
      meta.appendChild(audit);
    }
  }

  function tokens(value) {
    return value === null || value === undefined ? "?" : Number(value).toLocaleString("en");
  }

  function badge(kind, text, title) {
    var node = h("span", "chip chip-" + kind, text);
    node.title = title;
    return node;
  }

  // -------------------------------------------------------------- tool cards

  function createCard(callId, name, container) {
    var wrap = h("div", "tool-card");
    wrap.dataset.toolCallId = callId;
    var details = h("details");
    var summary = h("summary");
    var head = h("span", "tool-head");
    head.appendChild(h("span", "tool-icon", "ƒ"));
    var nameNode = h("code", "tool-name", name || "tool");
    head.appendChild(nameNode);
    var argsNode = h("span", "tool-args");
    head.appendChild(argsNode);
    var statusNode = h("span", "tool-status status-pending", "pending");
    head.appendChild(statusNode);
    var durationNode = h("span", "tool-duration");
    head.appendChild(durationNode);
    summary.appendChild(head);
    var previewNode = h("span", "tool-preview");
    previewNode.hidden = true;
    summary.appendChild(previewNode);
    details.appendChild(summary);

    var body = h("div", "tool-body");
    body.appendChild(h("div", "tool-label", "Arguments"));
    var argsFull = h("pre", "tool-pre");
    body.appendChild(argsFull);
    var resultLabel = h("div", "tool-label", "Result");
    resultLabel.hidden = true;
    body.appendChild(resultLabel);
    var resultFull = h("pre", "tool-pre");
    resultFull.hidden = true;
    body.appendChild(resultFull);
    details.appendChild(body);
    wrap.appendChild(details);

    var progress = h("div", "tool-progress");
    progress.hidden = true;
    var bar = h("progress");
    bar.max = 100;
    bar.value = 0;
    var progressText = h("span", "tool-progress-text");
    var progressId = "progress-" + callId.replace(/[^A-Za-z0-9_-]/g, "");
    progressText.id = progressId;
    bar.setAttribute("aria-labelledby", progressId);
    progress.appendChild(bar);
    progress.appendChild(progressText);
    wrap.appendChild(progress);

    var approval = null;
    var resourceNode = null;
    var card = {
      node: wrap,
      status: "pending",
      // A call that waits for the user: what it will do, an optional reason, and
      // Approve / Reject. The decision goes to the REST API; every tab hears of it
      // through tool_call.approval_decided.
      setApproval: function (executionId, description) {
        if (approval || !executionId) return;
        approval = h("div", "tool-approval");
        approval.setAttribute("role", "group");
        approval.setAttribute("aria-label", "Approve this tool call?");
        approval.appendChild(h("p", "tool-approval-text", description || nameNode.textContent));
        var reason = h("input", "tool-approval-reason");
        reason.type = "text";
        reason.maxLength = 2000;
        reason.placeholder = "Reason (optional)";
        reason.setAttribute("aria-label", "Reason (optional)");
        var approve = h("button", "button-primary button-small", "Approve");
        approve.type = "button";
        var reject = h("button", "button-danger button-small", "Reject");
        reject.type = "button";
        var row = h("div", "tool-approval-actions");
        row.appendChild(reason);
        row.appendChild(approve);
        row.appendChild(reject);
        approval.appendChild(row);
        function decide(action) {
          approve.disabled = true;
          reject.disabled = true;
          api("POST", "/tool-executions/" + encodeURIComponent(executionId) + "/" + action + "/", {
            reason: reason.value,
          })
            .then(function () {
              card.clearApproval();
            })
            .catch(function (error) {
              if (error.status === 409) {
                card.clearApproval(); // decided elsewhere (another tab, expiry, a cancel)
                return;
              }
              approve.disabled = false;
              reject.disabled = false;
              showError(error.message);
            });
        }
        approve.addEventListener("click", function () {
          decide("approve");
        });
        reject.addEventListener("click", function () {
          decide("reject");
        });
        wrap.appendChild(approval);
      },
      clearApproval: function () {
        if (approval) approval.remove();
        approval = null;
      },
      // The record the call made or read: "Note recorded: Boiler serviced · 14:02".
      setResource: function (resource, executionId) {
        if (!resource || resourceNode) return;
        var made = Boolean(executionId) && resource.created_by_execution_id === executionId;
        var kind = String(resource.kind || "record");
        kind = kind.charAt(0).toUpperCase() + kind.slice(1);
        resourceNode = h("div", "resource-card");
        resourceNode.appendChild(h("span", "resource-kind", kind + (made ? " recorded:" : ":")));
        var link = h("a", "resource-title", resource.title || "(untitled)");
        link.href = STAFF
          ? "/admin/tools/resource/" + encodeURIComponent(resource.id) + "/change/"
          : API + "/resources/" + encodeURIComponent(resource.id) + "/";
        link.target = "_blank";
        link.rel = "noopener";
        link.title = STAFF ? "Open it in the admin" : "Open it in the API";
        resourceNode.appendChild(link);
        var when = new Date(resource.created_at);
        if (!isNaN(when.getTime())) {
          var time = h("time", "resource-when", when.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" }));
          time.dateTime = resource.created_at;
          resourceNode.appendChild(time);
        }
        wrap.insertBefore(resourceNode, progress);
      },
      setName: function (value) {
        if (value) nameNode.textContent = value;
      },
      setArguments: function (args) {
        argsNode.textContent = clip(argumentsSummary(args), 80);
        argsFull.textContent = clip(pretty(args === undefined ? "" : args), RESULT_FULL_CHARS);
      },
      setStatus: function (status) {
        card.status = status;
        statusNode.textContent = status.replace("_", " ");
        statusNode.className = "tool-status status-" + status;
        if (status !== "running" && status !== "pending") progress.hidden = true;
      },
      setDuration: function (ms) {
        durationNode.textContent = formatMs(ms);
      },
      setTruncated: function () {
        if (!wrap.querySelector(".tool-truncated")) {
          body.appendChild(h("p", "tool-truncated muted", "The result was truncated before it was sent to the model."));
        }
      },
      setProgress: function (percent, message) {
        // A progress event that crossed the cancel on the way: the call is over.
        if (card.status !== "running" && card.status !== "pending") return;
        progress.hidden = false;
        bar.value = Math.max(0, Math.min(100, Number(percent) || 0));
        progressText.textContent = (message ? message + " · " : "") + Math.round(bar.value) + "%";
      },
      setResult: function (content) {
        if (content === null || content === undefined) return;
        var parsed = parseJSON(content);
        var preview = parsed && typeof parsed === "object" && typeof parsed.message === "string"
          ? parsed.message
          : parsed && typeof parsed === "object" && parsed.error
            ? String(parsed.error)
            : String(content);
        previewNode.textContent = clip(preview.replace(/\s+/g, " "), RESULT_PREVIEW_CHARS);
        previewNode.hidden = false;
        resultFull.textContent = clip(pretty(content), RESULT_FULL_CHARS);
        resultFull.hidden = false;
        resultLabel.hidden = false;
      },
    };
    state.cards[callId] = card;
    if (container) {
      container.appendChild(wrap);
    } else {
      append(wrap);
    }
    return card;
  }

  // ------------------------------------------------------------- live events

  function handleEvent(event) {
    if (typeof event.seq !== "number") return;
    // The server promises exactly-once delivery; dedupe by seq all the same.
    if (event.seq <= state.lastSeq) return;
    state.lastSeq = event.seq;
    var data = event.data || {};
    var card;
    switch (event.type) {
      case "run.started":
        setActiveRun(event.run_id);
        break;
      case "message.created": {
        if (data.role === "user") {
          receiveUserMessage(data, event.run_id);
          break;
        }
        var entry = messageNode(data.message_id, data.role || "assistant");
        if (!entry.text.textContent) {
          entry.node.classList.add("streaming");
          entry.node.setAttribute("aria-busy", "true");
          entry.bubble.hidden = data.purpose === "tools";
        }
        break;
      }
      case "messages.superseded":
        removeSuperseded(data);
        break;
      case "message.suggestions": {
        var answered = state.messages[data.message_id];
        if (answered) {
          var stickHere = nearEnd(); // measured before the chips make the log taller
          if (answered.message) answered.message.suggestions = data.suggestions;
          renderSuggestions(answered, data.suggestions);
          refreshActions();
          if (stickHere) scrollToEnd();
        }
        break;
      }
      case "message.delta": {
        var target = messageNode(data.message_id, "assistant");
        var stick = nearEnd();
        if (data.reset) target.text.textContent = "";
        if (data.text) {
          target.text.appendChild(document.createTextNode(data.text));
          target.bubble.hidden = false;
        }
        if (stick) scrollToEnd();
        break;
      }
      case "message.completed":
        if (data.message) renderMessage(data.message);
        scrollToEnd();
        break;
      case "tool_call.started":
        card = state.cards[data.tool_call_id] || createCard(data.tool_call_id, data.name, null);
        card.setName(data.name);
        if (data.arguments !== undefined) card.setArguments(data.arguments);
        card.setStatus("running");
        break;
      case "tool_call.approval_requested":
        card = state.cards[data.tool_call_id] || createCard(data.tool_call_id, data.name, null);
        if (data.arguments !== undefined) card.setArguments(data.arguments);
        card.setStatus("awaiting_approval");
        card.setApproval(data.execution_id, data.description);
        break;
      case "tool_call.approval_decided":
        card = state.cards[data.tool_call_id];
        if (card) {
          card.clearApproval();
          if (data.approved) card.setStatus("pending");
        }
        break;
      case "tool.progress":
        card = state.cards[data.tool_call_id] || createCard(data.tool_call_id, data.name, null);
        card.setProgress(data.percent, data.message);
        break;
      case "tool_call.completed":
        card = state.cards[data.tool_call_id] || createCard(data.tool_call_id, data.name, null);
        card.setStatus(data.status || "succeeded");
        card.setDuration(data.duration_ms);
        if (data.truncated) card.setTruncated();
        if (data.message) {
          card.setResult(data.message.content);
          if (data.message.resource) card.setResource(data.message.resource, data.execution_id);
        }
        break;
      case "run.completed": {
        // The badge adds a line under the answer, and the end of the run shows its
        // actions and chips: measured first, so that the log keeps its end in view.
        var stickToEnd = nearEnd();
        if (data.message_id && state.messages[data.message_id]) {
          state.messages[data.message_id].node.querySelector(".meta").appendChild(turnBadge(data));
        }
        endRun(event.run_id);
        if (stickToEnd) scrollToEnd();
        break;
      }
      case "run.failed":
        renderFailure(data.error);
        endRun(event.run_id);
        break;
      case "run.cancelled":
        renderNotice("info", "The run was cancelled.");
        (data.cancelled_tool_calls || []).forEach(function (callId) {
          var cancelled = state.cards[typeof callId === "string" ? callId : callId && callId.tool_call_id];
          if (cancelled) cancelled.setStatus("cancelled");
        });
        endRun(event.run_id);
        break;
      default:
        break;
    }
    if (TERMINAL[event.type]) {
      Object.keys(state.messages).forEach(function (id) {
        state.messages[id].node.classList.remove("streaming");
        state.messages[id].node.removeAttribute("aria-busy");
      });
    }
  }

  function setActiveRun(runId) {
    state.activeRunId = runId || null;
    updateComposer();
  }

  function endRun(runId) {
    if (runId) state.ended[runId] = true;
    if (!state.activeRunId || state.activeRunId === runId) setActiveRun(null);
  }

  // A run the REST API started: its events may have come (even its end) before the answer.
  function adoptRun(runId) {
    if (runId && !state.activeRunId && !state.ended[runId]) setActiveRun(runId);
  }

  function updateComposer() {
    var busy = Boolean(state.activeRunId) || Boolean(state.pendingSend) || Boolean(state.requesting);
    var ready = Boolean(state.current) || Boolean(state.opening) || Boolean(state.draft);
    el.send.disabled = !ready || busy || !el.input.value.trim() || overLimit();
    el.send.textContent = state.editing ? "Resend" : "Send";
    el.cancel.hidden = !state.activeRunId;
    el.composer.classList.toggle("busy", busy);
    refreshActions();
  }

  // A regenerated answer or an edited question: what the page showed of the replaced
  // turn goes (answers, tool cards, an error and its Retry); the record keeps it.
  function removeSuperseded(data) {
    var start = null;
    var anchor = data.after_message_id && state.messages[data.after_message_id];
    if (anchor) {
      start = anchor.node.nextElementSibling;
    } else {
      var ids = {};
      (data.message_ids || []).forEach(function (id) {
        ids[id] = true;
      });
      start = Array.prototype.filter.call(el.log.children, function (node) {
        return node.dataset && ids[node.dataset.id];
      })[0] || null;
    }
    while (start) {
      var next = start.nextElementSibling;
      if (start !== (state.pendingSend && state.pendingSend.node)) {
        if (start.dataset && start.dataset.id) delete state.messages[start.dataset.id];
        start.querySelectorAll("[data-tool-call-id]").forEach(function (card) {
          delete state.cards[card.dataset.toolCallId];
        });
        if (start.dataset && start.dataset.toolCallId) delete state.cards[start.dataset.toolCallId];
        start.remove();
      }
      start = next;
    }
    if (data.message_ids && state.editing && data.message_ids.indexOf(state.editing) >= 0) cancelEdit();
    refreshActions();
  }

  function regenerate() {
    if (!state.current || state.activeRunId || state.pendingSend || state.requesting) return;
    showError("");
    var id = state.current.id;
    var generation = state.generation;
    setRequesting(true);
    api("POST", "/conversations/" + id + "/regenerate/")
      .then(function (data) {
        touchConversation(id);
        if (generation === state.generation) adoptRun(data.run && data.run.id);
      })
      .catch(function (error) {
        if (generation === state.generation) showError("Could not regenerate: " + error.message);
      })
      .then(function () {
        setRequesting(false);
      });
  }

  function setRequesting(on) {
    state.requesting = on;
    updateComposer();
  }

  function startEdit(entry) {
    if (state.activeRunId || state.pendingSend || !entry.node.dataset.id) return;
    cancelEdit();
    state.editing = entry.node.dataset.id;
    entry.node.classList.add("editing");
    el.input.value = (entry.message && entry.message.content) || entry.text.textContent;
    el.editing.hidden = false;
    fitInput();
    checkLength();
    updateComposer();
    el.input.focus();
  }

  function cancelEdit() {
    el.editing.hidden = true;
    if (!state.editing) return;
    var entry = state.messages[state.editing];
    if (entry) entry.node.classList.remove("editing");
    state.editing = null;
    el.input.value = "";
    fitInput();
    checkLength();
    updateComposer();
  }

  el.editCancel.addEventListener("click", function () {
    cancelEdit();
    el.input.focus();
  });

  // An edit goes through the REST API (`replaces`); its events arrive on the socket.
  function sendEdit(content) {
    if (state.requesting) return;
    var replaces = state.editing;
    var id = state.current.id;
    var generation = state.generation;
    setRequesting(true);
    api("POST", "/conversations/" + id + "/messages/", { content: content, replaces: replaces })
      .then(function (data) {
        touchConversation(id);
        if (generation !== state.generation) return;
        if (state.editing === replaces) cancelEdit();
        adoptRun(data.run && data.run.id);
      })
      .catch(function (error) {
        if (generation === state.generation) showError(error.message);
      })
      .then(function () {
        setRequesting(false);
      });
  }

  // ------------------------------------------------------------------ socket

  function closeSocket() {
    clearTimeout(state.reconnectTimer);
    if (state.socket) {
      state.socket.onclose = null;
      state.socket.close(1000);
      state.socket = null;
    }
  }

  function connect(generation) {
    if (generation !== state.generation || !state.current) return;
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    var url = scheme + window.location.host + WS_PATH + state.current.id + "/?after=" + state.lastSeq;
    var socket = new WebSocket(url);
    state.socket = socket;
    setConnection("Connecting…", "wait");
    socket.onopen = function () {
      state.reconnectDelay = 500;
      setConnection("Live", "ok");
      flushPending();
    };
    socket.onmessage = function (message) {
      var payload = parseJSON(message.data);
      if (!payload || typeof payload !== "object") return;
      if (payload.type === "ping") return;
      if (payload.type === "ack") return handleAck(payload);
      if (payload.type === "error" && payload.seq === undefined) return handleSocketError(payload);
      handleEvent(payload);
    };
    socket.onclose = function (close) {
      if (state.socket !== socket) return;
      state.socket = null;
      // A message that never left waits for the next socket; one that left may or
      // may not have arrived, and the user decides whether to send it again.
      if (state.pendingSend && state.pendingSend.sent) {
        failSend("The connection closed before the message was accepted; try again.");
      }
      if (close.code === 4401) {
        window.location.assign("/login/?next=/");
        return;
      }
      if (close.code === 4404) {
        setConnection("", "");
        renderNotice("error", "This conversation is not available.");
        return;
      }
      setConnection("Reconnecting…", "wait");
      var delay = state.reconnectDelay;
      state.reconnectDelay = Math.min(state.reconnectDelay * 2, 10000);
      state.reconnectTimer = setTimeout(function () {
        connect(generation);
      }, delay);
    };
  }

  // A user message's event: this tab's own (it may come before the ack: the
  // pending bubble takes its id), or one sent from another tab or client.
  function receiveUserMessage(data, runId) {
    if (state.current) touchConversation(state.current.id);
    var id = data.message_id;
    if (!id || state.messages[id]) return;
    var pending = state.pendingSend;
    if (pending && pending.sent && !pending.id && data.message && data.message.content === pending.content) {
      adoptPending(pending, id);
    } else if (data.message) {
      renderMessage(data.message);
      state.lastUserContent = data.message.content;
      scrollToEnd();
    }
    if (runId && !state.activeRunId) setActiveRun(runId);
  }

  function adoptPending(pending, id) {
    pending.id = id;
    pending.node.classList.remove("pending");
    pending.node.dataset.id = id;
    pending.entry.message = { id: id, role: "user", content: pending.content };
    state.messages[id] = pending.entry;
    addActions(pending.entry);
    refreshActions();
  }

  function handleAck(payload) {
    if (payload.action === "message" && state.pendingSend) {
      var pending = state.pendingSend;
      state.pendingSend = null;
      if (payload.message_id && !pending.id) adoptPending(pending, payload.message_id);
      if (payload.run_id && !state.activeRunId) setActiveRun(payload.run_id);
      maybeTitle(pending.content);
      updateComposer();
    }
  }

  function handleSocketError(payload) {
    if (state.pendingSend) {
      failSend(payload.message || "The message was refused.", payload);
      return;
    }
    showError(payload.message || "The server refused the request.");
  }

  function failSend(message, payload) {
    var pending = state.pendingSend;
    state.pendingSend = null;
    if (pending) {
      pending.node.remove();
      if (!el.input.value) {
        el.input.value = pending.content;
        fitInput();
      }
    }
    showError(message);
    if (payload && payload.code === "conflict" && payload.details && payload.details.run_id) {
      setActiveRun(payload.details.run_id);
    }
    updateComposer();
  }

  // The first message names an untitled conversation (a PATCH, like any client could).
  function titleFrom(content) {
    return clip(content.replace(/\s+/g, " ").trim(), 60);
  }

  function maybeTitle(content) {
    var conversation = state.current;
    if (!conversation || conversation.title) return;
    var title = titleFrom(content);
    conversation.title = title;
    el.title.textContent = title;
    renderConversationList();
    api("PATCH", "/conversations/" + conversation.id + "/", { title: title })
      .then(upsertConversation)
      .catch(function () {
        /* a title is a nicety; the message went through */
      });
  }

  // ---------------------------------------------------------------- composer

  // The message waits in the thread (greyed) until the socket is open: typing
  // and pressing Enter right after opening a conversation just works.
  function send() {
    var content = el.input.value;
    if (!content.trim() || el.send.disabled) return;
    showError("");
    if (state.editing) {
      sendEdit(content);
      return;
    }
    var entry = messageNode(null, "user");
    entry.text.textContent = content;
    entry.node.classList.add("pending");
    state.pendingSend = { content: content, node: entry.node, entry: entry, sent: false };
    state.lastUserContent = content;
    el.input.value = "";
    fitInput();
    updateComposer();
    scrollToEnd();
    if (state.draft) {
      createFromDraft();
      return;
    }
    flushPending();
  }

  function flushPending() {
    var pending = state.pendingSend;
    if (!pending || pending.sent || !state.socket || state.socket.readyState !== WebSocket.OPEN) {
      return;
    }
    pending.sent = true;
    state.socket.send(JSON.stringify({ type: "message", content: pending.content }));
  }

  // The box grows with what is typed (up to 240 px) and shrinks back when emptied.
  function fitInput() {
    el.input.style.height = "auto";
    if (el.input.value) el.input.style.height = Math.min(el.input.scrollHeight, 240) + "px";
  }

  // Over the limit, nothing is cut: the user is told by how much, and Send waits.
  function charCount(text) {
    return text.length > MAX_CHARS / 2 ? Array.from(text).length : text.length;
  }

  function overLimit() {
    return charCount(el.input.value) > MAX_CHARS;
  }

  function checkLength() {
    var length = charCount(el.input.value);
    if (length > MAX_CHARS) {
      showError(
        "This message is " + length.toLocaleString("en") + " characters; the limit is " +
          MAX_CHARS.toLocaleString("en") + ". Shorten it by " +
          (length - MAX_CHARS).toLocaleString("en") + " or split it into several messages."
      );
      el.error.dataset.kind = "length";
    } else if (el.error.dataset.kind === "length") {
      delete el.error.dataset.kind;
      showError("");
    }
  }

  el.composer.addEventListener("submit", function (event) {
    event.preventDefault();
    send();
  });

  el.input.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && state.editing) {
      event.preventDefault();
      cancelEdit();
      return;
    }
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });

  el.input.addEventListener("input", function () {
    checkLength();
    updateComposer();
    fitInput();
  });

  el.cancel.addEventListener("click", function () {
    if (!state.activeRunId || !state.socket || state.socket.readyState !== WebSocket.OPEN) return;
    state.socket.send(JSON.stringify({ type: "cancel", run_id: state.activeRunId }));
  });

  // -------------------------------------------------------------------- start

  var startGeneration = state.generation;
  loadConversations()
    .then(function (items) {
      // The user started or opened a conversation while the list loaded: theirs stands.
      if (state.generation !== startGeneration) return;
      var id = window.location.hash.slice(1);
      if (UUID_RE.test(id)) {
        openConversation(id);
      } else if (items.length) {
        window.history.replaceState(null, "", "#" + items[0].id);
        openConversation(items[0].id);
      } else {
        startDraft(true); // type at once: the first message creates the conversation
      }
    })
    .catch(function (error) {
      showError("Could not load your conversations: " + error.message);
    });
})();
