#!/usr/bin/env python3
"""The module graph inside each crate of the workspace, and the rules it must keep.

An arrow A -> B means a file of module A names module B through a `crate::` or `super::`
path (in a `use` or inline). A parent module declaring its children (`mod b;`) is no arrow;
the crate root (lib.rs / main.rs), which declares every module and holds the shared state, is
left out. Inline test modules count as their file's module.

Rules (exit 1 when one breaks):
  * no import circle inside any crate (no strongly connected set of two or more modules);
  * in `server`, a module under `routes/` imports no other module under `routes/`.

  python3 tests/modgraph.py            # check, print a summary
  python3 tests/modgraph.py --graph    # also print every arrow, crate by crate
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LEAF_DIRS = {"server": "routes"}


def module_of(src: pathlib.Path, f: pathlib.Path):
    rel = f.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "mod":
        parts.pop()
    if parts in (["lib"], ["main"]):
        return None
    return tuple(parts)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def inline_depth(text: str):
    """For each offset, how many inline `mod name { ... }` blocks enclose it (a function of
    the offset, computed once)."""
    spans = []
    for m in re.finditer(r"\bmod\s+[A-Za-z_][A-Za-z0-9_]*\s*\{", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        spans.append((m.end(), i))
    return lambda at: sum(1 for a, b in spans if a <= at < b)


def paths_in(text: str):
    """Every `crate::a::b` or `super::a` path, with `use` brace groups expanded; a `super`
    inside an inline module first climbs out of it."""
    out = []
    depth_at = inline_depth(text)
    for m in re.finditer(r"\b(crate|super(?:::super)*)::((?:[A-Za-z_][A-Za-z0-9_]*::)*)(\{|[A-Za-z_][A-Za-z0-9_]*)", text):
        head, mid, tail = m.group(1), m.group(2), m.group(3)
        if head != "crate":
            ups = head.count("super") - depth_at(m.start())
            head = "self" if ups <= 0 else "::".join(["super"] * ups)
        if tail != "{":
            out.append((head, mid.split("::")[:-1] + [tail]))
            continue
        # a brace group: read it to its matching brace, one level of nesting at a time
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        group = text[m.end(): i - 1]
        base = mid.split("::")[:-1]
        for item in split_top(group):
            item = item.strip()
            if not item:
                continue
            if "{" in item:
                pre, inner = item.split("{", 1)
                pre = [p for p in pre.strip().rstrip(":").split("::") if p]
                for sub in split_top(inner.rsplit("}", 1)[0]):
                    if sub.strip():
                        out.append((head, base + pre + sub.strip().split(" as ")[0].split("::")))
            else:
                out.append((head, base + item.split(" as ")[0].split("::")))
    return out


def split_top(s: str):
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def crate_graph(src: pathlib.Path):
    files = [f for f in src.rglob("*.rs")]
    mods = {}
    for f in files:
        m = module_of(src, f)
        if m is not None:
            mods[m] = f
    known = set(mods)
    edges = {m: set() for m in mods}
    for m, f in mods.items():
        is_mod_rs = f.name == "mod.rs"
        text = strip_comments(f.read_text())
        children = {c[-1] for c in known if len(c) == len(m) + 1 and c[: len(m)] == m}
        for c in children:
            # `child::item` or `use child::{...}` written without `self::`
            if re.search(r"(?<![A-Za-z0-9_:])" + re.escape(c) + r"::", text):
                edges[m].add(m + (c,))
        for head, path in paths_in(text):
            if head == "crate":
                base = []
            elif head == "self":
                base = list(m)
            else:
                ups = head.count("super")
                # `super` of a.rs (module ('x','a')) is ('x'); of x/mod.rs it is ()
                here = list(m) if is_mod_rs else list(m)
                base = here[: len(here) - ups]
            full = base + [p for p in path if p not in ("self", "*")]
            target = None
            for n in range(len(full), 0, -1):
                if tuple(full[:n]) in known:
                    target = tuple(full[:n])
                    break
            if target is None or target == m:
                continue
            # a child naming its ancestor's items is an arrow; a parent declaring a child is not
            edges[m].add(target)
    return mods, edges


def sccs(nodes, edges):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return out


def name(m):
    return "::".join(m)


def main():
    show = "--graph" in sys.argv
    broken = []
    for cargo in sorted((ROOT / "crates").glob("*/Cargo.toml")):
        crate = cargo.parent.name
        src = cargo.parent / "src"
        mods, edges = crate_graph(src)
        arrows = sum(len(v) for v in edges.values())
        circles = [c for c in sccs(sorted(mods), edges) if len(c) > 1]
        print(f"{crate}: {len(mods)} modules, {arrows} arrows, {len(circles)} circles")
        for c in circles:
            broken.append(f"{crate}: import circle among {', '.join(sorted(name(m) for m in c))}")
        leaf = LEAF_DIRS.get(crate)
        if leaf:
            for m, ts in edges.items():
                if m[:1] == (leaf,) and len(m) > 1:
                    for t in ts:
                        if t[:1] == (leaf,) and len(t) > 1:
                            broken.append(f"{crate}: route module {name(m)} imports route module {name(t)}")
        if show:
            for m in sorted(edges):
                if edges[m]:
                    print(f"  {name(m)} -> {', '.join(sorted(name(t) for t in edges[m]))}")
    for b in broken:
        print("BROKEN:", b)
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
