#!/usr/bin/env python3
"""The stream-K GEMM (gemm config STREAM_K) against our default launch and cuBLAS, at prefill
shapes whose tile count leaves SMs idle or fills its last wave badly.

    PYTHONPATH=kernels/python python3 benchmarks/bench_streamk.py --out DIR [--shapes 512:4096:4608,...]
    ... --tiled     # also the tiled kernel at each stream-K tile config (STREAM_K 0)
    ... --smoke     # CPU, TRITON_INTERPRET=1: one tiny shape, tiny tiles, every path checked, nothing timed

A shape is M:K:N[:epilogue] (epilogue none or swiglu; swiglu's N is the [K, 2I] weight's 2I
columns). Defaults: M 512 and 2048 at each (K, N) of DEFAULT_KN, epilogue none, and swiglu at
M=512 K=4096 N=2x14336. Operands are bf16: x [M, K] and the weight K-major [K, N], scaled by
K^-1/2, one set per weight that rotates past 3x the L2. Paths:
  cublas      torch.matmul(x, W) on the same operands (swiglu: the [M, 2I] matmul alone, the floor
              the fused epilogue is held to)
  default     xpuinject_kernels.gemm(x, W, epilogue=...) at its own config (config=None: the GPU's
              tuned data, else the shape heuristic)
  streamk     gemm(..., config={tile config, "STREAM_K": P}) with P = gemm.streamk_programs (the
              SM count), at each tile config of STREAMK_CONFIGS
  tiled       (--tiled) gemm(..., config=tile config): the same tiles without stream-K
Each path is first checked against torch.matmul of the fp32 operands (swiglu: silu(g) * u of it)
by benchlib.rel_err (||out - ref|| / ||ref|| < benchlib.REL_TOL, ours NaN-poisoned so an unwritten
element fails), then timed by benchlib.time_calls (the calls captured in one CUDA graph, median
over replays), every path by the same code. A config that cannot launch (shared memory) says why.

Writes DIR/streamk.json (every path's time, error and schedule) and DIR/streamk.md (the table:
x = cuBLAS time / ours, > 1: ours faster). Exit status 0 when every check of ours passed, 1 when
one failed, 2 on bad arguments or no GPU.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "kernels" / "python"), str(Path(__file__).resolve().parent)]

import benchlib  # noqa: E402

# (K, N) of the default shapes: Llama-style projections (2048/3072/4096/8192/14336 hidden or
# intermediate sizes), each at M = 512 and 2048
DEFAULT_KN = ((2048, 2048), (2048, 3072), (4096, 4608), (4096, 4096), (4096, 12288), (3072, 9216), (8192, 2048),
              (14336, 4096))
DEFAULT_M = (512, 2048)
DEFAULT_EXTRA = ((512, 4096, 2 * 14336, "swiglu"),)
# (name, tile config): the stream-K candidates, each at GROUP_SIZE_M 8
STREAMK_CONFIGS = [
    (f"{bm}x{bn}x{bk} w{w} s{s}", dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_SIZE_M=8, num_warps=w, num_stages=s))
    for bm, bn, bk, w, s in ((128, 256, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4), (64, 256, 64, 4, 4),
                             (128, 64, 64, 4, 4))]
SMOKE_SHAPES = ((33, 72, 40, "none"),)
SMOKE_CONFIGS = [(f"{bm}x{bn}x16 w4 s1", dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=16, GROUP_SIZE_M=2, num_warps=4,
                                               num_stages=1)) for bm, bn in ((16, 16), (32, 16))]
EPILOGUES = ("none", "swiglu")


def parse_shape(text: str):
    parts = text.split(":")
    if len(parts) not in (3, 4):
        raise ValueError("want M:K:N or M:K:N:epilogue")
    m, k, n = (int(p) for p in parts[:3])
    epi = parts[3] if len(parts) == 4 else "none"
    if min(m, k, n) < 1:
        raise ValueError("sizes must be at least 1")
    if epi not in EPILOGUES:
        raise ValueError(f"epilogue {epi!r}: want one of {', '.join(EPILOGUES)}")
    if epi == "swiglu" and n % 2:
        raise ValueError("swiglu's N (gate | up columns) must be even")
    return m, k, n, epi


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for streamk.json and streamk.md (created)")
    p.add_argument("--shapes", default="", help="comma list of M:K:N[:epilogue] (default: the shapes above)")
    p.add_argument("--tiled", action="store_true", help="also the tiled kernel at each stream-K tile config")
    p.add_argument("--rep-ms", type=float, default=60.0, help="timed milliseconds per path (default 60)")
    p.add_argument("--smoke", action="store_true", help="CPU, TRITON_INTERPRET=1: one tiny shape, checks only")
    a = p.parse_args(argv)
    if a.shapes:
        try:
            a.shape_list = [parse_shape(s.strip()) for s in a.shapes.split(",") if s.strip()]
        except ValueError as e:
            p.error(f"--shapes: {e}")
    elif a.smoke:
        a.shape_list = list(SMOKE_SHAPES)
    else:
        a.shape_list = [(m, k, n, "none") for m in DEFAULT_M for k, n in DEFAULT_KN] + list(DEFAULT_EXTRA)
    if not a.shape_list:
        p.error("--shapes: no shape given")
    if a.rep_ms <= 0:
        p.error("--rep-ms must be positive")
    a.timer = "graph"  # benchlib.time_calls: one CUDA graph of calls per path
    return a


def label(m, k, n, epi):
    return f"M={m} K={k} N={'2x%d' % (n // 2) if epi == 'swiglu' else n}" + (f" {epi}" if epi != "none" else "")


def schedule(G, m, k, n, epi, cfg, programs):
    """The stream-K launch's tiles, waves of the tiled grid, units per program and most segments."""
    n_out = n // 2 if epi == "swiglu" else n
    tiles = -(-m // cfg["BLOCK_M"]) * -(-n_out // cfg["BLOCK_N"])
    k_tiles = -(-k // cfg["BLOCK_K"])
    dp, per, grid, segs = G._streamk_split(tiles, k_tiles, programs)
    return dict(tiles=tiles, waves=round(tiles / programs, 2), whole=dp, k_tiles=k_tiles, per=per, grid=grid,
                max_segments=segs)


def run_shape(env, G, m, k, n, epi, configs, programs, tiled):
    torch, xk = env.torch, env.xk
    F = torch.nn.functional
    i = n // 2
    g = env.gen()
    set_bytes = (m * k + k * n) * 2
    n_sets = 1 if env.smoke else benchlib.rotation_sets(set_bytes, env.l2, mem_cap=8 << 30)
    sets = [dict(x=env.randn((m, k), g), w=env.randn((k, n), g, 1.0 / math.sqrt(k))) for _ in range(n_sets)]

    def finish(y):
        """torch's epilogue on an [M, N] product, in fp32."""
        y = y.float()
        return F.silu(y[:, :i]) * y[:, i:] if epi == "swiglu" else y

    ref = finish(sets[0]["x"].float() @ sets[0]["w"].float())
    paths = {"cublas": (lambda s: torch.matmul(s["x"], s["w"]), finish, None),
             "default": (lambda s: xk.gemm(s["x"], s["w"], epilogue=epi), None, None)}
    for name, cfg in configs:
        sk = dict(cfg, STREAM_K=programs)
        paths[f"streamk {name}"] = (lambda s, c=sk: xk.gemm(s["x"], s["w"], epilogue=epi, config=c), None,
                                    schedule(G, m, k, n, epi, cfg, programs))
        if tiled:
            paths[f"tiled {name}"] = (lambda s, c=cfg: xk.gemm(s["x"], s["w"], epilogue=epi, config=c), None, None)
    row = dict(shape=label(m, k, n, epi), params=dict(M=m, K=k, N=n, epilogue=epi), programs=programs, sets=n_sets,
               paths={})
    for path, (fn, cmp, sched) in paths.items():
        res = row["paths"][path] = dict(schedule=sched) if sched else {}
        ours = path != "cublas"
        try:
            prev = xk.set_poison(ours)
            try:
                out = fn(sets[0])
            finally:
                xk.set_poison(prev)
            res["rel_err"] = benchlib.rel_err(env, cmp(out) if cmp else out, ref)
            res["check_ok"] = bool(res["rel_err"] < benchlib.REL_TOL)
            del out
            if not env.smoke and res["check_ok"]:
                t = benchlib.time_calls(env, fn, sets)
                res.update(us=t["us"], p20=t["p20"], p80=t["p80"], timer=t["timer"])
        except Exception as e:  # noqa: BLE001 - a config that cannot launch must not cost the others
            msg = str(e).strip()
            res["error"] = f"{type(e).__name__}: {msg.splitlines()[0][:300] if msg else ''}"
            if not env.smoke:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
    timed = {p: r["us"] for p, r in row["paths"].items() if p.startswith("streamk ") and r.get("us")}
    if timed:
        best = min(timed, key=timed.get)
        row["best_streamk"] = dict(path=best, us=timed[best])
    del sets
    return row


def fmt_x(us, base):
    if us is None or base is None:
        return "-"
    return f"{benchlib.fmt_us(us)} ({base / us:.2f}x)"


def cell(res):
    if res.get("error"):
        return "cannot run" if "OutOfResources" in res["error"] else "ERROR"
    if res.get("check_ok") is False:
        return f"FAIL {res['rel_err']:.1e}"
    if res.get("us") is None:
        return f"ok {res['rel_err']:.1e}"
    return benchlib.fmt_us(res["us"])


def table(rows):
    out = ["| shape | cuBLAS us | ours default us (x) | best stream-K us (x) | its config | its tiles / waves / segs |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        p = r["paths"]
        cub = p["cublas"].get("us")
        best = r.get("best_streamk")
        if best:
            sched = p[best["path"]]["schedule"]
            bcell, bname = fmt_x(best["us"], cub), best["path"].split(" ", 1)[1]
            bsched = f"{sched['tiles']} / {sched['waves']} / {sched['max_segments']}"
        else:
            bcell = bname = bsched = "-"
        dflt = fmt_x(p["default"].get("us"), cub) if p["default"].get("us") else cell(p["default"])
        out.append(f"| {r['shape']} | {cell(p['cublas'])} | {dflt} | {bcell} | {bname} | {bsched} |")
    return "\n".join(out)


def config_table(rows, names):
    """Every stream-K (and --tiled) path's time or state, a column per tile config."""
    head = "| shape | " + " | ".join(names) + " |"
    out = [head, "|" + "---|" * (len(names) + 1)]
    for r in rows:
        out.append(f"| {r['shape']} | " + " | ".join(cell(r["paths"][n]) if n in r["paths"] else "-" for n in names)
                   + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    env = benchlib.setup(SimpleNamespace(smoke=args.smoke, cache_dir=None, timer=args.timer, rep_ms=args.rep_ms),
                         competitors=False)
    if env is None:
        return 2
    torch = env.torch
    G = importlib.import_module("xpuinject_kernels.gemm")  # the package exports gemm() itself
    programs = G.streamk_programs(env.dev)
    configs = SMOKE_CONFIGS if args.smoke else STREAMK_CONFIGS
    res = dict(command=" ".join([os.path.basename(sys.executable)] + sys.argv), env=benchlib.environment(env),
               programs=programs, configs=dict(configs), rows=[])
    out_json = os.path.join(args.out, "streamk.json")
    with torch.inference_mode():
        for m, k, n, epi in args.shape_list:
            row = run_shape(env, G, m, k, n, epi, configs, programs, args.tiled)
            res["rows"].append(row)
            benchlib.log(f"[streamk +{time.time() - t0:.0f}s] {row['shape']}: " +
                         ", ".join(f"{p} {cell(r)}" for p, r in row["paths"].items()))
            benchlib.write_atomic(out_json, json.dumps(res, indent=1, default=str) + "\n")
    failed = [(r["shape"], p) for r in res["rows"] for p, v in r["paths"].items()
              if p != "cublas" and v.get("check_ok") is False]
    res["summary"] = dict(rows=len(res["rows"]), ours_failed=len(failed), wall_s=round(time.time() - t0, 1))
    names = [f"streamk {c}" for c, _ in configs] + ([f"tiled {c}" for c, _ in configs] if args.tiled else [])
    md = (f"# Stream-K GEMM ({'interpreter smoke, no timing' if env.smoke else res['env'].get('device', '?')}, "
          f"P = {programs} programs)\n\n"
          f"command: `{res['command']}`  \ndate: {res['env']['date_utc']}  \n"
          "us per call, median of CUDA-graph replays; x = cuBLAS time / ours (> 1: ours faster); waves = tiles / P "
          "(the tiled grid's), segs = most programs a tile's K steps are split over\n\n"
          + table(res["rows"]) + "\n\n## Every tile config\n\n" + config_table(res["rows"], names) + "\n")
    benchlib.write_atomic(out_json, json.dumps(res, indent=1, default=str) + "\n")
    benchlib.write_atomic(os.path.join(args.out, "streamk.md"), md)
    benchlib.log(md)
    benchlib.log(f"[streamk] {sum(len(r['paths']) for r in res['rows'])} paths checked, {len(failed)} of ours failed"
                 + (f": {failed}" if failed else "") + f"; {res['summary']['wall_s']} s; wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
