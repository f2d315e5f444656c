// @ts-check
/* Whether the sidebar lists the conversations of OpenAI-compatible clients (source
 * `v1`), as the person last chose: the choice, where it is remembered, and the list's
 * query that follows from it (sidebar.js draws the list).
 */

/** Where the choice to show API clients' conversations is remembered. */
export const SHOW_CLIENTS_KEY = "toolchat.sidebar.showClients";

/**
 * Whether the list shows the conversations of OpenAI-compatible clients (source `v1`):
 * yes, unless the person unticked it (a storage that cannot be read: yes).
 * @param {Pick<Storage, "getItem"> | null} storage
 */
export function showsClients(storage) {
  try {
    return !storage || storage.getItem(SHOW_CLIENTS_KEY) !== "0";
  } catch {
    return true;
  }
}

/**
 * Remembers the choice; a storage that refuses it (private mode, full) keeps it for the page only.
 * @param {Pick<Storage, "setItem"> | null} storage
 * @param {boolean} shown
 */
export function showClientsRemember(storage, shown) {
  try {
    if (storage) storage.setItem(SHOW_CLIENTS_KEY, shown ? "1" : "0");
  } catch {
    // Nothing to do: the box still says what the list shows.
  }
}

/**
 * The list's query: the search's `q`, and without API clients' conversations the other
 * sources (the REST API's `?source=`; a client's background tasks are never listed).
 * @param {string} search
 * @param {boolean} clients
 */
export function listQuery(search, clients) {
  return (search ? "&q=" + encodeURIComponent(search) : "") + (clients ? "" : "&source=chat,api");
}

/**
 * The page's localStorage, or null where it cannot be read (a sandboxed frame, a policy).
 * @returns {Storage | null}
 */
export function storageOrNull() {
  try {
    return window.localStorage;
  } catch {
    return null;
  }
}
