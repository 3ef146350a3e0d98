"""System Two through the official OpenAI Python SDK, against `vllm-srun router` in front of
a running worker: the model list, routed answers with their headers (with_raw_response),
streams, a tool call, and errors. Usage: router_check.py ROUTER_URL MODEL"""
import os
import sys

import openai
from openai import OpenAI

base, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base + "/v1", api_key=os.environ.get("VLLM_SR_API_KEY", "unused"), max_retries=0, timeout=300)
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


ids = [m.id for m in client.models.list().data]
check("models list vllm-sr/auto first", ids[:1] == ["vllm-sr/auto"] and model in ids, ids)

# Routed by the signals: a math problem and small talk take different decisions.
seen = {}
for text in ["Solve 3x + 5 = 20 for x.", "Hi there! How was your weekend?"]:
    raw = client.chat.completions.with_raw_response.create(
        model="vllm-sr/auto", messages=[{"role": "user", "content": text}], max_tokens=4, temperature=0,
        extra_headers={"X-Vsr-Debug": "true"})
    reply = raw.parse()
    h = raw.headers
    seen[text] = h.get("x-vsr-selected-decision")
    check("routed answer", reply.choices[0].message.content is not None and reply.model == model, reply)
    check("routing headers", h.get("x-vsr-selected-model") == model and h.get("x-vsr-selected-reasoning") == "off"
          and h.get("x-vsr-selected-algorithm") == "static" and h.get("x-vsr-decision-ranking"), dict(h))
check("math and small talk take different decisions", seen["Solve 3x + 5 = 20 for x."] == "math"
      and seen["Hi there! How was your weekend?"] == "chat", seen)

# A stream: headers first, chunks, the usage chunk.
raw = client.chat.completions.with_raw_response.create(
    model="vllm-sr/auto", messages=[{"role": "user", "content": "Say hello."}], max_tokens=5, temperature=0,
    stream=True, stream_options={"include_usage": True})
check("stream headers", raw.headers.get("x-vsr-selected-model") == model, dict(raw.headers))
text, usage = "", None
for chunk in raw.parse():
    if chunk.choices and chunk.choices[0].delta.content:
        text += chunk.choices[0].delta.content
    if chunk.usage:
        usage = chunk.usage
check("stream text and usage", text != "" and usage is not None and usage.completion_tokens > 0, (text, usage))

# A tool call passes through. The city's maxLength bounds the call the grammar allows (the
# small test model may otherwise write a "city" until max_tokens cuts it off, untouched by
# the router: seen once in CI), so the call always fits max_tokens.
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                         "required": ["city"]}}}]
resp = client.chat.completions.create(model="vllm-sr/auto", tools=tools, tool_choice="required", max_tokens=80, temperature=0,
                                      messages=[{"role": "user", "content": "Do I need an umbrella in San Jose today?"}])
calls = resp.choices[0].message.tool_calls or []
check("tool call", len(calls) == 1 and calls[0].function.name == "get_weather", resp)

# A concrete model passes straight through; an unknown one is the SDK's NotFoundError.
resp = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
check("concrete model", resp.model == model, resp)
try:
    client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "Hi"}])
    check("unknown model", False, "no error")
except openai.NotFoundError as e:
    check("unknown model", e.status_code == 404 and e.body.get("code") == "model_not_found", e.body)

print(f"router clients: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
