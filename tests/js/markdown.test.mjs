// The streaming Markdown renderer (static/js/markdown.js): hostile text makes only
// text and the allowed elements. Run with `node --test tests/js/`.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { ATTRIBUTES, TAGS, parse, toNodes } from "../../static/js/markdown.js";

/** A document just big enough for toNodes: it records what was made. */
function fakeDocument() {
  const element = (tag) => ({
    tag, attrs: {}, children: [],
    setAttribute(name, value) { this.attrs[name] = value; },
    appendChild(child) { this.children.push(child); },
  });
  return { createElement: element, createTextNode: (text) => ({ text }) };
}

/** Every element made, with its attributes; fails on anything else. */
function walk(nodes, seen = []) {
  for (const node of nodes) {
    if ("text" in node) continue;
    seen.push(node);
    walk(node.children, seen);
  }
  return seen;
}

const HOSTILE = [
  "<script>alert(1)</script>",
  "Hello <img src=x onerror=alert(1)> **bold <b onclick=alert(1)>x</b>**",
  "[click](javascript:alert(1)) [data](data:text/html,<script>alert(1)</script>) [rel](/admin/)",
  "[ok](https://example.com/\" onmouseover=\"alert(1))",
  "```html\" onload=\"alert(1)\n<script>alert(2)</script>\n```",
  "- <iframe src=https://evil>\n- `<style>*{}</style>`",
  "# <svg onload=alert(1)>",
  "*<a href=javascript:alert(1)>x</a>*",
].join("\n\n");

describe("the streaming Markdown renderer", () => {
  test("hostile Markdown makes only allowed elements, attributes and links", () => {
    const made = walk(toNodes(parse(HOSTILE), fakeDocument()));
    assert.ok(made.length > 5);
    for (const node of made) {
      assert.ok(TAGS.has(node.tag), node.tag);
      for (const [name, value] of Object.entries(node.attrs)) {
        assert.ok(ATTRIBUTES[node.tag] && ATTRIBUTES[node.tag].has(name), node.tag + " " + name);
        assert.ok(!/^on/i.test(name));
        if (name === "href") assert.match(value, /^https?:\/\/[^\s"'<>]+$/);
        if (name === "class") assert.match(value, /^language-[A-Za-z0-9-]+$/);
      }
    }
    assert.deepEqual(made.filter((n) => n.tag === "a").map((n) => n.attrs.href), []);
    const text = JSON.stringify(toNodes(parse(HOSTILE), fakeDocument()));
    assert.ok(text.includes("<script>alert(1)</script>"), "HTML in the text stays text");
  });

  test("a tree with a forbidden tag or attribute is drawn as text", () => {
    const made = walk(toNodes([
      { tag: "script", children: ["alert(1)"] },
      { tag: "a", attrs: { href: "javascript:alert(1)", onclick: "x" }, children: ["x"] },
    ], fakeDocument()));
    assert.deepEqual(made.map((n) => [n.tag, n.attrs]), [["a", {}]]);
  });

  test("the safe subset renders as the server would structure it", () => {
    const tree = parse("Some **bold** and `code` and *em*, [a link](https://example.com).\n\n- one\n- two\n\n```python\nprint(1)\n```");
    assert.deepEqual(tree, [
      { tag: "p", children: [
        "Some ", { tag: "strong", children: ["bold"] }, " and ", { tag: "code", children: ["code"] },
        " and ", { tag: "em", children: ["em"] }, ", ",
        { tag: "a", attrs: { href: "https://example.com", rel: "noopener noreferrer nofollow" }, children: ["a link"] }, ".",
      ] },
      { tag: "ul", children: [{ tag: "li", children: ["one"] }, { tag: "li", children: ["two"] }] },
      { tag: "pre", children: [{ tag: "code", attrs: { class: "language-python" }, children: ["print(1)\n"] }] },
    ]);
  });

  test("a list item whose marker came before its words shows nothing yet", () => {
    const one = { tag: "ul", children: [{ tag: "li", children: ["one"] }] };
    assert.deepEqual(parse("- one\n- "), [one]);
    assert.deepEqual(parse("- one\n-"), [one]);
    assert.deepEqual(parse("Steps:\n\n1."), [{ tag: "p", children: ["Steps:"] }]);
    assert.deepEqual(parse("- one\n- t"), [
      { tag: "ul", children: [{ tag: "li", children: ["one"] }, { tag: "li", children: ["t"] }] },
    ]);
    assert.deepEqual(parse("- "), []);
  });

  test("a fence still open while streaming is code so far", () => {
    assert.deepEqual(parse("```js\nlet a"), [
      { tag: "pre", children: [{ tag: "code", attrs: { class: "language-js" }, children: ["let a\n"] }] },
    ]);
  });
});
