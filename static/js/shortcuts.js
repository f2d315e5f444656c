// @ts-check
/* The page's keyboard shortcuts, and the help panel that lists them.
 *
 *   Ctrl+Shift+O (⌘+Shift+O)  a new conversation
 *   /  or  Shift+Escape        to the message box
 *   ↑ in an empty message box  edit your last message (composer.js)
 *   Escape                     stop the answer being written
 *   ?                          this list
 *
 * A key typed in a field is the field's (`?` and `/` are text there); a
 * combination with Ctrl or ⌘ works everywhere. Escape is the panels' first
 * (Settings, the approvals inbox, the sidebar, an edit, a rename close on it and
 * spend it): only one nobody used stops the answer. The help is a modal <dialog>: Escape closes it
 * and the focus goes back where it was. docs/chat-page.md lists them too.
 */

import { byId } from "./dom.js";

/**
 * @typedef {Object} ShortcutHooks
 * @property {() => void} newConversation
 * @property {() => void} focusComposer
 * @property {() => boolean} stop stops the answer being written; false when none is
 */

/**
 * Whether a key pressed on `target` is typed into it.
 * @param {EventTarget | null} target
 */
export function typingIn(target) {
  if (!(target instanceof HTMLElement)) return false;
  return target.isContentEditable || target.matches("input, textarea, select");
}

/** @param {ShortcutHooks} hooks */
export function createShortcuts(hooks) {
  const dialog = byId("shortcuts", HTMLDialogElement);
  const button = byId("shortcuts-button", HTMLButtonElement);
  /** @type {Element | null} */
  let before = null; // what had the focus when the help opened

  function show() {
    if (dialog.open) return;
    before = document.activeElement;
    dialog.showModal();
  }

  dialog.addEventListener("close", () => {
    // The close event comes a task after the panel hid: focus the user moved meanwhile
    // (a click, `/`) stays where they put it.
    const moved = document.activeElement && document.activeElement !== document.body;
    const inside = dialog.contains(document.activeElement);
    if (before instanceof HTMLElement && before.isConnected && (!moved || inside)) before.focus();
    before = null;
  });
  // A click on the backdrop (outside the panel's box) closes it too.
  dialog.addEventListener("click", (event) => {
    if (event.target === dialog) dialog.close();
  });
  button.addEventListener("click", show);
  button.disabled = false;

  document.addEventListener("keydown", (event) => {
    if (event.defaultPrevented || dialog.open || event.isComposing) return;
    const command = event.ctrlKey || event.metaKey;
    if (command && event.shiftKey && !event.altKey && event.key.toLowerCase() === "o") {
      event.preventDefault();
      hooks.newConversation();
    } else if (event.key === "Escape" && event.shiftKey) {
      event.preventDefault();
      hooks.focusComposer();
    } else if (event.key === "Escape") {
      // The approvals inbox open: Escape closes it (a decision there is not a reason to stop).
      const inbox = document.querySelector("details.approvals-inbox[open]");
      if (inbox instanceof HTMLDetailsElement) {
        event.preventDefault();
        inbox.open = false;
        const summary = inbox.querySelector("summary");
        if (summary) summary.focus();
      } else if (hooks.stop()) {
        event.preventDefault();
      }
    } else if (!command && !event.altKey && !typingIn(event.target)) {
      if (event.key === "?") {
        event.preventDefault();
        show();
      } else if (event.key === "/") {
        event.preventDefault();
        hooks.focusComposer();
      }
    }
  });

  return { show };
}
