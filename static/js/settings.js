// @ts-check
/* The open conversation's settings: its system prompt, changed with a PATCH as any
 * client would. A draft (a conversation not created yet) keeps what was saved and
 * is created with it, so that its first message is answered under that prompt.
 */

import { byId } from "./dom.js";

/**
 * @typedef {import("./sidebar.js").Conversation} Conversation
 *
 * @typedef {Object} SettingsHooks
 * @property {(method: string, path: string, body?: unknown) => Promise<any>} api
 * @property {() => Conversation | null} current the open conversation; null for a draft
 * @property {(conversation: Conversation) => void} saved the API's answer to a change
 */

/** @param {SettingsHooks} hooks */
export function createSettings(hooks) {
  const el = {
    panel: byId("conversation-settings", HTMLDetailsElement),
    form: byId("settings-form", HTMLFormElement),
    prompt: byId("system-prompt", HTMLTextAreaElement),
    status: byId("settings-status", HTMLElement),
    save: byId("settings-save", HTMLButtonElement),
  };
  let draftPrompt = ""; // what a draft is created with
  let shown = 0; // bumps on every show, so that a late answer about another conversation is ignored

  /**
   * @param {string} text
   * @param {boolean} [error]
   */
  function status(text, error = false) {
    el.status.textContent = text;
    el.status.className = "settings-status" + (error ? " settings-error" : "");
  }

  /**
   * Show a conversation's settings (null: a new draft's, which start blank).
   * @param {Conversation | null} conversation
   */
  function show(conversation) {
    ++shown;
    if (!conversation) draftPrompt = "";
    el.prompt.value = conversation ? conversation.system_prompt || "" : draftPrompt;
    el.save.disabled = false;
    status("");
  }

  el.form.addEventListener("submit", (event) => {
    event.preventDefault();
    const value = el.prompt.value;
    const conversation = hooks.current();
    if (!conversation) {
      draftPrompt = value;
      status("Saved: the conversation will be created with it.");
      return;
    }
    const asked = shown;
    el.save.disabled = true;
    status("Saving…");
    hooks
      .api("PATCH", "/conversations/" + encodeURIComponent(conversation.id) + "/", { system_prompt: value })
      .then(
        (/** @type {Conversation} */ updated) => {
          hooks.saved(updated);
          if (asked === shown) status("Saved. It applies from the next message.");
        },
        (/** @type {Error} */ error) => {
          if (asked === shown) status("Not saved: " + error.message, true);
        }
      )
      .then(() => {
        if (asked === shown) el.save.disabled = false;
      });
  });

  // Escape closes the panel and gives the focus back to its button.
  el.panel.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || !el.panel.open) return;
    event.preventDefault();
    event.stopPropagation();
    el.panel.open = false;
    const summary = el.panel.querySelector("summary");
    if (summary) summary.focus();
  });

  return {
    show,
    /** What a draft is created with: its saved prompt, if any. */
    draft: () => (draftPrompt ? { system_prompt: draftPrompt } : {}),
  };
}
