"""End-to-end checks with real client libraries against a running server.

The official OpenAI Python SDK (models, embeddings float and base64, chat completions
streamed and not, tools, JSON schema answers, completions, errors), and a plain msgpack
client for the SIE endpoints (/v1/encode, /v1/score, /v1/generate, errors); against `serve`
(when the listing has `vllm-sr/auto`), System Two through the SDK. Usage: clients_check.py URL
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
r = client.embeddings.create(model="minilm-l6", input="A man is eating food.", dimensions=128)
short = r.data[0].embedding
check("openai sdk: dimensions 128 gives a unit vector of 128",
      len(short) == 128 and abs(math.sqrt(sum(x * x for x in short)) - 1) < 1e-4)
try:
    client.embeddings.create(model="minilm-l6", input="x", dimensions=1024)
    check("openai sdk: more dimensions than the model has refused", False)
except openai.BadRequestError as e:
    check("openai sdk: more dimensions than the model has refused with 400", e.status_code == 400)
try:
    client.embeddings.create(model="no-such-model", input="x")
    check("openai sdk: unknown model 404", False)
except openai.NotFoundError:
    check("openai sdk: unknown model 404", True)

# Generation through the SDK, on the first model that serves it.
models = client.models.list()
gen = [m.id for m in models.data if "generate" in (getattr(m, "surfaces", None) or [])]
check("openai sdk models.list: a generating model listed", len(gen) > 0, str([m.id for m in models.data]))
if gen:
    m = gen[0]
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    r = client.chat.completions.create(model=m, messages=msgs, max_tokens=12, temperature=0)
    text = r.choices[0].message.content
    check("openai sdk chat: an answer with usage", bool(text) and r.usage.completion_tokens > 0
          and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, str(r))
    chunks = list(client.chat.completions.create(model=m, messages=msgs, max_tokens=12, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check("openai sdk chat stream: same text as the whole answer", streamed == text, f"{streamed!r} vs {text!r}")
    check("openai sdk chat stream: usage chunk last", chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == r.usage.completion_tokens)
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                             "required": ["city", "unit"]}}}]
    r = client.chat.completions.create(model=m, messages=[{"role": "user", "content": "What's the weather in Paris?"}],
                                       tools=tools, tool_choice="required", temperature=0, max_tokens=80)
    calls = r.choices[0].message.tool_calls or []
    ok = False
    if calls:
        try:
            args = json.loads(calls[0].function.arguments)
            ok = calls[0].function.name == "get_weather" and isinstance(args.get("city"), str) and args.get("unit") in ("celsius", "fahrenheit")
        except ValueError:
            ok = False
    check("openai sdk tools: get_weather called with valid JSON arguments", ok and r.choices[0].finish_reason == "tool_calls", str(r))
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30}, "age": {"type": "integer", "minimum": 0, "maximum": 150}},
              "required": ["name", "age"], "additionalProperties": False}
    r = client.chat.completions.create(model=m, messages=[{"role": "user", "content": "Invent a person: name and age."}],
                                       response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}},
                                       temperature=0, max_tokens=80)
    try:
        doc = json.loads(r.choices[0].message.content)
        ok = set(doc) == {"name", "age"} and isinstance(doc["name"], str) and isinstance(doc["age"], int) and 0 <= doc["age"] <= 150
    except ValueError:
        ok = False
    check("openai sdk response_format json_schema: parses and validates", ok, r.choices[0].message.content)
    r = client.completions.create(model=m, prompt="The capital of France is", max_tokens=4, temperature=0)
    check("openai sdk completions: Paris", "Paris" in r.choices[0].text, r.choices[0].text)
    try:
        client.chat.completions.create(model="no-such-model", messages=msgs)
        check("openai sdk chat: unknown model 404", False)
    except openai.NotFoundError as e:
        check("openai sdk chat: unknown model 404", e.code == "model_not_found")
    try:
        client.chat.completions.create(model=m, messages=msgs, temperature=9)
        check("openai sdk chat: bad temperature 400", False)
    except openai.BadRequestError as e:
        check("openai sdk chat: bad temperature 400", e.param == "temperature")
    status, headers, raw = post_msgpack(f"/v1/generate/{m}", {"prompt": "The capital of France is", "max_new_tokens": 4, "temperature": 0})
    body = msgpack.unpackb(raw)
    check("msgpack /v1/generate: text, finish_reason, usage, ttft_ms", status == 200 and "Paris" in body["text"]
          and body["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 4 and body["ttft_ms"] > 0, str(body))

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

# Against `serve` (router in front): System Two through the same SDK, routed to a served model.
if "vllm-sr/auto" in [m.id for m in models.data]:
    raw = client.chat.completions.with_raw_response.create(
        model="vllm-sr/auto", messages=[{"role": "user", "content": "Say hello."}], max_tokens=6, temperature=0)
    r = raw.parse()
    routed = raw.headers.get("x-vsr-selected-model")
    check("openai sdk vllm-sr/auto: routed to a served model with an answer",
          routed in gen and bool(r.choices[0].message.content) and r.model == routed, f"{routed} {r}")
    chunks = list(client.chat.completions.create(model="vllm-sr/auto", messages=[{"role": "user", "content": "Say hello."}],
                                                 max_tokens=6, temperature=0, stream=True))
    check("openai sdk vllm-sr/auto stream: text arrives in chunks",
          "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) != "")

print(f"clients: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
