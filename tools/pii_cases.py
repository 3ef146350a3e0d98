#!/usr/bin/env python3
"""Span cases for the `pii` preset's labels: texts with personal data in them, generated
from templates with Faker's values, each span with its label and code-point offsets.

    python3 tools/pii_cases.py train  out.jsonl --n 1500 --seed 1
    python3 tools/pii_cases.py heldout out.jsonl --n 150 --seed 2

`train` and `heldout` use different templates (written apart), so a held-out score is not
a score on sentences the head has seen with other names in them. Every line is a case for
`vllm-srun adapt`: {"state": text, "questions": {"pii": {"type": "span", "preset": "pii",
"ground_truth": [{"label", "start", "end", "text"}]}}}.
"""
import argparse
import json
import random
import re

from faker import Faker

LOCALES = ["en_US", "en_GB", "en_IE", "en_AU", "de_DE", "fr_FR", "es_ES", "it_IT", "nl_NL"]

# Templates: {LABEL} is a value of that label; {NUM}, {PRICE}, {CODE}, {VER}, {QTY} are
# numbers that are not personal data.
TRAIN = [
    "Hi, this is {PERSON}. Please call me back on {PHONE_NUMBER} about order {CODE}.",
    "My email is {EMAIL_ADDRESS} and my phone is {PHONE_NUMBER}.",
    "Customer {PERSON} ({EMAIL_ADDRESS}) reported a failed payment with card {CREDIT_CARD}.",
    "Ship it to {LOCATION} by {DATE_TIME}, please.",
    "Login from {IP_ADDRESS} at {DATE_TIME} was blocked.",
    "Please transfer the refund to {IBAN}, account holder {PERSON}.",
    "The docs are at {URL} if you need them.",
    "{PERSON} moved to {LOCATION} last year.",
    "Invoice {CODE}: {QTY} items, total {PRICE}. Contact {EMAIL_ADDRESS} with questions.",
    "Reach {PERSON} at {PHONE_NUMBER} or {EMAIL_ADDRESS}.",
    "Our office is at {LOCATION}. Opening hours change on {DATE_TIME}.",
    "User {PERSON} signed in from {IP_ADDRESS}.",
    "Card ending {NUM} declined; full number on file {CREDIT_CARD}.",
    "Version {VER} fixes the crash reported on {DATE_TIME}.",
    "Meeting with {PERSON} and {PERSON} on {DATE_TIME} in {LOCATION}.",
    "Please update my address to {LOCATION}. Thanks, {PERSON}",
    "Server {IP_ADDRESS} returned 503 for {URL}.",
    "Dear {PERSON},\nyour parcel {CODE} will arrive on {DATE_TIME}.\nRegards, support",
    "Call {PHONE_NUMBER} before {DATE_TIME} to confirm.",
    "The IBAN {IBAN} belongs to {PERSON}.",
    "I ordered {QTY} units for {PRICE} and was charged twice.",
    "Forward this to {EMAIL_ADDRESS}; cc {EMAIL_ADDRESS}.",
    "Visit {URL} or write to {EMAIL_ADDRESS}.",
    "{DATE_TIME}: {PERSON} updated ticket {CODE}.",
    "Born in {LOCATION}, {PERSON} now works remotely.",
    "Firewall log: deny tcp {IP_ADDRESS} -> {IP_ADDRESS} port {NUM}",
    "My card {CREDIT_CARD} expires soon; can I add a new one?",
    "name: {PERSON}\nemail: {EMAIL_ADDRESS}\nphone: {PHONE_NUMBER}",
    "Please delete all data about {PERSON}, {LOCATION}.",
    "Pay into {IBAN} within {QTY} days of {DATE_TIME}.",
    "The build {VER} is up; download it from {URL}.",
    "Hey {PERSON}, can you text me at {PHONE_NUMBER}?",
    "Delivery to {LOCATION} failed twice. Reschedule for {DATE_TIME}?",
    "Request {CODE} from {IP_ADDRESS} took {NUM} ms.",
    "Nothing personal here: order {CODE}, {QTY} boxes, {PRICE}.",
    "The meeting is moved to room {NUM}; agenda at {URL}.",
    "Thanks for your patience. Your ticket {CODE} is resolved.",
    "{PERSON} <{EMAIL_ADDRESS}> wrote on {DATE_TIME}:",
    "Contact: {PERSON}, tel. {PHONE_NUMBER}, {LOCATION}",
    "We noticed a login to your account from {LOCATION} ({IP_ADDRESS}).",
    "Refund of {PRICE} sent to card {CREDIT_CARD} on {DATE_TIME}.",
    "Ask {PERSON} about the {VER} release notes.",
    "Our new shop opens in {LOCATION} on {DATE_TIME}!",
    "The app keeps crashing after update {VER}, please help.",
    "Emergency contact: {PERSON} {PHONE_NUMBER}",
    "Please use {URL} to reset your password, not {URL}.",
    "Bank details: {IBAN} ({PERSON})",
    "Rate limit hit for {IP_ADDRESS}: {QTY} requests in {NUM} s.",
    "Signed, {PERSON}, {DATE_TIME}",
    "I live near {LOCATION} and the courier never finds my house.",
]

