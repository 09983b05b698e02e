#!/usr/bin/env python3
"""Sweep the kernels' launch constants on a GPU and write what each measured, per GPU.

    python3 benchmarks/tune.py --out DIR [--only rmsnorm,rope,gemm,attention] [--budget-s 240] [--rep-ms 30]
    python3 benchmarks/tune.py --smoke --out DIR   # CPU, TRITON_INTERPRET=1: tiny shapes, a few
                                                   # candidates each, checked, timed by the wall clock
    python3 benchmarks/tune.py --out DIR --write-tuned kernels/python/xpuinject_kernels/gpus/<gpu>.json
    python3 benchmarks/tune.py --out DIR --only gemm,attention --classes RUN/eval/eval.json --write-tuned ...
        # the GEMM and attention classes that run launched with heuristic configs
        # (autotune.heuristic_classes)

Every candidate goes through the kernel's public function with `config=` (the launch constants;
attention: attention._forced_config, which launches it as a tuned config is launched), is
checked against an fp32 reference (rel. error < 1e-2) and timed with the benchmarks' timer
(benchlib.time_calls: CUDA-graph replays over input sets rotating past 3x L2, median). Under
--smoke a candidate's time is one call's wall clock in the interpreter: it picks a winner for
the plumbing, not for a GPU.

  rmsnorm, add-rmsnorm  num_warps at M = 2048, 16384
  rope                  num_warps and tile_elems (heads per tile), out of place and in place
  gemm                  every candidate block config below (the SwiGLU / GeGLU epilogues too),
                        beside cuBLAS on the nn.Linear weight and on the packed K-major weight
                        (what a vendor route runs); a decode-sized class on the split-K GEMV,
                        also with the RoPE + cache-write epilogue ("+rope", keyed with its
                        head_dim) and on an N-major weight ("+nmajor")
  attention             prefill (BLOCK_M, BLOCK_N, warps, stages) and decode (BLOCK_N, warps,
                        stages), per problem class of the launcher (its tuned-config key)

The autotuned kernels (gemm, attention) are swept per problem class, and each class's candidates
also include the config a launch takes without a tuned one (its shape-derived heuristic) and the
autotuner's pick (what `xpuinject --autotune` launches; the autotuner benchmarks its own
configs, or reads Triton's disk cache), each timed with the same timer: the class's best is
never slower than either, and tune.json's "classes" lists all three per class.

Writes DIR/tune.json, one file per GPU:
  {gpu, date, command, smoke, timer, torch, triton, copy_GBps, wall_s,
   entries: [{kernel, label, shape, key?, config, vendor?, measured: {us, rel_err, GBps?, frac?,
              TFLOPs?}, best?}],
   classes: [{kernel, label, key, tuned: {config, us}, heuristic: {config, us},
              autotune: {config, us} | null}]}
(`config` is what the kernel's `config=` takes; vendor rows have config null and name the call;
`best` marks our fastest correct config per kernel and shape; `key` is the problem class of an
autotuned kernel's entry, as its tuned config is looked up; autotune is null where no autotuner
runs: the interpreter's GEMM), and DIR/tune.csv, one row per entry.

--write-tuned FILE puts each class's best config into a per-GPU data file's "tuned" section
(xpuinject_kernels/gpus.py reads it; its routes stay): the key the launcher looks up (gemm:
{epilogue, m_bucket, k, n}, m_bucket M rounded up to a power of two, the launch cache's class;
attention.prefill / attention.decode: the class key the launch itself computed), the launch
constants, and the times of the best, the heuristic's and the autotuner's pick. On that GPU the
kernel then launches it for the class instead of its heuristic (or autotuning). Commit
DIR/tune.json beside it (docs/results/) so the source it names exists.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib
import json
import os
import sys
import time
import types

import benchlib

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
# The interpreter: one big-tile and two narrow candidates, the plumbing rather than the tuning.
GEMM_SMOKE = [(32, 64, 32, 8, 4, 3), (16, 32, 32, 1, 4, 3), (16, 16, 64, 1, 2, 4)]
GEMM_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_SIZE_M", "num_warps", "num_stages")
# Decode-sized classes (M <= gemv.MAX_M on a packed weight) run gemv.py's split-K kernel:
# (BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages), the tiles and splits its H200 sweep spanned
# (benchmarks/bench_decode_step.py --sweep).
GEMV = [(bn, bk, sp, 4, 3) for bn, bk in ((64, 128), (128, 64), (64, 256), (32, 256)) for sp in (1, 2, 4, 8, 16)]
GEMV_SMOKE = [(32, 32, 1, 4, 1), (32, 32, 2, 4, 1)]  # in gemv.CONFIG_KEYS order

# Attention, CUDA: prefill (BLOCK_M, BLOCK_N, num_warps, num_stages) around the autotuner's space
# (attention._prefill_configs, after the Triton fused-attention tutorial's for H100); decode
# (BLOCK_N, num_warps, num_stages): key blocks up to a split's 64 keys and past them. Candidates
# that would not fit shared memory or spill the fp32 output tile are skipped (attention_fits).
ATTN_PREFILL = [(bm, bn, w, st) for bm in (64, 128) for bn in (32, 64, 128) for w in (4, 8) for st in (2, 3)]
ATTN_DECODE = [(bn, w, st) for bn in (16, 32, 64, 128) for w in (2, 4, 8) for st in (2, 3)]
ATTN_PREFILL_SMOKE = [(16, 16, 4, 1), (32, 16, 2, 1)]
ATTN_DECODE_SMOKE = [(16, 4, 1), (32, 2, 1)]
ATTN_KEYS = {"attention.prefill": ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"),
             "attention.decode": ("BLOCK_N", "num_warps", "num_stages")}
PARTS = ("rmsnorm", "rope", "gemm", "attention")

MODELS = {"1b": dict(hidden=2048, heads=32, kv=8, hd=64, inter=8192),
          "8b": dict(hidden=4096, heads=32, kv=8, hd=128, inter=14336)}
SMOKE_MODELS = {"tiny": dict(hidden=64, heads=4, kv=2, hd=32, inter=48)}
EPS = 1e-5


def gemm_shapes(smoke: bool = False):
    """(label, M, K, N of the weight, epilogue): the prefill shapes with a target and the decode
    shapes of both models."""
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
                (f"8b down M={m}", m, 14336, 4096, "none"), (f"8b qkv M={m}", m, 4096, 6144, "none"),
                (f"1b swiglu M={m}", m, 2048, 2 * MODELS["1b"]["inter"], "swiglu"),
                (f"8b swiglu M={m}", m, 4096, 2 * MODELS["8b"]["inter"], "swiglu")]
    return out


def attention_shapes(smoke: bool = False):
    """(kernel, label, problem) of the built-in attention classes: causal prefill of a whole
    prompt, and a decode step over a cache with the launcher's own split count. A problem is
    {b, h, kv, sq, sk, d, causal, mask_kind} (prefill) or {b, h, kv, sk, d, mask_kind, splits}
    (decode; splits None: the launcher's), mask_kind as attention.py numbers it."""
    if smoke:
        c = SMOKE_MODELS["tiny"]
        return [("attention.prefill", "tiny prefill S=33", dict(b=1, h=c["heads"], kv=c["kv"], sq=33, sk=33, d=c["hd"],
                                                              causal=True, mask_kind=0)),
                ("attention.decode", "tiny decode B=2 L=40", dict(b=2, h=c["heads"], kv=c["kv"], sk=40, d=c["hd"],
                                                                mask_kind=0, splits=None))]
    out = []
    for name, c in MODELS.items():
        for s in (512, 2048, 8192):
            out.append(("attention.prefill", f"{name} prefill S={s}",
                        dict(b=1, h=c["heads"], kv=c["kv"], sq=s, sk=s, d=c["hd"], causal=True, mask_kind=0)))
        for b, length in ((1, 1024), (1, 8192), (8, 2048)):
            out.append(("attention.decode", f"{name} decode B={b} L={length}",
                        dict(b=b, h=c["heads"], kv=c["kv"], sk=length, d=c["hd"], mask_kind=0, splits=None)))
    return out


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for tune.json and tune.csv (created)")
    p.add_argument("--only", default=",".join(PARTS),
                   help="comma list of: rmsnorm (with add-rmsnorm), rope, gemm, attention")
    p.add_argument("--budget-s", type=float, default=240.0, help="stop starting new shapes after this many seconds")
    p.add_argument("--rep-ms", type=float, default=30.0, help="timed milliseconds per candidate")
    p.add_argument("--cache-dir", default="", help="TRITON_CACHE_DIR / TORCHINDUCTOR_CACHE_DIR")
    p.add_argument("--smoke", action="store_true",
                   help="CPU, TRITON_INTERPRET=1, tiny shapes, checked, timed by the wall clock")
    p.add_argument("--write-tuned", default="",
                   help="a per-GPU data file (gpus/<gpu>.json): write each class's best config into it")
    p.add_argument("--classes", default="", help="eval.json files, comma-separated: sweep the GEMM and attention "
                   "classes their runs launched with heuristic configs (autotune.heuristic_classes) instead of the "
                   "built-in shapes")
    p.add_argument("--skip-tuned", action="store_true", help="with --classes and --write-tuned: leave out the classes "
                   "the data file already has a tuned config for (a sweep resumed where a spent budget stopped it)")
    p.add_argument("--m-buckets", default="", help="with --classes: only the classes of these token buckets, "
                   "comma-separated (a GEMM's m_bucket, a prefill attention's seq_q_bucket; a decode attention class "
                   "counts as 1), e.g. 1,512 for the decode and 512-token prefill points a latency run times")
    a = p.parse_args(argv)
    a.parts = [s.strip() for s in a.only.split(",") if s.strip()]
    bad = [s for s in a.parts if s not in PARTS]
    if bad:
        p.error(f"--only: unknown part(s) {', '.join(bad)} (want {', '.join(PARTS)})")
    if a.write_tuned:
        try:
            with open(a.write_tuned, encoding="utf-8") as f:
                json.load(f)
        except OSError as e:
            p.error(f"--write-tuned {a.write_tuned}: {e.strerror} (want a per-GPU data file)")
        except ValueError as e:
            p.error(f"--write-tuned {a.write_tuned}: not JSON: {e}")
    if a.skip_tuned and not (a.classes and a.write_tuned):
        p.error("--skip-tuned: needs --classes and --write-tuned")
    buckets = None
    if a.m_buckets:
        if not a.classes:
            p.error("--m-buckets: needs --classes")
        try:
            buckets = {int(v) for v in a.m_buckets.split(",") if v.strip()}
        except ValueError:
            p.error(f"--m-buckets {a.m_buckets}: want comma-separated token counts, e.g. 1,512")
    a.timer = "graph"
    a.gemm_classes = a.attention_classes = None
    skip = tuned_keys(a.write_tuned) if a.skip_tuned else set()
    if a.classes:
        try:
            a.gemm_classes = classes_from_eval(a.classes, skip, buckets)
            if "attention" in a.parts:
                a.attention_classes = attention_classes_from_eval(a.classes, a.smoke, skip, buckets)
        except (OSError, ValueError, KeyError, TypeError) as e:
            p.error(f"--classes {a.classes}: {e}")
    return a


def class_id(kernel: str, key) -> tuple:
    """A problem class's identity: its kernel and its key's fields."""
    return kernel, tuple(sorted((k, str(v)) for k, v in key.items()))


def tuned_keys(path: str) -> set:
    """The class_id of every tuned entry of a per-GPU data file."""
    with open(path, encoding="utf-8") as f:
        return {class_id(e["kernel"], e["key"]) for e in json.load(f).get("tuned", [])}


def class_bucket(kernel: str, key) -> int:
    """The token bucket of a problem class: a GEMM's m_bucket, a prefill attention's
    seq_q_bucket, 1 for a decode attention (one query row a sequence), a MoE kernel's tokens."""
    if kernel == "attention.decode":
        return 1
    if kernel.startswith("moe."):
        return int(key["tokens"])
    return int(key["seq_q_bucket"] if kernel == "attention.prefill" else key["m_bucket"])


def _heuristic_classes(paths: str, skip=frozenset(), buckets=None):
    """The heuristic classes of each comma-separated eval.json, in order, less those in skip
    (class_id values) and, given buckets, those of other token buckets (class_bucket)."""
    out = []
    for path in (p for p in paths.split(",") if p):
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
        classes = (run.get("autotune") or {}).get("heuristic_classes")
        if classes is None:
            raise ValueError(f"{path}: no autotune.heuristic_classes (an eval.json of a GPU run by this version)")
        out += [c for c in classes if class_id(c["kernel"], c["key"]) not in skip
                and (buckets is None or class_bucket(c["kernel"], c["key"]) in buckets)]
    return out


def classes_from_eval(path: str, skip=frozenset(), buckets=None):
    """The GEMM shapes (label, M, K, N of the weight, epilogue, kernel) of the classes an eval
    launched with heuristic configs: M is the class's token bucket, so the winner serves the whole
    class. A decode-sized "gemm" class is a weight the GEMV cannot read (the LM head's, read in
    place through weight.t()): it is swept on the GEMM kernel, on such a weight."""
    out, seen = [], set()
    for c in _heuristic_classes(path, skip, buckets):
        if c["kernel"] not in ("gemm", "gemv"):
            continue
        k = c["key"]
        shape = (int(k["m_bucket"]), int(k["k"]), int(k["n"]), str(k["epilogue"]), c["kernel"],
                 int(k.get("head_dim", 0)))
        if shape not in seen:
            seen.add(shape)
            m, kk, n, epi, kernel, d = shape
            out.append((f"{epi} M={m} K={kk} N={n}" + (f" D={d}" if d else ""), m, kk, n, epi, kernel, d))
    return out


def attention_classes_from_eval(path: str, smoke: bool = False, skip=frozenset(), buckets=None):
    """The attention problems (kernel, label, problem, key) of the classes an eval launched with
    heuristic configs, each one problem of its class: the sequence lengths at their buckets, the
    heads of a Llama-shaped model (smoke: the tiny one's), a query-head group that fills the
    key's BLOCK_G; a decode class's split count gives its split bucket (16 splits, 2 under --smoke,
    or 1 where the class is single). The sweep checks that a launch of it computes the recorded key."""
    heads, kv = (SMOKE_MODELS["tiny"]["heads"], SMOKE_MODELS["tiny"]["kv"]) if smoke else (32, 8)
    out, seen = [], set()
    for c in _heuristic_classes(path, skip, buckets):
        kernel, k = c["kernel"], c["key"]
        if kernel not in ATTN_KEYS:
            continue
        ident = (kernel, tuple(sorted(k.items())))
        if ident in seen:
            continue
        seen.add(ident)
        try:
            mask = int(k["mask_kind"])
            if kernel == "attention.prefill":
                sq, sk = int(k["seq_q_bucket"]), int(k["seq_k_bucket"])
                prob = dict(b=1, h=heads, kv=kv, sq=sq, sk=sk, d=int(k["head_dim"]), causal=bool(k["is_causal"]),
                            mask_kind=mask)
                label = f"prefill Sq={sq} Sk={sk} D={prob['d']}{' causal' if prob['causal'] else ''} mask={mask}"
            else:
                block_g, split = int(k["block_g"]), int(k["split_bucket"])
                group = heads // kv if block_g <= 16 else block_g
                splits = 1 if k["single"] else (2 if smoke else 16)
                prob = dict(b=1, h=group * kv, kv=kv, sk=split * splits, d=int(k["head_dim"]), mask_kind=mask,
                            splits=splits)
                label = f"decode split={split} D={prob['d']} G={group} splits={splits} mask={mask}"
        except KeyError as e:
            raise ValueError(f"heuristic class {kernel} {k}: no field {e}") from None
        out.append((kernel, label, prob, dict(k)))
    return out


class Sweep:
    """Records entries, times candidates and keeps to the time budget."""

    def __init__(self, env, args):
        self.env, self.args = env, args
        self.t0 = time.time()
        self.entries = []
        self.classes = []  # per autotuned class: the best, the heuristic's and the autotuner's pick
        self.bw = None  # copy bandwidth, bytes/s

    def over_budget(self) -> bool:
        return time.time() - self.t0 > self.args.budget_s

    def timed(self, fn, make, set_bytes):
        if self.args.smoke:
            # The interpreter: one call's wall clock (it picks a winner for the plumbing only).
            s = make()
            t = time.perf_counter()
            fn(s)
            return (time.perf_counter() - t) * 1e6
        n = benchlib.rotation_sets(set_bytes, self.env.l2, max_sets=32)
        return benchlib.time_calls(self.env, fn, [make() for _ in range(n)])["us"]

    def rate(self, nbytes, us):
        if us is None:
            return {}
        return dict(GBps=round(nbytes / us / 1e3), frac=round(nbytes / (us * 1e-6) / self.bw, 3) if self.bw else None)

    def record(self, kernel, label, shape, config, us, err, extra=None, vendor=None, key=None):
        e = dict(kernel=kernel, label=label, shape=shape, config=config,
                 measured=dict(us=us, rel_err=err, **(extra or {})))
        if key is not None:
            e["key"] = key
        if vendor:
            e["vendor"] = vendor
        self.entries.append(e)
        shown = "%9.2f us" % us if us is not None else "   failed"
        cand = vendor or " ".join(f"{k}={v}" for k, v in (config or {}).items())
        benchlib.log(f"[tune +{time.time() - self.t0:.0f}s] {kernel:11s} {label:22s} {cand:60s} {shown}  err {err:.1e}"
                     + (f"  {extra}" if extra else ""))


def sweep_rmsnorm(sw: Sweep, models, m_rows):
    env, xk, torch = sw.env, sw.env.xk, sw.env.torch
    from bench_rmsnorm import rms_ref

    g = env.gen()
    for name, c in models.items():
        n = c["hidden"]
        for m in m_rows:
            for res in (False, True):
                def make(m=m, n=n, res=res):
                    d = dict(x=env.randn((m, n), g), w=env.randn((n,), g, 0.1).float().add_(1.0).to(env.dtype))
                    if res:
                        d["r"] = env.randn((m, n), g)
                    return d

                nbytes = (4 if res else 2) * m * n * 2
                s0 = make()
                if res:
                    s = s0["x"].float() + s0["r"].float()
                    refs = [s, rms_ref(torch, s, s0["w"], EPS)]
                else:
                    refs = [rms_ref(torch, s0["x"], s0["w"], EPS)]
                for warps in ((2, 4) if sw.args.smoke else (2, 4, 8, 16, 32)):
                    cfg = {"num_warps": warps}
                    if res:
                        def fn(s, cfg=cfg):  # (new residual, normed)
                            return xk.add_rms_norm(s["x"], s["r"], s["w"], EPS, config=cfg)
                    else:
                        def fn(s, cfg=cfg):
                            return xk.rms_norm(s["x"], s["w"], EPS, config=cfg)
                    err = benchlib.rel_err(env, fn(s0), refs)
                    us = sw.timed(fn, make, nbytes)
                    sw.record("add-rmsnorm" if res else "rmsnorm", f"{'add_' if res else ''}rms {name} M={m}",
                              dict(M=m, N=n), cfg, us, err, sw.rate(nbytes, us))


def sweep_rope(sw: Sweep, models, m_rows):
    env, xk, torch = sw.env, sw.env.xk, sw.env.torch
    from bench_rope import rope_formula

    g = env.gen()
    for name, c in models.items():
        h, kv, d = c["heads"], c["kv"], c["hd"]
        for m in m_rows:
            def make(m=m, h=h, kv=kv, d=d):
                q = env.randn((1, m, h, d), g).transpose(1, 2)
                k = env.randn((1, m, kv, d), g).transpose(1, 2)
                ang = torch.rand((1, m, d), generator=g, device=env.dev) * 6.28
                return dict(q=q, k=k, cos=ang.cos().to(env.dtype), sin=ang.sin().to(env.dtype))

            nbytes = 2 * (h + kv) * m * d * 2 + 2 * m * d * 2
            s0 = make()
            refs = list(rope_formula(torch, s0["q"].float(), s0["k"].float(), s0["cos"].float(), s0["sin"].float()))
            for inplace in (False, True):
                for tile in ((64, 2048) if sw.args.smoke else (512, 1024, 2048)):
                    for warps in ((4,) if sw.args.smoke else (1, 2, 4, 8)):
                        if sw.over_budget():
                            return
                        cfg = {"tile_elems": tile, "num_warps": warps}

                        def fn(s, inplace=inplace, cfg=cfg):
                            return xk.apply_rope(s["q"], s["k"], s["cos"], s["sin"], inplace=inplace, config=cfg)

                        s1 = {kk: (vv.clone() if kk in ("q", "k") else vv) for kk, vv in s0.items()}
                        err = benchlib.rel_err(env, fn(s1), refs)
                        us = sw.timed(fn, make, nbytes)
                        sw.record("rope", f"rope {name} M={m}", dict(M=m, H=h, KV=kv, D=d, inplace=inplace),
                                  cfg, us, err, sw.rate(nbytes, us))


def sweep_gemm(sw: Sweep):
    env, xk, torch = sw.env, sw.env.xk, sw.env.torch
    F = torch.nn.functional
    g = env.gen()
    shapes = sw.args.gemm_classes if sw.args.gemm_classes is not None else gemm_shapes(sw.args.smoke)
    for label, m, k, n_w, epi, *rest in shapes:
        kernel, head_dim = rest[:1], (rest[1] if len(rest) > 1 else 0)
        # a decode-sized class runs the GEMV unless the eval saw it on the GEMM kernel
        on_gemm = m > sw.gemv.MAX_M or kernel == ["gemm"]
        if not on_gemm and epi != epi.split("+")[0]:
            sweep_gemv_variant(sw, label, m, k, n_w, epi, head_dim)
            continue
        in_place = m <= sw.gemv.MAX_M and on_gemm  # the weight read through weight.t(), as the LM head
        if sw.over_budget():
            benchlib.log(f"[tune] budget spent before {label}")
            return
        swiglu = epi in ("swiglu", "geglu", "geglu_erf")
        n = n_w // 2 if swiglu else n_w
        shape = dict(M=m, K=k, N=n_w, epilogue=epi)

        def make(m=m, k=k, n_w=n_w, epi=epi):
            return benchlib.gemm_inputs(env, g, m, k, n_w, bias=epi == "bias", residual=epi == "residual")

        set_bytes = (m * k + k * n_w + m * n) * 2
        s0 = make()
        ref = s0["x"].float() @ s0["w"].float()
        if epi == "swiglu":
            ref = F.silu(ref[:, :n]) * ref[:, n:]
        elif epi == "geglu":
            ref = F.gelu(ref[:, :n], approximate="tanh") * ref[:, n:]
        elif epi == "geglu_erf":
            ref = F.gelu(ref[:, :n]) * ref[:, n:]
        elif epi == "hardswish":
            ref = F.hardswish(ref)
        elif epi == "bias":
            ref = ref + s0["b"].float()
        elif epi == "residual":
            ref = ref + s0["r"].float()
        flops = 2 * m * k * n_w
        # cuBLAS: nn.Linear layout (stock) and the packed K-major weight (a vendor route); the
        # matmul alone, before any epilogue
        for vendor, fn in (("cuBLAS F.linear(W[N,K])", lambda s: F.linear(s["x"], s["w_nk"])),
                           ("cuBLAS x @ W[K,N] (packed)", lambda s: s["x"] @ s["w"])):
            us = sw.timed(fn, make, set_bytes + k * n_w * 2)
            sw.record("gemm", label, shape, None, us, 0.0, dict(TFLOPs=round(flops / us / 1e6, 1)) if us else {},
                      vendor=vendor)

        be = sw.be
        key = dict(epilogue=epi, m_bucket=1 << (m - 1).bit_length(), k=k, n=n_w)
        check = lambda fn, s0=s0, ref=ref: benchlib.rel_err(env, fn(s0), [ref])  # noqa: E731
        rate = lambda us: dict(TFLOPs=round(flops / us / 1e6, 1))  # noqa: E731
        if not on_gemm:
            # what a decode-sized call launches: the split-K GEMV, whose only tuner is this sweep
            keys = sw.gemv.CONFIG_KEYS

            def run_gemv(s, cfg, epi=epi, n=n, keys=keys):
                out = torch.empty(s["x"].shape[0], n, dtype=s["x"].dtype, device=s["x"].device)
                c = sw.triton.Config({k: cfg[k] for k in keys[:3]}, num_warps=cfg["num_warps"],
                                     num_stages=cfg["num_stages"])
                return sw.gemv.gemv(s["x"], s["w"], s.get("b"), s.get("r"), out, epi, c)

            units = env.backend.compute_units(s0["x"].device)
            heuristic = config_dict(sw.gemv.heuristic_config(be, m, n, k, 2 if swiglu else 1, units), keys)
            cands = GEMV_SMOKE if sw.args.smoke else GEMV
            sweep_class(sw, "gemv", label, shape, key, [dict(zip(keys, c)) for c in cands], heuristic, None,
                        run_gemv, check, make, set_bytes, rate)
            del s0, ref
            continue

        def run(s, cfg, epi=epi, in_place=in_place):
            w = s["w_nk"].t() if in_place else s["w"]
            return xk.gemm(s["x"], w, bias=s.get("b"), residual=s.get("r"), epilogue=epi, config=cfg)

        heuristic = config_dict(env.backend.gemm_heuristic(be, m, n, k, 2 if swiglu else 1), GEMM_KEYS)
        pick = autotune_pick(sw.gemm_module._autotuner(be, swiglu), lambda s0=s0: run(s0, None))
        cands = GEMM_SMOKE if sw.args.smoke else (GEMM_BIG if m >= 2048 else GEMM_SMALL)
        sweep_class(sw, "gemm", label, shape, key, [dict(zip(GEMM_KEYS, c)) for c in cands],
                    heuristic, config_dict(pick, GEMM_KEYS) if pick is not None else None,
                    run, check, make, set_bytes, rate)
        del s0, ref
        if not sw.args.smoke:
            torch.cuda.empty_cache()


def sweep_gemv_variant(sw: Sweep, label: str, m: int, k: int, n_w: int, epi: str, head_dim: int):
    """A GEMV class whose launches carry more than the epilogue (gemv.launch_config's class name):
    "+nmajor", the weight stored N-major (read through its [K, N] view); "+rope", the decode
    token's QKV projection with the RoPE + static-cache write in its epilogue
    (rope_cache.qkv_rope_cache_write), a head of head_dim columns a tile, checked on the rotated
    queries. The kv-head count does not change the work (each head is written once, to the query
    or a cache), so one kv head stands for the model's."""
    env, torch, triton = sw.env, sw.env.torch, sw.triton
    base, *flags = epi.split("+")
    if base not in ("none", "bias") or any(f not in ("rope", "nmajor") for f in flags):
        benchlib.log(f"[tune] gemv {label}: no sweep for the class {epi!r}; left out")
        return
    rope, nmajor = "rope" in flags, "nmajor" in flags
    if rope and not (head_dim and n_w % head_dim == 0 and n_w // head_dim > 2):
        benchlib.log(f"[tune] gemv {label}: a rope class needs its head_dim in the key (an eval.json whose "
                     "key names it); left out")
        return
    if sw.over_budget():
        benchlib.log(f"[tune] budget spent before {label}")
        return
    from xpuinject_kernels import rope_cache

    g = env.gen()
    bias = base == "bias"
    # the key the launcher looks the class up by (a rope class's names its head_dim)
    key = sw.gemv._config_key(epi, 1 << (m - 1).bit_length(), k, n_w, head_dim if rope else 0)
    shape = dict(M=m, K=k, N=n_w, epilogue=epi, **({"head_dim": head_dim} if rope else {}))
    hq = n_w // head_dim - 2 if rope else 0
    cache_len = 64 if sw.args.smoke else 512

    def make(m=m, k=k, n_w=n_w):
        s = benchlib.gemm_inputs(env, g, m, k, n_w, bias=bias)
        s["w"] = s["w_nk"].t() if nmajor else s["w"]
        if rope:
            ang = env.randn((1, 1, head_dim // 2), g)
            s["cos"], s["sin"] = (torch.cat([f(ang), f(ang)], -1).to(s["x"].dtype) for f in (torch.cos, torch.sin))
            s["kc"], s["vc"] = (env.randn((m, 1, cache_len, head_dim), g) for _ in range(2))
            s["ctr"] = torch.tensor(cache_len // 2, device=s["x"].device)
        return s

    def run(s, cfg):
        c = triton.Config({kk: cfg[kk] for kk in sw.gemv.CONFIG_KEYS[:3]}, num_warps=cfg["num_warps"],
                          num_stages=cfg["num_stages"])
        if rope:
            return rope_cache._qkv_rope_cache_write(s["x"].view(m, 1, k), s["w"], s.get("b"), s["cos"], s["sin"],
                                                    s["kc"], s["vc"], s["ctr"], hq, config=c)
        out = torch.empty(m, n_w, dtype=s["x"].dtype, device=s["x"].device)
        return sw.gemv.gemv(s["x"], s["w"], s.get("b"), None, out, base, c)

    s0 = make()
    ref = s0["x"].float() @ s0["w"].float() + (s0["b"].float() if bias else 0)
    if rope:
        q = ref[:, :hq * head_dim].view(m, 1, hq, head_dim)
        kv = ref[:, hq * head_dim:].view(m, 1, 2, head_dim)
        ref = rope_cache.rope_cache_write_ref(q, kv[:, :, :1], kv[:, :, 1:], s0["cos"], s0["sin"], s0["kc"], s0["vc"],
                                              s0["ctr"], dtype=torch.float32)[0]
    units = env.backend.compute_units(s0["x"].device)
    # the launcher's own choice: a dot tile is a whole head (BLOCK_N its power of two), as here
    block_n = triton.next_power_of_2(head_dim) if rope and (not nmajor or m > 1) else None
    keys = sw.gemv.CONFIG_KEYS
    heuristic = config_dict(sw.gemv.heuristic_config(sw.be, m, n_w, k, 1, units, block_n, not nmajor), keys)
    cands = []
    for c in (GEMV_SMOKE if sw.args.smoke else GEMV):
        c = dict(zip(keys, c), **({"BLOCK_N": block_n} if block_n else {}))
        if c not in cands:
            cands.append(c)
    set_bytes = (m * k + k * n_w + m * n_w) * 2
    sweep_class(sw, "gemv", label, shape, key, cands, heuristic, None, run,
                lambda fn: benchlib.rel_err(env, fn(s0), [ref]), make, set_bytes,
                lambda us: dict(TFLOPs=round(2 * m * k * n_w / us / 1e6, 1)))


def config_dict(cfg, keys):
    """A triton.Config as the kernels' `config=` dict, its launch constants in `keys` order."""
    d = dict(cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return {k: d[k] for k in keys}


@contextlib.contextmanager
def autotune_asked():
    """XPUINJECT_AUTOTUNE=1 (`xpuinject --autotune`) inside the block."""
    old = os.environ.get("XPUINJECT_AUTOTUNE")
    os.environ["XPUINJECT_AUTOTUNE"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["XPUINJECT_AUTOTUNE"]
        else:
            os.environ["XPUINJECT_AUTOTUNE"] = old


def autotune_pick(tuner, launch):
    """The config `xpuinject --autotune` launches a class with: one launch() of a class not yet
    launched, with autotuning asked for, and what `tuner` (the kernel's triton Autotuner) then
    picked, from benchmarking its configs or from Triton's disk cache. None where the launch ran
    no autotuner (the interpreter's GEMM takes a tile sized by the problem instead)."""
    tuner.best_config = None
    with autotune_asked():
        launch()
    return tuner.best_config


def sweep_class(sw, kernel, label, shape, key, cands, heuristic, pick, run, check, make, set_bytes, rate):
    """Check and time one autotuned problem class's candidate configs: the heuristic's and the
    autotuner's pick first (so a spent budget still leaves both measured), then `cands`, each
    once. run(set, config) launches the class with a config, check(fn) gives fn's relative
    error, rate(us) the entry's rate fields. Records the entries and the class's summary."""
    order = []
    for c in [heuristic, pick] + list(cands):
        if c is not None and c not in order:
            order.append(c)
    times = []
    for cfg in order:
        if sw.over_budget() and times:
            benchlib.log(f"[tune] budget spent during {label}: {len(times)} of {len(order)} configs timed")
            break

        def fn(s, cfg=cfg):
            return run(s, cfg)

        try:
            err = check(fn)
            us = sw.timed(fn, make, set_bytes) if err < 1e-2 else None
        except Exception as e:  # noqa: BLE001 - out of resources etc.: record and go on
            sw.record(kernel, label, shape, cfg, None, float("inf"), dict(error=f"{type(e).__name__}: {str(e)[:120]}"),
                      key=key)
            continue
        sw.record(kernel, label, shape, cfg, us, err,
                  rate(us) if us else ({} if err < 1e-2 else dict(error="check failed")), key=key)
        if us is not None:
            times.append((cfg, us))
    if not times:
        return

    def timed_of(cfg):
        return None if cfg is None else dict(config=cfg, us=next((t for c, t in times if c == cfg), None))

    best = min(times, key=lambda t: t[1])
    sw.classes.append(dict(kernel=kernel, label=label, key=key, tuned=dict(config=best[0], us=best[1]),
                           heuristic=timed_of(heuristic), autotune=timed_of(pick)))


def attention_fits(kernel, cand, d):
    """Whether a CUDA attention candidate fits: prefill's K/V stages in shared memory and its fp32
    output tile in registers (the autotuner's pruner's rules, attention._prefill_prune)."""
    if kernel != "attention.prefill":
        return True
    from xpuinject_kernels import _backend

    bm, bn, w, st = cand
    block_d = max(16, _backend.next_pow2(d))
    return (st * 2 * bn * block_d * 2 <= _backend.CUDA_SMEM_BYTES
            and bm * block_d <= _backend.CUDA_ACC_PER_THREAD * 32 * w)


def attention_inputs(env, g, kernel, p):
    """make() of an attention problem's input sets, its fp32 reference on the first, the call and
    the bytes one set holds. Masks (mask_kind 1: a padding mask of the first eighth of the keys;
    2: that and the causal triangle, as one 4-D mask) are shared by the sets."""
    torch, xk = env.torch, env.xk
    from xpuinject_kernels.attention import attention_ref

    b, h, kv, sk, d, mk = p["b"], p["h"], p["kv"], p["sk"], p["d"], p["mask_kind"]
    sq = p.get("sq", 1)
    masks = {}
    keep = torch.ones(b, sk, dtype=torch.bool, device=env.dev)
    keep[:, : sk // 8] = False
    if mk == 1:
        masks["key_mask"] = keep
    elif mk == 2:
        i = torch.arange(sq, device=env.dev)[:, None] + (sk - sq)
        j = torch.arange(sk, device=env.dev)[None, :]
        masks["attn_mask"] = ((j <= i)[None, None] & keep[:, None, None, :]).contiguous()
    elif mk != 0:
        raise ValueError(f"mask_kind {mk} (want 0, 1 or 2)")

    def make():
        return dict(q=env.randn((b, h, sq, d), g), k=env.randn((b, kv, sk, d), g), v=env.randn((b, kv, sk, d), g),
                    **masks)

    s0 = make()
    set_bytes = (b * h * sq * d + 2 * b * kv * sk * d) * 2
    if kernel == "attention.prefill":
        causal = p["causal"]

        def call(s):
            return xk.flash_attention_prefill(s["q"], s["k"], s["v"], causal=causal, key_mask=s.get("key_mask"),
                                              attn_mask=s.get("attn_mask"))

        if env.smoke or masks or (causal and sq != sk):
            ref = attention_ref(s0["q"], s0["k"], s0["v"], causal=causal, **masks)
        else:
            from bench_attention import attn_ref  # fp32 SDPA on K/V repeated to every head

            ref = attn_ref(env, s0, causal)
        flops = 4 * b * h * sq * sk * d // (2 if causal else 1)
        return make, s0, ref, call, set_bytes, lambda us: dict(TFLOPs=round(flops / us / 1e6, 1))

    def call(s):
        return xk.decode_attention(s["q"], s["k"], s["v"], key_mask=s.get("key_mask"), num_splits=p["splits"])

    ref = attention_ref(s0["q"], s0["k"], s0["v"], causal=False, **masks)
    return make, s0, ref, call, set_bytes, None


def sweep_attention(sw: Sweep):
    """Each attention problem class: the key its launch computes (checked against an eval's
    record), the heuristic config (the eval's record, else the launcher's rule), the autotuner's
    pick and the candidates, through attention._forced_config."""
    env = sw.env
    from xpuinject_kernels import attention

    g = env.gen()
    if sw.args.attention_classes is not None:
        problems = sw.args.attention_classes
    else:
        problems = [(kernel, label, p, None) for kernel, label, p in attention_shapes(sw.args.smoke)]
    recorded = {}
    if sw.args.classes:
        recorded = {(c["kernel"], tuple(sorted(c["key"].items()))): c.get("config")
                    for c in _heuristic_classes(sw.args.classes)}
    done = set()
    for kernel, label, p, want_key in problems:
        if sw.over_budget():
            benchlib.log(f"[tune] budget spent before {label}")
            return
        keys = ATTN_KEYS[kernel]
        make, s0, ref, call, set_bytes, rate = attention_inputs(env, g, kernel, p)
        block_d = max(16, env.backend.next_pow2(p["d"]))
        rule = (attention._prefill_heuristic(sw.be, p["sq"], block_d) if kernel == "attention.prefill"
                else attention._decode_heuristic(sw.be))
        heuristic = config_dict(rule, keys)
        with attention._forced_config(kernel, heuristic) as seen:
            call(s0)
        key = dict(seen)
        shape = dict(p, M=p.get("sq", 1) * p["b"])
        if want_key is not None and key != want_key:
            off = ", ".join(f"{f} {key.get(f)} (recorded {want_key.get(f)})" for f in sorted(set(key) | set(want_key))
                            if key.get(f) != want_key.get(f))
            sw.record(kernel, label, shape, None, None, float("inf"), dict(error=f"launches another class: {off}"))
            continue
        ident = (kernel, tuple(sorted(key.items())))
        if ident in done:
            continue
        done.add(ident)
        heuristic = recorded.get(ident) or heuristic
        tuner = attention._prefill_fn(sw.be) if kernel == "attention.prefill" else attention._decode_fn(sw.be)
        pick = autotune_pick(tuner, lambda s0=s0: call(s0))
        if sw.args.smoke:
            cands = ATTN_PREFILL_SMOKE if kernel == "attention.prefill" else ATTN_DECODE_SMOKE
        else:
            cands = [c for c in (ATTN_PREFILL if kernel == "attention.prefill" else ATTN_DECODE)
                     if attention_fits(kernel, c, p["d"])]

        def run(s, cfg, kernel=kernel, call=call):
            with attention._forced_config(kernel, cfg):
                return call(s)

        def rated(us, rate=rate, set_bytes=set_bytes):
            return rate(us) if rate else sw.rate(set_bytes, us)

        sweep_class(sw, kernel, label, shape, key, [dict(zip(keys, c)) for c in cands], heuristic,
                    config_dict(pick, keys) if pick is not None else None, run,
                    lambda fn, s0=s0, ref=ref: benchlib.rel_err(env, fn(s0), [ref]), make, set_bytes, rated)
        del s0, ref
        if not sw.args.smoke:
            env.torch.cuda.empty_cache()


def mark_best(entries):
    """Flag our fastest correct config per (kernel, label); returns those entries."""
    best = {}
    for e in entries:
        us = e["measured"]["us"]
        if us is None or e.get("vendor") or not e["measured"]["rel_err"] < 1e-2:
            continue
        key = (e["kernel"], e["label"])
        if key not in best or us < best[key]["measured"]["us"]:
            best[key] = e
    for e in best.values():
        e["best"] = True
    return list(best.values())


def tuned_entries(best, date: str, command: str, source: str, classes=()):
    """The data file's "tuned" entries for the best configs of the autotuned kernels (see
    --write-tuned), with the times of the class's heuristic config and autotuner's pick where
    `classes` (the sweep's summaries) has them."""
    by = {(c["kernel"], c["label"]): c for c in classes}
    out = []
    for e in best:
        if e["kernel"] == "gemm":
            sh = e["shape"]
            key = dict(epilogue=sh["epilogue"], m_bucket=1 << (sh["M"] - 1).bit_length(), k=sh["K"], n=sh["N"])
        elif e["kernel"] in ATTN_KEYS or e["kernel"] == "gemv":
            key = e["key"]
        else:
            continue
        measured = dict(us=e["measured"]["us"])
        c = by.get((e["kernel"], e["label"]))
        for role in ("heuristic", "autotune"):
            if c and c[role] and c[role]["us"] is not None:
                measured[f"{role}_us"] = c[role]["us"]
        out.append(dict(kernel=e["kernel"], key=key, config=e["config"], measured=measured, date=date, command=command,
                        source=source))
    return out


def write_tuned(path: str, entries, device: str) -> None:
    """Put this sweep's entries into a per-GPU data file: an entry of a class this sweep tuned gives
    way to the new one; every other entry (other classes, the MoE entries benchmarks/bench_moe.py
    writes) and the rest of the file (routes, kept) stay."""
    import routes  # this folder's routes.py: the same layout as it writes

    new = {class_id(e["kernel"], e["key"]) for e in entries}
    routes.write_tuned(path, entries, device, keep=lambda e: class_id(e["kernel"], e["key"]) not in new)


def class_table(classes) -> str:
    """Per class: the best config's time beside the heuristic's and the autotuner's pick (x: their
    time over the best's)."""
    def cell(c, best):
        if not c or c["us"] is None:
            return "-"
        return f"{c['us']:.2f} (x{c['us'] / best:.2f})"

    lines = [f"  {'kernel':17s} {'class':44s} {'tuned us':>10s} {'heuristic us':>18s} {'autotune us':>18s}"]
    for c in classes:
        b = c["tuned"]["us"]
        lines.append(f"  {c['kernel']:17s} {c['label'][:44]:44s} {b:10.2f} {cell(c['heuristic'], b):>18s} "
                     f"{cell(c['autotune'], b):>18s}")
    return "\n".join(lines)


def write_csv(path, entries):
    fields = ["kernel", "label", "config", "vendor", "us", "rel_err", "GBps", "frac", "TFLOPs", "best", "error"]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        for e in entries:
            m = e["measured"]
            w.writerow(dict(kernel=e["kernel"], label=e["label"],
                            config=" ".join(f"{k}={v}" for k, v in (e["config"] or {}).items()),
                            vendor=e.get("vendor", ""), us="" if m["us"] is None else f"{m['us']:.4g}",
                            rel_err=f"{m['rel_err']:.2g}", GBps=m.get("GBps", ""), frac=m.get("frac", ""),
                            TFLOPs=m.get("TFLOPs", ""), best=int(bool(e.get("best"))), error=m.get("error", "")))


def main(argv=None) -> int:
    args = parse_args(argv)
    env = benchlib.setup(types.SimpleNamespace(smoke=args.smoke, cache_dir=args.cache_dir, timer="graph",
                                               rep_ms=args.rep_ms), competitors=False)
    if env is None:
        return 2
    torch = env.torch
    os.makedirs(args.out, exist_ok=True)
    from xpuinject_kernels import _backend, gpus

    # A sweep measures from scratch: a shipped tuned config must not stand in for the autotuner's
    # pick (the launchers look theirs up through gpus.tuned_config).
    gpus.tuned_config = lambda kernel, key, device: None
    env.backend = _backend
    sw = Sweep(env, args)
    sw.be = "cpu" if args.smoke else "cuda"
    sw.gemm_module = importlib.import_module("xpuinject_kernels.gemm")  # the package's `gemm` is the function
    import triton

    from xpuinject_kernels import gemv

    sw.gemv, sw.triton = gemv, triton
    models = SMOKE_MODELS if args.smoke else MODELS
    m_rows = (17,) if args.smoke else (2048, 16384)
    with torch.inference_mode():
        if not args.smoke:
            sw.bw = benchlib.copy_bandwidth(env)["copy_GBps"] * 1e9
            benchlib.log(f"[tune] copy ceiling {sw.bw / 1e9:.0f} GB/s")
        if "rmsnorm" in args.parts:
            sweep_rmsnorm(sw, models, m_rows)
        if "rope" in args.parts:
            sweep_rope(sw, models, m_rows)
        if "gemm" in args.parts:
            sweep_gemm(sw)
        if "attention" in args.parts:
            sweep_attention(sw)
    best = mark_best(sw.entries)
    import triton

    gpu = "cpu (Triton interpreter)" if args.smoke else torch.cuda.get_device_properties(0).name
    res = dict(gpu=gpu, date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               command=" ".join([os.path.basename(sys.executable)] + sys.argv), smoke=args.smoke,
               timer="interpreter wall clock, one call" if args.smoke else "graph",
               torch=torch.__version__, triton=triton.__version__,
               copy_GBps=sw.bw / 1e9 if sw.bw else None, wall_s=round(time.time() - sw.t0, 1), entries=sw.entries,
               classes=sw.classes)
    benchlib.write_atomic(os.path.join(args.out, "tune.json"), json.dumps(res, indent=1) + "\n")
    if args.write_tuned:
        tuned = tuned_entries(best, res["date"][:10], res["command"], os.path.join(args.out, "tune.json"), sw.classes)
        write_tuned(args.write_tuned, tuned, gpu)
        benchlib.log(f"[tune] {len(tuned)} tuned configs written to {args.write_tuned}")
    write_csv(os.path.join(args.out, "tune.csv"), sw.entries)
    benchlib.log("\nbest per shape:")
    for e in best:
        vendor = [x for x in sw.entries if x["label"] == e["label"] and x.get("vendor") and x["measured"]["us"]]
        ratio = "  ".join(f"{x['vendor'][:14]} x{x['measured']['us'] / e['measured']['us']:.2f}" for x in vendor)
        cand = " ".join(f"{k}={v}" for k, v in e["config"].items())
        benchlib.log(f"  {e['kernel']:11s} {e['label']:22s} {cand:60s} {e['measured']['us']:9.2f} us  {ratio}  "
                     f"{e['measured'].get('frac', '')}")
    if sw.classes:
        benchlib.log("\nper class, the best beside the heuristic config and the autotuner's pick:\n"
                     + class_table(sw.classes))
    bad = [e for e in sw.entries if not e["measured"]["rel_err"] < 1e-2]
    benchlib.log(f"[tune] {len(sw.entries)} entries, {len(bad)} failed their check or did not run; "
                 f"wrote tune.json and tune.csv to {args.out}")
    # A real sweep may meet configs that do not fit (recorded, not fatal); the smoke run must be clean.
    return 1 if (args.smoke and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
