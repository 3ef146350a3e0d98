"""The error rules as a check (issue 64): no HTTP error status and no OpenAI error type is
chosen in product code outside the `errors` crate, and no product function fails with a bare
`String` (`Result<_, String>`): errors are typed inside (`thiserror`), `anyhow` at the edges.

Product code is every `crates/*/src` file, less its trailing `#[cfg(test)]` module and the
crates' `tests/` folders. Success statuses (200, 201, 202, 204, 304) may be named anywhere;
reading a status (`== StatusCode::...`, `StatusCode::from_u16` of an answer's status) is
not choosing one.
"""
import re
import sys

import product_code
ALLOWED = {"OK", "CREATED", "ACCEPTED", "NO_CONTENT", "NOT_MODIFIED"}
STATUS = re.compile(r"StatusCode::([A-Z_]+)")
TYPES = re.compile(r'"(invalid_request_error|rate_limit_error|server_error|authentication_error)"')



def string_errors(text):
    """Offsets of each `Result<..., String>` in `text` (the error type at the top level)."""
    for m in re.finditer(r"\bResult<", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"<": 1, ">": -1}.get(text[i], 0)
            i += 1
        inner, top, level = text[m.end():i - 1], [], 0
        for k, c in enumerate(inner):
            level += c in "<([" and 1 or 0
            level -= c in ">)]" and 1 or 0
            if c == "," and level == 0:
                top.append(k)
        if top and inner[top[-1] + 1:].strip().rstrip(",").strip() == "String":
            yield m.start()


bad, untyped = [], []
files = {}
for rel, n, line in product_code.lines():
    files.setdefault(rel, []).append((n, line))
for rel, numbered in files.items():
    text = "\n".join(line for _, line in numbered)
    for at in string_errors(text):
        n, line = numbered[text.count("\n", 0, at)]
        untyped.append(f"{rel}:{n}: {line.strip()}")
    if rel.parts[1] == "errors":
        continue
    for n, line in numbered:
        # A status read off the wire (`from_u16` of an answer's status) is not chosen here.
        if "from_u16(" in line or "==" in line or "!=" in line:
            continue
        for m in STATUS.finditer(line):
            if m.group(1) not in ALLOWED:
                bad.append(f"{rel}:{n}: {line.strip()}")
        if TYPES.search(line):
            bad.append(f"{rel}:{n}: {line.strip()}")
for b in bad + untyped:
    print(b)
if bad:
    print(f"{len(bad)} error statuses or types chosen outside crates/errors")
if untyped:
    print(f"{len(untyped)} results fail with a bare String (type the error)")
if bad or untyped:
    sys.exit(1)
print("errors_check: every error status and type is the errors crate's; no error is a bare String")
