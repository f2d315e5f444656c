// @ts-check
/* The sidebar: the user's conversations (newest activity first, searchable,
 * renamed and deleted in place; those of API clients shown or not, as the
 * person last chose: clients.js), and the mode of new conversations. On a
 * narrow screen it opens over the thread (drawer.js).
 */

import { listQuery, showClientsRemember, showsClients, storageOrNull } from "./clients.js";
import { conversationItem, conversationLabel } from "./listitem.js";
import { byId, h } from "./dom.js";
import { createDrawer } from "./drawer.js";

/**
 * @typedef {import("./listitem.js").Conversation} Conversation
 *
 * @typedef {Object} SidebarHooks
 * @property {(method: string, path: string, body?: unknown) => Promise<any>} api
 * @property {(path: string, maxPages?: number) => Promise<any[]>} apiAll
 * @property {() => string | null} currentId the open conversation's id
 * @property {(id: string) => void} select open a conversation
 * @property {() => void} newDraft "New conversation" was pressed
 * @property {() => void} modeChanged the mode of new conversations changed
 * @property {(conversation: Conversation) => void} renamed
 * @property {(conversation: Conversation) => void} deleted
 * @property {(message: string) => void} error
 */

export { conversationLabel };

/**
 * @param {HTMLElement} root the chat page's root (it carries `sidebar-open`)
 * @param {SidebarHooks} hooks
 */
