"""The error rules as a check (issue 64): no HTTP error status and no OpenAI error type is
chosen in product code outside the `errors` crate.

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

bad = []
for rel, n, line in product_code.lines(skip=("errors",)):
    # A status read off the wire (`from_u16` of an answer's status) is not chosen here.
    if "from_u16(" in line or "==" in line or "!=" in line:
        continue
    for m in STATUS.finditer(line):
        if m.group(1) not in ALLOWED:
            bad.append(f"{rel}:{n}: {line.strip()}")
    if TYPES.search(line):
        bad.append(f"{rel}:{n}: {line.strip()}")
for b in bad:
    print(b)
if bad:
    print(f"{len(bad)} error statuses or types chosen outside crates/errors")
    sys.exit(1)
print("errors_check: every error status and type is the errors crate's")
