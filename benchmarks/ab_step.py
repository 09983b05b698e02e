#!/usr/bin/env python3
"""The injected model's decode step under the package's switches, side by side: each variant a
fresh process (a switch such as XPUINJECT_NMAJOR acts when the package injects), all timed by the
same code, profile_decode.py's graph path (the graph runtime, the eval's timer), and rounds that
interleave the variants, each round in another order, so drift falls on all alike.

    PYTHONPATH=kernels/python:harness/python python3 benchmarks/ab_step.py MODEL_DIR RUN_DIR \\
        --variant base --variant nmajor:XPUINJECT_NMAJOR=1 [--variant nopdl:XPUINJECT_PDL=0,XPUINJECT_NMAJOR=1] \\
        [--rounds 2] [--batches 1] [--steps 30] [--context 512] [--device cuda] [--json OUT]

A variant is NAME or NAME:VAR=VALUE[,VAR=VALUE...], the variables set over this process's
environment. MODEL_DIR and RUN_DIR as profile_decode.py takes them. Prints each variant's step
time per round, its median and the ratio of that median to the first variant's; a variant whose
process failed says why and the others go on (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
_VAR = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def parse_variant(spec: str) -> tuple:
    """NAME[:VAR=VALUE,...] -> (name, {VAR: VALUE})."""
    name, _, rest = spec.partition(":")
    if not re.match(r"^[\w.+-]+$", name):
        raise ValueError(f"--variant {spec!r}: want NAME or NAME:VAR=VALUE[,VAR=VALUE...] (NAME of letters, digits, _.+-)")
    env = {}
    for pair in filter(None, rest.split(",")):
        var, eq, val = pair.partition("=")
        if not eq or not _VAR.match(var):
            raise ValueError(f"--variant {spec!r}: {pair!r} is not VAR=VALUE (VAR in capitals, as environment "
                             "variables are named)")
        env[var] = val
    return name, env


def order(variants: list, rnd: int) -> list:
    """Round rnd's order: the variants rotated by rnd places."""
    k = rnd % len(variants)
    return variants[k:] + variants[:k]


def run_one(args, env: dict, batches: str) -> dict:
    """One process of profile_decode.py's graph path: {batch: step ms}, or {"error": why}."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "step.json"
        cmd = [sys.executable, str(HERE / "profile_decode.py"), args.model, args.run, "--device", args.device,
               "--paths", "graph", "--batches", batches, "--steps", str(args.steps), "--context", str(args.context),
               "--no-profile", "--json", str(out)]
        try:
            p = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"no result in {args.timeout} s"}
        if p.returncode != 0 or not out.exists():
            tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
            return {"error": f"exit {p.returncode}: " + " | ".join(tail)}
        return {str(g["batch"]): g["step_ms"] for g in json.loads(out.read_text())["graph"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("run")
    ap.add_argument("--variant", action="append", required=True, help="NAME[:VAR=VALUE,...] (two or more)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batches", default="1")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--timeout", type=int, default=600, help="seconds a variant's process may take")
    ap.add_argument("--json", default=None, help="write every round's times here")
    args = ap.parse_args(argv)
    try:
        variants = [parse_variant(v) for v in args.variant]
    except ValueError as e:
        ap.error(str(e))
    names = [n for n, _ in variants]
    if len(set(names)) != len(names):
        ap.error(f"--variant: names repeat ({', '.join(names)})")
    if args.rounds < 1 or args.steps < 1:
        ap.error("--rounds and --steps: want at least 1")
    for what, path in (("MODEL_DIR", args.model), ("RUN_DIR", args.run)):
        if not Path(path).is_dir():
            ap.error(f"{what} {path}: not a folder")
    batches = [b.strip() for b in args.batches.split(",") if b.strip()]
    times = {n: {b: [] for b in batches} for n in names}
    errors = {}
    for rnd in range(args.rounds):
        for name, env in order(variants, rnd):
            got = run_one(args, env, ",".join(batches))
            if "error" in got:
                errors.setdefault(name, []).append(got["error"])
                print(f"round {rnd + 1} {name}: failed: {got['error']}", flush=True)
                continue
            for b in batches:
                times[name][b].append(got[b])
            print(f"round {rnd + 1} {name}: " + ", ".join(f"batch {b} {got[b]:.4f} ms" for b in batches), flush=True)
    print(f"\ndecode step, graph runtime, median of {args.rounds} round(s) of {args.steps} steps; x = over "
          f"{names[0]}'s")
    base = {b: statistics.median(times[names[0]][b]) if times[names[0]][b] else None for b in batches}
    for name, env in variants:
        cells = []
        for b in batches:
            ts = times[name][b]
            if not ts:
                cells.append(f"batch {b} -")
                continue
            med = statistics.median(ts)
            ratio = f" ({med / base[b]:.3f}x)" if base[b] else ""
            cells.append(f"batch {b} {med:.4f} ms{ratio} [" + " ".join(f"{t:.4f}" for t in ts) + "]")
        setting = ",".join(f"{k}={v}" for k, v in env.items()) or "as shipped"
        print(f"  {name:<12} {setting:<40} " + "  ".join(cells))
    if args.json:
        Path(args.json).write_text(json.dumps({"variants": {n: e for n, e in variants}, "rounds": args.rounds,
                                               "steps": args.steps, "ms": times, "errors": errors}, indent=1) + "\n")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
