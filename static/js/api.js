// @ts-check
/* The REST API, with the session's cookie and its CSRF token. */

/** @typedef {Error & {status?: number, data?: any}} ApiError */

/** The CSRF token: from its cookie, or the page's form field. */
function csrfToken() {
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  if (match) return decodeURIComponent(match[1]);
  const field = document.querySelector("input[name=csrfmiddlewaretoken]");
  return field instanceof HTMLInputElement ? field.value : "";
}

/**
 * A client of the API at `root` ("/api/v1").
 * @param {string} root
 */
export function createApi(root) {
  /**
   * One request; resolves to the JSON answer, rejects with an ApiError (`status`, `data`).
   * `path` is relative to the API root, or a full URL (a page's `next`).
   * @param {string} method
   * @param {string} path
   * @param {unknown} [body]
   * @returns {Promise<any>}
   */
  function api(method, path, body) {
    /** @type {Record<string, string>} */
    const headers = { Accept: "application/json" };
    // Every unsafe method carries the CSRF token, with a body or without (a DELETE).
    if (method !== "GET") headers["X-CSRFToken"] = csrfToken();
    /** @type {RequestInit} */
    const options = { method, credentials: "same-origin", headers };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    const url = /^https?:/.test(path) ? path : root + path;
    return fetch(url, options).then((response) => {
      if (response.status === 401) window.location.assign("/login/?next=/");
      return response.text().then((text) => {
        let data = null;
        try {
          data = text ? JSON.parse(text) : null;
        } catch (e) {
          data = null;
        }
        if (!response.ok) {
          /** @type {ApiError} */
          const error = new Error((data && data.message) || "The server answered " + response.status + ".");
          error.status = response.status;
          error.data = data;
          throw error;
        }
        return data;
      });
    });
  }

  /**
   * Every page of a paginated list (follows `next` up to a bound).
   * @param {string} path
   * @param {number} [maxPages]
   * @returns {Promise<any[]>}
   */
  function apiAll(path, maxPages = 20) {
    /** @type {any[]} */
    let results = [];
    /**
     * @param {string} url
     * @param {number} left
     * @returns {Promise<any[]>}
     */
    function step(url, left) {
      return api("GET", url).then((page) => {
        results = results.concat(page.results || []);
        if (page.next && left > 1) return step(page.next, left - 1);
        return results;
      });
    }
    return step(path, maxPages);
  }

  return { api, apiAll };
}
