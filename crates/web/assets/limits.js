// The limits page: /api/info's rate limits and each model's limits, as tables.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  // The per-model rows, in the order of the spec's "Per-model limits".
  const ROWS = [
    ["max_state_chars", "State length (code points)"],
    ["max_options", "Options per question"],
    ["max_states", "Entries of states"],
    ["max_questions", "Questions"],
    ["max_images", "Images"],
    ["max_image_bytes", "Image size (bytes)"],
    ["max_image_pixels", "Image pixels"],
    ["max_videos", "Videos"],
    ["max_video_bytes", "Video size (bytes)"],
    ["max_video_seconds", "Video length (s)"],
    ["max_video_frames", "Video frames"],
    ["max_request_tokens", "Estimated input tokens"],
    ["timeout_seconds", "Time limit (s)"],
    ["box", "Box questions"],
  ];
  const cell = (v) => VSR.el("td", { class: "num" }, v === true ? "yes" : v === false ? "no" : VSR.fmt(v));

  function budget(who, b) {
    b = b || {};
    return VSR.el("tr", {}, VSR.el("th", { scope: "row" }, who), cell(b.requests_per_minute),
      cell(b.tokens_per_minute), cell(b.requests_per_day), cell(b.tokens_per_day));
  }

  async function load() {
    const r = await VSR.api("GET", "/api/info");
    if (!r.ok || !r.json) {
      $("limits-status").className = "error";
      $("limits-status").textContent = `The limits could not be read (${VSR.errorText(r)}).`;
      return;
    }
    const info = r.json, rl = info.rate_limits || {};
    $("rate-limits").tBodies[0].replaceChildren(budget("Each key, per model", rl.per_key),
      budget("Each network address", rl.per_address), budget("Each key, System Two", rl.system_two));
    const models = (info.models || []).filter((m) => m.system === "one");
    const head = $("model-limits").tHead.rows[0];
    head.replaceChildren(VSR.el("th", { scope: "col" }, "Limit"),
      ...models.map((m) => VSR.el("th", { scope: "col", class: "num", "data-model": m.id }, m.id)));
    $("model-limits").tBodies[0].replaceChildren(...ROWS.map(([k, label]) =>
      VSR.el("tr", { "data-limit": k }, VSR.el("th", { scope: "row" }, label),
        ...models.map((m) => cell((m.limits || {})[k])))));
    $("limits-status").className = "good";
    $("limits-status").textContent = `${models.length} System One models.`;
  }

  document.addEventListener("DOMContentLoaded", load);
})();
