/* toolchat chat page: vanilla JS, no dependencies.
 *
 * Reads go to the REST API (session auth); messages and cancels go through the
 * conversation's WebSocket, which also carries the live events. Everything the
 * model or a tool wrote is inserted as text (textContent), never as HTML.
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
    messages: {}, // message id -> {node, text}
    cards: {}, // tool_call_id -> card object
    generation: 0, // bumps on every open, so late answers of an old open are ignored
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
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.headers["X-CSRFToken"] = csrfToken();
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

  function renderConversationList() {
    el.list.textContent = "";
    el.listEmpty.hidden = state.conversations.length > 0;
    state.conversations.forEach(function (conversation) {
      var item = h("li");
      var link = h("a", "conversation-link");
      link.href = "#" + conversation.id;
      link.dataset.id = conversation.id;
      link.appendChild(h("span", "conversation-title", conversationLabel(conversation)));
      link.appendChild(h("span", "conversation-mode", conversation.mode.replace("_", "-")));
      if (state.current && state.current.id === conversation.id) link.setAttribute("aria-current", "page");
      item.appendChild(link);
      el.list.appendChild(item);
    });
  }

  function loadConversations() {
    return apiAll("/conversations/?page_size=200", 1).then(function (items) {
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
    renderConversationList();
  }

  el.newForm.addEventListener("submit", function (event) {
    event.preventDefault();
    var button = el.newForm.querySelector("button");
    button.disabled = true;
    // Leave the open conversation at once: what is typed from now on is for the
    // new one, and waits for it (it was sent to the old one's socket).
    ++state.generation;
    closeSocket();
    resetThread();
    state.current = null;
    state.opening = true;
    el.title.textContent = "New conversation";
    updateComposer();
    api("POST", "/conversations/", { mode: el.newMode.value })
      .then(function (conversation) {
        upsertConversation(conversation);
        selectConversation(conversation.id, true, true);
      })
      .catch(function (error) {
        state.opening = false;
        failSend("Could not create a conversation: " + error.message);
      })
      .then(function () {
        button.disabled = false;
      });
  });

  el.list.addEventListener("click", function (event) {
    var link = event.target.closest("a.conversation-link");
    if (!link) return;
    event.preventDefault();
    selectConversation(link.dataset.id);
  });

  el.toggle.addEventListener("click", function () {
    var open = root.classList.toggle("sidebar-open");
    el.toggle.setAttribute("aria-expanded", open ? "true" : "false");
  });

  root.addEventListener("keydown", function (event) {
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
        renderFailure(turn.outcome.error, turn.content);
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
        if (message.turn && message.run_id !== activeRunId) {
          turn = { runId: message.run_id, outcome: message.turn, content: message.content };
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

  // A failed turn's error, with a button that sends its message again (a new turn).
  function renderFailure(error, content) {
    var node = renderNotice("error", "The run failed: " + (error || "unknown error"));
    if (content) {
      var retry = h("button", "button-small button-ghost notice-action", "Retry");
      retry.type = "button";
      retry.addEventListener("click", function () {
        if (state.activeRunId || state.pendingSend) return;
        el.input.value = content;
        checkLength();
        updateComposer();
        send();
      });
      node.appendChild(retry);
    }
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
    node.appendChild(h("div", "meta"));
    entry = { node: node, text: text, bubble: bubble, role: role };
    if (id) state.messages[id] = entry;
    append(node);
    return entry;
  }

  function renderMessage(message) {
    if (message.role === "tool") {
      var card = state.cards[message.tool_call_id] || createCard(message.tool_call_id, message.name, null);
      card.setResult(message.content);
      if (card.status === "pending" || card.status === "running") card.setStatus("succeeded");
      return;
    }
    var entry = messageNode(message.id, message.role);
    entry.text.textContent = message.content || "";
    entry.bubble.hidden = !message.content;
    entry.node.classList.remove("streaming");
    entry.node.removeAttribute("aria-busy");
    (message.tool_calls || []).forEach(function (call) {
      var fn = call.function || call.custom || {};
      var args = call.function ? parseJSON(fn.arguments) : fn.input;
      var card = state.cards[call.id] || createCard(call.id, fn.name, entry.node.querySelector(".tools"));
      card.setArguments(args === undefined ? fn.arguments : args);
    });
    if (message.role === "assistant") renderMeta(entry, message);
  }

  function renderMeta(entry, message) {
    var meta = entry.node.querySelector(".meta");
    meta.textContent = "";
    if (message.latency_ms !== null && message.latency_ms !== undefined) {
      meta.appendChild(badge("latency", formatMs(message.latency_ms), "Model call latency"));
    }
    var usage = message.usage;
    if (usage && (usage.prompt_tokens !== null || usage.completion_tokens !== null)) {
      meta.appendChild(
        badge(
          "tokens",
          (usage.prompt_tokens || 0) + " → " + (usage.completion_tokens || 0) + " tok",
          "Prompt tokens → completion tokens"
        )
      );
    }
    if (message.model) meta.appendChild(badge("model", message.model, "Model"));
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
        if (data.message) card.setResult(data.message.content);
        break;
      case "run.completed":
        if (data.message_id && state.messages[data.message_id]) {
          var meta = state.messages[data.message_id].node.querySelector(".meta");
          var stickToEnd = nearEnd();
          meta.appendChild(turnBadge(data));
          if (stickToEnd) scrollToEnd();  // the badge adds a line under the answer
        }
        endRun(event.run_id);
        break;
      case "run.failed":
        renderFailure(data.error, state.lastUserContent);
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
    if (!state.activeRunId || state.activeRunId === runId) setActiveRun(null);
  }

  function updateComposer() {
    var busy = Boolean(state.activeRunId) || Boolean(state.pendingSend);
    var ready = Boolean(state.current) || Boolean(state.opening);
    el.send.disabled = !ready || busy || !el.input.value.trim() || overLimit();
    el.cancel.hidden = !state.activeRunId;
    el.composer.classList.toggle("busy", busy);
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
    state.messages[id] = pending.entry;
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
  function maybeTitle(content) {
    var conversation = state.current;
    if (!conversation || conversation.title) return;
    var title = clip(content.replace(/\s+/g, " ").trim(), 60);
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
    var entry = messageNode(null, "user");
    entry.text.textContent = content;
    entry.node.classList.add("pending");
    state.pendingSend = { content: content, node: entry.node, entry: entry, sent: false };
    state.lastUserContent = content;
    el.input.value = "";
    fitInput();
    updateComposer();
    scrollToEnd();
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

  loadConversations()
    .then(function (items) {
      var id = window.location.hash.slice(1);
      if (UUID_RE.test(id)) {
        openConversation(id);
      } else if (items.length) {
        window.history.replaceState(null, "", "#" + items[0].id);
        openConversation(items[0].id);
      }
    })
    .catch(function (error) {
      showError("Could not load your conversations: " + error.message);
    });
})();