export function createSidebar(root, hooks) {
  const el = {
    list: byId("conversation-list", HTMLUListElement),
    listEmpty: byId("conversations-empty", HTMLElement),
    newForm: byId("new-conversation", HTMLFormElement),
    newMode: byId("new-mode", HTMLSelectElement),
    search: byId("conversation-search", HTMLInputElement),
    showClients: byId("conversations-show-clients", HTMLInputElement),
    modeHelp: byId("mode-help", HTMLElement),
  };
  /** @type {Conversation[]} */
  let conversations = [];
  let search = ""; // the search box's text, once it settled
  el.showClients.checked = showsClients(storageOrNull());
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let searchTimer;
  let listRequest = 0; // numbers the list's loads: a late answer to an older search is dropped
  /** @type {string[]} */
  const created = []; // conversations this page created, in order (a list loaded before keeps them)

  /** @param {string | undefined} mode */
  function modeName(mode) {
    const option = el.newMode.querySelector('option[value="' + mode + '"]');
    return option ? option.textContent || "" : String(mode || "").replace("_", "-");
  }

  /** @type {string | null} */
  let roving = null; // the conversation whose link is the list's one tab stop
  /** @type {string | null} */
  let rovedOpen = null; // the open conversation when the list last chose its tab stop

  /**
   * Makes one conversation the list's tab stop: its link and its buttons; every
   * other item is reached with the arrow keys (docs/chat-page.md, "Keyboard").
   * @param {string | null} id
   */
  function rove(id) {
    const items = Array.from(el.list.querySelectorAll(".conversation-item"));
    const chosen = items.find((item) => item instanceof HTMLElement && item.dataset.id === id) || items[0];
    roving = chosen instanceof HTMLElement ? chosen.dataset.id || null : null;
    for (const item of items) {
      const index = item === chosen ? "0" : "-1";
      item.querySelectorAll("a, button").forEach((node) => node.setAttribute("tabindex", index));
    }
  }

  /** Whether a title is being edited (its box must survive the list's redraws). */
  let renaming = false;
  /** @type {string | null} */
  let revealed = null; // the open conversation the list last scrolled to

  /**
   * Scrolls the list (only the list) so that the open conversation shows whole, when
   * it is another than the last shown: a new one at the top, a lower one opened.
   */
  function reveal() {
    const id = hooks.currentId();
    if (!id || id === revealed) return;
    const item = Array.from(el.list.querySelectorAll(".conversation-item")).find(
      (node) => node instanceof HTMLElement && node.dataset.id === id
    );
    if (!(item instanceof HTMLElement) || !el.list.clientHeight) return; // hidden: next time
    revealed = id;
    const list = el.list.getBoundingClientRect();
    const box = item.getBoundingClientRect();
    const padding = parseFloat(getComputedStyle(el.list).paddingBottom) || 0;
    if (box.top < list.top) el.list.scrollTop -= list.top - box.top;
    else if (box.bottom > list.bottom - padding) el.list.scrollTop += box.bottom - (list.bottom - padding);
  }

  function render() {
    // A title being edited keeps its box: the redraw waits for the edit's end.
    if (renaming) return;
    // A redraw (the list reloads, a time moves on) keeps the keyboard's place.
    const focused = document.activeElement;
    const hadFocus = el.list.contains(focused) && focused instanceof HTMLElement ? focused.dataset.action || "link" : null;
    const scrolled = el.list.scrollTop; // emptied, the list would be back at its top
    el.list.textContent = "";
    el.listEmpty.textContent = search ? "No conversation matches “" + search + "”." : "No conversations yet.";
    el.listEmpty.hidden = conversations.length > 0;
    const currentId = hooks.currentId();
    for (const conversation of conversations) {
      el.list.appendChild(conversationItem(conversation, modeName(conversation.mode), currentId === conversation.id));
    }
    el.list.scrollTop = scrolled;
    // Another conversation opened (by its address, a new one, the first load): it becomes
    // the list's tab stop, where the drawer puts the focus (it stayed on the first item).
    if (currentId !== rovedOpen && (!currentId || find(currentId))) {
      rovedOpen = currentId;
      if (currentId) roving = currentId;
    }
    rove(roving && conversations.some((c) => c.id === roving) ? roving : currentId);
    if (hadFocus) focusLink(roving, hadFocus);
    reveal();
  }

  /**
   * Focuses a conversation's link, or one of its buttons ("rename", "delete").
   * @param {string | null} id
   * @param {string} [which]
   */
  function focusLink(id, which = "link") {
    const item = Array.from(el.list.querySelectorAll(".conversation-item")).find(
      (node) => node instanceof HTMLElement && node.dataset.id === id
    );
    const target = item && item.querySelector(which === "link" ? ".conversation-link" : '[data-action="' + which + '"]');
    if (target instanceof HTMLElement) target.focus();
  }

  /**
   * Up and Down (Home, End) move between conversations, Enter opens one (the link's
   * own), F2 renames it and Delete deletes it.
   * @param {KeyboardEvent} event
   */
  function listKey(event) {
    const target = /** @type {HTMLElement} */ (event.target);
    const item = target.closest(".conversation-item");
    if (!(item instanceof HTMLElement) || target.matches("input")) return;
    const items = Array.from(el.list.querySelectorAll(".conversation-item"));
    const at = items.indexOf(item);
    const moves = { ArrowDown: at + 1, ArrowUp: at - 1, Home: 0, End: items.length - 1 };
    const conversation = find(item.dataset.id || "");
    if (event.key in moves) {
      const next = items[Math.max(0, Math.min(items.length - 1, moves[/** @type {keyof typeof moves} */ (event.key)]))];
      event.preventDefault();
      if (next instanceof HTMLElement) {
        rove(next.dataset.id || null);
        focusLink(roving);
      }
    } else if (event.key === "F2" && conversation) {
      event.preventDefault();
      rename(item, conversation);
    } else if (event.key === "Delete" && conversation) {
      event.preventDefault();
      remove(conversation);
    }
  }

  /** The list from the server (with the search's `q`); resolves to it. */
  function load() {
    const query = listQuery(search, el.showClients.checked);
    const request = ++listRequest;
    const createdBefore = created.length;
    return hooks.apiAll("/conversations/?page_size=200" + query, 1).then((items) => {
      if (request !== listRequest) return conversations;
      // A conversation this page created while the list was on its way is not in it yet.
      if (!search) {
        const listed = new Set(items.map((c) => c.id));
        for (const c of conversations) {
          if (!listed.has(c.id) && created.indexOf(c.id, createdBefore) !== -1) items.unshift(c);
        }
      }
      conversations = items;
      render();
      return items;
    });
  }

  /**
   * A conversation new or changed; the most recently active first, as the server lists them.
   * @param {Conversation} conversation
   */
  function upsert(conversation) {
    let found = false;
    conversations = conversations.map((c) => {
      if (c.id !== conversation.id) return c;
      found = true;
      return conversation;
    });
    if (!found && !el.showClients.checked && conversation.source === "v1") return;
    if (!found) conversations.unshift(conversation);
    conversations.sort((a, b) => (b.updated_at || "").localeCompare(a.updated_at || ""));
    render();
  }

  /**
   * A conversation moved (a message was posted): it goes to the top, marked "just now".
   * @param {string} id
   */
  function touch(id) {
    const conversation = conversations.find((c) => c.id === id);
    if (!conversation) return;
    conversation.updated_at = new Date().toISOString();
    upsert(conversation);
  }

  /** @param {string} id */
  function find(id) {
    return conversations.find((c) => c.id === id) || null;
  }

  /**
   * @param {HTMLElement} item
   * @param {Conversation} conversation
   */
  function rename(item, conversation) {
    const link = item.querySelector(".conversation-link");
    if (!(link instanceof HTMLElement)) return;
    const input = h("input", "conversation-rename");
    renaming = true;
    input.type = "text";
    input.maxLength = 200;
    input.value = conversation.title || "";
    input.setAttribute("aria-label", "New title");
    link.hidden = true;
    item.classList.add("renaming"); // its buttons step aside: the box has the row
    item.insertBefore(input, link);
    input.focus();
    input.select();
    let done = false;
    /** @param {boolean} save */
    function finish(save) {
      if (done) return;
      done = true;
      renaming = false;
      const title = input.value.replace(/\s+/g, " ").trim();
      // Ended with a key, the focus goes back to the conversation (not <body>), where
      // Delete and the arrow keys still work; a click elsewhere keeps its own focus.
      const focused = document.activeElement === input;
      input.remove();
      item.classList.remove("renaming");
      if (link instanceof HTMLElement) {
        link.hidden = false;
        if (focused) link.focus();
      }
      if (!save || title === (conversation.title || "")) return render();
      hooks.api("PATCH", "/conversations/" + conversation.id + "/", { title })
        .then((updated) => {
          upsert(updated);
          hooks.renamed(updated);
        })
        .catch((error) => {
          hooks.error("Could not rename: " + error.message);
          render();
        });
    }
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        finish(true);
      } else if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation();
        finish(false);
      }
    });
    input.addEventListener("blur", () => finish(true));
  }

  /** @param {Conversation} conversation */
  function remove(conversation) {
    if (!window.confirm("Delete “" + conversationLabel(conversation) + "” and all its messages?")) return;
    hooks.api("DELETE", "/conversations/" + conversation.id + "/")
      .then(() => {
        conversations = conversations.filter((c) => c.id !== conversation.id);
        render();
        hooks.deleted(conversation);
      })
      .catch((error) => hooks.error("Could not delete: " + error.message));
  }

  // Opened over the thread on a narrow screen, the focus goes to the list's tab stop.
  const drawer = createDrawer(root, () => {
    const target = el.list.querySelector('.conversation-link[tabindex="0"]') || el.newForm.querySelector("button");
    if (target instanceof HTMLElement) target.focus();
    revealed = null;
    reveal();
  });
  const { close, isOpen } = drawer;

  el.newForm.addEventListener("submit", (event) => {
    event.preventDefault();
    close(); // on a narrow screen, back to the thread to type
    hooks.newDraft();
  });

  el.newMode.addEventListener("change", () => {
    const option = el.newMode.options[el.newMode.selectedIndex];
    el.modeHelp.textContent = option ? option.dataset.help || "" : "";
    hooks.modeChanged();
  });

  el.search.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      search = el.search.value.trim();
      load().catch((error) => hooks.error("Could not search: " + error.message));
    }, 250);
  });

  el.showClients.addEventListener("change", () => {
    showClientsRemember(storageOrNull(), el.showClients.checked);
    load().catch((error) => hooks.error("Could not load the conversations: " + error.message));
  });

  el.list.addEventListener("keydown", listKey);
  // A click or a Tab into an item makes it the list's tab stop.
  el.list.addEventListener("focusin", (event) => {
    const item = event.target instanceof HTMLElement ? event.target.closest(".conversation-item") : null;
    if (item instanceof HTMLElement && item.dataset.id !== roving) rove(item.dataset.id || null);
  });
  el.list.addEventListener("click", (event) => {
    const target = event.target instanceof Element ? event.target : null;
    const button = target && target.closest("button[data-action]");
    if (button instanceof HTMLElement) {
      const item = button.closest(".conversation-item");
      if (!(item instanceof HTMLElement)) return;
      const conversation = find(item.dataset.id || "");
      if (!conversation) return;
      if (button.dataset.action === "rename") rename(item, conversation);
      if (button.dataset.action === "delete") remove(conversation);
      return;
    }
    const link = target && target.closest("a.conversation-link");
    if (!(link instanceof HTMLElement)) return;
    event.preventDefault();
    hooks.select(link.dataset.id || "");
  });

  // The page's HTML disables these until a click would do something.
  el.newForm.querySelectorAll("button").forEach((button) => {
    button.disabled = false;
  });

  return {
    load,
    render,
    upsert,
    touch,
    close,
    isOpen,
    modeName,
    /** The mode a new conversation gets. */
    mode: () => el.newMode.value,
    /** @param {string} id a conversation this page created */
    created: (id) => created.push(id),
  };
}
