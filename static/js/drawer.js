// @ts-check
/* The sidebar on a narrow screen (48rem and less): a drawer over the thread, opened by
 * the thread header's Conversations button, with a backdrop. Escape, a tap beside it or
 * a choice in it closes it; the focus goes into it, and back to the button. The
 * thread cannot be reached while it is open (inert). Wide, the sidebar is beside the
 * thread and there is nothing to open or close.
 */

import { byId } from "./dom.js";

/**
 * @param {HTMLElement} root the chat page's root (it carries `sidebar-open`)
 * @param {() => void} opened called once it is open (the sidebar focuses its list)
 */
export function createDrawer(root, opened) {
  const toggle = byId("sidebar-toggle", HTMLButtonElement);
  const sidebar = byId("sidebar", HTMLElement);
  const backdrop = byId("sidebar-backdrop", HTMLElement);
  const thread = byId("thread", HTMLElement);

  /** Whether the narrow screen's sidebar is open (over the thread). */
  const isOpen = () => root.classList.contains("sidebar-open");

  /**
   * Closes the narrow screen's sidebar; the focus, if it was in it, goes back to the
   * button that opens it.
   */
  function close() {
    if (!isOpen()) return;
    const hadFocus = sidebar.contains(document.activeElement);
    root.classList.remove("sidebar-open");
    toggle.setAttribute("aria-expanded", "false");
    backdrop.hidden = true;
    thread.inert = false;
    if (hadFocus) toggle.focus();
  }

  /** Opens it over the thread (which cannot be reached meanwhile). */
  function open() {
    root.classList.add("sidebar-open");
    toggle.setAttribute("aria-expanded", "true");
    backdrop.hidden = false;
    thread.inert = true;
    opened();
  }

  toggle.addEventListener("click", () => {
    if (isOpen()) close();
    else open();
  });
  // A tap beside it: the tap took the focus out of it (to <body>), so it goes to the button.
  backdrop.addEventListener("click", () => {
    close();
    toggle.focus();
  });
  // Wide again, there is nothing to close: the sidebar is beside the thread.
  const narrow = window.matchMedia("(max-width: 48rem)");
  narrow.addEventListener("change", () => {
    if (!narrow.matches) close();
  });
  // The page's HTML disables it until a click would do something.
  toggle.disabled = false;

  // Escape closes the narrow screen's sidebar wherever the focus is (even on nothing).
  document.addEventListener("keydown", (event) => {
    if (event.defaultPrevented) return;
    if (event.key === "Escape" && isOpen()) {
      event.preventDefault(); // this Escape is spent: it stops no answer
      close();
      toggle.focus();
    }
  });

  return { close, isOpen };
}
