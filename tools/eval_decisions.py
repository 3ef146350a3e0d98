"""Accuracy of a served decision model on a labelled manifest (sys1bench's format).

    python3 tools/eval_decisions.py URL MODEL MANIFEST.jsonl [MANIFEST.jsonl ...]

Each item goes to URL/v1/decisions as one request (its state and every question). Per
question: accuracy, Brier score, ECE over 15 bins, and the majority prior's accuracy on the
same items. Develop on manifests from `sys1bench generate` with your own seed; the packaged
canary is held out.

ORDERS=k also asks every choice question with its options rotated by 1..k-1 places, in the
same request, and prints the option-order sensitivity: per question, the largest change of
any option's probability between orders; its mean and max over the manifest's questions.

ADAPTER=1 asks every question with `decision_adapter: true` (ADAPTER=0: false), to compare a
package's decision adapters with its base readout.

T* is the temperature (applied to log-probabilities) that minimises the NLL of the truth, per
question and pooled per type: what a fitted `temperature` in decision_config.json would be.
"""
import collections
import json
import math
import os
import sys
import urllib.request

url, model, files = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3:]


ORDERS = int(os.environ.get("ORDERS", "1"))
# VARIANTS=1 also asks, in the same request, each noul as a choice between `yes` and `no` read
# by name (`__yn`) and by letter (`__ab`), and each score as a choice between `level N` names
# with the levels' descriptions (`__lv`); they are scored as the question they stand for.
VARIANTS = os.environ.get("VARIANTS") == "1"
# ADAPTER=1 (or 0) asks every question with `decision_adapter: true` (or false): on a package
# `vllm-srun adapt` wrote, its heads answer (or the base readout does).
ADAPTER = os.environ.get("ADAPTER")


