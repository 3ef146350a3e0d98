"""The web pages in a real browser: Debian's chromium, driven by Playwright's Python package.

    python3 tests/pages_check.py ROUTER_URL DECISION_MODEL [SCREENSHOT_DIR]

ROUTER_URL is a router with the keys service and the pages, on a fresh data directory (the
check creates four keys from this address: the fourth must be refused). Gets a key on the
home page, uses it on Try it (System One and System Two, and the copied curl command), reads
its usage on the Keys page, revokes it and sees the next request refused, deletes a second
key with its data, adds an older site's key (OLD_KEY, an `sk-pt-` key the operator imported)
through the one-time link and deletes it, sees the status page list the models, and
measures the proof of work.
Screenshots of every page go to SCREENSHOT_DIR (default target/pages).
"""
import json
import os
import re
import statistics
import subprocess
import sys
import urllib.request

from playwright.sync_api import sync_playwright

BASE = sys.argv[1].rstrip("/")
MODEL = sys.argv[2]
SHOTS = sys.argv[3] if len(sys.argv) > 3 else "target/pages"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
os.makedirs(SHOTS, exist_ok=True)

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok    {name}", file=sys.stderr)
    else:
        failed += 1
        print(f"FAIL  {name}: {detail}", file=sys.stderr)


def broken_images(page):
    """The images a person would see that show nothing: no source, or one that did not load."""
    return page.evaluate("""() => [...document.querySelectorAll('img')]
        .filter(i => i.getClientRects().length > 0
                     && (!i.getAttribute('src') || (i.complete && i.naturalWidth === 0)))
        .map(i => i.id || i.alt || i.src)""")


def wait_text(page, selector, pattern, timeout=120_000):
    """Wait until the element's text matches `pattern`; return the text."""
    page.wait_for_function(
        "([s, p]) => { const e = document.querySelector(s); return e && new RegExp(p).test(e.textContent); }",
        arg=[selector, pattern], timeout=timeout)
    return page.text_content(selector)


def get_key(page):
    page.get_by_role("button", name="Get a key").click()
    wait_text(page, "#key-status", "created in|^\\d{3}|failed")
    return page.text_content("#key-status")


