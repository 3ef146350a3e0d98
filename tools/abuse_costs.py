#!/usr/bin/env python3
"""What each abusive request costs a running worker: time to its answer, and /health's
latency while it runs (a thread polls /health every 20 ms).

    python3 tools/abuse_costs.py http://127.0.0.1:8000 [--model smollm2-135m]

Sends each case alone, in order, and prints one table row per case: the time the client
saw, and the server's own (Server-Timing total, from the body's first byte read). Standard library only, so
it runs against any build (the table in issue 18's note compares two binaries this way).
"""

import argparse
import gzip
import http.client
import json
import threading
import time
import urllib.parse

MB = 1 << 20


def words(n_bytes):
    unit = "the parcel arrived late and the box was crushed again "
    return (unit * (n_bytes // len(unit) + 1))[:n_bytes]


def noul(extra=None):
    q = {"type": "noul", "instructions": "Is the customer unhappy?"}
    q.update(extra or {})
    return q


def cases(model):
    def body(d):
        d.setdefault("model", model)
        return json.dumps(d).encode()

    yield "5,000 unreferenced video assets, 1 MB state", "/v1/decisions", {}, body({
        "state": words(MB),
        "assets": {f"Z{i:04}": {"type": "video", "data_base64": ""} for i in range(5000)},
        "questions": {"q": noul()},
    })
    yield "10 MB state, max_tokens 1e8, window", "/v1/decisions", {}, body({
        "state": words(10 * MB),
        "options": {"max_tokens": 100_000_000},
        "questions": {"q": noul({"overflow": "window"})},
    })
    option = words(190)
    yield "200 questions x 255 options (10 MB)", "/v1/decisions", {}, body({
        "state": "short",
        "questions": {
            f"q{i}": {"type": "choice", "criteria": {f"o{j} {option}": None for j in range(255)}}
            for i in range(200)
        },
    })
    yield "16 MB of one string", "/v1/decisions", {}, body({
        "state": "a" * (16 * MB - 200),
        "questions": {"q": noul()},
    })
    yield "300,000 tiny questions", "/v1/decisions", {}, body({
        "state": "short",
        "questions": {f"q{i}": {"type": "noul", "instructions": "Late?"} for i in range(300_000)},
    })
    yield "JSON nested 100,000 deep", "/v1/decisions", {}, (
        b'{"state": ' + b"[" * 100_000 + b"]" * 100_000 + b', "questions": {"q": {"type": "noul"}}}'
    )
    yield "4 at once: 10 MB state, max_tokens 1e8, window", "/v1/decisions", {}, body({
        "state": words(10 * MB),
        "options": {"max_tokens": 100_000_000},
        "questions": {"q": noul({"overflow": "window"})},
    })
    plain = body({"state": words(15 * MB), "questions": {"q": noul()}})
    yield "gzip body of 15 MB", "/v1/decisions", {"Content-Encoding": "gzip"}, gzip.compress(plain, 6)
    yield "gzip bomb (1 GB of spaces)", "/v1/decisions", {"Content-Encoding": "gzip"}, gzip.compress(
        b" " * (1 << 30), 9
    )


def at_once(url, path, headers, data, n):
    """Send `n` copies at once; the slowest answer's status, reason and time."""
    out = [None] * n

    def one(i):
        out[i] = post(url, path, headers, data)[:3]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = sorted({f"{s} {r}" for s, r, _ in out})
    return " / ".join(statuses), "", max(ms for _, _, ms in out), ""


def post(url, path, headers, data, timeout=120):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    h = {"Content-Type": "application/json", **headers}
    t = time.perf_counter()
    c.request("POST", path, body=data, headers=h)
    r = c.getresponse()
    raw = r.read()
    ms = (time.perf_counter() - t) * 1000
    try:
        v = json.loads(raw)
    except ValueError:
        v = {}
    e = v.get("error", v) if isinstance(v, dict) else {}
    reason = e.get("reason") if isinstance(e, dict) else None
    c.close()
    timing = r.getheader("server-timing") or ""
    total = next((p.split("dur=")[1] for p in timing.split(",") if p.strip().startswith("total")), "")
    return r.status, reason, ms, total


class Health(threading.Thread):
    def __init__(self, url):
        super().__init__(daemon=True)
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port
        self.stop = threading.Event()
        self.times = []

    def run(self):
        while not self.stop.is_set():
            c = http.client.HTTPConnection(self.host, self.port, timeout=120)
            t = time.perf_counter()
            c.request("GET", "/health")
            c.getresponse().read()
            self.times.append((time.perf_counter() - t) * 1000)
            c.close()
            time.sleep(0.02)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--model", default="smollm2-135m")
    a = ap.parse_args()
    print("| input | status | reason | answered in (ms) | server total (ms) | /health max (ms) |")
    print("|---|---|---|---|---|---|")
    for name, path, headers, data in cases(a.model):
        h = Health(a.url)
        h.start()
        if name.startswith("4 at once"):
            status, reason, ms, total = at_once(a.url, path, headers, data, 4)
        else:
            status, reason, ms, total = post(a.url, path, headers, data)
        h.stop.set()
        h.join()
        worst = max(h.times) if h.times else float("nan")
        total = f"{float(total):.0f}" if total else "-"
        print(f"| {name} | {status} | {reason} | {ms:.0f} | {total} | {worst:.0f} |", flush=True)


if __name__ == "__main__":
    main()
