#!/usr/bin/env python3
"""How far the GEMM heuristic's pick is from the best a tune.py sweep timed, per problem class.

    python3 benchmarks/heuristic_check.py TUNE.json [TUNE.json ...] [--m-min 65] [--m-max 512]

Reads the sweeps' recorded timings (no GPU): for every GEMM class with M in [m-min, m-max], the
time of the config `_backend.gemm_heuristic` picks now and of the heuristic the sweep recorded,
each over the class's best. Prints the geometric mean and the worst of each, and the classes
whose current pick the sweep did not time.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kernels" / "python"))

GATED = ("swiglu", "geglu", "geglu_erf")


def cfg_tuple(c: dict) -> tuple:
    return c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["num_warps"], c["num_stages"]


def classes(paths):
    """{(file, label): (shape, {config tuple: us}, recorded heuristic tuple or None)}"""
    out = {}
    for path in paths:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
        heur = {c["label"]: cfg_tuple(c["heuristic"]["config"]) for c in d.get("classes", [])
                if c["kernel"] == "gemm" and (c.get("heuristic") or {}).get("config")}
        for e in d["entries"]:
            if e["kernel"] != "gemm" or not e.get("config") or not e["measured"].get("us"):
                continue
            shape, times, _ = out.setdefault((path, e["label"]), (e["shape"], {}, heur.get(e["label"])))
            t = cfg_tuple(e["config"])
            times[t] = min(e["measured"]["us"], times.get(t, math.inf))
    return out


def pick_ratios(_backend, found, m_min, m_max):
    """(current pick's time over the best, recorded heuristic's over the best, classes whose
    current pick the sweep did not time), for the GEMM classes with M in [m_min, m_max]."""
    now, recorded, untimed = [], [], []
    for (path, label), (shape, times, heur) in sorted(found.items()):
        m, epi = shape["M"], shape.get("epilogue")
        if not m_min <= m <= m_max:
            continue
        gated = epi in GATED
        c = _backend.gemm_heuristic("cuda", m, shape["N"] // (2 if gated else 1), shape["K"], 2 if gated else 1)
        pick, best = cfg_tuple(dict(c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages)), min(times.values())
        if heur in times:
            recorded.append((times[heur] / best, path, label))
        if pick in times:
            now.append((times[pick] / best, path, label))
        else:
            untimed.append((path, label, pick))
    return now, recorded, untimed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tune", nargs="+")
    ap.add_argument("--m-min", type=int, default=65)
    ap.add_argument("--m-max", type=int, default=512)
    a = ap.parse_args(argv)
    from xpuinject_kernels import _backend

    interpret = _backend.is_interpret
    _backend.is_interpret = lambda: False  # the GPU's configs, not the interpreter's one
    try:
        now, recorded, untimed = pick_ratios(_backend, classes(a.tune), a.m_min, a.m_max)
    finally:
        _backend.is_interpret = interpret
    for name, rows in (("recorded heuristic", recorded), ("current heuristic", now)):
        if rows:
            gm = math.exp(sum(math.log(r) for r, *_ in rows) / len(rows))
            worst = max(rows)
            print(f"{name}: {len(rows)} classes, {gm:.3f}x the best on average, worst {worst[0]:.2f}x "
                  f"({worst[2]}, {worst[1]})")
    print(f"current pick not timed by the sweep: {len(untimed)}")
    for path, label, pick in untimed:
        print(f"  {label} ({path}): {pick}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
