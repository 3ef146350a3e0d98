"""The routing heads on long messages, read through routing views of two widths.

    python3 tools/routing_view_eval.py URL DEV_DIR SYS1BENCH_DIR [VIEW ...]

URL serves `minilm-l6-router`; DEV_DIR is `tools/devsuite.py`'s output (its `router_signals`
domain: 40 short requests with their task and deliberation truths); SYS1BENCH_DIR holds
`sys1bench generate log_triage|support_tickets DIR/NAME.jsonl --n 40 --seed 101`. Each request
is made long by 1,500 characters of three generated logs or tickets pasted before it, or after
it, then cut to a routing view as the router cuts one (`signals::routing_view`: its first and
last VIEW/2 characters) and asked as the router asks (no `overflow`: a view over the encoder's
510 tokens fails, and the router then treats the signal as unknown). Prints, for each view
width (400 and 2,000 by default) and placement, the right task and deliberation answers and the
failed requests. The 40 requests are the routing heads' own training cases: this compares the
views, it does not judge the heads.
"""
import json
import random
import sys
import urllib.error
import urllib.request

URL, DEV, S1 = sys.argv[1], sys.argv[2], sys.argv[3]
VIEWS = [int(v) for v in sys.argv[4:]] or [400, 2000]
HERE = __file__.rsplit("/", 1)[0]
SIGNALS = json.load(open(f"{HERE}/../crates/hub/catalogue/minilm-l6-router/router_questions.json"))


def text(state):
    return state if isinstance(state, str) else "\n".join(f"{k}: {v}" for k, v in state.items())


def view(t, width):
    if len(t) <= width:
        return t
    return t[:width // 2] + "\n…\n" + t[len(t) - width // 2:]


def ask(state):
    """(task, needs deliberation) as the heads answer them; (None, None) for a refusal."""
    questions = {"task": SIGNALS["vsr_task"], "deliberate": SIGNALS["vsr_needs_deliberation"]}
    body = {"model": "minilm-l6-router", "state": state, "questions": questions}
    req = urllib.request.Request(URL + "/v1/decisions", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    try:
        a = json.load(urllib.request.urlopen(req, timeout=60))["answers"]
    except urllib.error.HTTPError:
        return None, None
    return a["task"].get("choice"), a["deliberate"].get("noul", 0) >= 0.5


def main():
    rows = [json.loads(line) for line in open(f"{DEV}/router_signals.jsonl")]
    pasted = [text(json.loads(line)["state"])
              for name in ("log_triage", "support_tickets")
              for line in open(f"{S1}/{name}.jsonl")]
    for placement in ("context first", "request first"):
        for width in VIEWS:
            rng = random.Random(7)
            task = deliberate = failed = 0
            for r in rows:
                context = "\n".join(rng.sample(pasted, 3))[:1500]
                request = r["state"]
                long = f"{context}\n\n{request}" if placement == "context first" else f"{request}\n\n{context}"
                t, d = ask(view(long, width))
                task += t == r["questions"]["task"]["ground_truth"]
                deliberate += d == bool(r["questions"]["deliberate"]["ground_truth"])
                failed += t is None
            print(f"{placement}, view {width}: task {task}/{len(rows)}, "
                  f"deliberation {deliberate}/{len(rows)}, failed {failed}")


if __name__ == "__main__":
    main()
