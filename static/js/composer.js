// @ts-check
/* The composer: the message box, Send (or Resend, while an edit is open),
 * Cancel for the run in progress, and the error line above them; a post refused
 * over a hard budget limit has a notice of its own there (which limit, what was
 * used, when it resets), and what was typed stays in the box.
 *
 * Enter sends, Shift+Enter makes a new line, Escape cancels an edit (or stops
 * the answer being written), Up in an empty box edits the last message. A message
 * over MAX_MESSAGE_CHARS is not cut: the user is told by how much, and Send
 * waits. The box grows with what is typed, up to 240 px.
 *
 * Attach (or a paste of images in the box) adds images to the message: each is
 * read here as a data: URL, shown by its name with a button to remove it, and
 * sent with the message (docs/api.md); a message of images alone may have no
 * text. A file that is not a PNG, JPEG, GIF or WebP, or over the server's size
 * limit, is refused here with a word why (the server checks them again).
 */

import { refusal as refusalText, utcTime } from "./budget.js";
import { byId, h } from "./dom.js";
import { charCount, count } from "./format.js";

/**
 * @typedef {import("./thread.js").Thread} Thread
 * @typedef {import("./thread.js").MessageView} MessageView
 * @typedef {{message?: string, details?: {limit?: import("./budget.js").BudgetLimit, retry_after?: number}}} Refusal
 *
 * @typedef {Object} ComposerHooks
 * @property {number} maxChars the server's MAX_MESSAGE_CHARS, counted in code points
 * @property {number} [maxImageBytes] the server's TOOLCHAT_IMAGE_MAX_BYTES
 * @property {number} [maxImages] the server's TOOLCHAT_IMAGE_MAX_COUNT
 * @property {() => Thread} thread
 * @property {() => boolean} ready a conversation (or a draft) is there to write in
 * @property {(content: string, images: string[]) => void} post a new message, with its images
 * @property {(content: string, replaces: string) => void} resend an edited question
 * @property {(id: string | null) => void} editing the question being edited changed
 * @property {() => void} cancelRun
 * @property {() => MessageView | null} lastQuestion the question Edit is offered on, if any
 */

// What a message's images may come to, as sent: the socket takes a frame of 16 MiB at
// most (uvicorn's default), and the message's text and framing need some of it.
const MAX_MESSAGE_IMAGE_BYTES = 15 * 1024 * 1024;

/**
 * A file's size once it is a data: URL (base64: 4 characters for 3 bytes, and its prefix).
 * @param {number} bytes
 * @returns {number}
 */
function encodedSize(bytes) {
  return Math.ceil(bytes / 3) * 4 + 40;
}

