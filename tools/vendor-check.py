"""Checks that each vendor/NAME.patch, applied to the published crate, reproduces vendor/NAME.

The published crates are fetched by cargo (a throwaway package that depends on each at the vendored
version), unpacked from cargo's cache, patched with `patch -p1`, and compared file by file with the
vendored copy. Left out of the comparison: the packaging files the copies leave out (README.md,
Cargo.toml.orig, .cargo_vcs_info.json, cubecl.toml) and Cargo.lock (a vendored copy may pin its own
test dependencies). Exit 1 with the differences listed, 0 when every copy is its patch.

    python3 tools/vendor-check.py
"""
import filecmp
import pathlib
import re
import subprocess
import sys
import tarfile
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
LEFT_OUT = {"README.md", "Cargo.toml.orig", ".cargo_vcs_info.json", ".cargo-ok", "cubecl.toml", "Cargo.lock"}


def version(crate_dir):
    """The version in a vendored copy's Cargo.toml."""
    text = (crate_dir / "Cargo.toml").read_text()
    return re.search(r'^version = "([^"]+)"', text, re.M).group(1)


def fetch(crates, work):
    """The published `.crate` files of `crates` ({name: version}), fetched by cargo into its cache."""
    pkg = work / "fetch"
    (pkg / "src").mkdir(parents=True)
    (pkg / "src" / "main.rs").write_text("fn main() {}\n")
    deps = "\n".join(f'{n} = {{ version = "={v}", default-features = false }}' for n, v in crates.items())
    (pkg / "Cargo.toml").write_text(
        f'[package]\nname = "vendor-check"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n{deps}\n'
    )
    subprocess.run(["cargo", "fetch", "--quiet"], cwd=pkg, check=True)
    home = pathlib.Path(subprocess.run(["sh", "-c", "echo ${CARGO_HOME:-$HOME/.cargo}"],
                                       capture_output=True, text=True).stdout.strip())
    found = {}
    for n, v in crates.items():
        hits = sorted(home.glob(f"registry/cache/*/{n}-{v}.crate"))
        if not hits:
            sys.exit(f"vendor-check: cargo fetched no {n}-{v}.crate")
        found[n] = hits[0]
    return found


def files(root):
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file() and p.name not in LEFT_OUT}


def check(name, crate_file, work):
    """The differences between the published crate patched and the vendored copy."""
    with tarfile.open(crate_file) as t:
        t.extractall(work / "published", filter="data")
    published = next((work / "published").glob(f"{name}-*"))
    patch = (ROOT / "vendor" / f"{name}.patch").read_bytes()
    r = subprocess.run(["patch", "-p1", "-s", "--no-backup-if-mismatch"], cwd=published, input=patch,
                       capture_output=True)
    if r.returncode != 0:
        return [f"{name}.patch does not apply: {r.stdout.decode()}{r.stderr.decode()}"]
    vendored = ROOT / "vendor" / name
    ours, theirs = files(vendored), files(published)
    problems = [f"{name}: only in the vendored copy: {p}" for p in sorted(ours - theirs)]
    problems += [f"{name}: missing from the vendored copy: {p}" for p in sorted(theirs - ours)]
    problems += [f"{name}: {p} differs from the patched crate" for p in sorted(ours & theirs)
                 if not filecmp.cmp(vendored / p, published / p, shallow=False)]
    return problems


def main():
    names = sorted(p.stem for p in (ROOT / "vendor").glob("*.patch"))
    crates = {n: version(ROOT / "vendor" / n) for n in names}
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        for n, crate_file in fetch(crates, work).items():
            (work / n).mkdir()
            problems += check(n, crate_file, work / n)
    for p in problems:
        print(f"vendor-check: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"vendor-check: {', '.join(f'{n} {v}' for n, v in crates.items())}: each is its patch")


main()
