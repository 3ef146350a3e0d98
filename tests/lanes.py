"""Run the workspace's test binaries on a number of lanes, longest first.

    python3 tests/lanes.py ARTIFACTS LANES [SLOW ...]

ARTIFACTS is the JSON cargo printed while it built the tests (`--message-format=json`); every
test harness in it (a `test` profile with an executable, outside the `bench` crate) runs once,
in its package's directory as `cargo test` runs it. The binaries named in SLOW (by target
name, longest first) start first and the rest follow in cargo's order, so the lanes end close
together. Each binary's output is printed whole when it ends; the exit status is 1 when any
binary failed.
"""

import json
import os
import subprocess
import sys
import threading
import time


def harnesses(path):
    seen, out = set(), []
    for line in open(path, encoding="utf-8"):
        if not line.startswith("{"):
            continue
        m = json.loads(line)
        exe = m.get("executable")
        if m.get("reason") != "compiler-artifact" or not exe or not m["profile"]["test"]:
            continue
        if "example" in m["target"]["kind"] or m["package_id"].split("#")[0].endswith("/bench"):
            continue
        if exe in seen:
            continue
        seen.add(exe)
        out.append((m["target"]["name"], exe, os.path.dirname(m["manifest_path"])))
    return out


def main():
    artifacts, lanes, slow = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    queue = harnesses(artifacts)
    rank = {name: i for i, name in enumerate(slow)}
    queue.sort(key=lambda h: rank.get(h[0], len(slow)))
    lock, failed = threading.Lock(), []

    def lane():
        while True:
            with lock:
                if not queue:
                    return
                name, exe, cwd = queue.pop(0)
            start = time.monotonic()
            env = dict(os.environ, CARGO_MANIFEST_DIR=cwd)
            run = subprocess.run([exe], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, errors="replace")
            took = time.monotonic() - start
            with lock:
                print(f"     Running {name} ({os.path.relpath(exe)}) in {took:.1f} s", flush=True)
                print(run.stdout, end="", flush=True)
                if run.returncode != 0:
                    failed.append(name)

    threads = [threading.Thread(target=lane) for _ in range(lanes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        print(f"test binaries failed: {' '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
