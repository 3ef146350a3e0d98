#!/usr/bin/env python3
"""Measure span answers on a labelled PII set: precision, recall and F1 per label.

The set is generated here with Faker (a fixed seed): short messages from templates, each
entity's label and code-point offsets recorded as it is placed. Every text goes to a running
server as one `/v1/decisions` request with a `{"preset": "pii"}` span question, and the spans
that come back are matched exactly (label, start, end) against the recorded ones. Beside it, a
regex baseline for the pattern labels (email, phone, IP, credit card, IBAN, URL), scored the
same way.

    python3 tools/pii_eval.py generate pii.jsonl --n 300 --seed 11
    python3 tools/pii_eval.py run pii.jsonl --url http://127.0.0.1:8000 --model qwen2.5-1.5b

The sets measured so far are kept in tools/pii/ (`dev-seed5` to try changes on, `heldout-seed11`
to report), as generated then: Faker's dates used to end at the day of generation, so the same
seed now gives other texts.

Every span returned is also checked to be the text between its offsets (in code points), and
inside the text; a failure of that check is reported and makes the exit status 1.
"""

import argparse
import datetime
import gzip
import json
import random
import re
import sys
import time
import urllib.request

LABELS = [
    "PERSON",
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "LOCATION",
    "CREDIT_CARD",
    "IP_ADDRESS",
    "IBAN",
    "DATE_TIME",
    "URL",
]

# Templates: {LABEL} slots filled in order; the text between them is plain.
TEMPLATES = [
    "Hi, this is {PERSON}. Please call me back on {PHONE_NUMBER} or write to {EMAIL_ADDRESS}.",
    "Meeting with {PERSON} moved to {DATE_TIME} in {LOCATION}.",
    "Refund the order to card {CREDIT_CARD}, the customer is {PERSON}.",
    "Login from {IP_ADDRESS} was blocked; the account owner {PERSON} was told at {EMAIL_ADDRESS}.",
    "Please wire the deposit to IBAN {IBAN} before {DATE_TIME}.",
    "Our new docs live at {URL}; questions go to {EMAIL_ADDRESS}.",
    "{PERSON} from {LOCATION} asked for a callback at {PHONE_NUMBER}.",
    "Shipping address changed to {LOCATION}. Contact: {PERSON}, {PHONE_NUMBER}.",
    "The invoice went to {EMAIL_ADDRESS} on {DATE_TIME}; the payment came from {IBAN}.",
    "Suspicious requests from {IP_ADDRESS} hit {URL} all night.",
    "Thanks for the order! We charged the card ending in {CREDIT_CARD} and will ship to {LOCATION}.",
    "Ask {PERSON} or {PERSON} about the server at {IP_ADDRESS}.",
    "Reminder: dentist on {DATE_TIME}. Call {PHONE_NUMBER} to cancel.",
    "I can't log in. My email is {EMAIL_ADDRESS} and my name is {PERSON}.",
    "Visit {URL} or our office in {LOCATION}.",
]
PREFIXES = ["", "", "", "😀 ", "東京オフィスより: ", "🚀🚀 Update: ", "Re: 请确认 — "]


EPOCH = datetime.datetime(1970, 1, 1)
LATEST = datetime.datetime(2026, 1, 1)


def fill(fake, label):
    if label == "PERSON":
        return fake.name()
    if label == "EMAIL_ADDRESS":
        return fake.email()
    if label == "PHONE_NUMBER":
        return fake.phone_number()
    if label == "LOCATION":
        return random.choice([fake.city(), fake.country(), f"{fake.city()}, {fake.country()}"])
    if label == "CREDIT_CARD":
        return fake.credit_card_number()
    if label == "IP_ADDRESS":
        return fake.ipv4() if random.random() < 0.8 else fake.ipv6()
    if label == "IBAN":
        return fake.iban()
    if label == "DATE_TIME":
        # Between fixed bounds: Faker's default range ends now, so the same seed would give
        # other dates on another day.
        when = fake.date_time_between(start_date=EPOCH, end_date=LATEST)
        return random.choice(
            [when.strftime("%d %B %Y"), when.strftime("%Y-%m-%d"), when.strftime("%B %d at %H:%M")]
        )
    if label == "URL":
        return fake.url()
    raise ValueError(label)


def generate(path, n, seed):
    from faker import Faker

    random.seed(seed)
    Faker.seed(seed)
    fake = Faker("en_US")
    with open(path, "w") as out:
        for i in range(n):
            template = random.choice(TEMPLATES)
            text = random.choice(PREFIXES)
            entities = []
            rest = template
            while True:
                m = re.search(r"\{([A-Z_]+)\}", rest)
                if not m:
                    text += rest
                    break
                text += rest[: m.start()]
                value = fill(fake, m.group(1))
                start = len(text)  # code points: Python strings index by code point
                text += value
                entities.append(
                    {"label": m.group(1), "start": start, "end": len(text), "text": value}
                )
                rest = rest[m.end():]
            out.write(json.dumps({"id": f"pii-{i}", "text": text, "entities": entities}) + "\n")


PATTERNS = {
    "EMAIL_ADDRESS": r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+",
    "URL": r"https?://[^\s,;]+[^\s,;.]",
    "IP_ADDRESS": r"\b(?:\d{1,3}\.){3}\d{1,3}\b|\b(?:[0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}\b",
    "CREDIT_CARD": r"\b\d{12,19}\b",
    "IBAN": r"\b[A-Z]{2}\d{2}[A-Z0-9]{10,30}\b",
    "PHONE_NUMBER": r"(?:\+?\d{1,3}[-. ]?)?(?:\(\d{3}\)|\d{3})[-. ]?\d{3}[-. ]?\d{4}(?:\s?x\d+)?",
}


