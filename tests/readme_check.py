"""Every example of README.md (and of the docs named) that talks to a running service, run
as written.

Usage: python3 tests/readme_check.py [README.md docs/*.md]

Expects the default `vllm-srun serve` (no arguments) listening on localhost:8000, as README's
first command starts it. Each ```sh block whose commands are curl calls and each ```python
block is run verbatim; a block passes when it exits 0 and what it printed is no error: curl
prints whatever status came back, so its JSON (or each server-sent event) is read and must not
carry an `error` member. Blocks that build, install or start things (cargo, pip, bash, a server
in the background) are left to the commands README names for them and are listed as skipped.
Prints `N passed, N failed` last; exits 1 when any block failed.
"""

import json
import re
import subprocess
import sys

TIMEOUT_S = 600


def blocks(text):
    """(line, language, body) of every fenced block."""
    out = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)))
    return out


def commands(body):
    """The shell commands of a block, comment lines and blank lines left out."""
    return [
        ln for ln in body.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]


def runnable(lang, body):
    if lang == "python":
        return True
    if lang != "sh":
        return False
    cmds = commands(body)
    # A curl example: its first line is a curl call and every other line continues it.
    return bool(cmds) and cmds[0].startswith("curl ")


def errors_in(printed):
    """What in a curl example's output is an error answer (JSON or server-sent events)."""
    found = []
    text = printed.strip()
    if not text:
        return ["nothing printed"]
    if text.startswith("data:") or "\ndata:" in text:
        events = [ln[5:].strip() for ln in text.splitlines() if ln.startswith("data:")]
        if not events or events[-1] != "[DONE]":
            found.append("the stream did not end with [DONE]")
        for e in events[:-1]:
            try:
                v = json.loads(e)
            except ValueError:
                found.append(f"an event is not JSON: {e[:80]}")
                continue
            if isinstance(v, dict) and "error" in v:
                found.append(f"an error event: {e[:200]}")
        return found
    try:
        v = json.loads(text)
    except ValueError:
        return [f"not JSON: {text[:200]}"]
    if isinstance(v, dict) and ("error" in v or "detail" in v):
        found.append(f"an error answer: {text[:300]}")
    return found


def main():
    paths = sys.argv[1:] or ["README.md"]
    passed = failed = 0
    for path in paths:
        text = open(path, encoding="utf-8").read()
        for line, lang, body in blocks(text):
            where = f"{path}:{line}"
            if not runnable(lang, body):
                if lang in ("sh", "python"):
                    first = (commands(body) or [""])[0]
                    print(f"skip  {where} ({lang}: {first[:60]})")
                continue
            argv = ["python3", "-c", body] if lang == "python" else ["bash", "-c", body]
            try:
                r = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                print(f"FAIL  {where}: no answer in {TIMEOUT_S} s")
                failed += 1
                continue
            problems = [] if r.returncode == 0 else [f"exit {r.returncode}: {r.stderr[-600:]}"]
            if lang == "sh" and r.returncode == 0:
                problems += errors_in(r.stdout)
            if problems:
                failed += 1
                print(f"FAIL  {where} ({lang})")
                for p in problems:
                    print(f"      {p}")
            else:
                passed += 1
                shown = r.stdout.strip().splitlines()
                print(f"ok    {where} ({lang}): {(shown[0] if shown else '')[:100]}")
    print(f"examples: {passed} passed, {failed} failed")
    sys.exit(1 if failed or not passed else 0)


if __name__ == "__main__":
    main()
