// The status page: every model's live state and server times, refreshed every 5 seconds.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const WORDS = { ready: "Ready", degraded: "Degraded", loading: "Loading", unavailable: "Unavailable" };

  async function refresh() {
    const r = await VSR.api("GET", "/api/status");
    if (!r.ok || !r.json || !Array.isArray(r.json.models)) {
      $("overall").className = "error";
      $("overall").textContent = `The status could not be read (${VSR.errorText(r)}); trying again.`;
      return;
    }
    const models = r.json.models;
    const notReady = models.filter((m) => m.state !== "ready").length;
    $("overall").className = notReady ? "error" : "good";
    $("overall").textContent = notReady ? `${notReady} of ${models.length} models are not ready.` : `All ${models.length} models are ready.`;
    $("models").tBodies[0].replaceChildren(...models.map((m) => {
      const lat = m.latency_ms || {};
      return VSR.el("tr", { "data-model": m.id },
        VSR.el("th", { scope: "row" }, m.id),
        VSR.el("td", {}, m.system === "two" ? "Two" : "One"),
        VSR.el("td", {}, VSR.el("span", { class: `state ${m.state}` }, WORDS[m.state] || m.state),
          m.workers > 1 ? ` (${m.workers_ready}/${m.workers} workers)` : ""),
        VSR.el("td", { class: "num" }, VSR.fmt(lat.p50)),
        VSR.el("td", { class: "num" }, VSR.fmt(lat.p90)),
        VSR.el("td", { class: "num" }, VSR.fmt(m.requests)),
        VSR.el("td", { class: "num" }, VSR.fmt(m.errors)));
    }));
    const window = models.find((m) => m.window_seconds);
    $("updated").textContent = `Updated ${new Date().toLocaleTimeString()}` +
      (window ? `; times over the last ${Math.round(window.window_seconds / 60)} minutes.` : "; server times need the keys service.");
  }

  document.addEventListener("DOMContentLoaded", () => {
    refresh();
    setInterval(refresh, 5000);
  });
})();