def regex_spans(text):
    out = []
    for label, pat in PATTERNS.items():
        for m in re.finditer(pat, text):
            out.append({"label": label, "start": m.start(), "end": m.end()})
    return out


def score(cases, predicted, labels):
    rows = {}
    for label in labels:
        tp = fp = fn = 0
        for case, pred in zip(cases, predicted):
            gold = {(e["start"], e["end"]) for e in case["entities"] if e["label"] == label}
            got = {(s["start"], s["end"]) for s in pred if s["label"] == label}
            tp += len(gold & got)
            fp += len(got - gold)
            fn += len(gold - got)
        p = tp / (tp + fp) if tp + fp else 0.0
        r = tp / (tp + fn) if tp + fn else 0.0
        f = 2 * p * r / (p + r) if p + r else 0.0
        rows[label] = {"tp": tp, "fp": fp, "fn": fn, "precision": p, "recall": r, "f1": f}
    return rows


def ask(url, model, text, timeout, only=None):
    # Threshold 0: every span comes back with its probability; thresholds apply here.
    question = {"preset": "pii", "threshold": 0.0}
    if only:
        # One label with its description: the preset's branch for that label alone.
        question = {"type": "span", "criteria": dict([only]), "threshold": 0.0}
    body = {"model": model, "state": text, "questions": {"pii": question}}
    req = urllib.request.Request(
        url.rstrip("/") + "/v1/decisions",
        json.dumps(body).encode(),
        {"content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def run(args):
    opener = gzip.open if args.manifest.endswith(".gz") else open
    with opener(args.manifest, "rt") as f:
        cases = [json.loads(line) for line in f]
    if args.limit:
        cases = cases[: args.limit]
    only = tuple(args.only.split("=", 1)) if args.only else None
    if only and (len(only) != 2 or only[0] not in LABELS):
        sys.exit("--only takes LABEL=description, with a label of the preset")
    labels = [only[0]] if only else LABELS
    predicted, bad = [], 0
    t0 = time.time()
    times = []
    for i, case in enumerate(cases):
        started = time.time()
        v = ask(args.url, args.model, case["text"], args.timeout, only)
        times.append(time.time() - started)
        spans = v.get("spans", {}).get("pii", [])
        chars = list(case["text"])
        for s in spans:
            if not (0 <= s["start"] <= s["end"] <= len(chars)) or "".join(
                chars[s["start"]:s["end"]]
            ) != s["text"]:
                bad += 1
                print("offset mismatch:", case["id"], s, file=sys.stderr)
        predicted.append(spans)
        if args.verbose:
            print(case["id"], [(s["label"], s["text"]) for s in spans], file=sys.stderr)
        if (i + 1) % 10 == 0:
            print(f"{i + 1}/{len(cases)} in {time.time() - t0:.0f} s", file=sys.stderr)
    elapsed = time.time() - t0
    if args.save:
        with open(args.save, "w") as f:
            for case, spans in zip(cases, predicted):
                f.write(json.dumps({"id": case["id"], "spans": spans}) + "\n")
    for t in (0.5, 0.6, 0.7, 0.8, 0.9):
        rows = score(cases, [[s for s in p if s["probability"] >= t] for p in predicted], labels)
        print(f"threshold {t}: " + " ".join(f"{k}={v['f1']:.2f}" for k, v in rows.items()))
    predicted = [[s for s in p if s["probability"] >= args.threshold] for p in predicted]
    print(f"at threshold {args.threshold}:")
    ours = score(cases, predicted, labels)
    base = score(cases, [regex_spans(c["text"]) for c in cases], list(PATTERNS))
    times.sort()
    pct = lambda q: times[min(len(times) - 1, int(q * len(times)))] if times else 0.0
    print(f"{len(cases)} texts, {elapsed:.0f} s ({elapsed / max(1, len(cases)):.2f} s per text; "
          f"p50 {pct(0.5) * 1000:.1f} ms, p99 {pct(0.99) * 1000:.1f} ms)")
    print(f"{'label':15} {'n':>4} {'P':>6} {'R':>6} {'F1':>6}   regex P/R/F1")
    for label in labels:
        o = ours[label]
        n = o["tp"] + o["fn"]
        b = base.get(label)
        bs = f"{b['precision']:.2f}/{b['recall']:.2f}/{b['f1']:.2f}" if b else "-"
        print(f"{label:15} {n:4d} {o['precision']:6.2f} {o['recall']:6.2f} {o['f1']:6.2f}   {bs}")
    print(f"offset mismatches: {bad}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ours": ours, "regex": base, "texts": len(cases), "seconds": elapsed}, f)
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("out")
    g.add_argument("--n", type=int, default=300)
    g.add_argument("--seed", type=int, default=11)
    r = sub.add_parser("run")
    r.add_argument("manifest")
    r.add_argument("--url", default="http://127.0.0.1:8000")
    r.add_argument("--model", default="qwen2.5-1.5b")
    r.add_argument("--limit", type=int, default=0)
    r.add_argument("--timeout", type=float, default=300)
    r.add_argument("--json")
    r.add_argument("--save", help="write each text's spans (with probabilities) here")
    r.add_argument("--threshold", type=float, default=0.5)
    r.add_argument("--verbose", action="store_true")
    r.add_argument(
        "--only",
        metavar="LABEL=DESCRIPTION",
        help="ask one label with this description instead of the preset, and score it alone",
    )
    args = ap.parse_args()
    if args.cmd == "generate":
        generate(args.out, args.n, args.seed)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
