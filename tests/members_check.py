"""The wire-format rule as a check (issue 64): the router and the keys service name no request
member by a string literal that `protocol::member` defines; they read and write those members
through its constants, which protocol's tests tie to its wire types.

Checked: member accesses on JSON values (`.get("x")`, `.get_mut`, `.contains_key`, `.remove`,
`.entry`, `.insert("x".into()`, `["x"]`) in product code (a file less its trailing test module).
"""
import pathlib
import re
import sys

import product_code

ROOT = pathlib.Path(__file__).resolve().parent.parent
members = set(re.findall(r'pub const [A-Z0-9_]+: &str = "([a-z0-9_]+)";',
                         (ROOT / "crates/protocol/src/member.rs").read_text()))
ACCESS = re.compile(r'\.(?:get|get_mut|contains_key|remove|entry)\("([a-z0-9_]+)"\)'
                    r'|\.insert\("([a-z0-9_]+)"\.into\(\)|\["([a-z0-9_]+)"\]')
bad = []
for rel, n, line in product_code.lines(("router", "service")):
    for m in ACCESS.finditer(line):
        word = next(g for g in m.groups() if g)
        if word in members:
            bad.append(f"{rel}:{n}: {line.strip()}")
for b in bad:
    print(b)
if bad:
    print(f"{len(bad)} request members named by string; use protocol::member")
    sys.exit(1)
print(f"members_check: router and service name the {len(members)} members through protocol")
