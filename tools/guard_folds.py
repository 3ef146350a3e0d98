"""The two guard heads of `minilm-l6-router` cross-validated as the engine trains and answers
them, and the thresholds of the router's rule that blocks when either fires.

    python3 tools/guard_folds.py VLLM_SRUN CASES.jsonl ROUTER_SIGNALS.jsonl [--folds 5]

VLLM_SRUN is the binary (e.g. target/release/vllm-srun); CASES.jsonl is what
`tools/guard_train.py ... --view 400` writes (each case as the whole message for
`vsr_jailbreak` and as its routing view for `vsr_jailbreak_view`); ROUTER_SIGNALS.jsonl is the
development suite's `router_signals.jsonl` (the routing heads, trained in every fold as the
package trains them). Cases are split into folds by a seeded shuffle within each answer; for
each fold, `adapt --model minilm-l6 --lexical vsr_jailbreak` trains on the other folds and a
`serve` of that package answers the fold's cases. Out of fold, it prints jailbreaks caught and
ordinary cases flagged for each head alone and for the rule "either head at or over its
threshold", over a grid of threshold pairs, and the pair that catches the most with at most 2 %
flagged (ties: fewer flagged, then higher thresholds).
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.request

GRID = [round(0.1 * i, 1) for i in range(1, 10)]


def post(url, body):
    req = urllib.request.Request(url + "/v1/decisions", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=600))


def main():
    binary, cases_path, router_path = sys.argv[1:4]
    folds = int(sys.argv[sys.argv.index("--folds") + 1]) if "--folds" in sys.argv else 5
    rows = [json.loads(line) for line in open(cases_path) if line.strip()]
    by_case = {}
    for r in rows:
        by_case.setdefault(r["task_id"].removesuffix("_view"), []).append(r)
    truth = {c: next(iter(rs[0]["questions"].values()))["ground_truth"] for c, rs in by_case.items()}
    fold_of = {}
    rng = random.Random(7)
    for answer in (True, False):
        ids = sorted(c for c in by_case if truth[c] == answer)
        rng.shuffle(ids)
        for i, c in enumerate(ids):
            fold_of[c] = i % folds
    scores = {}  # case -> {question id: p}
    work = tempfile.mkdtemp(prefix="guard_folds.")
    for k in range(folds):
        train = os.path.join(work, f"train{k}.jsonl")
        with open(train, "w") as f:
            for c, rs in by_case.items():
                if fold_of[c] != k:
                    for r in rs:
                        f.write(json.dumps(r) + "\n")
        pkg = os.path.join(work, f"pkg{k}")
        subprocess.run([binary, "adapt", "--model", "minilm-l6", "--data", train, "--data",
                        router_path, "--lexical", "vsr_jailbreak", "--out", pkg, "--no-pull"],
                       check=True, stdout=subprocess.DEVNULL)
        port = 8700 + k
        server = subprocess.Popen([binary, "serve", "--model", pkg, "--port", str(port),
                                   "--no-generate", "--no-router", "--no-pull"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(120):
                try:
                    urllib.request.urlopen(url + "/health", timeout=2)
                    break
                except OSError:
                    time.sleep(0.5)
            for c, rs in by_case.items():
                if fold_of[c] != k:
                    continue
                for r in rs:
                    (qid, q), = r["questions"].items()
                    ask = {"type": "noul", "instructions": q["instructions"], "overflow": "window"}
                    a = post(url, {"model": os.path.basename(pkg), "state": r["state"],
                                   "questions": {"q": ask}})
                    scores.setdefault(c, {})[qid] = a["answers"]["q"]["noul"]
        finally:
            server.terminate()
            server.wait()
        print(f"fold {k + 1}/{folds} done", file=sys.stderr)
    jail = [c for c in scores if truth[c]]
    ordinary = [c for c in scores if not truth[c]]

    def rate(cs, fires):
        return sum(fires(scores[c]) for c in cs) / len(cs)

    print(f"{len(jail)} jailbreaks, {len(ordinary)} ordinary, out of fold")
    for qid in ("vsr_jailbreak", "vsr_jailbreak_view"):
        cells = "  ".join(
            f"{t}: {rate(jail, lambda s: s[qid] >= t):.3f}/{rate(ordinary, lambda s: s[qid] >= t):.3f}"
            for t in GRID)
        print(f"{qid} alone (caught/flagged)  {cells}")
    best = None
    for a in GRID:
        for b in GRID:
            fires = lambda s: s["vsr_jailbreak"] >= a or s["vsr_jailbreak_view"] >= b
            caught, flagged = rate(jail, fires), rate(ordinary, fires)
            key = (flagged <= 0.02, caught, -flagged, a + b)
            if best is None or key > best[0]:
                best = (key, a, b, caught, flagged)
    _, a, b, caught, flagged = best
    print(f"either head: vsr_jailbreak >= {a} or vsr_jailbreak_view >= {b}: "
          f"caught {caught:.3f}, flagged {flagged:.3f}")


if __name__ == "__main__":
    main()
