"""The keys service of a running `vllm-srun router --require-keys`: a key made with the
spec's own Python recipe (only BASE changed), used on System One with its rate-limit
headers, its usage, revoke (the next request is refused), forget (no row left in the
database). Prints a fresh key last, for the next checks.
Usage: keys_check.py BASE SYSTEM_ONE_MODEL SQLITE_FILE"""
import json
import sqlite3
import sys
import urllib.error
import urllib.request

base, model, db = sys.argv[1], sys.argv[2], sys.argv[3]
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: {detail}", file=sys.stderr)


# --- The spec's snippet (Create a key from a terminal), BASE changed. ---
import hashlib, itertools, json, urllib.request

BASE = base

def post(path, body=None):
    data = b"" if body is None else json.dumps(body).encode()
    headers = {} if body is None else {"content-type": "application/json"}
    req = urllib.request.Request(BASE + path, data=data, headers=headers)
    with urllib.request.urlopen(req) as res:
        return json.load(res)

challenge = post("/api/keys/challenge")
target = 1 << (256 - challenge["difficulty"])
prefix = challenge["challenge"] + ":"

def solves(n):
    digest = hashlib.sha256(f"{prefix}{n}".encode()).digest()
    return int.from_bytes(digest, "big") < target

nonce = next(n for n in itertools.count() if solves(n))
key = post("/api/keys", {
    "challenge": challenge["challenge"],
    "nonce": str(nonce),
    "accept_terms": True,
})
# --- end of the snippet ---
api_key = key["api_key"]
check("the snippet got a key", api_key.startswith("sk-vsr-"), key)


def call(method, path, key=None, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    if body is not None:
        req.add_header("content-type", "application/json")
    if key:
        req.add_header("X-API-Key", key)
    try:
        with urllib.request.urlopen(req, timeout=120) as res:
            raw = res.read()
            return res.status, res.headers, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, e.headers, json.loads(raw) if raw else None


ask = {"model": model, "state": "Refund my order, it arrived broken.",
       "questions": {"angry": {"type": "noul", "instructions": "Is the writer upset?"}}}
s, h, v = call("POST", "/v1/systemone", None, ask)
check("no key: 401 invalid_api_key", s == 401 and v["error"]["code"] == "invalid_api_key", (s, v))
check("401 has a request id", h.get("x-request-id"), dict(h))
s, h, v = call("POST", "/v1/systemone", api_key, ask)
check("System One answers with the key", s == 200 and "angry" in v.get("answers", {}), (s, v))
check("rate-limit headers", h.get("x-ratelimit-limit-requests") and h.get("x-ratelimit-remaining-requests")
      and h.get("x-ratelimit-reset-tokens"), dict(h))
s, _, me = call("GET", "/api/keys/self", api_key)
check("self counts the request", s == 200 and me["usage_today"]["requests"] == 1
      and me["usage_today"]["input_tokens"] == v["usage"]["input_tokens"], me)
s, _, u = call("GET", "/api/keys/self/usage", api_key)
check("usage: 30 days, the model, latency", s == 200 and len(u["days"]) == 30
      and u["models"][0]["id"] == model and u["recent"]["latency_ms"]["p50"] is not None, u)
s, _, info = call("GET", "/api/info")
check("info lists the model's admission", s == 200 and any(m["id"] == model and "admission" in m for m in info["models"]), info)
# The per-model limits a client reads from /api/info (system-duo-api.txt, "Per-model limits").
limits = next(m for m in info["models"] if m["id"] == model)["limits"]
names = ["max_state_chars", "max_options", "max_states", "max_questions", "max_images", "max_image_bytes",
         "max_videos", "max_video_bytes", "max_video_seconds", "max_video_frames", "max_request_tokens",
         "timeout_seconds", "box"]
check("info: every per-model limit", all(k in limits for k in names) and limits["box"] is False, limits)
# A request one past a published limit is refused at that limit.
q = {"q": {"type": "noul", "instructions": "Is it?"}}
states = {f"s{i}": {"state": "x", "questions": q} for i in range(limits["max_states"] + 1)}
s, _, v = call("POST", "/v1/decisions", api_key, {"model": model, "states": states})
check("one past max_states: 400 too_many_states at the published limit",
      s == 400 and v["error"]["reason"] == "too_many_states" and v["error"]["limit"] == limits["max_states"], (s, v))
# "Both APIs answer errors in one shape, the OpenAI one", whoever refused: the router (an
# unknown model) and the worker (an unknown member) alike; the vllm-sr/5.0 words stay beside it.
for name, path, body, status, code in [
        ("unknown model", "/v1/systemone", dict(ask, model="no-such-model"), 404, "model_not_found"),
        ("unknown member", "/v1/systemone", dict(ask, colour="red"), 400, "invalid_request")]:
    s, _, v = call("POST", path, api_key, body)
    e = (v or {}).get("error", {})
    check(f"{name}: {status} in the OpenAI shape and the flat one",
          s == status and e.get("type") == "invalid_request_error" and e.get("message")
          and e.get("code") == v.get("code") == code, (s, v))
# A batch through the router: the worker's body, answered under responses, charged its usage.
s, _, me0 = call("GET", "/api/keys/self", api_key)
batch = {"model": model, "requests": {"a": {"state": "The build is broken.", "questions": ask["questions"]},
                                      "b": {"state": "Thanks, all good.", "questions": ask["questions"]}}}
s, _, v = call("POST", "/v1/systemone/batch", api_key, batch)
check("batch through the router: each request answered under responses",
      s == 200 and all("angry" in v["responses"][n]["answers"] for n in "ab"), (s, v))
s, _, me1 = call("GET", "/api/keys/self", api_key)
used = sum(v["responses"][n]["usage"]["input_tokens"] for n in "ab")
check("batch: charged its requests' input tokens",
      me1["usage_today"]["input_tokens"] - me0["usage_today"]["input_tokens"] == used, (me0, me1, used))
s, _, _ = call("DELETE", "/api/keys/self", api_key)
check("revoke: 204", s == 204, s)
s, _, v = call("POST", "/v1/systemone", api_key, ask)
check("revoked: refused on the very next request", s == 401, (s, v))

# Forget: a second key's rows are gone from the database.
def new_key():
    c = post("/api/keys/challenge")
    t = 1 << (256 - c["difficulty"])
    n = next(n for n in itertools.count()
             if int.from_bytes(hashlib.sha256(f"{c['challenge']}:{n}".encode()).digest(), "big") < t)
    return post("/api/keys", {"challenge": c["challenge"], "nonce": str(n), "accept_terms": True})

k2 = new_key()
call("POST", "/v1/systemone", k2["api_key"], ask)
s, _, v = call("POST", "/api/keys/self/forget", k2["api_key"])
check("forget: 202 scheduled", s == 202 and v["status"] == "scheduled", (s, v))
con = sqlite3.connect(db)
rows = sum(con.execute(f"SELECT COUNT(*) FROM {t} WHERE {c} = ?", (k2["key_id"],)).fetchone()[0]
           for t, c in [("keys", "id"), ("usage_days", "key_id"), ("requests", "key_id")])
check("forget: no row of the key remains", rows == 0, rows)

print(f"keys: {passed} passed, {failed} failed", file=sys.stderr)
if failed:
    sys.exit(1)
print(new_key()["api_key"])