HELDOUT = [
    "Could someone from billing contact {PERSON} at {EMAIL_ADDRESS}? The charge of {PRICE} is wrong.",
    "If the issue persists, call {PHONE_NUMBER} before {DATE_TIME}.",
    "Attached is the statement for {IBAN}. Kind regards, {PERSON}",
    "Alert: {QTY} failed logins for admin from {IP_ADDRESS} since {DATE_TIME}.",
    "{PERSON} asked us to send the contract to {LOCATION}.",
    "See {URL} for the tracking of parcel {CODE}.",
    "The customer paid with {CREDIT_CARD} and wants a receipt at {EMAIL_ADDRESS}.",
    "Appointment confirmed for {DATE_TIME} with {PERSON} at our {LOCATION} branch.",
    "Traffic spike from {IP_ADDRESS} hitting {URL}.",
    "Please don't share my number ({PHONE_NUMBER}) with anyone, {PERSON} here.",
    "Release {VER} ships {QTY} fixes; nothing else changed.",
    "From: {EMAIL_ADDRESS}\nTo: {EMAIL_ADDRESS}\nSubject: order {CODE}",
    "Wire the deposit to {IBAN} no later than {DATE_TIME}.",
    "Moving from {LOCATION} to {LOCATION}; please change my billing address.",
    "Technician {PERSON} will visit on {DATE_TIME}; questions to {PHONE_NUMBER}.",
    "Your subscription renews at {PRICE} per month. Manage it at {URL}.",
    "The suspicious card {CREDIT_CARD} was used in {LOCATION}.",
    "Ticket {CODE} escalated by {PERSON} at {DATE_TIME}.",
    "Order {CODE} contains {QTY} items and weighs {NUM} kg.",
    "Write to {PERSON} ({EMAIL_ADDRESS}) or ring {PHONE_NUMBER}.",
]


def values(fake, rnd):
    """A value of each label, in one of its written forms."""
    def person():
        r = rnd.random()
        if r < 0.6:
            return fake.first_name() + " " + fake.last_name()
        if r < 0.8:
            return fake.name()
        return fake.first_name()

    def phone():
        r = rnd.random()
        if r < 0.5:
            return fake.phone_number()
        if r < 0.75:
            return "+%d %d %d %04d" % (rnd.choice([1, 44, 49, 33, 34, 39, 31]),
                                      rnd.randint(20, 999), rnd.randint(100, 999), rnd.randint(0, 9999))
        return "%03d-%03d-%04d" % (rnd.randint(200, 999), rnd.randint(200, 999), rnd.randint(0, 9999))

    def location():
        r = rnd.random()
        if r < 0.4:
            return fake.city()
        if r < 0.6:
            return fake.country()
        if r < 0.85:
            return fake.street_address()
        return fake.street_address() + ", " + fake.city()

    def card():
        n = fake.credit_card_number()
        if rnd.random() < 0.5 and len(n) == 16:
            return " ".join(n[i:i + 4] for i in range(0, 16, 4))
        return n

    def iban():
        n = fake.iban()
        if rnd.random() < 0.5:
            return " ".join(n[i:i + 4] for i in range(0, len(n), 4))
        return n

    def when():
        d = fake.date_time_between(start_date="-3y", end_date="+1y")
        forms = ["%Y-%m-%d", "%d/%m/%Y", "%B %d, %Y", "%d %B %Y", "%Y-%m-%d %H:%M", "%H:%M",
                 "%A", "%b %d", "%A %d %B", "%A at %H:%M", "%d.%m.%Y", "%I:%M %p"]
        return d.strftime(rnd.choice(forms))

    def ip():
        return fake.ipv4() if rnd.random() < 0.85 else fake.ipv6()

    def url():
        return fake.url() + (fake.uri_path() if rnd.random() < 0.5 else "")

    return {
        "PERSON": person, "EMAIL_ADDRESS": fake.email, "PHONE_NUMBER": phone,
        "LOCATION": location, "CREDIT_CARD": card, "IP_ADDRESS": ip, "IBAN": iban,
        "DATE_TIME": when, "URL": url,
        "NUM": lambda: str(rnd.randint(1, 9999)),
        "PRICE": lambda: rnd.choice(["$", "€", "£"]) + "%d.%02d" % (rnd.randint(1, 999), rnd.randint(0, 99)),
        "CODE": lambda: rnd.choice(["#", "A-", "ORD-", ""]) + str(rnd.randint(10000, 9999999)),
        "VER": lambda: "%d.%d.%d" % (rnd.randint(0, 9), rnd.randint(0, 30), rnd.randint(0, 30)),
        "QTY": lambda: str(rnd.randint(2, 500)),
    }


