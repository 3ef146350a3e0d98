// The Keys page: this browser's keys, each with its usage (System One and System Two side by
// side), revoke, and delete with its data.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const { el, svg, fmt } = VSR;

  // A bar chart of one measure over the 30 days: System One's bars beside System Two's.
  function chart(title, one, two, field) {
    const days = (one && one.days) || (two && two.days) || [];
    const v1 = days.map((_, i) => (one && one.days[i] ? one.days[i][field] : 0));
    const v2 = days.map((_, i) => (two && two.days[i] ? two.days[i][field] : 0));
    const top = Math.max(0, ...v1, ...v2);
    const max = Math.max(1, top);
    const W = 300, H = 90, step = W / Math.max(1, days.length), bw = Math.max(1, step / 2 - 1);
    const total1 = v1.reduce((a, b) => a + b, 0), total2 = v2.reduce((a, b) => a + b, 0);
    const label = `${title}, last ${days.length} days: System One ${fmt(total1)}, System Two ${fmt(total2)}`;
    const s = svg("svg", { viewBox: `0 0 ${W} ${H + 14}`, width: W, height: H + 14, role: "img", "aria-label": label });
    s.append(svg("line", { x1: 0, y1: H, x2: W, y2: H, class: "axis" }));
    days.forEach((d, i) => {
      [[v1[i], "one", 0], [v2[i], "two", bw + 1]].forEach(([v, cls, dx]) => {
        if (!v) return;
        const h = Math.max(1, (v / max) * (H - 4));
        const r = svg("rect", { x: i * step + dx, y: H - h, width: bw, height: h, class: cls });
        const t = svg("title", {});
        t.textContent = `${d.date}: ${fmt(v)} (${cls === "one" ? "System One" : "System Two"})`;
        r.append(t);
        s.append(r);
      });
    });
    const first = svg("text", { x: 0, y: H + 12, "font-size": 10 });
    first.textContent = days.length ? days[0].date : "";
    const last = svg("text", { x: W, y: H + 12, "font-size": 10, "text-anchor": "end" });
    last.textContent = days.length ? days[days.length - 1].date : "";
    s.append(first, last);
    return el("figure", { class: "chart" }, el("figcaption", {}, `${title} (most in a day: ${fmt(top)})`), s);
  }

  function modelsTable(one, two) {
    const rows = [];
    for (const [sys, u] of [["One", one], ["Two", two]]) {
      for (const m of (u && u.models) || []) {
        rows.push(el("tr", {}, el("th", { scope: "row" }, m.id), el("td", {}, sys),
          el("td", { class: "num" }, fmt(m.requests)), el("td", { class: "num" }, fmt(m.input_tokens)),
          el("td", { class: "num" }, fmt(m.errors)), el("td", { class: "num" }, fmt(m.rate_limited))));
      }
    }
    if (!rows.length) return el("p", { class: "hint" }, "No requests in the last 30 days.");
    return el("table", { class: "models" }, el("caption", {}, "Per model, last 30 days"),
      el("thead", {}, el("tr", {}, ...["Model", "System", "Requests", "Input tokens", "Server errors", "Rate-limited"]
        .map((h, i) => el("th", { scope: "col", class: i > 1 ? "num" : null }, h)))),
      el("tbody", {}, rows));
  }

  function recentText(sys, u) {
    const r = u && u.recent;
    if (!r) return null;
    const lat = r.latency_ms || {};
    const errors = (r.errors || []).map((e) => `${e.status} ${e.code}: ${fmt(e.count)}`).join(", ") || "none";
    return el("li", { class: `recent-${sys.toLowerCase()}` },
      `System ${sys}, last ${r.days} days: ${fmt(r.requests)} requests, ${fmt(r.answered)} answered; ` +
      `server time p50 ${fmt(lat.p50)} ms, p90 ${fmt(lat.p90)} ms; errors ${errors}.`);
  }

  function quotaTable(one, two) {
    const rows = [];
    for (const u of [one, two]) {
      for (const q of (u && u.quota && u.quota.models) || []) {
        const limit = q.limits && q.limits.requests_per_day;
        rows.push(el("tr", {}, el("th", { scope: "row" }, q.id),
          el("td", { class: "num" }, `${fmt(q.requests_today)} / ${fmt(limit)}`),
          el("td", {}, limit ? el("progress", { max: limit, value: q.requests_today, "aria-label": `${q.id} requests today` }) : "—"),
          el("td", { class: "num" }, `${fmt(q.tokens_today)} / ${fmt(q.limits && q.limits.tokens_per_day)}`)));
      }
    }
    if (!rows.length) return null;
    const resets = (one && one.quota && one.quota.resets_at) || "";
    return el("table", { class: "quota" }, el("caption", {}, `Today's quota (resets ${resets})`),
      el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Model"), el("th", { scope: "col", class: "num" }, "Requests"),
        el("th", { scope: "col" }, "Used"), el("th", { scope: "col", class: "num" }, "Tokens"))),
      el("tbody", {}, rows));
  }

  async function fill(card, k) {
    const problem = card.querySelector(".key-problem");
    const meta = card.querySelector(".key-meta");
    const usage = card.querySelector(".usage");
    const self = await VSR.api("GET", "/api/keys/self", { key: k.key });
    if (self.status === 401) {
      VSR.keys.update(k.key, { status: "revoked" });
      meta.textContent = `Created ${k.created_at || "?"}.`;
      problem.textContent = "This key is revoked or deleted: requests with it are refused, and its usage can no longer be read with it.";
      card.querySelector(".revoke").disabled = true;
      card.querySelector(".forget").disabled = true;
      usage.replaceChildren();
      return;
    }
    if (!self.ok) {
      problem.textContent = VSR.errorText(self);
      return;
    }
    const s = self.json;
    meta.textContent = `${s.status}, created ${s.created_at}. Today (System One): ${fmt(s.usage_today.requests)} requests, ${fmt(s.usage_today.input_tokens)} input tokens.`;
    const [one, two] = await Promise.all([
      VSR.api("GET", "/api/keys/self/usage", { key: k.key }),
      VSR.api("GET", "/pt/api/keys/self/usage", { key: k.key }),
    ]);
    if (!one.ok) {
      problem.textContent = VSR.errorText(one);
      return;
    }
    const u1 = one.json, u2 = two.ok ? two.json : null;
    usage.replaceChildren(
      el("p", { class: "hint" }, el("span", { class: "legend-one" }, "■ System One"), "  ", el("span", { class: "legend-two" }, "■ System Two"),
        ` · as of ${u1.generated_at}`),
      el("div", { class: "charts" },
        chart("Requests", u1, u2, "requests"), chart("Input tokens", u1, u2, "input_tokens"),
        chart("Server errors", u1, u2, "errors"), chart("Rate-limited", u1, u2, "rate_limited")),
      modelsTable(u1, u2),
      el("ul", { class: "recent" }, recentText("One", u1), recentText("Two", u2)),
      quotaTable(u1, u2) || "",
    );
  }

  function render() {
    const list = VSR.keys.list();
    const box = $("keys");
    box.replaceChildren();
    if (!list.length) {
      box.append(el("p", {}, "This browser has no keys yet. ", el("a", { href: "/" }, "Get one on the home page"), "."));
      return;
    }
    for (const k of list) {
      const card = $("key-card").content.firstElementChild.cloneNode(true);
      card.dataset.prefix = k.prefix || "";
      card.querySelector(".key-title").textContent = `${k.prefix || k.key.slice(0, 11)}…`;
      card.querySelector(".revoke").addEventListener("click", async () => {
        if (!confirm(`Revoke ${k.prefix}…? Requests with it will be refused. Its data is kept; to delete it too, use "Delete key and its data" instead.`)) return;
        const r = await VSR.api("DELETE", "/api/keys/self", { key: k.key });
        $("keys-status").textContent = r.status === 204 ? `${k.prefix}… is revoked.` : VSR.errorText(r);
        render();
      });
      card.querySelector(".forget").addEventListener("click", async () => {
        if (!confirm(`Delete ${k.prefix}… and its data? The key stops working at once and what was stored for it is deleted. This cannot be undone.`)) return;
        // An older System Two key (sk-pt-) is forgotten where the spec says: under /pt.
        const path = k.key.startsWith("sk-pt-") ? "/pt/api/keys/self/forget" : "/api/keys/self/forget";
        const r = await VSR.api("POST", path, { key: k.key });
        if (r.status === 202) {
          VSR.keys.remove(k.key);
          $("keys-status").textContent = `${k.prefix}… is deleted: ${r.json.message}`;
        } else {
          $("keys-status").textContent = VSR.errorText(r);
        }
        render();
      });
      card.querySelector(".remove").addEventListener("click", () => {
        if (!confirm(`Remove ${k.prefix}… from this browser's list? The key itself keeps working.`)) return;
        VSR.keys.remove(k.key);
        render();
      });
      box.append(card);
      fill(card, k);
    }
  }

  // Check a key with the service and add it to this browser's list.
  async function addKey(key) {
    const r = await VSR.api("GET", "/api/keys/self", { key });
    if (!r.ok) {
      $("keys-status").textContent = VSR.errorText(r);
      return false;
    }
    VSR.keys.add({ key, prefix: r.json.prefix, key_id: r.json.key_id, label: r.json.label, created_at: r.json.created_at, status: r.json.status });
    $("keys-status").textContent = `${r.json.prefix}… added.`;
    return true;
  }

  document.addEventListener("DOMContentLoaded", async () => {
    $("add-key").addEventListener("submit", async (e) => {
      e.preventDefault();
      if (await addKey($("add-key-value").value.trim())) $("add-key-value").value = "";
      render();
    });
    // The one-time link an older site's Keys page sends (/keys#add=KEY): the key never goes
    // to the server in the address, and leaves the address bar and history at once.
    // Says whether it added one; the caller renders the list once.
    async function fromLink() {
      const m = location.hash.match(/^#add=([A-Za-z0-9_-]+)$/);
      if (!m) return false;
      history.replaceState(null, "", location.pathname);
      await addKey(m[1]);
      return true;
    }
    window.addEventListener("hashchange", async () => {
      if (await fromLink()) render();
    });
    await fromLink();
    render();
  });
})();
