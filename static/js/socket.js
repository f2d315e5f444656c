// @ts-check
/* The conversation's WebSocket, and what the page does when it drops.
 *
 * The socket carries the live events and takes the user's messages and cancels.
 * It opens with `?after=SEQ` (the newest event the page has), so the server
 * replays what was missed, then sends live ones: no gap and no duplicate. When
 * it closes for any reason but a refusal, it opens again after 0.5 s, 1 s, 2 s …
 * up to 10 s, from the newest event seen by then.
 */

import { parseJSON } from "./format.js";

/**
 * @typedef {import("./thread.js").RunEvent} RunEvent
 * @typedef {import("./thread.js").Ack} Ack
 * @typedef {{type: "error", code?: string, message?: string,
 *   details?: {run_id?: string, limit?: import("./budget.js").BudgetLimit, retry_after?: number}}} SocketError
 *
 * @typedef {Object} SocketHandlers
 * @property {() => string} url where to connect, with the newest seq seen
 * @property {(text: string, kind: string) => void} status "Live", "Reconnecting…"
 * @property {() => void} open the socket is open: a waiting message can go
 * @property {(event: RunEvent) => void} event a run event
 * @property {(ack: Ack) => void} ack
 * @property {(error: SocketError) => void} error the server refused something
 * @property {() => void} lost the socket closed (a message that left may be lost)
 * @property {() => void} unauthenticated close code 4401
 * @property {() => void} unavailable close code 4404: no such conversation, or not ours
 */

/**
 * A socket that reconnects until `close()`.
 * @param {SocketHandlers} handlers
 */
export function openSocket(handlers) {
  /** @type {WebSocket | null} */
  let socket = null;
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let timer;
  let delay = 500;
  let closed = false;

  function connect() {
    if (closed) return;
    const current = new WebSocket(handlers.url());
    socket = current;
    handlers.status("Connecting…", "wait");
    current.onopen = () => {
      delay = 500;
      handlers.status("Live", "ok");
      handlers.open();
    };
    current.onmessage = (message) => {
      const payload = /** @type {Record<string, any> | undefined} */ (parseJSON(message.data));
      if (!payload || typeof payload !== "object") return;
      if (payload.type === "ping") return;
      if (payload.type === "ack") return handlers.ack(/** @type {Ack} */ (payload));
      if (payload.type === "error" && payload.seq === undefined) {
        return handlers.error(/** @type {SocketError} */ (payload));
      }
      handlers.event(/** @type {RunEvent} */ (payload));
    };
    current.onclose = (close) => {
      if (socket !== current) return;
      socket = null;
      handlers.lost();
      if (close.code === 4401) return handlers.unauthenticated();
      if (close.code === 4404) {
        handlers.status("", "");
        return handlers.unavailable();
      }
      handlers.status("Reconnecting…", "wait");
      const wait = delay;
      delay = Math.min(delay * 2, 10000);
      timer = setTimeout(connect, wait);
    };
  }

  /**
   * Sends a message if the socket is open; says whether it did.
   * @param {Record<string, unknown>} message
   */
  function send(message) {
    if (!socket || socket.readyState !== WebSocket.OPEN) return false;
    socket.send(JSON.stringify(message));
    return true;
  }

  /** Closes it for good (another conversation opens). */
  function close() {
    closed = true;
    clearTimeout(timer);
    if (socket) {
      socket.onclose = null;
      socket.close(1000);
      socket = null;
    }
  }

  function isOpen() {
    return Boolean(socket && socket.readyState === WebSocket.OPEN);
  }

  connect();
  return { send, close, isOpen };
}
