#!/usr/bin/env python3
"""The figures `oom-bisect bench` prints, computed from a bisect journal (JSONL) after the fact.

Used for the H200 forum run, whose diagnosis was cut by the device tool's time limit before `bench`
could print them: `python3 docs/journal-figures.py docs/runs/h200/run6-forum-journal.jsonl`.
Trials are taken in journal order, which is the order they ran in.
"""
import json
import sys


def mean(v):
    return sum(v) / len(v) if v else 0.0


rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
reports = [r["report"] for r in rows]
walls = [r["wall_seconds"] for r in reports]
finished = [r for r in reports if r["outcome"] == "fits" and len(r["steps"]) > 1]
outcomes = {}
for r in reports:
    outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
print(f"{len(reports)} trials, {sum(walls):.1f} s inside trial processes; outcomes {outcomes}")
print(f"  process start to device ready (context, ceiling)   {mean([r['ready_seconds'] for r in reports if r.get('ready_seconds') is not None]):8.2f} s")
print(f"  building model, optimizer and batch                {mean([r['built_seconds'] - r['ready_seconds'] for r in reports if r.get('built_seconds') is not None and r.get('ready_seconds') is not None]):8.2f} s")
print(f"  whole trial, any outcome                           {mean(walls):8.2f} s")
oom = [r for r in reports if r["outcome"] == "oom"]
print(f"  out-of-memory trials: whole trial ({len(oom)})          {mean([r['wall_seconds'] for r in oom]):8.2f} s")
print(f"  finished trials: whole trial ({len(finished)})             {mean([r['wall_seconds'] for r in finished]):8.2f} s")
print(f"  finished trials: all training steps                {mean([sum(s['seconds'] for s in r['steps']) for r in finished]):8.2f} s")
print(f"  finished trials: first step (compilation included) {mean([r['steps'][0]['seconds'] for r in finished]):8.2f} s")
print(f"  finished trials: a later step                      {mean([s['seconds'] for r in finished for s in r['steps'][1:]]):8.2f} s")
over = [r["wall_seconds"] - min(s["seconds"] for s in r["steps"][1:]) * len(r["steps"]) for r in finished]
print(f"  finished trials: overhead beyond steady steps      {mean(over):8.2f} s")
if len(walls) > 1:
    print(f"  first trial {walls[0]:.2f} s, later trials {mean(walls[1:]):.2f} s on average")
