// The sidebar's choice to show API clients' conversations (static/js/clients.js): what the
// list asks the server for, and how the choice is remembered. Run with `node --test tests/js/`.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { SHOW_CLIENTS_KEY, listQuery, showClientsRemember, showsClients } from "../../static/js/clients.js";

/** A localStorage of one page, or one that throws as a browser's private mode may. */
function storage({ broken = false } = {}) {
  const items = new Map();
  return {
    items,
    getItem(key) {
      if (broken) throw new Error("SecurityError");
      return items.has(key) ? items.get(key) : null;
    },
    setItem(key, value) {
      if (broken) throw new Error("QuotaExceededError");
      items.set(key, String(value));
    },
  };
}

describe("API clients' conversations in the sidebar", () => {
  test("are shown until the person unticks them, and the choice is kept", () => {
    const kept = storage();
    assert.equal(showsClients(kept), true);
    showClientsRemember(kept, false);
    assert.equal(kept.items.get(SHOW_CLIENTS_KEY), "0");
    assert.equal(showsClients(kept), false);
    showClientsRemember(kept, true);
    assert.equal(showsClients(kept), true);
  });

  test("a storage that cannot be read or written shows them and throws nothing", () => {
    const broken = storage({ broken: true });
    assert.equal(showsClients(broken), true);
    assert.doesNotThrow(() => showClientsRemember(broken, false));
    assert.equal(showsClients(null), true);
  });

  test("hidden, the list asks for the chat page's and the REST API's only", () => {
    assert.equal(listQuery("", true), "");
    assert.equal(listQuery("", false), "&source=chat,api");
    assert.equal(listQuery("boiler & co", false), "&q=boiler%20%26%20co&source=chat,api");
    assert.equal(listQuery("boiler", true), "&q=boiler");
  });
});
