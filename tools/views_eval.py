"""A choice asked also as one noul per option (issue 61 item 2): does the second view help?

    python3 tools/views_eval.py URL MODEL MANIFEST.jsonl [MANIFEST.jsonl ...] [--limit N]

Every choice question of the manifests (sys1bench's format; the domain is the file's name) is
asked in one request about its state twice over: as the choice it is, and as one noul per
option, "INSTRUCTIONS Is the right answer "MEANING"?" (the option's description, or its key
where it has none), all on the state's one read. The nouls' P(yes), normalised over the
options, is the second view's answer. Prints accuracy and NLL of the truth per domain for the
choice alone, the nouls alone, and the two combined by their normalised geometric mean and by
their mean. Use development manifests (`tools/devsuite.py`, `sys1bench generate` with a seed
other than 9001); the packaged canary is held out.
"""
import argparse
import collections
import math
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from rekey_eval import post, sampled  # noqa: E402


def normalised(p):
    s = sum(p)
    return [x / s for x in p] if s > 0 else [1 / len(p)] * len(p)


def combine(views, kind):
    if kind == "geometric":
        logs = [sum(math.log(max(v[i], 1e-12)) for v in views) / len(views)
                for i in range(len(views[0]))]
        top = max(logs)
        return normalised([math.exp(x - top) for x in logs])
    return normalised([sum(v[i] for v in views) / len(views) for i in range(len(views[0]))])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("manifests", nargs="+")
    ap.add_argument("--limit", type=int, default=0,
                    help="items per manifest, a fixed random sample (0: all)")
    args = ap.parse_args()
    rows = collections.defaultdict(list)  # (domain, reading) -> [(right, nll)]
    for path in args.manifests:
        domain, items = sampled(path, args.limit)
        for item in items:
            questions, asked = {}, []
            for qid, q in item["questions"].items():
                if q["type"] != "choice":
                    continue
                keys = [o["key"] for o in q["criteria"]]
                questions[qid] = {"type": "choice", "instructions": q["instructions"],
                                  "criteria": {o["key"]: o.get("description") for o in q["criteria"]}}
                for i, o in enumerate(q["criteria"]):
                    meaning = o.get("description") or o["key"]
                    questions[f"{qid}__{i}"] = {
                        "type": "noul",
                        "instructions": f'{q["instructions"]} Is the right answer "{meaning}"?'}
                asked.append((qid, keys, keys.index(q["ground_truth"])))
            if not asked:
                continue
            answers = post(args.url, {"model": args.model, "state": item["state"],
                                      "questions": questions})
            for qid, keys, truth in asked:
                choice = [answers[qid]["probabilities"][k] for k in keys]
                nouls = normalised([answers[f"{qid}__{i}"]["noul"] for i in range(len(keys))])
                readings = {"choice": choice, "nouls": nouls,
                            "geometric": combine([choice, nouls], "geometric"),
                            "mean": combine([choice, nouls], "mean")}
                for name, p in readings.items():
                    right = max(range(len(p)), key=p.__getitem__) == truth
                    rows[(domain, name)].append((right, -math.log(max(p[truth], 1e-12))))
    readings = ["choice", "nouls", "geometric", "mean"]
    print(f"{'domain':22} {'n':>4} " + " ".join(f"{r:>16}" for r in readings))
    totals = collections.defaultdict(list)
    for domain in sorted({d for d, _ in rows}):
        cells = []
        for r in readings:
            rs = rows[(domain, r)]
            totals[r].extend(rs)
            cells.append(f"{sum(x for x, _ in rs) / len(rs):.3f} / {sum(n for _, n in rs) / len(rs):.3f}")
        print(f"{domain:22} {len(rows[(domain, 'choice')]):4} " + " ".join(f"{c:>16}" for c in cells))
    cells = [f"{sum(x for x, _ in totals[r]) / len(totals[r]):.3f} / {sum(n for _, n in totals[r]) / len(totals[r]):.3f}"
             for r in readings]
    print(f"{'all':22} {len(totals['choice']):4} " + " ".join(f"{c:>16}" for c in cells))


if __name__ == "__main__":
    main()
