"""Reads the JSON reports of a benchmark folder and prints one Markdown table: trials, seconds, and the
boundaries each run found. Usage: python3 tools/bench/table.py FOLDER [NAME ...]"""
import json
import pathlib
import sys


def boundary(b):
    if b.get("last_fit") and b.get("first_oom"):
        return f'{b["axis"]} {b["last_fit"]["value"]} \\| {b["first_oom"]["value"]}'
    return f'{b["axis"]}: {b.get("kind", "no boundary")}'


def row(path):
    try:
        r = json.loads(path.read_text())
    except (OSError, ValueError):
        return f"| {path.stem} | – | – | – | did not finish |"
    trials = r.get("trials", {})
    if "boundaries" not in r:  # a trial's JSON
        need = (r.get("allocator") or {}).get("need_bytes")
        replay = ""
        if need and r.get("ceiling_bytes"):
            says = "fits" if need <= r["ceiling_bytes"] else "oom"
            replay = f"; replay: needs {need / 2**30:.2f} GiB, {says}"
        return f'| {path.stem} | 1 | – | {r.get("wall_seconds", 0):.1f} | device: {r["outcome"]}{replay} |'
    found = "; ".join(boundary(b) for b in r["boundaries"])
    ran = trials.get("count", len(trials.get("list", [])))
    ev = r.get("evidence") or {}
    certs = ev.get("certificates") or []
    agree = sum(1 for c in certs if c.get("agrees"))
    certified = f"{len(certs)} ({agree} agree)" if ev.get("certified") else "–"
    return f'| {path.stem} | {ran} | {certified} | {r["wall_seconds"]:.1f} | {found} |'


def main():
    folder = pathlib.Path(sys.argv[1])
    names = sys.argv[2:] or sorted(p.stem for p in folder.glob("*.json"))
    print("| run | trials | certified on the GPU | seconds | found |\n| --- | --- | --- | --- | --- |")
    for n in names:
        print(row(folder / f"{n}.json"))


main()
