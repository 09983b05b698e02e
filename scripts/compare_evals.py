#!/usr/bin/env python3
"""Compare two eval.json files of one model, package and text evaluated on different placements
(e.g. `xpuinject eval --gpus 1` and `--gpus 2`): the accuracy figures must agree, the latency is
shown per configuration.

    python3 scripts/compare_evals.py ONE/eval.json TWO/eval.json [--count 2] [--rtol 1e-3]

Prints a Markdown summary. Exit 0 when every accuracy figure (logits metrics of both bf16 models,
the oracle's perplexity, every layer's error) of the second file is within --rtol (relative) of the
first's and the second ran on --count devices; 1 otherwise; 2 on unreadable input. Pipeline
stages compute each layer with the same kernels on the same shapes as one device does, so the
figures are expected to be equal up to the float64 summation order of the metrics; --rtol leaves
room for bf16 noise, and a layout or communication bug lands far outside it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

METRICS = ("cosine", "max_abs", "mean_abs", "max_rel", "mean_rel", "top1_agreement", "kl", "perplexity")


def rel(a, b):
    if a is None or b is None:
        return 0.0 if a is b else math.inf
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b))


def accuracy_rows(one, two):
    """(figure, first, second, relative difference) for every accuracy figure of the two files."""
    rows = []
    for model in ("injected", "stock"):
        for k in METRICS:
            a, b = one["accuracy"][model].get(k), two["accuracy"][model].get(k)
            if a is not None or b is not None:
                rows.append((f"{model} {k}", a, b, rel(a, b)))
    if "oracle_perplexity" in one["accuracy"]:
        a, b = one["accuracy"]["oracle_perplexity"], two["accuracy"].get("oracle_perplexity")
        rows.append(("oracle perplexity", a, b, rel(a, b)))
    la, lb = one.get("layers", []), two.get("layers", [])
    if len(la) != len(lb):
        rows.append(("layers", len(la), len(lb), math.inf))
    for x, y in zip(la, lb):
        for model in ("injected", "stock"):
            a, b = x[model]["mean_rel"], y[model]["mean_rel"]
            rows.append((f"{x['name']} {model} mean_rel", a, b, rel(a, b)))
    return rows


def placement(ev):
    d = ev["device"]
    out = [f"{d.get('count', 1)} × {d['type']} ({d.get('name', '')})"]
    p = d.get("placement") or {}
    inj = p.get("injected")
    if inj:
        out.append("; ".join(f"rank {s['rank']} {s['device']}: layers {s['layers']}" for s in inj["stages"]))
    o = p.get("oracle")
    if o:
        out.append(f"oracle {o['mode']} on {o['device']}" + (f", {o['kept_units']}/{o['units']} units kept" if o["mode"] == "layered" else ""))
    return ". ".join(out)


def latency_rows(ev, label):
    lat = ev.get("latency") or {}
    if not lat.get("measured"):
        return [f"| {label} | — | not measured: {lat.get('reason', '')} | — |"]
    rows = []
    for kind, key, name in (("prefill", "tokens", "prefill"), ("decode", "batch", "decode batch")):
        for p in lat.get(kind, []):
            ms = p["ms"]
            cells = ", ".join(f"{k} {v:.3f}" for k, v in ms.items() if v is not None)
            head = next(iter(p.get("ratios", {}).items()), None)
            rows.append(f"| {label} | {name} {p[key]} | {cells} | {head[0] + ' ' + format(head[1], '.2f') + '×' if head else '—'} |")
    return rows


def fmt(v):
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("one")
    ap.add_argument("two")
    ap.add_argument("--count", type=int, default=2, help="devices the second run must report (device.count)")
    ap.add_argument("--rtol", type=float, default=1e-3)
    a = ap.parse_args(argv)
    try:
        one, two = (json.load(open(p, encoding="utf-8")) for p in (a.one, a.two))
    except (OSError, ValueError) as e:
        print(f"compare_evals: {e}", file=sys.stderr)
        return 2
    rows = accuracy_rows(one, two)
    worst = max((r[3] for r in rows), default=0.0)
    bad = [r for r in rows if r[3] > a.rtol]
    count = two["device"].get("count", 1)
    print(f"# {one['model']['path']}: {one['device'].get('count', 1)} device(s) against {count}\n")
    print(f"- first: {placement(one)}\n- second: {placement(two)}\n")
    print(f"## Accuracy: largest relative difference {worst:.3g} (tolerance {a.rtol:g})\n")
    print("| figure | first | second | relative difference |\n| --- | --- | --- | --- |")
    for name, x, y, d in rows:
        print(f"| {name} | {fmt(x)} | {fmt(y)} | {d:.3g}{' **over**' if d > a.rtol else ''} |")
    g1, g2 = one.get("generation") or {}, two.get("generation") or {}
    if g1 and g2:
        print("\n| greedy generation | first: equal / before first divergence | second |\n| --- | --- | --- |")
        for k in ("injected", "stock", "injected_vs_stock"):
            print(f"| {k} | {g1[k]['positions']:.3f} / {g1[k]['prefix']:.3f} | {g2[k]['positions']:.3f} / {g2[k]['prefix']:.3f} |")
    print("\n## Latency per configuration (ms; decode: per token)\n\n| run | point | ms by path | headline ratio |\n| --- | --- | --- | --- |")
    for ev, label in ((one, f"{one['device'].get('count', 1)} device(s)"), (two, f"{count} device(s)")):
        for r in latency_rows(ev, label):
            print(r)
    ok = not bad and count == a.count
    if count != a.count:
        print(f"\n**The second run reports device.count {count}, not {a.count}.**")
    print(f"\nverdict: {'equal within tolerance' if ok else 'DIFFERENT'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
