"""Do a yes/no question and its negation come out complementary? (issue 10)

    python3 tools/negation_eval.py URL MODEL MANIFEST.jsonl [MANIFEST.jsonl ...] [--n 50]

For each noul question of the manifests (sys1bench's format) whose instructions have a written
negation below, the question and its negation are asked in one request about the same state,
through /v1/decisions. Prints, over the first N such pairs, the mean and max of
|p(yes) + p'(yes) - 1| (0 when the two answers are exact complements), and how often the two
answers agree with each other (p >= 0.5 exactly when p' < 0.5). Then, against the questions'
truths, the accuracy and NLL of three readings of the same pairs (issue 61's "a noul asked
also as its negation"): the question alone (p), its negation alone (1 - p'), and the two views
combined by their normalised geometric mean, sqrt(p (1 - p')) against sqrt((1 - p) p'). Use
development manifests (`sys1bench generate` with your own seed); the packaged canary is held
out.
"""
import math
import argparse
import json
import urllib.request

# Negations of the noul questions sys1bench's generators write (keyed by their instructions).
NEGATIONS = {
    "Is the customer expressing anger or hostility?":
        "Is the customer calm, expressing neither anger nor hostility?",
    "Is this email a phishing or social-engineering attack?":
        "Is this email legitimate, not a phishing or social-engineering attack?",
    "Does the sender domain differ from the known brand domain?":
        "Is the sender domain the same as the known brand domain?",
    "Does the message ask the recipient to log in, verify, or reset credentials via a link?":
        "Does the message leave credentials alone, asking no one to log in, verify, or reset them via a link?",
    "Does the message pressure the recipient to act within 24 hours or threaten consequences?":
        "Does the message leave the recipient free of time pressure, with no 24-hour deadline and no threats?",
    "Does the message ask to change payment details or send money or gift cards?":
        "Does the message leave payment details alone and ask for no money or gift cards?",
    "Does the message urge opening an attachment the recipient did not request?":
        "Does the message make no push to open an attachment the recipient did not request?",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("manifests", nargs="+")
    ap.add_argument("--n", type=int, default=50)
    args = ap.parse_args()
    pairs = []
    for f in args.manifests:
        for line in open(f):
            item = json.loads(line)
            for qid, q in item["questions"].items():
                neg = NEGATIONS.get(q["instructions"])
                if q["type"] == "noul" and neg:
                    pairs.append((item["state"], q["instructions"], neg, bool(q["ground_truth"])))
    # Spread the pairs over the questions: take them round-robin by question text.
    by_q = {}
    for p in pairs:
        by_q.setdefault(p[1], []).append(p)
    spread = []
    while len(spread) < args.n and any(by_q.values()):
        for k in list(by_q):
            if by_q[k] and len(spread) < args.n:
                spread.append(by_q[k].pop(0))
    gaps, agree = [], 0
    readings = {"question": [], "negation": [], "both": []}
    for state, q, neg, truth in spread:
        body = {"model": args.model, "state": state, "questions": {
            "q": {"type": "noul", "instructions": q},
            "neg": {"type": "noul", "instructions": neg}}}
        req = urllib.request.Request(args.url.rstrip("/") + "/v1/decisions",
                                     data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
        a = json.load(urllib.request.urlopen(req, timeout=600))["answers"]
        p, pn = a["q"]["noul"], a["neg"]["noul"]
        gaps.append(abs(p + pn - 1))
        agree += (p >= 0.5) != (pn >= 0.5)
        yes, no = math.sqrt(p * (1 - pn)), math.sqrt((1 - p) * pn)
        for name, py in (("question", p), ("negation", 1 - pn), ("both", yes / (yes + no))):
            pt = py if truth else 1 - py
            readings[name].append(((py >= 0.5) == truth, -math.log(max(pt, 1e-12))))
    n = len(gaps)
    print(f"{n} pairs over {len(by_q)} questions: |p + p' - 1| mean {sum(gaps) / n:.3f}, "
          f"max {max(gaps):.3f}; consistent answers {agree}/{n}")
    for name, rs in readings.items():
        print(f"  {name:9} accuracy {sum(r for r, _ in rs) / n:.3f}, NLL {sum(x for _, x in rs) / n:.3f}")


if __name__ == "__main__":
    main()
