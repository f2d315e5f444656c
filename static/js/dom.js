// @ts-check
/* Small DOM helpers shared by the page's modules. */

/**
 * A new element, with a class and text (inserted as text, never as HTML).
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {string} [className]
 * @param {unknown} [text]
 * @returns {HTMLElementTagNameMap[K]}
 */
export function h(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

/**
 * The element with this id (the template has them all).
 * @template {HTMLElement} T
 * @param {string} id
 * @param {new () => T} type
 * @returns {T}
 */
export function byId(id, type) {
  const node = document.getElementById(id);
  if (!(node instanceof type)) throw new Error("The chat page has no #" + id + ".");
  return node;
}

/**
 * Copies text; the button says whether it worked for a moment.
 * @param {string} text
 * @param {HTMLButtonElement} button
 */
export function copyText(text, button) {
  /** @param {boolean} ok */
  function done(ok) {
    const label = button.textContent;
    button.textContent = ok ? "Copied" : "Copy failed";
    setTimeout(() => {
      button.textContent = label;
    }, 1500);
  }
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(
      () => done(true),
      () => done(false)
    );
    return;
  }
  // Plain http on another host: the old way still works.
  const area = h("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.appendChild(area);
  area.select();
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch (e) {
    ok = false;
  }
  area.remove();
  done(ok);
}

/**
 * Each code block of rendered Markdown gets its language and a Copy button.
 * @param {HTMLElement} container
 */
export function decorateCode(container) {
  container.querySelectorAll("pre").forEach((pre) => {
    const parent = pre.parentElement;
    if (!parent || parent.classList.contains("code-block")) return;
    const code = pre.querySelector("code");
    const language = code && /language-([\w-]+)/.exec(code.className);
    const block = h("div", "code-block");
    const bar = h("div", "code-bar");
    bar.appendChild(h("span", "code-language", language ? language[1] : "code"));
    const copy = h("button", "code-copy", "Copy");
    copy.type = "button";
    copy.setAttribute("aria-label", "Copy the code");
    copy.addEventListener("click", () => copyText((code || pre).textContent || "", copy));
    bar.appendChild(copy);
    parent.insertBefore(block, pre);
    block.appendChild(bar);
    block.appendChild(pre);
  });
}