/** @param {ComposerHooks} hooks */
export function createComposer(hooks) {
  const el = {
    form: byId("composer", HTMLFormElement),
    input: byId("composer-input", HTMLTextAreaElement),
    send: byId("send", HTMLButtonElement),
    cancel: byId("cancel", HTMLButtonElement),
    error: byId("composer-error", HTMLElement),
    editing: byId("composer-editing", HTMLElement),
    editCancel: byId("edit-cancel", HTMLButtonElement),
    budget: byId("budget-notice", HTMLElement),
    attach: byId("attach", HTMLButtonElement),
    file: byId("composer-file", HTMLInputElement),
    images: byId("composer-images", HTMLElement),
  };
  /** @type {{name: string, url: string}[]} the images to send with the message */
  let attached = [];
  const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];
  /** The files being read now: how many, and their size as they will be sent. */
  const reading = { count: 0, bytes: 0 };

  /**
   * @param {string} message
   * @param {string} [kind]
   */
  function setError(message, kind) {
    el.error.textContent = message;
    el.error.hidden = !message;
    if (message && kind) el.error.dataset.kind = kind;
    else delete el.error.dataset.kind;
  }

  /**
   * @param {string} message the error to show, or "" to hide it (and a budget notice)
   * @param {string} [kind] what it is about, for `clearError`: "busy" (another run is
   *   in progress) goes when that run ends
   */
  function showError(message, kind) {
    if (!message) el.budget.hidden = true;
    setError(message, kind);
  }

  /**
   * Hides the error if it is of this kind.
   * @param {string} kind
   */
  function clearError(kind) {
    if (el.error.dataset.kind === kind) setError("");
  }

  /**
   * A post refused over a hard budget limit (`budget_exceeded`): which limit, what was used,
   * when it resets (local time; the UTC instant on hover). Every figure is the server's, as text.
   * @param {Refusal} refused
   */
  function showBudget(refused) {
    const said = refusalText(refused);
    setError("");
    const text = h("p", "budget-notice-text");
    text.appendChild(h("strong", "budget-notice-title", said.title + " "));
    text.appendChild(document.createTextNode([said.limit, said.used].filter(Boolean).join(" ")));
    if (said.resets) {
      text.appendChild(document.createTextNode(" It resets "));
      const when = h("time", "budget-notice-reset", said.resets);
      when.setAttribute("datetime", said.resetsAt);
      when.title = utcTime(said.resetsAt);
      text.appendChild(when);
      text.appendChild(document.createTextNode("."));
    }
    const parts = [text];
    if (said.note) parts.push(h("p", "budget-notice-note", "Note: " + said.note));
    parts.push(
      h("p", "budget-notice-help", el.input.value
        ? "Your message was not sent; it is still in the box."
        : "Nothing was sent.")
    );
    const close = h("button", "icon-button budget-notice-dismiss", "×");
    close.type = "button";
    close.title = "Dismiss";
    close.setAttribute("aria-label", "Dismiss the budget notice");
    close.addEventListener("click", () => {
      el.budget.hidden = true;
      el.input.focus();
    });
    el.budget.replaceChildren(close, ...parts);
    el.budget.hidden = false;
  }

  function overLimit() {
    return charCount(el.input.value, hooks.maxChars) > hooks.maxChars;
  }

  function checkLength() {
    const length = charCount(el.input.value, hooks.maxChars);
    const max = hooks.maxChars;
    if (length > max) {
      showError(
        "This message is " + count(length) + " characters; the limit is " +
          count(max) + ". Shorten it by " + count(length - max) +
          " or split it into several messages.",
        "length"
      );
    } else {
      clearError("length");
    }
  }

  function fitInput() {
    el.input.style.height = "auto";
    if (el.input.value) el.input.style.height = Math.min(el.input.scrollHeight, 240) + "px";
  }

  /** Send and Cancel as the thread allows. */
  function update() {
    const thread = hooks.thread();
    const busy = Boolean(thread.activeRunId || thread.pending || thread.requesting);
    const empty = !el.input.value.trim() && !attached.length;
    el.send.disabled = !hooks.ready() || busy || empty || overLimit();
    el.attach.disabled = !hooks.ready() || Boolean(thread.editing);
    el.send.textContent = thread.editing ? "Resend" : "Send";
    el.cancel.hidden = !thread.activeRunId;
    el.form.classList.toggle("busy", busy);
  }

  /** @param {string} value */
  function setValue(value) {
    el.input.value = value;
    fitInput();
    checkLength();
  }

  /** The message waits in the thread (greyed) until the socket is open. */
  function send() {
    const content = el.input.value;
    if ((!content.trim() && !attached.length) || el.send.disabled) return;
    showError("");
    const editing = hooks.thread().editing;
    if (editing) {
      hooks.resend(content, editing);
      return;
    }
    const images = attached.map((image) => image.url);
    el.input.value = "";
    attached = [];
    drawAttached();
    fitInput();
    hooks.post(content, images);
  }

  /** The images to send, each by its name, with a button that removes it. */
  function drawAttached() {
    el.images.replaceChildren(...attached.map((image, index) => {
      const item = h("li", "composer-image", image.name);
      const remove = h("button", "icon-button", "×");
      remove.type = "button";
      remove.title = "Remove";
      remove.setAttribute("aria-label", "Remove " + image.name);
      remove.addEventListener("click", () => {
        attached = attached.filter((_, at) => at !== index);
        drawAttached();
        update();
      });
      item.appendChild(remove);
      return item;
    }));
    el.images.hidden = !attached.length;
  }

  /**
   * Images chosen or pasted: read as data: URLs, after the checks the server makes too.
   * @param {File[]} files
   */
  function attach(files) {
    const maxBytes = hooks.maxImageBytes || 5 * 1024 * 1024;
    const maxImages = hooks.maxImages || 8;
    for (const file of files) {
      if (!IMAGE_TYPES.includes(file.type)) {
        showError(file.name + " is not a PNG, JPEG, GIF or WebP image.");
        continue;
      }
      if (file.size > maxBytes) {
        showError(file.name + " is " + count(file.size) + " bytes; the limit is " +
          count(maxBytes) + ".");
        continue;
      }
      // Files still being read count too: twenty picked at once are not all let in.
      if (attached.length + reading.count >= maxImages) {
        showError("At most " + maxImages + " images a message.");
        break;
      }
      // The message goes over the socket in one frame (the server takes 16 MiB at most).
      if (reading.bytes + attachedBytes() + encodedSize(file.size) > MAX_MESSAGE_IMAGE_BYTES) {
        showError("These images are too large to send together: at most " +
          Math.floor(MAX_MESSAGE_IMAGE_BYTES / 1024 / 1024) + " MB a message, as sent.");
        break;
      }
      const name = file.name || "pasted image";
      const reader = new FileReader();
      reading.count += 1;
      reading.bytes += encodedSize(file.size);
      reader.addEventListener("loadend", () => {
        reading.count -= 1;
        reading.bytes -= encodedSize(file.size);
      });
      reader.addEventListener("load", () => {
        if (typeof reader.result !== "string") return;
        attached = [...attached, { name, url: reader.result }];
        drawAttached();
        update();
      });
      reader.readAsDataURL(file);
    }
  }

  /** @returns {number} the attached images' size as sent (their data: URLs) */
  function attachedBytes() {
    return attached.reduce((total, image) => total + image.url.length, 0);
  }

  /**
   * Edit on the last question: its text goes in the composer.
   * @param {MessageView} view
   */
  function startEdit(view) {
    const thread = hooks.thread();
    if (thread.activeRunId || thread.pending || !view.id) return;
    cancelEdit();
    hooks.editing(view.id);
    el.editing.hidden = false;
    setValue((view.message && view.message.content) || view.text);
    update();
    el.input.focus();
  }

  function cancelEdit() {
    el.editing.hidden = true;
    if (!hooks.thread().editing) return;
    hooks.editing(null);
    setValue("");
    update();
  }

  /**
   * A chip's text is sent as if typed.
   * @param {string} text
   */
  function sendText(text) {
    const thread = hooks.thread();
    if (thread.activeRunId || thread.pending || thread.opening) return;
    cancelEdit();
    el.input.value = text;
    checkLength();
    update();
    send();
    el.input.focus(); // the chip is gone with its answer: the focus goes where one types next
  }

  /**
   * A message that did not go comes back to the box, unless something new is typed.
   * @param {string} content
   */
  function restore(content) {
    if (el.input.value) return;
    el.input.value = content;
    fitInput();
  }

  el.editCancel.addEventListener("click", () => {
    cancelEdit();
    el.input.focus();
  });

  el.form.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });

  el.input.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && hooks.thread().editing) {
      event.preventDefault();
      cancelEdit();
      return;
    }
    if (event.key === "ArrowUp" && !el.input.value && !event.shiftKey && !event.isComposing) {
      const last = hooks.lastQuestion();
      if (last) {
        event.preventDefault();
        startEdit(last);
      }
      return;
    }
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });

  el.input.addEventListener("input", () => {
    checkLength();
    update();
    fitInput();
  });

  el.cancel.addEventListener("click", () => hooks.cancelRun());

  el.attach.addEventListener("click", () => el.file.click());
  el.file.addEventListener("change", () => {
    attach(Array.from(el.file.files || []));
    el.file.value = "";
  });
  el.input.addEventListener("paste", (event) => {
    const files = Array.from((event.clipboardData && event.clipboardData.files) || [])
      .filter((file) => file.type.startsWith("image/"));
    if (!files.length) return;
    event.preventDefault(); // an image pasted is attached, not its name typed
    attach(files);
  });

  return {
    update,
    showError,
    clearError,
    showBudget,
    startEdit,
    cancelEdit,
    sendText,
    restore,
    /** @param {boolean} on */
    enable: (on) => {
      el.input.disabled = !on;
    },
    focus: () => el.input.focus(),
    /** An edit ended elsewhere (its question was replaced): the box empties. */
    editEnded: () => {
      el.editing.hidden = true;
      setValue("");
    },
  };
}