def ask(item):
    questions = {}
    for qid, q in item["questions"].items():
        out = {"type": q["type"], "instructions": q["instructions"]}
        if q["type"] == "choice":
            crit = q["criteria"]
            out["criteria"] = {c["key"]: c.get("description") or c["key"] for c in crit}
            for r in range(1, ORDERS):
                turned = crit[r % len(crit):] + crit[:r % len(crit)]
                questions[f"{qid}__order{r}"] = dict(
                    out, criteria={c["key"]: c.get("description") or c["key"] for c in turned})
        elif q["type"] == "score":
            levels = sorted(q["criteria"], key=lambda c: c["level"])
            out["criteria"] = [c["description"] for c in levels]
            if VARIANTS:
                questions[f"{qid}__lv"] = {"type": "choice", "instructions": q["instructions"],
                                           "criteria": {f"level {i}": c["description"] for i, c in enumerate(levels)}}
        if q["type"] == "noul" and VARIANTS:
            questions[f"{qid}__yn"] = {"type": "choice", "instructions": q["instructions"],
                                       "criteria": {"yes": None, "no": None}}
            questions[f"{qid}__ab"] = {"type": "choice", "instructions": q["instructions"],
                                       "criteria": {"yes.": None, "no.": None}}
        questions[qid] = out
    if ADAPTER is not None:
        for q in questions.values():
            q["decision_adapter"] = ADAPTER == "1"
    body = {"model": model, "state": item["state"], "questions": questions}
    req = urllib.request.Request(url + "/v1/decisions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=600))["answers"]


def distribution(q, a):
    """(probabilities, index of the truth) of one answer."""
    if "noul" in a:
        return [a["noul"], 1 - a["noul"]], 0 if q["ground_truth"] else 1
    keys = list(a["probabilities"])
    truth = str(q["ground_truth"])
    return [a["probabilities"][k] for k in keys], keys.index(truth) if truth in keys else None


def best_temperature(ds):
    """The temperature (on log-probabilities) that minimises the mean negative log-likelihood
    of the truth, over a log-spaced grid from 0.05 to 20; with that NLL and the NLL at 1."""
    def nll(t):
        total = 0.0
        for ps, i in ds:
            logs = [math.log(max(p, 1e-12)) / t for p in ps]
            top = max(logs)
            z = sum(math.exp(x - top) for x in logs)
            total -= logs[i] - top - math.log(z)
        return total / len(ds)
    grid = [0.05 * (400 ** (k / 120)) for k in range(121)]
    t = min(grid, key=nll)
    return t, nll(t), nll(1.0)


def outcome(q, a):
    """(predicted, truth, probability of the truth, probability of the prediction)."""
    truth = q["ground_truth"]
    if q["type"] == "noul":
        p = a["noul"]
        pred = p >= 0.5
        return pred, truth, p if truth else 1 - p, max(p, 1 - p)
    probs = a["probabilities"]
    key = str(truth)
    pred = max(probs, key=probs.get)
    return pred, key, probs.get(key, 0.0), probs[pred]


CF = os.environ.get("CF")
cf_cache = {}


def calibrated(item, answers):
    """Content-free calibration, emulated: each answer divided by the same question's answer
    about an empty text."""
    key = json.dumps(item["questions"], sort_keys=True)
    if key not in cf_cache:
        cf_cache[key] = ask(dict(item, state=CF))
    cf = cf_cache[key]
    out = {}
    for qid, a in answers.items():
        c = cf.get(qid, {})
        if "noul" in a and "noul" in c:
            y, n = a["noul"] / c["noul"], (1 - a["noul"]) / (1 - c["noul"])
            out[qid] = dict(a, noul=y / (y + n))
        elif "probabilities" in a and "probabilities" in c:
            r = {k: v / c["probabilities"][k] for k, v in a["probabilities"].items()}
            z = sum(r.values())
            out[qid] = dict(a, probabilities={k: v / z for k, v in r.items()})
        else:
            out[qid] = a
    return out


rows = collections.defaultdict(list)
dists = collections.defaultdict(list)
order_shift = []
for f in files:
    for line in open(f):
        item = json.loads(line)
        answers = ask(item)
        if CF is not None:
            answers = calibrated(item, answers)
        for qid, q in item["questions"].items():
            turns = [answers.get(f"{qid}__order{r}", {}) for r in range(1, ORDERS)]
            if q["type"] == "choice" and ORDERS > 1 and all("probabilities" in a for a in turns):
                ps = [answers[qid]["probabilities"]] + [a["probabilities"] for a in turns]
                order_shift.append(max(max(p[k] for p in ps) - min(p[k] for p in ps) for k in ps[0]))
            a = answers.get(qid, {})
            if "error" in a or not a:
                continue
            pred, truth, p_truth, p_pred = outcome(q, a)
            rows[(f.split("/")[-1], qid)].append((pred, truth, p_truth, p_pred))
            ps, i = distribution(q, a)
            if i is not None:
                dists[(f.split("/")[-1], qid)].append((ps, i))
                dists[("type", q["type"])].append((ps, i))
            for v in ("__yn", "__ab", "__lv"):
                b = answers.get(qid + v, {})
                if "probabilities" not in b:
                    continue
                probs = b["probabilities"]
                if v == "__lv":
                    b = {"probabilities": {str(i): probs[f"level {i}"] for i in range(len(probs))}}
                else:
                    b = {"noul": probs["yes" if v == "__yn" else "yes."]}
                pred, truth, p_truth, p_pred = outcome(q, b)
                rows[(f.split("/")[-1], qid + v)].append((pred, truth, p_truth, p_pred))

print(f"{'question':40} {'n':>4} {'acc':>6} {'prior':>6} {'brier':>6} {'ece':>6} {'T*':>6}")
accs, priors = [], []
for (f, qid), rs in sorted(rows.items()):
    n = len(rs)
    acc = sum(p == t for p, t, _, _ in rs) / n
    prior = collections.Counter(t for _, t, _, _ in rs).most_common(1)[0][1] / n
    brier = sum((1 - pt) ** 2 for _, _, pt, _ in rs) / n
    bins = collections.defaultdict(list)
    for p, t, _, pp in rs:
        bins[min(14, int(pp * 15))].append((pp, p == t))
    ece = sum(len(b) / n * abs(sum(x for x, _ in b) / len(b) - sum(y for _, y in b) / len(b)) for b in bins.values())
    accs.append(acc)
    priors.append(prior)
    temp = best_temperature(dists[(f, qid)])[0] if dists[(f, qid)] else float("nan")
    print(f"{f + ':' + qid:40} {n:4} {acc:6.3f} {prior:6.3f} {brier:6.3f} {ece:6.3f} {temp:6.2f}")
print(f"{'mean':40} {'':4} {sum(accs) / len(accs):6.3f} {sum(priors) / len(priors):6.3f}")
if order_shift:
    print(f"option order ({ORDERS} orders, {len(order_shift)} choice questions): largest change of an "
          f"option's probability, mean {sum(order_shift) / len(order_shift):.3f}, max {max(order_shift):.3f}")
for kind in ("choice", "noul", "score"):
    ds = dists.get(("type", kind))
    if ds:
        temp, best, at_one = best_temperature(ds)
        print(f"type {kind:6} n {len(ds):4}: NLL-optimal temperature {temp:.2f} (NLL {best:.3f}, at 1: {at_one:.3f})")