with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=CHROMIUM, args=[
        "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"])
    ctx = browser.new_context(viewport={"width": 1200, "height": 900})
    ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=BASE)
    page = ctx.new_page()
    problems, elsewhere = [], []
    # A refused API call is logged by the browser as a failed load; the checks read those
    # answers themselves. Any other error (a script's, a refused resource's) is a problem.
    page.on("console", lambda m: m.type == "error" and not m.text.startswith("Failed to load resource")
            and problems.append(m.text))
    page.on("response", lambda r: (r.status == 404 or r.status >= 500) and problems.append(f"{r.status} {r.url}"))
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("request", lambda r: r.url.startswith((BASE, "data:", "blob:")) or elsewhere.append(r.url))
    page.on("dialog", lambda d: d.accept())

    # --- Home: get a key --------------------------------------------------------------
    page.goto(BASE + "/")
    check("home: title", "Home" in page.title(), page.title())
    status = get_key(page)
    key = page.text_content("#new-key-value") or ""
    check("home: a key is shown once, with its prefix", re.fullmatch(r"sk-vsr-[A-Za-z0-9]{32}", key)
          and key[:11] in status, (key, status))
    stored = page.evaluate("JSON.parse(localStorage.getItem('vsr.keys'))")
    check("home: the key is in this browser's list", stored and stored[0]["key"] == key, stored)
    click_ms = page.evaluate("window.vsrLastKey.ms")
    page.get_by_role("button", name="Copy").first.click()
    check("home: Copy puts the key on the clipboard",
          page.evaluate("navigator.clipboard.readText()") == key)
    page.screenshot(path=f"{SHOTS}/home-key.png", full_page=True)

    # The proof of work as the button runs it, on fresh challenges at the server's difficulty.
    difficulty = json.load(urllib.request.urlopen(BASE + "/api/info"))["keys"]["difficulty"]
    times = page.evaluate("""async (d) => {
        const out = [];
        for (let i = 0; i < 15; i++) {
            const c = crypto.getRandomValues(new Uint32Array(4)).join("-");
            out.push((await window.vsrSolve(c, d)).ms);
        }
        return out;
    }""", difficulty)
    median = statistics.median(times)
    print(f"pages: proof of work at difficulty {difficulty}: median {median:.0f} ms over 15 "
          f"(min {min(times):.0f}, max {max(times):.0f}); one click to a shown key {click_ms:.0f} ms",
          file=sys.stderr)
    check("home: key creation's median under 1 s", median < 1000, times)
    selftest = page.evaluate("""() => new Promise((res) => {
        const w = new Worker('/assets/pow.js');
        w.onmessage = (e) => { w.terminate(); res(e.data); };
        w.postMessage({selftest: 'vsr:' + 'x'.repeat(70) + ':12345'});
    })""")
    check("pow.js: the fallback SHA-256 equals WebCrypto's", selftest["selftest"] == selftest["webcrypto"], selftest)

    # --- Try it: System One ------------------------------------------------------------
    page.select_option("#try-key", key)
    page.select_option("#s1-model", MODEL)
    page.select_option("#example", index=1)
    check("home: a text example shows no broken image", not broken_images(page), broken_images(page))
    page.get_by_role("button", name="Send").first.click()
    s1 = wait_text(page, "#s1-status", "^\\d{3}")
    answer = json.loads(page.text_content("#s1-raw") or "{}")
    a = answer.get("answers", {})
    check("try it: System One answered", s1.startswith("200") and set(a) == {"route", "receipt", "urgency"}, s1)
    shown = page.locator("#s1-answers [data-question]").count()
    check("try it: every answer is drawn", shown == 3, shown)
    route = a.get("route", {})
    check("try it: a damaged delivery goes to returns", route.get("choice") == "returns", route)
    check("try it: probabilities sum to 1",
          abs(sum(route.get("probabilities", {}).values()) - 1) < 1e-3, route)
    page.locator("#s1-curl").click()
    curl = page.evaluate("navigator.clipboard.readText()")
    check("try it: curl elides the key", "$VLLM_SR_API_KEY" in curl and key not in curl, curl)
    run = subprocess.run(["bash", "-c", curl], capture_output=True, text=True,
                         env={**os.environ, "VLLM_SR_API_KEY": key}, timeout=300)
    try:
        via_curl = json.loads(run.stdout)["answers"]
    except Exception:
        via_curl = run.stdout
    check("try it: the copied curl command gets the same answers", via_curl == a, (via_curl, a))

    # --- Try it: a box drawn on the photo (the model has the detector attached) -------------
    dog = os.path.join(os.environ.get("VLLM_SRUN_TEST_PHOTOS", "/usr/share/darknet/data"), "dog.jpg")
    page.select_option("#example", index=2)
    check("try it: the box example asks for a photo", page.is_visible("#s1-photo"), None)
    page.set_input_files("#s1-photo", dog)
    page.wait_for_function("() => document.querySelector('#s1-body').value.length > 100000")
    page.get_by_role("button", name="Send").first.click()
    s1 = wait_text(page, "#s1-status", "^\\d{3}")
    answer = json.loads(page.text_content("#s1-raw") or "{}")
    where = answer.get("answers", {}).get("where", {})
    check("try it: the box example is answered with a box",
          s1.startswith("200") and where.get("type") == "box", (s1, where))
    mark = page.locator("#s1-picture .boxmark[data-question=where]")
    check("try it: the box is drawn on the photo", mark.count() == 1, mark.count())
    if mark.count() == 1 and where.get("box"):
        img, m = page.locator("#s1-img").bounding_box(), mark.bounding_box()
        drawn = ((m["x"] - img["x"]) / img["width"], (m["y"] - img["y"]) / img["height"],
                 (m["x"] + m["width"] - img["x"]) / img["width"],
                 (m["y"] + m["height"] - img["y"]) / img["height"])
        want = tuple(where["box"][k] for k in ("left", "top", "right", "bottom"))
        check("try it: the drawn box is where the answer says",
              all(abs(x - y) < 0.02 for x, y in zip(drawn, want)), (drawn, want))
    check("home: the chosen photo is shown whole", not broken_images(page), broken_images(page))
    page.screenshot(path=os.path.join(SHOTS, "home-box.png"), full_page=True)

    # --- Try it: System Two ------------------------------------------------------------
    page.fill("#s2-message", "What is 17 times 23? Show the calculation.")
    page.fill("#s2-max", "16")
    page.locator("#s2-send").click()
    s2 = wait_text(page, "#s2-status", "^\\d{3}", timeout=300_000)
    check("try it: System Two answered", s2.startswith("200"), s2)
    check("try it: the answer is shown", len((page.text_content("#s2-answer") or "").strip()) > 0)
    headers = page.locator("#s2-headers tbody th").all_text_contents()
    check("try it: the routing headers are drawn",
          {"x-vsr-selected-decision", "x-vsr-selected-model"} <= set(headers)
          and any(h.startswith("x-vsr-matched-") for h in headers), headers)
    page.locator("#s2-curl").click()
    curl2 = page.evaluate("navigator.clipboard.readText()")
    check("try it: System Two's curl asks for the debug headers",
          "X-Vsr-Debug: true" in curl2 and key not in curl2, curl2)
    page.screenshot(path=f"{SHOTS}/home-try-it.png", full_page=True)

    # --- Keys page -----------------------------------------------------------------------
    page.goto(BASE + "/keys")
    card = page.locator("article.key").first
    page.wait_for_selector("article.key figure.chart", timeout=60_000)
    meta = card.locator(".key-meta").text_content()
    m = re.search(r"Today \(System One\): (\d+) requests", meta or "")
    check("keys: today's usage counts the requests", m and int(m.group(1)) >= 2, meta)
    check("keys: four charts", card.locator("figure.chart").count() == 4)
    labels = " ".join(card.locator("figure.chart svg").evaluate_all("s => s.map(x => x.getAttribute('aria-label'))"))
    check("keys: the charts show both systems' requests",
          re.search(r"Requests, last 30 days: System One [1-9]\d*, System Two [1-9]", labels), labels)
    rows = card.locator("table.models tbody th").all_text_contents()
    check("keys: per model, both systems", MODEL in rows and "vllm-sr/auto" in rows, rows)
    recent = card.locator("ul.recent").text_content() or ""
    check("keys: recent server times", re.search(r"p50 [\d,]+ ms, p90 [\d,]+ ms", recent), recent)
    check("keys: today's quota", card.locator("table.quota progress").count() >= 1)
    page.screenshot(path=f"{SHOTS}/keys.png", full_page=True)

    # Revoke: the next request is refused, and the page says why.
    card.get_by_role("button", name="Revoke").click()
    wait_text(page, "#keys-status", "revoked")
    wait_text(page, "article.key .key-problem", "revoked")
    page.goto(BASE + "/")
    page.wait_for_function("() => document.querySelectorAll('#s1-model option').length > 0")
    page.select_option("#try-key", key)
    page.select_option("#s1-model", MODEL)
    page.get_by_role("button", name="Send").first.click()
    refused = wait_text(page, "#s1-status", "^\\d{3}")
    check("revoked: the next request is refused, readably",
          refused.startswith("401 invalid_api_key") and "revoked" in refused, refused)
    again = subprocess.run(["bash", "-c", curl], capture_output=True, text=True,
                           env={**os.environ, "VLLM_SR_API_KEY": key}, timeout=60)
    check("revoked: the curl command is refused too", "invalid_api_key" in again.stdout, again.stdout)
    page.screenshot(path=f"{SHOTS}/home-revoked.png", full_page=True)

    # Delete key and its data.
    status = get_key(page)
    second = page.text_content("#new-key-value")
    page.goto(BASE + "/keys")
    page.wait_for_selector("article.key figure.chart", timeout=60_000)
    target = page.locator(f"article.key[data-prefix='{second[:11]}']")
    target.get_by_role("button", name="Delete key and its data").click()
    wait_text(page, "#keys-status", "deleted")
    left = [k["key"] for k in page.evaluate("JSON.parse(localStorage.getItem('vsr.keys'))")]
    check("forget: the key leaves this browser's list", second not in left and key in left, left)
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", BASE + "/api/keys/self",
                        "-H", f"X-API-Key: {second}"], capture_output=True, text=True)
    check("forget: the key no longer works", r.stdout == "401", r.stdout)

    # An older site's key (sk-pt-, imported by the operator with `vllm-srun keys import`)
    # arrives through the one-time link, works, and is deleted where the spec says (/pt).
    old = os.environ.get("OLD_KEY")
    if old:
        forgets = []
        page.on("request", lambda r: forgets.append(r.url) if r.url.endswith("/keys/self/forget") else None)
        page.goto(BASE + "/keys#add=" + old)
        wait_text(page, "#keys-status", "added")
        check("older key: the one-time link leaves the address bar", "#" not in page.url, page.url)
        stored = [k["key"] for k in page.evaluate("JSON.parse(localStorage.getItem('vsr.keys'))")]
        check("older key: added to this browser's list", old in stored, stored)
        card = page.locator(f"article.key[data-prefix='{old[:10]}']")
        card.locator("figure.chart").first.wait_for(timeout=60_000)
        ask = json.dumps({"model": MODEL, "state": "Hello", "questions": {"q": {"type": "noul", "instructions": "Is it a greeting?"}}})
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", BASE + "/v1/systemone",
                            "-H", f"X-API-Key: {old}", "-H", "content-type: application/json", "-d", ask],
                           capture_output=True, text=True)
        check("older key: System One answers with it", r.stdout == "200", r.stdout)
        card.get_by_role("button", name="Delete key and its data").click()
        wait_text(page, "#keys-status", "deleted")
        check("older key: deleted through /pt/api/keys/self/forget",
              any(u.endswith("/pt/api/keys/self/forget") for u in forgets), forgets)
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", BASE + "/api/keys/self",
                            "-H", f"X-API-Key: {old}"], capture_output=True, text=True)
        check("older key: no longer works", r.stdout == "401", r.stdout)
        page.screenshot(path=f"{SHOTS}/keys-older.png", full_page=True)

    # The fourth key from this address within the hour: a 429 that says when to retry.
    page.goto(BASE + "/")
    get_key(page)
    limited = get_key(page)
    check("home: a refused key says when to retry",
          limited.startswith("429 key_creation_limited") and "Try again in" in limited, limited)
    page.screenshot(path=f"{SHOTS}/home-limited.png", full_page=True)

    # --- Status page ---------------------------------------------------------------------
    page.goto(BASE + "/status")
    page.wait_for_selector(f"tr[data-model='{MODEL}']", timeout=30_000)
    row = page.locator(f"tr[data-model='{MODEL}']").text_content() or ""
    check("status: the decision model is listed as ready", "Ready" in row, row)
    auto = page.locator("tr[data-model='vllm-sr/auto']").text_content() or ""
    check("status: vllm-sr/auto is listed", "Ready" in auto or "Degraded" in auto, auto)
    p50 = page.locator(f"tr[data-model='{MODEL}'] td.num").first.text_content()
    check("status: live server times", p50 and p50 != "—", row)
    first = page.text_content("#updated")
    try:
        page.wait_for_function("(t) => document.querySelector('#updated').textContent !== t",
                               arg=first, timeout=15_000)
        refreshed = True
    except Exception as e:
        refreshed = e
    check("status: refreshed without reloading", refreshed is True, refreshed)
    page.screenshot(path=f"{SHOTS}/status.png", full_page=True)

    # --- Terms, privacy, limits ----------------------------------------------------------
    page.goto(BASE + "/")
    page.click("label:has(#terms) a[href='/terms']")
    page.wait_for_url(BASE + "/terms")
    check("home: the terms checkbox links to the terms", "Terms of use" in page.title(), page.title())
    check("terms: research and evaluation only",
          "research and evaluation only" in (page.text_content("main") or ""))
    page.screenshot(path=f"{SHOTS}/terms.png", full_page=True)
    page.click("a[href='/privacy']")
    page.wait_for_url(BASE + "/privacy")
    text = page.text_content("main") or ""
    check("privacy: says what is stored, how long, and how forget works",
          all(w in text for w in ["SHA-256", "Two days", "/api/keys/self/forget", "not stored"]), text[:200])
    page.screenshot(path=f"{SHOTS}/privacy.png", full_page=True)
    info = json.load(urllib.request.urlopen(BASE + "/api/info"))
    mine = next(m for m in info["models"] if m["id"] == MODEL)
    page.goto(BASE + "/limits")
    page.wait_for_selector(f"#model-limits th[data-model='{MODEL}']", timeout=30_000)
    col = page.evaluate(
        "(m) => [...document.querySelectorAll('#model-limits th')].findIndex(th => th.dataset.model === m)",
        MODEL)
    shown = {}
    for k in ["max_questions", "max_video_seconds", "max_request_tokens", "box"]:
        shown[k] = page.locator(f"#model-limits tr[data-limit={k}] > *").nth(col).text_content()
    want = {k: ("yes" if mine["limits"][k] is True else "no" if mine["limits"][k] is False
                else f"{mine['limits'][k]:,}") for k in shown}
    check("limits: the page shows /api/info's per-model limits", shown == want, (shown, want))
    per_key = page.locator("#rate-limits tbody tr").first.text_content() or ""
    check("limits: the page shows the per-key rate limits",
          f"{info['rate_limits']['per_key']['requests_per_minute']:,}" in per_key, per_key)
    page.screenshot(path=f"{SHOTS}/limits.png", full_page=True)

    check("no script error or refused resource on any page", not problems, problems)
    check("every byte came from this server", not elsewhere, elsewhere)
    browser.close()

print(f"pages: {passed} passed, {failed} failed", file=sys.stderr)
sys.exit(1 if failed else 0)
