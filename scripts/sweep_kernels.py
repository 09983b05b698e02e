#!/usr/bin/env python3
"""Sweep launch constants of the xpuinject kernels on the GPU (issue 8: every constant chosen by a
sweep names the measurement behind it; this is the script that makes those measurements).

One process, run on the device machine (repo root):

    python3 scripts/sweep_kernels.py --out $OUT/sweep [--only rmsnorm,rope,gemm] [--budget-s 240]
    python scripts/sweep_kernels.py --smoke --out DIR   # CPU, TRITON_INTERPRET=1: tiny shapes, a few
        candidates each, checks only (tests/kernels/test_sweep_smoke.py; a GPU run is too dear to
        find a Python error in)

For each candidate it checks the output against torch (fp32 reference, rel err < 1e-2) and times
it with the benchmark's timer (scripts/bench_kernels.py `time_calls`: CUDA-graph replays over input
sets rotating past 3x L2, median). It prints one line per candidate and writes sweep.json; the
winners go into the kernels by hand, with the number in a comment.

  rmsnorm  num_warps of the one-row-per-program RMSNorm / add+RMSNorm at M = 2048, 16384
  rope     num_warps and heads per tile of apply_rope at M = 2048, 16384, out of place and in place
  gemm     every CUDA config candidate below, launched directly (no autotuner), at the issue-8
           shapes the 2026-11-29 bench missed, beside cuBLAS on the nn.Linear weight and on the
           packed K-major weight (what a vendor route runs)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "kernels", "python"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_SIZE_M, num_warps, num_stages)
GEMM_BIG = [
    (128, 256, 64, 8, 8, 3), (128, 256, 64, 8, 8, 4), (256, 128, 64, 8, 8, 3), (256, 128, 64, 8, 8, 4),
    (128, 128, 64, 8, 8, 4), (128, 128, 64, 8, 4, 3), (128, 128, 64, 8, 8, 5), (128, 128, 64, 8, 4, 4),
    (128, 128, 128, 8, 8, 3), (64, 256, 64, 8, 4, 4), (64, 256, 64, 8, 8, 4), (64, 128, 64, 8, 4, 4),
    (128, 256, 64, 16, 8, 3), (128, 256, 64, 4, 8, 3),
]
GEMM_SMALL = [
    (16, 128, 128, 1, 4, 4), (16, 64, 256, 1, 4, 3), (64, 64, 128, 8, 4, 4),
    (16, 32, 256, 1, 4, 4), (16, 32, 512, 1, 4, 3), (16, 16, 512, 1, 4, 4), (16, 64, 128, 1, 4, 5),
    (16, 32, 128, 1, 2, 6), (16, 16, 256, 1, 2, 4), (64, 32, 256, 8, 4, 3), (32, 32, 256, 1, 4, 4),
    (16, 64, 512, 1, 8, 3),
]
MODELS = {"1b": dict(hidden=2048, heads=32, kv=8, hd=64, inter=8192),
          "8b": dict(hidden=4096, heads=32, kv=8, hd=128, inter=14336)}


SMOKE_MODELS = {"tiny": dict(hidden=64, heads=4, kv=2, hd=32, inter=48)}


def gemm_shapes(smoke: bool = False):
    """(label, M, K, N, epilogue) for the sweep."""
    if smoke:
        return [("tiny qkv M=17", 17, 64, 256, "none"), ("tiny swiglu M=17", 17, 64, 96, "swiglu"),
                ("tiny down M=1", 1, 48, 64, "none")]
    out = []
    for m in (2048, 16384):
        c = MODELS["1b"]
        out += [(f"1b qkv M={m}", m, 2048, 3072, "none"), (f"1b o M={m}", m, 2048, 2048, "none"),
                (f"1b gate_up M={m}", m, 2048, 16384, "none"), (f"1b swiglu M={m}", m, 2048, 2 * c["inter"], "swiglu")]
    out += [("8b qkv M=16384", 16384, 4096, 6144, "none"), ("8b gate_up M=16384", 16384, 4096, 28672, "none"),
            ("8b swiglu M=16384", 16384, 4096, 2 * 14336, "swiglu")]
    for m in (1, 64):
        out += [(f"1b qkv M={m}", m, 2048, 3072, "none"), (f"1b o M={m}", m, 2048, 2048, "none"),
                (f"1b down M={m}", m, 8192, 2048, "none"), (f"8b o M={m}", m, 4096, 4096, "none"),
                (f"8b down M={m}", m, 14336, 4096, "none"), (f"8b qkv M={m}", m, 4096, 6144, "none")]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="rmsnorm,rope,gemm")
    p.add_argument("--budget-s", type=float, default=240.0)
    p.add_argument("--rep-ms", type=float, default=30.0)
    p.add_argument("--smoke", action="store_true", help="CPU, TRITON_INTERPRET=1, tiny shapes, checks only (no timing)")
    args = p.parse_args()
    os.environ["TRITON_INTERPRET"] = "1" if args.smoke else os.environ.get("TRITON_INTERPRET", "0")
    import torch
    import triton

    if not args.smoke and not torch.cuda.is_available():
        print("sweep: no CUDA device (--smoke checks the plumbing on the CPU)", file=sys.stderr)
        return 2
    dev = "cpu" if args.smoke else "cuda"
    models = SMOKE_MODELS if args.smoke else MODELS
    m_rows = (17,) if args.smoke else (2048, 16384)
    import bench_kernels as bk
    import xpuinject_kernels as xk
    import importlib

    from xpuinject_kernels import _backend, _interpret

    if args.smoke:
        _interpret.apply()  # the interpreter fixes the kernel tests use (bf16 rounding, dot, loop bounds)

    # the package re-exports the functions under the module names: import the modules themselves
    gm, rn, rp = (importlib.import_module(f"xpuinject_kernels.{m}") for m in ("gemm", "rmsnorm", "rope"))

    torch.backends.cuda.matmul.allow_tf32 = False
    env = types.SimpleNamespace(torch=torch, smoke=False, args=types.SimpleNamespace(timer="graph", rep_ms=args.rep_ms))
    l2 = 60 << 20 if args.smoke else int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or (60 << 20))
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    rows = []
    g = torch.Generator(device=dev)
    g.manual_seed(7)

    def randn(shape, scale=1.0):
        return (torch.randn(shape, generator=g, device=dev) * scale).to(torch.bfloat16)

    def rel(out, ref):
        out, ref = out.float(), ref.float()
        if not torch.isfinite(out).all():
            return float("inf")
        return float((out - ref).norm() / ref.norm().clamp_min(1e-30))

    def timed(fn, make, set_bytes):
        if args.smoke:
            return None
        n = bk.rotation_sets(set_bytes, l2, max_sets=32)
        sets = [make() for _ in range(n)]
        return bk.time_calls(env, fn, sets)["us"]

    def record(part, label, cand, us, err, extra=None):
        r = dict(part=part, shape=label, cand=cand, us=us, rel_err=err, **(extra or {}))
        rows.append(r)
        shown = "%9.2f us" % us if us is not None else ("  checked" if args.smoke and err < 1e-2 else "   failed")
        print(f"[sweep +{time.time() - t0:.0f}s] {part:7s} {label:22s} {cand:40s} "
              f"{shown}  err {err:.1e}" + (f"  {extra}" if extra else ""), flush=True)

    def rate(nbytes, us):
        if us is None:
            return {}
        return dict(GBps=round(nbytes / us / 1e3), frac=round(nbytes / (us * 1e-6) / bw, 3) if bw else None)

    def over_budget():
        return time.time() - t0 > args.budget_s

    only = set(args.only.split(","))
    bw = None
    if not args.smoke:
        # Copy ceiling as in the bench (SM-kernel copy; memcpy nodes in a graph read ~2.7 TB/s).
        src = randn((1 << 30,))
        dst = torch.empty_like(src)
        us = bk.time_calls(env, lambda s: torch.neg(s["src"], out=dst), [dict(src=src)])["us"]
        bw = 4 * (1 << 30) / (us * 1e-6)
        del src, dst
        torch.cuda.empty_cache()
        print(f"[sweep] copy ceiling {bw / 1e9:.0f} GB/s", flush=True)

    with torch.inference_mode():
        if "rmsnorm" in only:
            for name, c in models.items():
                n = c["hidden"]
                for m in m_rows:
                    for res in (False, True):
                        def make(m=m, n=n, res=res):
                            d = dict(x=randn((m, n)), w=randn((n,), 0.1) + 1)
                            if res:
                                d["r"] = randn((m, n))
                            return d
                        nbytes = (4 if res else 2) * m * n * 2
                        for warps in ((2, 4) if args.smoke else (2, 4, 8, 16, 32)):
                            def fn(s, warps=warps, res=res):
                                x2 = s["x"]
                                out = torch.empty_like(x2)
                                rout = torch.empty_like(x2) if res else None
                                rn._launch(x2, s["r"] if res else None, s["w"], out, rout, 1e-5, warps=warps)
                                return (rout, out) if res else out  # add_rms_norm's order: (residual, normed)
                            s0 = make()
                            got = fn(s0)
                            if res:
                                ref = xk.add_rms_norm(s0["x"], s0["r"], s0["w"], 1e-5)
                                err = max(rel(got[0], ref[0]), rel(got[1], ref[1]))
                            else:
                                err = rel(got, xk.rms_norm(s0["x"], s0["w"], 1e-5))
                            us = timed(fn, make, nbytes)
                            label = f"{'add_' if res else ''}rms {name} M={m}"
                            record("rmsnorm", label, f"num_warps={warps}", us, err, rate(nbytes, us))
        if "rope" in only:
            for name, c in models.items():
                h, kv, d = c["heads"], c["kv"], c["hd"]
                half = d // 2
                for m in m_rows:
                    def make(m=m, h=h, kv=kv, d=d):
                        q = randn((1, m, h, d)).transpose(1, 2)
                        k = randn((1, m, kv, d)).transpose(1, 2)
                        ang = torch.rand((1, m, d), generator=g, device=dev) * 6.28
                        return dict(q=q, k=k, cos=ang.cos().to(torch.bfloat16), sin=ang.sin().to(torch.bfloat16))
                    nbytes = 2 * (h + kv) * m * d * 2 + 2 * m * d * 2
                    s0 = make()
                    refq, refk = xk.apply_rope(s0["q"], s0["k"], s0["cos"], s0["sin"])
                    for inplace in (False, True):
                        for cap in ((64, 2048) if args.smoke else (512, 1024, 2048)):
                            for warps in ((4,) if args.smoke else (1, 2, 4, 8)):
                                if over_budget():
                                    break
                                bhq = min(triton.next_power_of_2(h), max(1, cap // triton.next_power_of_2(half)))
                                bhk = min(triton.next_power_of_2(kv), max(1, cap // triton.next_power_of_2(half)))

                                def fn(s, inplace=inplace, cap=cap, warps=warps):
                                    q, k = s["q"], s["k"]
                                    qo, ko = (q, k) if inplace else (torch.empty_like(q), torch.empty_like(k))
                                    rp._launch(q, k, qo, ko, s["cos"], s["sin"], tile_elems=cap, num_warps=warps)
                                    return qo, ko
                                s1 = {kk: (vv.clone() if kk in ("q", "k") else vv) for kk, vv in s0.items()}
                                qo, ko = fn(s1)
                                err = max(rel(qo, refq), rel(ko, refk))
                                us = timed(fn, make, nbytes)
                                record("rope", f"rope {name} M={m}",
                                       f"{'inplace' if inplace else 'new'} BLOCK_HQ={bhq} BLOCK_HK={bhk} warps={warps}",
                                       us, err, rate(nbytes, us))
        if "gemm" in only:
            _backend.ensure_allocator(torch.device(dev))
            for label, m, k, n_w, epi in gemm_shapes(args.smoke):
                if over_budget():
                    print(f"[sweep] budget spent before {label}", flush=True)
                    break
                swiglu = epi == "swiglu"
                n = n_w // 2 if swiglu else n_w

                def make(m=m, k=k, n_w=n_w):
                    return dict(x=randn((m, k)), w=randn((k, n_w), 1 / math.sqrt(k)))
                set_bytes = (m * k + k * n_w + m * n) * 2
                s0 = make()
                ref = s0["x"].float() @ s0["w"].float()
                if swiglu:
                    ref = torch.nn.functional.silu(ref[:, :n]) * ref[:, n:]
                flops = 2 * m * k * n_w
                w_nk = s0["w"].t().contiguous()
                # cuBLAS: nn.Linear layout (stock) and the packed K-major weight (a vendor route)
                for cand, fn in (("cuBLAS F.linear(W[N,K])", lambda s: torch.nn.functional.linear(s["x"], s["wn"])),
                                 ("cuBLAS x @ W[K,N] (packed)", lambda s: s["x"] @ s["w"])):
                    def mk(m=m, k=k, n_w=n_w):
                        d = make()
                        d["wn"] = d["w"].t().contiguous()
                        return d
                    us = timed(fn, mk, set_bytes + k * n_w * 2)
                    record("gemm", label, cand, us, 0.0, dict(TFLOPs=round(flops / us / 1e6, 1)) if us else {})
                del w_nk
                use_desc = m >= gm.CUDA_DESC_MIN_M
                cands = GEMM_BIG if m >= 2048 else GEMM_SMALL
                if args.smoke:  # one big-tile and two narrow candidates: the plumbing, not the tuning
                    cands = [(32, 64, 32, 8, 4, 3), (16, 32, 32, 1, 4, 3), (16, 16, 64, 1, 2, 4)]
                for cfg in cands:
                    bm, bn, bk_, gsm, warps, stages = cfg
                    cand = f"{bm}x{bn}x{bk_} g{gsm} w{warps} s{stages}"

                    def fn(s, bm=bm, bn=bn, bk_=bk_, gsm=gsm, warps=warps, stages=stages):
                        x, w = s["x"], s["w"]
                        out = torch.empty((m, n), device=dev, dtype=torch.bfloat16)
                        grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
                        gm._gemm_kernel[grid](
                            x, w, w, out, out, m, n, k, triton.next_power_of_2(m),
                            x.stride(0), w.stride(0), w.stride(1), 0, out.stride(0), n if swiglu else 0,
                            HAS_BIAS=False, EPILOGUE=1 if swiglu else 0, USE_DESC=use_desc, W_KMAJOR=True,
                            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk_, GROUP_SIZE_M=gsm, num_warps=warps, num_stages=stages)
                        return out
                    try:
                        err = rel(fn(s0), ref)
                        us = timed(fn, make, set_bytes) if err < 1e-2 else None
                    except Exception as e:  # noqa: BLE001 - out of resources etc.: record and go on
                        record("gemm", label, cand, None, float("inf"), dict(error=f"{type(e).__name__}: {str(e)[:120]}"))
                        continue
                    record("gemm", label, cand, us, err,
                           dict(TFLOPs=round(flops / us / 1e6, 1)) if us else ({} if err < 1e-2 else dict(error="check failed")))
                del s0, ref
                if not args.smoke:
                    torch.cuda.empty_cache()

    with open(os.path.join(args.out, "sweep.json.tmp"), "w") as f:
        json.dump(dict(copy_GBps=bw / 1e9 if bw else None, smoke=args.smoke, rows=rows, wall_s=time.time() - t0), f, indent=1)
    os.replace(os.path.join(args.out, "sweep.json.tmp"), os.path.join(args.out, "sweep.json"))
    # summary: best candidate per shape
    print("\nbest per shape:")
    best = {}
    for r in rows:
        if r["us"] is None or r["cand"].startswith("cuBLAS"):
            continue
        key = (r["part"], r["shape"])
        if key not in best or r["us"] < best[key]["us"]:
            best[key] = r
    for (part, shape), r in best.items():
        cub = [x for x in rows if x["shape"] == shape and x["cand"].startswith("cuBLAS") and x["us"]]
        ratio = "  ".join(f"{x['cand'][:14]} x{x['us'] / r['us']:.2f}" for x in cub)
        print(f"  {part:7s} {shape:22s} {r['cand']:40s} {r['us']:9.2f} us  {ratio}  {r.get('frac', '')}")
    bad = [r for r in rows if not r["rel_err"] < 1e-2]
    print(f"[sweep] {len(rows)} candidates, {len(bad)} failed their check or did not run; wrote {args.out}/sweep.json")
    # A real sweep may meet configs that do not fit (recorded, not fatal); the smoke run must be clean.
    return 1 if (args.smoke and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
