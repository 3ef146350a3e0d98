"""Does a choice's answer depend on how its option keys are spelled? (issue 61)

    python3 tools/rekey_eval.py URL MANIFEST.jsonl [MANIFEST.jsonl ...] [--limit N]

Every choice question of the manifests (sys1bench's format; the domain is the file's name) is
asked four ways in one request about its state: with its own keys (`words`: a key, and its
description where it has one), and with the option's meaning (its description, or its key
where it has none) under keys `a`/`b`/`c`, `1`/`2`/`3` and random ids. Noul and score
questions are asked once, as written. Prints accuracy and NLL of the truth per type and key
style, per domain, and the largest change of any option's probability between the key styles
(0 when keys cannot move an answer). Use development manifests (`tools/devsuite.py`,
`sys1bench generate` with a seed other than 9001); the packaged canary is held out.
"""
import argparse
import collections
import json
import math
import os
import random
import urllib.request

STYLES = ["words", "letters", "digits", "ids"]


def keyed(options, style, rng):
    """{key: description} for one key style, and each key's option index."""
    if style == "words":
        return {o["key"]: o.get("description") for o in options}
    out = {}
    for i, o in enumerate(options):
        meaning = o.get("description") or o["key"]
        key = {"letters": chr(97 + i), "digits": str(i + 1),
               "ids": "o%04x" % rng.randrange(1 << 16) + str(i)}[style]
        out[key] = meaning
    return out


def sampled(path, limit):
    """A manifest's domain (its file's name) and items: all, or a fixed random sample of
    `limit` (seeded by the domain, so every tool asks the same ones)."""
    domain = os.path.basename(path).rsplit(".", 1)[0]
    items = [json.loads(line) for line in open(path) if line.strip()]
    if limit and len(items) > limit:
        items = random.Random(domain).sample(items, limit)
    return domain, items


def post(url, body):
    req = urllib.request.Request(url + "/v1/decisions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=900))["answers"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("manifests", nargs="+")
    ap.add_argument("--limit", type=int, default=0,
                    help="items per manifest, a fixed random sample (0: all)")
    ap.add_argument("--types", default="choice,noul,score",
                    help="question types to ask, comma-separated")
    args = ap.parse_args()
    types = set(args.types.split(","))
    rng = random.Random(61)
    rows = collections.defaultdict(list)  # (domain, type, style) -> [(right, nll)]
    shifts = []
    for path in args.manifests:
        domain, items = sampled(path, args.limit)
        for item in items:
            questions, asked = {}, {}
            for qid, q in item["questions"].items():
                if q["type"] not in types:
                    continue
                if q["type"] == "choice":
                    for style in STYLES:
                        crit = keyed(q["criteria"], style, rng)
                        questions[f"{qid}__{style}"] = {"type": "choice",
                                                        "instructions": q["instructions"],
                                                        "criteria": crit}
                        asked[f"{qid}__{style}"] = (q, style, list(crit))
                elif q["type"] == "score":
                    levels = sorted(q["criteria"], key=lambda c: c["level"])
                    questions[qid] = {"type": "score", "instructions": q["instructions"],
                                      "criteria": [c["description"] for c in levels]}
                    asked[qid] = (q, "-", None)
                elif q["type"] == "noul":
                    questions[qid] = {"type": "noul", "instructions": q["instructions"]}
                    asked[qid] = (q, "-", None)
            if not questions:
                continue
            answers = post(args.url, {"state": item["state"], "questions": questions})
            by_index = collections.defaultdict(dict)
            for qid, (q, style, keys) in asked.items():
                a = answers[qid]
                if q["type"] == "noul":
                    p = a["noul"] if q["ground_truth"] else 1 - a["noul"]
                    right = (a["noul"] >= 0.5) == bool(q["ground_truth"])
                elif q["type"] == "score":
                    probs = [a["probabilities"][str(i)] for i in range(len(q["criteria"]))]
                    truth = int(q["ground_truth"])
                    p, right = probs[truth], max(range(len(probs)), key=probs.__getitem__) == truth
                else:
                    probs = [a["probabilities"][k] for k in keys]
                    truth = [o["key"] for o in q["criteria"]].index(q["ground_truth"])
                    p, right = probs[truth], max(range(len(probs)), key=probs.__getitem__) == truth
                    by_index[qid.rsplit("__", 1)[0]][style] = probs
                rows[(domain, q["type"], style)].append((right, -math.log(max(p, 1e-12))))
            for styles in by_index.values():
                ps = list(styles.values())
                shifts.append(max(abs(x - y) for a in ps for b in ps for x, y in zip(a, b)))
    print(f"{'domain':22} {'type':7} {'keys':8} {'n':>4} {'acc':>6} {'nll':>6}")
    totals = collections.defaultdict(list)
    for (domain, t, style), rs in sorted(rows.items()):
        acc = sum(r for r, _ in rs) / len(rs)
        nll = sum(n for _, n in rs) / len(rs)
        totals[(t, style)].extend(rs)
        print(f"{domain:22} {t:7} {style:8} {len(rs):4} {acc:6.3f} {nll:6.3f}")
    print()
    for (t, style), rs in sorted(totals.items()):
        acc = sum(r for r, _ in rs) / len(rs)
        nll = sum(n for _, n in rs) / len(rs)
        print(f"{'all':22} {t:7} {style:8} {len(rs):4} {acc:6.3f} {nll:6.3f}")
    if shifts:
        print(f"\nlargest probability change between key styles: mean {sum(shifts) / len(shifts):.3f}, "
              f"max {max(shifts):.3f} over {len(shifts)} choice questions")


if __name__ == "__main__":
    main()
