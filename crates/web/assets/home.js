// The home page: get a key (proof of work in Web Workers), and Try it for System One and
// System Two.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);

  // --- Proof of work -------------------------------------------------------------------

  // Solve a challenge in Web Workers; onProgress(tried) now and then. Resolves to
  // {nonce, ms, tried}. Workers: one per spare core, at most four.
  function solve(challenge, difficulty, onProgress) {
    const n = Math.max(1, Math.min(4, (navigator.hardwareConcurrency || 2) - 1));
    const t0 = performance.now();
    return new Promise((resolve, reject) => {
      const workers = [];
      const tried = new Array(n).fill(0);
      const stop = () => workers.forEach((w) => w.terminate());
      for (let i = 0; i < n; i++) {
        const w = new Worker("/assets/pow.js");
        w.onmessage = (e) => {
          tried[i] = e.data.tried || tried[i];
          const all = tried.reduce((a, b) => a + b, 0);
          if (e.data.nonce !== undefined) {
            stop();
            resolve({ nonce: e.data.nonce, ms: performance.now() - t0, tried: all });
          } else if (onProgress) {
            onProgress(all);
          }
        };
        w.onerror = (e) => {
          stop();
          reject(new Error(e.message || "the proof-of-work worker failed"));
        };
        w.postMessage({ challenge, difficulty, first: i, stride: n });
        workers.push(w);
      }
    });
  }
  // The browser test measures the solver the button uses.
  window.vsrSolve = solve;

  async function getKey() {
    const button = $("get-key-button");
    const status = $("key-status");
    const progress = $("pow-progress");
    button.disabled = true;
    $("new-key").hidden = true;
    status.className = "";
    status.textContent = "Asking for a challenge…";
    const t0 = performance.now();
    try {
      const c = await VSR.api("POST", "/api/keys/challenge");
      if (!c.ok) throw c;
      const expected = Math.pow(2, c.json.difficulty);
      $("pow").hidden = false;
      progress.value = 0;
      status.textContent = "Working on the proof of work…";
      const found = await solve(c.json.challenge, c.json.difficulty, (tried) => {
        // The chance of having found it by now, so the bar moves as the odds do.
        progress.value = Math.round(100 * (1 - Math.exp(-tried / expected)));
      });
      progress.value = 100;
      status.textContent = "Creating the key…";
      const k = await VSR.api("POST", "/api/keys", {
        body: { challenge: c.json.challenge, nonce: found.nonce, accept_terms: $("terms").checked },
      });
      if (!k.ok) throw k;
      const ms = performance.now() - t0;
      VSR.keys.add({
        key: k.json.api_key, prefix: k.json.prefix, key_id: k.json.key_id,
        label: k.json.label, created_at: k.json.created_at, status: "active",
      });
      $("new-key-value").textContent = k.json.api_key;
      $("new-key").hidden = false;
      status.className = "good";
      status.textContent = `Key ${k.json.prefix}… created in ${(ms / 1000).toFixed(2)} s and added to this browser's key list.`;
      window.vsrLastKey = { ms, powMs: found.ms, tried: found.tried };
      fillKeys();
    } catch (r) {
      status.className = "error";
      status.textContent = r instanceof Error ? `The proof of work failed: ${r.message}` : VSR.errorText(r);
    } finally {
      $("pow").hidden = true;
      button.disabled = false;
    }
  }

  // --- Try it --------------------------------------------------------------------------

  function fillKeys() {
    const select = $("try-key");
    const keep = select.value;
    select.replaceChildren(VSR.el("option", { value: "" }, "No key"));
    let active = null;
    for (const k of VSR.keys.list()) {
      const revoked = k.status === "revoked";
      const o = VSR.el("option", { value: k.key },
        `${k.prefix || k.key.slice(0, 11)}… (${(k.created_at || "").slice(0, 10)})${revoked ? " (revoked)" : ""}`);
      select.append(o);
      if (!revoked && !active) active = o;
    }
    if (keep && [...select.options].some((o) => o.value === keep)) select.value = keep;
    else if (active) select.value = active.value;
  }

  const examples = JSON.parse($("examples").textContent || "[]");

  // Models by name, with the question types each answers (System One `features`).
  const features = {};

  function bodyFor(i) {
    const e = examples[i];
    let model = $("s1-model").value;
    // A box example goes to a model that answers box questions, where one is served.
    if (e.photo && !(features[model] || []).includes("box")) {
      const boxed = Object.keys(features).find((m) => features[m].includes("box"));
      if (boxed) model = $("s1-model").value = boxed;
    }
    const request = JSON.parse(JSON.stringify(e.request));
    if (e.photo && photo) request.assets["<photo>"].data_base64 = photo;
    return JSON.stringify(Object.assign(model ? { model } : {}, request), null, 2);
  }

  // The chosen photo's base64 bytes, put into a box example's <photo> asset.
  let photo = "";

  function choosePhoto() {
    const file = $("s1-photo").files[0];
    if (!file) return;
    const reader = new FileReader();
    reader.onload = () => {
      const url = String(reader.result);
      photo = url.slice(url.indexOf(",") + 1);
      $("s1-img").src = url;
      $("s1-picture").hidden = false;
      clearMarks();
      try {
        const b = JSON.parse($("s1-body").value);
        b.assets = b.assets || {};
        b.assets["<photo>"] = { type: "image", data_base64: photo };
        $("s1-body").value = JSON.stringify(b, null, 2);
      } catch (_) {
        $("s1-body").value = bodyFor($("example").value);
      }
    };
    reader.readAsDataURL(file);
  }

  function clearMarks() {
    $("s1-picture").querySelectorAll(".boxmark").forEach((m) => m.remove());
  }

  // A box answer drawn on the photo: its edges are fractions of the picture's sides.
  function mark(id, a) {
    if ($("s1-picture").hidden || !a.box) return;
    const b = a.box;
    const pct = (x) => `${(x * 100).toFixed(2)}%`;
    $("s1-picture").append(VSR.el("div", {
      class: "boxmark", "data-question": id,
      style: `left:${pct(b.left)};top:${pct(b.top)};width:${pct(b.right - b.left)};height:${pct(b.bottom - b.top)}`,
    }, VSR.el("span", {}, `${id} ${Number(a.confidence).toFixed(2)}`)));
  }

  async function fillModels() {
    const select = $("s1-model");
    const r = await VSR.api("GET", "/v1/systemone/models");
    const names = [];
    for (const m of (r.json && r.json.models) || []) {
      const name = m.name || m.id;
      const surfaces = m.surfaces;
      if (name && (!Array.isArray(surfaces) || surfaces.includes("decisions"))) {
        names.push(name);
        features[name] = Array.isArray(m.features) ? m.features : [];
      }
    }
    select.replaceChildren(...names.map((n) => VSR.el("option", { value: n }, n)));
    if (!names.length) $("s1-status").textContent = "No System One model is ready yet; see the status page.";
  }

  function bars(probabilities) {
    const rows = Object.entries(probabilities || {}).map(([k, p]) =>
      VSR.el("tr", {},
        VSR.el("th", { scope: "row" }, k),
        VSR.el("td", { class: "num" }, p.toFixed(4)),
        VSR.el("td", {}, VSR.el("span", { class: "bar", style: `width:${Math.round(p * 200)}px` }))));
    return VSR.el("table", {}, VSR.el("tbody", {}, rows));
  }

  function showAnswers(json) {
    const out = $("s1-answers");
    out.replaceChildren();
    clearMarks();
    for (const [id, a] of Object.entries((json && json.answers) || {})) {
      let what;
      if (a.error) what = VSR.el("p", { class: "error" }, `${a.error}${a.reason ? " (" + a.reason + ")" : ""}: ${a.message || ""}`);
      else if (a.type === "noul") what = bars({ yes: a.noul, no: 1 - a.noul });
      else if (a.type === "choice") what = [VSR.el("p", {}, `Chosen: ${a.choice} (confidence ${Number(a.confidence).toFixed(4)})`), bars(a.probabilities)];
      else if (a.type === "score") what = [VSR.el("p", {}, `Score: ${Number(a.score).toFixed(4)} (confidence ${Number(a.confidence).toFixed(4)})`), bars(a.probabilities)];
      else if (a.type === "box") {
        const b = a.box;
        what = VSR.el("p", {}, `Box: left ${b.left}, top ${b.top}, right ${b.right}, bottom ${b.bottom} (confidence ${Number(a.confidence).toFixed(4)})`);
        mark(id, a);
      }
      else what = VSR.el("pre", {}, JSON.stringify(a, null, 2));
      out.append(VSR.el("section", { class: "answer-of", "data-question": id }, VSR.el("h4", {}, `${id} (${a.type})`), what));
    }
  }

  async function sendOne() {
    const status = $("s1-status");
    status.className = "";
    let body;
    try {
      body = JSON.parse($("s1-body").value);
    } catch (e) {
      status.className = "error";
      status.textContent = `The request body is not valid JSON: ${e.message}`;
      return;
    }
    status.textContent = "Asking…";
    const r = await VSR.api("POST", "/v1/systemone", { key: $("try-key").value, body });
    $("s1-raw").textContent = r.text;
    if (!r.ok) {
      status.className = "error";
      status.textContent = VSR.errorText(r);
      $("s1-answers").replaceChildren();
      return;
    }
    status.className = "good";
    status.textContent = `${r.status}: answered by ${r.json.model} in ${Math.round(r.ms)} ms, ${VSR.fmt(r.json.usage && r.json.usage.input_tokens)} input tokens.`;
    showAnswers(r.json);
  }

  function chatBody() {
    return {
      model: "vllm-sr/auto",
      messages: [{ role: "user", content: $("s2-message").value }],
      max_tokens: Number($("s2-max").value) || 64,
    };
  }

  async function sendTwo() {
    const status = $("s2-status");
    status.className = "";
    status.textContent = "Routing and answering…";
    $("s2-answer").hidden = true;
    $("s2-headers").hidden = true;
    const r = await VSR.api("POST", "/v1/chat/completions", {
      key: $("try-key").value, body: chatBody(), headers: { "X-Vsr-Debug": "true" },
    });
    if (!r.ok) {
      status.className = "error";
      status.textContent = VSR.errorText(r);
      return;
    }
    const choice = r.json.choices && r.json.choices[0];
    $("s2-answer").textContent = (choice && choice.message && choice.message.content) || "(no text)";
    $("s2-answer").hidden = false;
    const rows = [];
    r.headers.forEach((v, k) => {
      if (k.startsWith("x-vsr-") || k === "server-timing") rows.push([k, v]);
    });
    rows.sort((a, b) => a[0].localeCompare(b[0]));
    $("s2-headers").tBodies[0].replaceChildren(...rows.map(([k, v]) =>
      VSR.el("tr", {}, VSR.el("th", { scope: "row" }, VSR.el("code", {}, k)), VSR.el("td", {}, v))));
    $("s2-headers").hidden = false;
    status.className = "good";
    status.textContent = `${r.status}: ${r.json.model} answered in ${Math.round(r.ms)} ms.`;
  }

  document.addEventListener("DOMContentLoaded", async () => {
    $("get-key-button").addEventListener("click", getKey);
    $("copy-key").addEventListener("click", () => VSR.copy($("new-key-value").textContent, $("key-copied")));
    const ex = $("example");
    examples.forEach((e, i) => ex.append(VSR.el("option", { value: i }, e.title)));
    ex.addEventListener("change", () => {
      $("s1-body").value = bodyFor(ex.value);
      const photoExample = Boolean(examples[ex.value].photo);
      $("s1-photo-row").hidden = !photoExample;
      $("s1-picture").hidden = !photoExample || !photo;
    });
    $("s1-photo").addEventListener("change", choosePhoto);
    $("s1-model").addEventListener("change", () => {
      // Keep the user's edits: change only the model member.
      try {
        const b = JSON.parse($("s1-body").value);
        b.model = $("s1-model").value;
        $("s1-body").value = JSON.stringify(b, null, 2);
      } catch (_) {
        $("s1-body").value = bodyFor(ex.value);
      }
    });
    $("s1-send").addEventListener("click", sendOne);
    $("s1-curl").addEventListener("click", () => VSR.copy(VSR.curl("POST", "/v1/systemone", $("s1-body").value), $("copied")));
    $("s2-send").addEventListener("click", sendTwo);
    $("s2-curl").addEventListener("click", () =>
      VSR.copy(VSR.curl("POST", "/v1/chat/completions", chatBody(), { "X-Vsr-Debug": "true" }), $("copied")));
    fillKeys();
    const info = await VSR.api("GET", "/api/info");
    if (info.ok && info.json.keys && info.json.keys.required) $("try-key-hint").textContent = "This server needs a key: get one above.";
    await fillModels();
    $("s1-body").value = bodyFor(0);
  });
})();
