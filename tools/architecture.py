#!/usr/bin/env python3
"""Checks the house that docs/architecture.md describes, from the code's own imports.

Within each crate, a file may import another file's module, never the crate root (`crate::name`
where `name` is re-exported or defined by lib.rs/main.rs: the root declares every module, so such an
import runs back up and can hide a circle), and no files may import each other in a loop. Between
crates, the order is the table in docs/architecture.md (CRATE_FLOORS below): a crate imports only
crates on a lower floor.

Usage: python3 tools/architecture.py [REPO]   (exit 1 and one line per finding when the house is off)
Test modules (`#[cfg(test)] mod ... {`) and the crates' tests/ folders are not read: they may reach
anywhere.
"""
import re
import sys
from pathlib import Path

CRATE_FLOORS = {
    "oom-bisect": 3,
    "oom-trial": 2,
    "deeplab": 1,
    "pytorch-allocator": 1,
    "oom-search": 1,
}

USE = re.compile(r"\buse\s+((?:crate|super|self)::[^;]*);", re.S)
INLINE = re.compile(r"\b((?:crate|super)(?:::\w+)+)")
MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)
EXTERN = re.compile(r"(?<![:\w])(oom_bisect|oom_trial|deeplab|pytorch_allocator|oom_search)::")


def without_tests(text):
    """The file up to its first `#[cfg(test)]` module."""
    m = re.search(r"#\[cfg\(test\)\]\s*(?:pub\s+)?mod\s+\w+\s*\{", text)
    return text[: m.start()] if m else text


def without_comments(text):
    """The code alone: comments and string literals taken out (a string may name anything)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'r(#*)".*?"\1', '""', text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def use_paths(tree):
    """Every path a `use` tree names: `crate::{a::{b, c}, d}` gives crate::a::b, crate::a::c, crate::d."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", tree))
    if "{" not in tree:
        return [tree]
    head, rest = tree.split("{", 1)
    body = rest[: rest.rfind("}")]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    out = []
    for p in filter(None, parts):
        out += use_paths(head + p)
    return out


class Crate:
    def __init__(self, root):
        self.root = root
        self.name = root.name
        src = root / "src"
        self.top = src / "lib.rs" if (src / "lib.rs").exists() else src / "main.rs"
        self.files = {}  # module path tuple -> file
        self._declare((), self.top)

    def _declare(self, path, file):
        self.files[path] = file
        folder = file.parent if file.name in ("lib.rs", "main.rs", "mod.rs") else file.with_suffix("")
        for name in MOD.findall(without_tests(without_comments(file.read_text()))):
            for child in (folder / f"{name}.rs", folder / name / "mod.rs"):
                if child.exists():
                    self._declare(path + (name,), child)

    def module_of(self, file):
        return next(p for p, f in self.files.items() if f == file)

    def target(self, here, segments):
        """The file a path names: the longest prefix that is a module."""
        if segments[0] == "crate":
            path = ()
        elif segments[0] == "self":
            path = here
        else:
            path = here
            while segments and segments[0] == "super":
                path, segments = path[:-1], segments[1:]
            segments = ["crate"] + segments
        best = path
        for s in segments[1:]:
            if path + (s,) not in self.files:
                break
            path = path + (s,)
            best = path
        return best


def check_crate(crate):
    findings, edges = [], {f: set() for f in crate.files.values()}
    for path, file in crate.files.items():
        if file == crate.top:
            continue
        text = without_tests(without_comments(file.read_text()))
        named = [p for u in USE.findall(text) for p in use_paths(u)]
        named += INLINE.findall(USE.sub("", text))
        for p in named:
            segments = [s for s in p.split("::") if s and s != "*"]
            target = crate.target(path, segments)
            if target == ():
                findings.append(f"{rel(file)}: `{p}` imports through the crate root; import from the defining module")
            elif crate.files[target] != file and target != path[: len(target)]:
                edges[file].add(crate.files[target])
    return findings + [
        "circle: " + " -> ".join(rel(f) for f in loop + [loop[0]]) for loop in circles(edges)
    ]


def circles(edges):
    """The strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check_crates(crates):
    findings = []
    for c in crates:
        floor = CRATE_FLOORS.get(c.name)
        if floor is None:
            findings.append(f"crates/{c.name}: not in CRATE_FLOORS (docs/architecture.md's table)")
            continue
        for file in c.files.values():
            for used in set(EXTERN.findall(without_comments(file.read_text()))):
                other = used.replace("_", "-")
                if other != c.name and CRATE_FLOORS.get(other, 0) >= floor:
                    findings.append(f"{rel(file)}: imports {other}, which is not on a lower floor")
    return findings


def rel(p):
    return str(p.relative_to(REPO))


TICKED = re.compile(r"`([^`\n]+)`")
CAMEL = re.compile(r"^[A-Z][a-z0-9]+[A-Za-z0-9]*$")
SNAKE = re.compile(r"^[a-z_][a-z0-9_]*$")
CRATE_WORDS = {"crate", "self", "super", "deeplab", "oom_search", "oom_trial", "pytorch_allocator", "oom_bisect"}


def check_named(doc, crates):
    """What docs/architecture.md names in backticks exists: each source file it names, each type
    (CamelCase) as a word of the code, and each function or module after `::` as a definition."""
    sources = [f for c in crates for f in c.files.values()] + list(REPO.glob("vendor/*/src/**/oom_bisect.rs"))
    code = "\n".join(without_comments(f.read_text()) for f in sources)
    words = set(re.findall(r"\b\w+\b", code))
    defined = set(re.findall(r"\b(?:fn|mod|const|static|struct|enum|trait|type)\s+(\w+)", code))
    defined |= set(re.findall(r"\bpub\s+(\w+)\s*:", code))  # a field (`Modules::encode`)
    files = {str(f.relative_to(REPO)) for f in REPO.glob("crates/**/*.rs")}
    findings = []
    for token in sorted(set(TICKED.findall(doc.read_text()))):
        name = token.split("(")[0].strip()
        if name.endswith(".rs") or "/" in name:
            path = name.split("::")[0]
            if path.endswith(".rs") and not any(f == path or f.endswith("/" + path) for f in files):
                findings.append(f"{rel(doc)}: `{token}` names a file the crates do not have")
            continue
        if name.startswith("-") or " " in name or not re.fullmatch(r"[\w:]+", name):
            continue
        segments = [x for x in name.split("::") if x and x not in CRATE_WORDS]
        for i, seg in enumerate(segments):
            if CAMEL.match(seg) and seg not in words:
                findings.append(f"{rel(doc)}: `{token}` names {seg}, which the code does not have")
            elif i > 0 and SNAKE.match(seg) and seg not in defined:
                findings.append(f"{rel(doc)}: `{token}` names {seg}, which the code does not define")
    return findings


if __name__ == "__main__":
    REPO = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    crates = [Crate(d) for d in sorted((REPO / "crates").iterdir()) if (d / "Cargo.toml").exists()]
    findings = check_crates(crates)
    findings += check_named(REPO / "docs" / "architecture.md", crates)
    for c in crates:
        findings += check_crate(c)
    for f in findings:
        print(f)
    if not findings:
        files = sum(len(c.files) for c in crates)
        print(f"the house holds: {len(crates)} crates, {files} files, no upward import, no circle")
    sys.exit(1 if findings else 0)
