// @ts-check
/* Markdown while it streams: a small safe subset drawn as DOM nodes, never as HTML.
 *
 * The server stays the sanitizer of record (chat/markdown.py renders the
 * complete answer and nh3 cleans it); this only draws the text that has
 * arrived so far, so that the answer does not jump from raw Markdown to
 * formatted text at its end. It parses into a tree of plain objects whose
 * tags and attributes are a subset of the server's nh3 policy (paragraphs,
 * headings, emphasis, code spans, fenced code, lists, http(s) links), and
 * builds nodes with createElement and text nodes only: HTML in the text stays
 * text, and no attribute but a checked href, rel and a code's language class
 * is ever set.
 */

/**
 * @typedef {{tag: string, attrs?: Record<string, string>, children: MdNode[]}} MdElement
 * @typedef {MdElement | string} MdNode
 */

/** The tags this renderer may make: all on chat/markdown.py's TAGS list. */
export const TAGS = new Set(["p", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "code", "pre", "ul", "ol", "li", "a"]);
/** The attributes it may set, per tag. */
export const ATTRIBUTES = { a: new Set(["href", "rel"]), code: new Set(["class"]) };
const SAFE_URL = /^https?:\/\/[^\s<>"']+$/i;
const LANGUAGE = /^language-[A-Za-z0-9-]+$/;
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*(?=\S)([\s\S]*?\S)\*\*|\*(?=[^\s*])([^*]*?[^\s*])\*|\[([^\]\n]+)\]\(([^()\s]+)\)/;

/**
 * Inline Markdown: code spans, strong, emphasis, links; everything else text.
 * @param {string} text
 * @returns {MdNode[]}
 */
export function inline(text) {
  /** @type {MdNode[]} */
  const out = [];
  let rest = text;
  while (rest) {
    const match = INLINE.exec(rest);
    if (!match) break;
    if (match.index) out.push(rest.slice(0, match.index));
    if (match[1]) out.push({ tag: "code", children: [match[2].trim() || match[2]] });
    else if (match[3] !== undefined) out.push({ tag: "strong", children: inline(match[3]) });
    else if (match[4] !== undefined) out.push({ tag: "em", children: inline(match[4]) });
    else if (SAFE_URL.test(match[6])) {
      out.push({ tag: "a", attrs: { href: match[6], rel: "noopener noreferrer nofollow" }, children: inline(match[5]) });
    } else out.push(match[5]); // javascript:, data:, relative: the label alone, as text
    rest = rest.slice(match.index + match[0].length);
  }
  if (rest) out.push(rest);
  return out;
}

/**
 * Block Markdown: fenced code (open until its fence closes), headings, lists, paragraphs.
 * @param {string} text
 * @returns {MdElement[]}
 */
export function parse(text) {
  const lines = text.replace(/\r\n?/g, "\n").split("\n");
  /** @type {MdElement[]} */
  const blocks = [];
  /** @type {string[]} */
  let paragraph = [];
  /** @type {MdElement | null} */
  let list = null;
  const flush = () => {
    if (paragraph.length) blocks.push({ tag: "p", children: inline(paragraph.join("\n")) });
    paragraph = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    // The last line so far is only a list marker ("- ", "2."): its item has no words
    // yet, and an empty bullet would show until they come.
    if (i === lines.length - 1 && /^\s{0,3}([-*+]|\d{1,9}[.)])\s*$/.test(line)) break;
    const fence = /^\s{0,3}(```+|~~~+)\s*([\w-]*)/.exec(line);
    const heading = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line);
    const bullet = /^\s{0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/.exec(line);
    if (fence) {
      flush();
      list = null;
      const body = [];
      for (i++; i < lines.length && !lines[i].trim().startsWith(fence[1]); i++) body.push(lines[i]);
      const language = "language-" + fence[2];
      /** @type {MdElement} */
      const code = { tag: "code", children: [body.length ? body.join("\n") + "\n" : ""] };
      if (fence[2] && LANGUAGE.test(language)) code.attrs = { class: language };
      blocks.push({ tag: "pre", children: [code] });
    } else if (heading) {
      flush();
      list = null;
      blocks.push({ tag: "h" + heading[1].length, children: inline(heading[2]) });
    } else if (bullet) {
      flush();
      const tag = /\d/.test(bullet[1]) ? "ol" : "ul";
      if (!list || list.tag !== tag) {
        list = { tag, children: [] };
        blocks.push(list);
      }
      list.children.push({ tag: "li", children: inline(bullet[2]) });
    } else if (!line.trim()) {
      flush();
      list = null;
    } else if (list && /^\s+\S/.test(line)) {
      const last = /** @type {MdElement} */ (list.children[list.children.length - 1]);
      last.children.push("\n", ...inline(line.trim()));
    } else {
      list = null;
      paragraph.push(line.trim());
    }
  }
  flush();
  return blocks;
}

/**
 * The tree as DOM nodes: elements from TAGS, attributes from ATTRIBUTES, text as text.
 * @param {MdNode[]} nodes
 * @param {Document} doc
 * @returns {Node[]}
 */
export function toNodes(nodes, doc) {
  return nodes.map((node) => {
    if (typeof node === "string") return doc.createTextNode(node);
    if (!TAGS.has(node.tag)) return doc.createTextNode(textOf(node));
    const element = doc.createElement(node.tag);
    const allowed = /** @type {Record<string, Set<string>>} */ (ATTRIBUTES)[node.tag];
    for (const [name, value] of Object.entries(node.attrs || {})) {
      if (!allowed || !allowed.has(name)) continue;
      if (name === "href" && !SAFE_URL.test(value)) continue;
      if (name === "class" && !LANGUAGE.test(value)) continue;
      element.setAttribute(name, value);
    }
    for (const child of toNodes(node.children, doc)) element.appendChild(child);
    return element;
  });
}

/** @param {MdNode} node @returns {string} */
function textOf(node) {
  return typeof node === "string" ? node : node.children.map(textOf).join("");
}