# What may open a message, and how sentences are joined.
OPENINGS = ["", "", "", "", "Hello, ", "FW: ", "Note — ", "✅ ", "📞 ", "Ticket update: ",
            "Bonjour! ", "Привет. ", "[auto] ", "> ", "Hi team,\n"]
JOINS = [" ", " ", "\n", " Also, ", "; ", " — ", " P.S. "]

SLOT = re.compile(r"\{([A-Z_]+)\}")
LABELS = {"PERSON", "EMAIL_ADDRESS", "PHONE_NUMBER", "LOCATION", "CREDIT_CARD", "IP_ADDRESS",
          "IBAN", "DATE_TIME", "URL"}


def case(template, fake, rnd):
    gen = values(fake, rnd)
    out, spans, at = [], [], 0
    pos = 0
    for m in SLOT.finditer(template):
        lit = template[pos:m.start()]
        out.append(lit)
        at += len(lit)
        v = gen[m.group(1)]().replace("\n", ", ")
        if m.group(1) in LABELS:
            spans.append({"label": m.group(1), "start": at, "end": at + len(v), "text": v})
        out.append(v)
        at += len(v)
        pos = m.end()
    out.append(template[pos:])
    text = "".join(out)
    return {"state": text, "questions": {"pii": {"type": "span", "preset": "pii", "ground_truth": spans}}}


def strings(v):
    """Every text inside a state (a text, or the values of an object)."""
    if isinstance(v, str):
        yield v
    elif isinstance(v, dict):
        for x in v.values():
            yield from strings(x)
    elif isinstance(v, list):
        for x in v:
            yield from strings(x)


def carrier_sentences(paths):
    """Sentences without personal data from `sys1bench generate` manifests (or plain text
    files): no address, link, long number, markup, or capitalised word past the first (a
    name or place, unlabelled)."""
    out = set()
    for path in paths:
        with open(path) as f:
            for line in f:
                try:
                    item = json.loads(line)
                    texts = strings(item.get("state", item.get("text")))
                except (json.JSONDecodeError, AttributeError):
                    # A line of plain text (a document).
                    texts = [line]
                for text in texts:
                    for sent in re.split(r"(?<=[.!?])\s+|\n+", text):
                        sent = sent.strip().strip('"')
                        words = sent.split()
                        if not 4 <= len(words) <= 40:
                            continue
                        if re.search(r"@|https?:|www\.|\d{5,}|\d[\d -]{6,}\d|^\w+,|[`|#*\[\]<>]", sent):
                            continue
                        if any(w[:1].isupper() and w != "I" and not w.startswith("I'") for w in words[1:]):
                            continue
                        out.add(sent)
    return sorted(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("split", choices=["train", "heldout"])
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--carrier", nargs="*", default=[],
                    help="sys1bench manifests whose sentences go between the entities'")
    a = ap.parse_args()
    carrier = carrier_sentences(a.carrier)
    rnd = random.Random(a.seed)
    fakes = {loc: Faker(loc) for loc in LOCALES}
    for i, f in enumerate(fakes.values()):
        f.seed_instance(a.seed * 100 + i)
    templates = TRAIN if a.split == "train" else HELDOUT
    with open(a.out, "w") as f:
        for _ in range(a.n):
            fake = fakes[rnd.choice(LOCALES)]
            # One to three sentences joined, after an opening a message may have: an entity's
            # place in the text and its neighbours vary, not only its template.
            parts = [rnd.choice(templates) for _ in range(rnd.choice([1, 1, 2, 3]))]
            # Ordinary sentences around them (a brace would read as a slot).
            for _ in range(rnd.choice([0, 1, 1, 2]) if carrier else 0):
                plain = rnd.choice(carrier).replace("{", "(").replace("}", ")")
                parts.insert(rnd.randint(0, len(parts)), plain)
            template = rnd.choice(OPENINGS) + rnd.choice(JOINS).join(parts)
            f.write(json.dumps(case(template, fake, rnd), ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
