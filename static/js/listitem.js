// @ts-check
/* One conversation in the sidebar's list: its link (title, last activity, mode, and
 * "API client" for one made over /v1) and its Rename and Delete buttons, and the name a
 * conversation goes by where it has no title.
 */

import { h } from "./dom.js";
import { exactTime, relativeTime, shortTime } from "./format.js";

/**
 * @typedef {{id: string, title?: string, mode?: string, created_at: string, updated_at?: string,
 *   last_event_seq?: number, active_run_id?: string | null, system_prompt?: string,
 *   source?: string}} Conversation
 */

/**
 * The title, or "Untitled · 12 Nov 10:00" (format.js shortTime).
 * @param {Conversation} conversation
 */
export function conversationLabel(conversation) {
  if (conversation.title) return conversation.title;
  return "Untitled · " + shortTime(conversation.created_at);
}

/**
 * The list's item for a conversation (`aria-current` on the open one's link).
 * @param {Conversation} conversation
 * @param {string} modeName its mode, as the mode menu names it
 * @param {boolean} open
 */
export function conversationItem(conversation, modeName, open) {
  const item = h("li", "conversation-item");
  item.dataset.id = conversation.id;
  const link = h("a", "conversation-link");
  link.href = "#" + conversation.id;
  link.dataset.id = conversation.id;
  link.appendChild(h("span", "conversation-title", conversationLabel(conversation)));
  const facts = h("span", "conversation-facts");
  const at = conversation.updated_at || conversation.created_at;
  const when = h("time", "conversation-when", relativeTime(at));
  when.dateTime = at;
  when.title = "Last activity: " + exactTime(at);
  facts.appendChild(when);
  facts.appendChild(h("span", "conversation-mode", modeName));
  if (conversation.source === "v1") {
    const source = h("span", "conversation-source", "API client");
    source.title = "Made by an OpenAI-compatible client (/v1)";
    facts.appendChild(source);
  }
  link.appendChild(facts);
  if (open) link.setAttribute("aria-current", "page");
  item.appendChild(link);
  const actions = h("span", "conversation-actions");
  actions.appendChild(iconButton("✎", "icon-button", "rename", "Rename", conversation));
  actions.appendChild(iconButton("×", "icon-button icon-danger", "delete", "Delete", conversation));
  item.appendChild(actions);
  return item;
}

/**
 * @param {string} text
 * @param {string} className
 * @param {string} action
 * @param {string} verb
 * @param {Conversation} conversation
 */
function iconButton(text, className, action, verb, conversation) {
  const button = h("button", className, text);
  button.type = "button";
  button.dataset.action = action;
  button.setAttribute("aria-label", verb + " “" + conversationLabel(conversation) + "”");
  button.title = verb;
  return button;
}
