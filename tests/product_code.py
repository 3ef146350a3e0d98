"""The product code of the workspace's crates, line by line, for the layout checks
(`errors_check.py`, `members_check.py`): each file of `crates/CRATE/src` less its trailing
`#[cfg(test)] mod tests` and test-only files, without comment lines."""
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def lines(crates=("*",), skip=()):
    """(path relative to the root, line number, line) of every product line of the crates
    named in `crates` (glob patterns), less those in `skip`."""
    for crate in crates:
        for path in sorted(ROOT.glob(f"crates/{crate}/src/**/*.rs")):
            rel = path.relative_to(ROOT)
            if rel.parts[1] in skip or path.name.endswith("_tests.rs") or path.name == "tests.rs":
                continue
            text = path.read_text()
            cut = text.find("#[cfg(test)]\nmod tests")
            if cut >= 0:
                text = text[:cut]
            for n, line in enumerate(text.splitlines(), 1):
                if not line.lstrip().startswith("//"):
                    yield rel, n, line
