// What every page shares: this browser's key list, calls to the API, errors a person can
// read, copying. Pages build their DOM with VSR.el (text only, never HTML from data).
"use strict";

const VSR = (() => {
  const STORE = "vsr.keys";

  const keys = {
    list() {
      try {
        const v = JSON.parse(localStorage.getItem(STORE) || "[]");
        return Array.isArray(v) ? v.filter((k) => k && typeof k.key === "string") : [];
      } catch (_) {
        return [];
      }
    },
    save(list) {
      localStorage.setItem(STORE, JSON.stringify(list));
    },
    add(entry) {
      const list = keys.list().filter((k) => k.key !== entry.key);
      list.unshift(entry);
      keys.save(list);
    },
    update(key, fields) {
      keys.save(keys.list().map((k) => (k.key === key ? Object.assign({}, k, fields) : k)));
    },
    remove(key) {
      keys.save(keys.list().filter((k) => k.key !== key));
    },
  };

  // One API call. Resolves (never rejects) to {status, ok, headers, json, text, ms, failed}.
  async function api(method, path, opts = {}) {
    const headers = Object.assign({}, opts.headers || {});
    if (opts.key) headers["X-API-Key"] = opts.key;
    let body;
    if (opts.body !== undefined) {
      headers["content-type"] = "application/json";
      body = typeof opts.body === "string" ? opts.body : JSON.stringify(opts.body);
    }
    const t0 = performance.now();
    let res;
    try {
      res = await fetch(path, { method, headers, body, cache: "no-store" });
    } catch (e) {
      return { status: 0, ok: false, failed: true, headers: new Headers(), json: null, text: "", ms: 0 };
    }
    const text = await res.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch (_) {}
    return { status: res.status, ok: res.ok, headers: res.headers, json, text, ms: performance.now() - t0 };
  }

  function seconds(s) {
    const n = Number(s);
    if (!isFinite(n)) return null;
    if (n < 90) return `${Math.max(1, Math.round(n))} s`;
    if (n < 5400) return `${Math.round(n / 60)} min`;
    return `${Math.round(n / 3600)} h`;
  }

  // A sentence for a failed answer: what went wrong and what to do.
  function errorText(r) {
    if (r.failed) return "The server could not be reached. Check your connection and try again.";
    const e = (r.json && (r.json.error || r.json)) || {};
    const code = typeof e.code === "string" ? e.code : "";
    const detail = r.json && r.json.detail;
    const message = typeof e.message === "string" ? e.message
      : typeof detail === "string" ? detail
      : Array.isArray(detail) ? detail.map((d) => (d && d.msg) || "").filter(Boolean).join("; ")
      : "";
    let out = `${r.status}${code ? " " + code : ""}`;
    if (r.status === 401) out += ": the key is not valid (it was revoked, deleted or never existed).";
    else if (message) out += `: ${message}`;
    if (r.status === 429) {
      const wait = seconds(r.headers.get("retry-after"));
      out += wait ? ` Try again in ${wait}.` : " Try again later.";
    } else if (r.status >= 500) {
      out += " The server had a problem; try again in a moment.";
    }
    return out;
  }

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      // Through CSSOM: the pages' policy refuses style attributes.
      else if (k === "style") e.style.cssText = v;
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function svg(tag, attrs) {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }

  async function copy(text, status) {
    let ok = false;
    try {
      await navigator.clipboard.writeText(text);
      ok = true;
    } catch (_) {
      const t = el("textarea", { "aria-hidden": "true" });
      t.value = text;
      document.body.append(t);
      t.select();
      try {
        ok = document.execCommand("copy");
      } catch (_) {}
      t.remove();
    }
    if (status) status.textContent = ok ? "Copied." : "Copying failed: select the text and copy it by hand.";
    return ok;
  }

  // A curl command for a call, with the key left as $VLLM_SR_API_KEY.
  function curl(method, path, body, extraHeaders = {}) {
    const q = (s) => "'" + String(s).replace(/'/g, "'\\''") + "'";
    const lines = [`curl -s${method === "POST" ? "" : " -X " + method} ${location.origin}${path}`];
    lines.push(`  -H "Authorization: Bearer $VLLM_SR_API_KEY"`);
    for (const [k, v] of Object.entries(extraHeaders)) lines.push(`  -H ${q(k + ": " + v)}`);
    if (body !== undefined) {
      lines.push(`  -H 'content-type: application/json'`);
      lines.push(`  -d ${q(typeof body === "string" ? body : JSON.stringify(body, null, 2))}`);
    }
    return lines.join(" \\\n");
  }

  function fmt(n) {
    return n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US");
  }

  return { keys, api, errorText, el, svg, copy, curl, fmt, seconds };
})();
