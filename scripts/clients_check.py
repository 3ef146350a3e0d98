"""End-to-end checks with real client libraries against a running server.

The official OpenAI Python SDK (embeddings, float and base64), and a plain msgpack client
for the SIE endpoints (/v1/encode, /v1/score, errors). Usage: clients_check.py URL
Prints `clients: N passed, M failed` and exits non-zero on any failure.
"""
import base64
import json
import struct
import math
import sys
import urllib.error
import urllib.request

import msgpack
import openai

URL = sys.argv[1].rstrip("/")
passed, failed = 0, 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok    {name}")
    else:
        failed += 1
        print(f"FAIL  {name} {detail}")


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def post_msgpack(path, body, accept="application/msgpack"):
    req = urllib.request.Request(
        URL + path,
        data=msgpack.packb(body),
        headers={"Content-Type": "application/msgpack", "Accept": accept},
    )
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


texts = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market fell sharply today."]
client = openai.OpenAI(base_url=URL + "/v1", api_key="unused")
for fmt in ["float", "base64"]:
    r = client.embeddings.create(model="minilm-l6", input=texts, encoding_format=fmt)
    # Asked for explicitly, base64 comes back as the string the server sent: little-endian f32.
    v = [d.embedding if fmt == "float" else list(struct.unpack(f"<{384}f", base64.b64decode(d.embedding))) for d in r.data]
    check(f"openai sdk embeddings ({fmt}): 3 vectors of 384", len(v) == 3 and all(len(x) == 384 for x in v))
    c1, c2 = cosine(v[0], v[1]), cosine(v[0], v[2])
    check(f"openai sdk ({fmt}): cosine 0.755 / 0.004 within 1e-3", abs(c1 - 0.755) < 1e-3 and abs(c2 - 0.004) < 1e-3, f"{c1:.4f} {c2:.4f}")
    check(f"openai sdk ({fmt}): usage counted", r.usage.prompt_tokens > 10 and r.usage.total_tokens == r.usage.prompt_tokens)
# The SDK's default (no encoding_format) asks for base64 and decodes it.
r = client.embeddings.create(model="minilm-l6", input="A man is eating food.")
check("openai sdk default call", len(r.data[0].embedding) == 384)
try:
    client.embeddings.create(model="minilm-l6", input="x", dimensions=128)
    check("openai sdk: undeclared dimensions refused", False)
except openai.BadRequestError as e:
    check("openai sdk: undeclared dimensions refused with 400", e.status_code == 400)
try:
    client.embeddings.create(model="no-such-model", input="x")
    check("openai sdk: unknown model 404", False)
except openai.NotFoundError:
    check("openai sdk: unknown model 404", True)

# msgpack round trips on the SIE face.
status, headers, raw = post_msgpack("/v1/encode/minilm-l6", {"items": [{"id": "a", "text": texts[0]}, {"id": "b", "text": texts[1]}]})
body = msgpack.unpackb(raw)
check("msgpack /v1/encode: 200 msgpack answer", status == 200 and headers["Content-Type"] == "application/msgpack")
ok = [it["id"] for it in body["items"]] == ["a", "b"] and body["items"][0]["dense"]["dims"] == 384
check("msgpack /v1/encode: ids echoed, dense 384", ok)
c = cosine(body["items"][0]["dense"]["values"], body["items"][1]["dense"]["values"])
check("msgpack /v1/encode: cosine 0.755", abs(c - 0.755) < 1e-3, f"{c:.4f}")
check("msgpack /v1/encode: timing headers", all(h in headers for h in ["X-Total-Time", "X-Queue-Time", "X-Tokenization-Time", "X-Inference-Time"]))
status, headers, raw = post_msgpack("/v1/score/minilm-l6", {"query": {"id": "q", "text": "A man eats"}, "items": [{"id": "x", "text": texts[2]}, {"id": "y", "text": texts[1]}]})
body = msgpack.unpackb(raw)
check("msgpack /v1/score: sorted with ranks", status == 200 and [s["item_id"] for s in body["scores"]] == ["y", "x"] and [s["rank"] for s in body["scores"]] == [0, 1], str(body))
check("msgpack /v1/score: query id and usage", body["query_id"] == "q" and body["usage"]["input_tokens"] > 0)
status, headers, raw = post_msgpack("/v1/encode/nope", {"items": [{"text": "x"}]})
check("msgpack error: 404 MODEL_NOT_FOUND", status == 404 and msgpack.unpackb(raw)["detail"]["code"] == "MODEL_NOT_FOUND")
status, headers, raw = post_msgpack("/v1/encode/minilm-l6", {"items": [{"text": "x"}]}, accept="application/json")
check("Accept: application/json answers JSON", status == 200 and json.loads(raw)["items"][0]["dense"]["dims"] == 384)

print(f"clients: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
