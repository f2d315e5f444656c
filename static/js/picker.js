// @ts-check
/*
 * The model picker in the thread's header: the model the open conversation (or the
 * draft) talks to. Its options are the models GET /api/v1/models/ lists, written into
 * the <select> by the server (templates/chat/index.html), which leaves it out when
 * there is only one. A change on an open conversation is saved at once (PATCH); a
 * draft keeps it for the conversation its first message creates. The Settings'
 * placeholder follows it: each model's provider may have its own default prompt.
 */

/**
 * @typedef {{id: string, model?: string}} Chosen
 * @typedef {object} PickerHooks
 * @property {(method: string, path: string, body?: object) => Promise<any>} api
 * @property {() => Chosen | null} current the open conversation, or null for a draft
 * @property {(conversation: any) => void} saved the conversation as the server now has it
 * @property {(message: string) => void} error
 */

/**
 * @param {PickerHooks} hooks
 */
export function createPicker(hooks) {
  const found = document.getElementById("model-picker");
  const select = found instanceof HTMLSelectElement ? found : null;
  const fallback = select ? select.dataset.default || select.value : "";

  /**
   * Show the model of this conversation (null: a draft, which starts on the default).
   * A model that is no longer offered stays shown as what it is.
   * @param {Chosen | null} conversation
   */
  function show(conversation) {
    if (!select) return;
    const wanted = (conversation && conversation.model) || fallback;
    select.querySelectorAll("option[data-gone]").forEach((option) => option.remove());
    if (!Array.from(select.options).some((option) => option.value === wanted)) {
      const gone = document.createElement("option");
      gone.value = wanted;
      gone.textContent = wanted + " (no longer offered)";
      gone.dataset.gone = "1";
      gone.disabled = true;
      select.appendChild(gone);
    }
    select.value = wanted;
    promptShown();
  }

  /**
   * The Settings' placeholder: what a conversation on the picked model is told by
   * default; and the picked label whole, as the select's title.
   */
  function promptShown() {
    const prompt = document.getElementById("system-prompt");
    const option = select && select.selectedOptions[0];
    if (select) select.title = option ? option.textContent || "" : "";
    if (prompt instanceof HTMLTextAreaElement && option && option.dataset.prompt) {
      prompt.placeholder = option.dataset.prompt;
    }
  }

  if (select) {
    select.addEventListener("change", () => {
      promptShown();
      const conversation = hooks.current();
      if (!conversation) return; // a draft: read when it is created
      const before = conversation.model || fallback;
      select.disabled = true;
      hooks
        .api("PATCH", "/conversations/" + encodeURIComponent(conversation.id) + "/", { model: select.value })
        .then(hooks.saved, (/** @type {Error} */ error) => {
          show({ id: conversation.id, model: before });
          hooks.error("The model was not changed: " + error.message);
        })
        .finally(() => {
          select.disabled = false;
        });
    });
  }

  return {
    show,
    /** The fields a new conversation is created with: its model, when one was picked. */
    fields: () => (select && select.value && select.value !== fallback ? { model: select.value } : {}),
  };
}
