#!/usr/bin/env python3
"""Record what the sparrow-decider package's own numpy forward answers, as fixtures for the
Rust backend (crates/backend-sparrow/tests/fixtures/sparrow.json).

    python3 tools/sparrow_fixtures.py          # installs sparrow-decider==0.2.0 if missing

Each case is a state and one question in the System One shape, with the probabilities the
package computes (`Decider.probs`) for each option in order. States over the model's 512
tokens carry `"overflow": "truncate"`: the package reads their first 512 tokens, as the
runtime does when told to truncate.
"""
import json
import os
import random
import subprocess
import sys

VERSION = "0.2.0"
try:
    import sparrow_decider
except ImportError:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", f"sparrow-decider=={VERSION}", "numpy"])
    import sparrow_decider
assert sparrow_decider.__version__ == VERSION, sparrow_decider.__version__
from sparrow_decider import Decider

MODELS = {"sparrow-nano": "nano-general", "sparrow-nano-robot": "nano-robot"}
OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "backend-sparrow", "tests", "fixtures", "sparrow.json")

rng = random.Random(20261130)

TICKETS = [
    "I was charged twice for my subscription this month and nobody answers my emails.",
    "The app crashes every time I open the settings page on Android 14.",
    "Could you tell me how to export my data to CSV?",
    "Your delivery driver left the parcel in the rain and now the book is ruined!!!",
    "Please cancel my account effective immediately.",
    "Password reset link expired before I could use it; can you send another one?",
    "Ich habe meine Rechnung nicht erhalten. Können Sie sie erneut senden?",
    "Le produit est arrivé cassé, je veux un remboursement.",
    "我的订单还没有发货，请帮我查一下。",
    "Great service, thanks a lot 🙏 — the refund arrived today.",
    "URGENT: production database is down since 03:00 UTC, customers cannot log in.",
    "Dear team,\n\nplease find attached the signed contract.\n\nRegards,\nAnna",
    "Click here to verify your account or it will be suspended: http://examp1e.co/login",
    "Naïve café owners résumé: crème brûlée costs €4.50 déjà vu",
    "",
]
ROBOT = [
    "battery: 6%\nfront_obstacle_m: 7.0\npath: clear",
    "battery: 88%\nfront_obstacle_m: 0.3\npath: blocked",
    "zone_a: dirt_level=34\nzone_b: dirt_level=2\nbattery: 55%",
    "temperature_c: 71.5\nfan_rpm: 0\nstatus: overheating",
    "speed_mps = 1.2\nload_kg = 14\nbattery = 41 %",
    "arm_angle: -12.5\ngripper: open\nobject_distance_m: 0.04",
    "battery: 100%\ndocked: yes\nqueue_length: 0",
    "wheel_slip: 0.45\nincline_deg: 18\nbattery: 23%",
]
CHOICES = [
    ("What is the customer asking about?", {"billing": "charges, invoices, refunds", "bug": "a broken feature", "account": "login, password, cancellation", "other": None}),
    ("Primary intent?", {"refund": "money back", "information": "a question", "complaint": None}),
    ("Which language is the message in?", {"english": None, "german": None, "french": None, "chinese": None}),
    ("What should the robot do next?", {"continue": None, "slow": None, "stop": None, "dock": None, "replan": None}),
    (None, {"positive": "the writer is pleased", "negative": "the writer is unhappy", "neutral": None}),
    ("Which team should handle this?", {"payments": None, "engineering": None, "support": None, "sales": None, "security": None, "logistics": None}),
]
NOULS = [
    ("Is the customer angry?", None),
    ("Is the user asking for money back?", None),
    ("Does the message look like phishing?", None),
    ("Is the battery low?", None),
    ("Is there an obstacle close ahead?", None),
    (None, {"false": "the request can wait", "true": "the request needs action today"}),
    ("Is this urgent?", {"false": "no rush", "true": "needs an answer now"}),
    ("Should the robot return to its dock?", None),
]
SCORES = [
    ("How urgent is this?", ["not urgent", "soon", "now"]),
    ("How angry is the writer?", ["calm", "annoyed", "angry", "furious"]),
    ("Priority of the ticket", ["P4", "P3", "P2", "P1", "P0"]),
    ("How risky is the robot's situation?", ["safe", "caution", "danger"]),
    ("Rate the sentiment", ["very negative", "negative", "neutral", "positive", "very positive"]),
    ("How complete is the report?", [str(i) for i in range(10)]),
]


def states():
    for t in TICKETS:
        yield t
    for r in ROBOT:
        yield r
    # Object states, rendered by the package as indented JSON.
    yield {"subject": "Refund", "body": "I was charged twice.", "customer": {"tier": "gold", "years": 3}}
    yield {"battery": "6%", "obstacle_m": 7.0, "path": ["clear", "wet floor"]}
    # Long states: past 512 tokens the package reads the first 512.
    yield " ".join(rng.choice(TICKETS[:12]) for _ in range(120))
    yield "\n".join(rng.choice(ROBOT) for _ in range(150))


def main():
    cases = []
    for model_id, name in MODELS.items():
        d = Decider.load(name)
        for state in states():
            long_ = isinstance(state, str) and len(d.static.tok.encode(state, 10_000)) > d.static.max_len
            questions = []
            for instr, crit in rng.sample(CHOICES, 3):
                q = {"type": "choice", "criteria": crit}
                if instr is not None:
                    q["instructions"] = instr
                questions.append(q)
            for instr, crit in rng.sample(NOULS, 3):
                q = {"type": "noul"}
                if instr is not None:
                    q["instructions"] = instr
                if crit is not None:
                    q["criteria"] = crit
                questions.append(q)
            for instr, levels in rng.sample(SCORES, 2):
                questions.append({"type": "score", "instructions": instr, "criteria": levels})
            for q in questions:
                pq = {k: v for k, v in q.items()}
                # The package reads a missing description as empty; so does the runtime.
                if "criteria" in pq and isinstance(pq["criteria"], dict):
                    pq["criteria"] = {k: (v or "") for k, v in pq["criteria"].items()}
                kind, names, _, p = d.probs(state, pq)
                if long_:
                    q = dict(q, overflow="truncate")
                cases.append({"model": model_id, "state": state, "question": q,
                              "options": names, "probabilities": [float(x) for x in p]})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"package": f"sparrow-decider=={VERSION}", "cases": cases}, f, ensure_ascii=False, indent=0)
        f.write("\n")
    kinds = {}
    for c in cases:
        kinds[c["question"]["type"]] = kinds.get(c["question"]["type"], 0) + 1
    print(f"{len(cases)} cases {kinds} -> {os.path.relpath(OUT)}")


if __name__ == "__main__":
    main()
