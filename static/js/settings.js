// @ts-check
/* The open conversation's settings: its system prompt, changed with a PATCH as any
 * client would. A draft (a conversation not created yet) keeps what was saved and
 * is created with it, so that its first message is answered under that prompt.
 *
 * Save waits for a change (it is disabled while the box holds what is saved), and
 * after a save the focus stays in the panel, on the box: never on <body>, where
 * Escape would no longer reach the panel. The panel's form is one section
 * (`.settings-section`); another goes beside it with its own form and state.
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
  let savedPrompt = ""; // what the shown conversation (or draft) has: Save waits for a change
  let saving = false;
  let shown = 0; // bumps on every show, so that a late answer about another conversation is ignored

  /** Save is for a change, once at a time. */
  function saveAllowed() {
    el.save.disabled = saving || el.prompt.value === savedPrompt;
  }

  /** After Save, the focus stays in the panel: on the box, if the button lost it. */
  function keepFocus() {
    if (el.panel.open && (document.activeElement === el.save || document.activeElement === document.body)) {
      if (el.save.disabled) el.prompt.focus();
    }
  }

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
    savedPrompt = el.prompt.value;
    saving = false;
    saveAllowed();
    status("");
  }

  el.form.addEventListener("submit", (event) => {
    event.preventDefault();
    const value = el.prompt.value;
    const conversation = hooks.current();
    if (el.save.disabled) return; // Enter in a field, with nothing to save
    if (!conversation) {
      draftPrompt = savedPrompt = value;
      saveAllowed();
      keepFocus();
      status("Saved: the conversation will be created with it.");
      return;
    }
    const asked = shown;
    const focusedSave = document.activeElement === el.save;
    saving = true;
    saveAllowed();
    if (focusedSave) el.prompt.focus(); // a disabled button would drop the focus to <body>
    status("Saving…");
    hooks
      .api("PATCH", "/conversations/" + encodeURIComponent(conversation.id) + "/", { system_prompt: value })
      .then(
        (/** @type {Conversation} */ updated) => {
          hooks.saved(updated);
          if (asked !== shown) return;
          savedPrompt = value;
          status("Saved. It applies from the next message.");
        },
        (/** @type {Error} */ error) => {
          if (asked === shown) status("Not saved: " + error.message, true);
        }
      )
      .then(() => {
        if (asked !== shown) return;
        saving = false;
        saveAllowed();
        keepFocus();
      });
  });

  el.prompt.addEventListener("input", saveAllowed);

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
