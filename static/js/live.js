// @ts-check
/* The open conversation's live side: its WebSocket (socket.js) from the newest seq
 * the thread has, and what each thing heard does to the page. Events go to the
 * reducer (a user's message moves its conversation up the list; the approvals inbox
 * hears of calls); an ack names an untitled conversation; a refusal gives a message
 * back to the box; a socket lost after a message left says it may not have arrived.
 */

import { openSocket } from "./socket.js";

/**
 * @typedef {import("./state.js").Action} Action
 * @typedef {import("./thread.js").Thread} Thread
 * @typedef {import("./sidebar.js").Conversation} Conversation
 *
 * @typedef {Object} LiveHooks
 * @property {string} wsPath the sockets' path, before the conversation's id
 * @property {() => Thread} thread
 * @property {(action: Action, follow?: boolean) => void} dispatch
 * @property {(text: string, kind: string) => void} status the connection's state, in words
 * @property {(message: string) => void} error
 * @property {ReturnType<typeof import("./sending.js").createSending>} sending
 * @property {{touch: (id: string) => void}} sidebar
 * @property {{event: (event: any) => void}} approvals
 */

/**
 * Opens the conversation's socket.
 * @param {Conversation} conversation
 * @param {LiveHooks} hooks
 */
export function openLive(conversation, hooks) {
  const { dispatch, sending } = hooks;
  const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
  return openSocket({
    url: () => scheme + window.location.host + hooks.wsPath + conversation.id + "/?after=" + hooks.thread().lastSeq,
    status: hooks.status,
    open: sending.flushPending,
    event: (event) => {
      const thread = hooks.thread();
      const fresh = typeof event.seq === "number" && event.seq > thread.lastSeq;
      // A user's message (this tab's, or another's) moves its conversation up the list;
      // one that was not on the page yet, and a complete message, bring the log to its end.
      const user = event.type === "message.created" && event.data && event.data.role === "user" ? event.data : null;
      if (user && fresh) hooks.sidebar.touch(conversation.id);
      const shown = Boolean(user && user.message_id && !thread.keyOf[user.message_id]);
      dispatch({ type: "event", event }, fresh && (event.type === "message.completed" || shown));
      if (fresh) hooks.approvals.event(event);
    },
    ack: (ack) => {
      const pending = hooks.thread().pending;
      dispatch({ type: "ack", ack });
      if (ack.action === "message" && pending) sending.maybeTitle(pending.content);
    },
    error: (refusal) => {
      if (hooks.thread().pending) sending.failSend(refusal.message || "The message was refused.", refusal);
      else hooks.error(refusal.message || "The server refused the request.");
    },
    // A message that never left waits for the next socket; one that left may or may
    // not have arrived, and the user decides whether to send it again.
    lost: () => {
      const pending = hooks.thread().pending;
      if (pending && pending.sent) {
        sending.failSend("The connection closed before the message was accepted; try again.");
      }
    },
    unauthenticated: () => window.location.assign("/login/?next=/"),
    unavailable: () => dispatch({ type: "notice", level: "error", text: "This conversation is not available." }),
  });
}
