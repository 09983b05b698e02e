#!/usr/bin/env python3
"""Sweep the kernels' launch constants on a GPU and write what each measured, per GPU.

    python3 benchmarks/tune.py --out DIR [--only rmsnorm,rope,gemm] [--budget-s 240] [--rep-ms 30]
    python3 benchmarks/tune.py --smoke --out DIR   # CPU, TRITON_INTERPRET=1: tiny shapes, a few
                                                   # candidates each, checks only
    python3 benchmarks/tune.py --out DIR --write-tuned kernels/python/xpuinject_kernels/gpus/<gpu>.json
    python3 benchmarks/tune.py --out DIR --only gemm --classes RUN/eval/eval.json --write-tuned ...
        # the GEMM classes that run launched with heuristic configs (autotune.heuristic_classes)

Every candidate goes through the kernel's public function with `config=` (the launch constants),
is checked against an fp32 reference (rel. error < 1e-2) and timed with the benchmarks' timer
(benchlib.time_calls: CUDA-graph replays over input sets rotating past 3x L2, median).

  rmsnorm, add-rmsnorm  num_warps at M = 2048, 16384
  rope                  num_warps and tile_elems (heads per tile), out of place and in place
  gemm                  every candidate block config below, beside cuBLAS on the nn.Linear weight
                        and on the packed K-major weight (what a vendor route runs)

Writes DIR/tune.json, one file per GPU:
  {gpu, date, command, smoke, torch, triton, copy_GBps, wall_s,
   entries: [{kernel, label, shape, config, vendor?, measured: {us, rel_err, GBps?, frac?, TFLOPs?},
              best?}]}
(`config` is what the kernel's `config=` takes; vendor rows have config null and name the call;
`best` marks our fastest correct config per kernel and shape), and DIR/tune.csv, one row per entry.

--write-tuned FILE puts each GEMM shape's best config into a per-GPU data file's "tuned" section
(kernels/gpus.go describes it; its routes stay): key {epilogue, m_bucket, k, n} (m_bucket: M
rounded up to a power of two, the launch cache's class), the six launch constants, the time. On
that GPU `gemm` then launches it instead of autotuning the class. Commit DIR/tune.json beside it
(docs/results/) so the source it names exists.
"""

from __future__ import annotations

import argparse
import csv
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
                (f"8b down M={m}", m, 14336, 4096, "none"), (f"8b qkv M={m}", m, 4096, 6144, "none")]
    return out


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for tune.json and tune.csv (created)")
    p.add_argument("--only", default="rmsnorm,rope,gemm", help="comma list of: rmsnorm (with add-rmsnorm), rope, gemm")
    p.add_argument("--budget-s", type=float, default=240.0, help="stop starting new shapes after this many seconds")
    p.add_argument("--rep-ms", type=float, default=30.0, help="timed milliseconds per candidate")
    p.add_argument("--cache-dir", default="", help="TRITON_CACHE_DIR / TORCHINDUCTOR_CACHE_DIR")
    p.add_argument("--smoke", action="store_true", help="CPU, TRITON_INTERPRET=1, tiny shapes, checks only (no timing)")
    p.add_argument("--write-tuned", default="", help="a per-GPU data file (gpus/<gpu>.json): write the GEMM best configs into it")
    p.add_argument("--classes", default="", help="an eval.json: sweep the GEMM classes its run launched with heuristic "
                   "configs (autotune.heuristic_classes) instead of the built-in shapes")
    a = p.parse_args(argv)
    a.parts = [s.strip() for s in a.only.split(",") if s.strip()]
    bad = [s for s in a.parts if s not in ("rmsnorm", "rope", "gemm")]
    if bad:
        p.error(f"--only: unknown part(s) {', '.join(bad)} (want rmsnorm, rope, gemm)")
    a.timer = "graph"
    a.gemm_classes = None
    if a.classes:
        try:
            a.gemm_classes = classes_from_eval(a.classes)
        except (OSError, ValueError, KeyError, TypeError) as e:
            p.error(f"--classes {a.classes}: {e}")
    return a


def classes_from_eval(path: str):
    """The GEMM shapes (label, M, K, N of the weight, epilogue) of the classes an eval launched
    with heuristic configs: M is the class's token bucket, so the winner serves the whole class."""
    with open(path, encoding="utf-8") as f:
        run = json.load(f)
    classes = (run.get("autotune") or {}).get("heuristic_classes")
    if classes is None:
        raise ValueError("no autotune.heuristic_classes (an eval.json of a GPU run by this version)")
    out, seen = [], set()
    for c in classes:
        if c["kernel"] != "gemm":
            continue
        k = c["key"]
        shape = (int(k["m_bucket"]), int(k["k"]), int(k["n"]), str(k["epilogue"]))
        if shape not in seen:
            seen.add(shape)
            m, kk, n, epi = shape
            out.append((f"{epi} M={m} K={kk} N={n}", m, kk, n, epi))
    return out


class Sweep:
    """Records entries, times candidates and keeps to the time budget."""

    def __init__(self, env, args):
        self.env, self.args = env, args
        self.t0 = time.time()
        self.entries = []
        self.bw = None  # copy bandwidth, bytes/s

    def over_budget(self) -> bool:
        return time.time() - self.t0 > self.args.budget_s

    def timed(self, fn, make, set_bytes):
        if self.args.smoke:
            return None
        n = benchlib.rotation_sets(set_bytes, self.env.l2, max_sets=32)
        return benchlib.time_calls(self.env, fn, [make() for _ in range(n)])["us"]

    def rate(self, nbytes, us):
        if us is None:
            return {}
        return dict(GBps=round(nbytes / us / 1e3), frac=round(nbytes / (us * 1e-6) / self.bw, 3) if self.bw else None)

    def record(self, kernel, label, shape, config, us, err, extra=None, vendor=None):
        e = dict(kernel=kernel, label=label, shape=shape, config=config,
                 measured=dict(us=us, rel_err=err, **(extra or {})))
        if vendor:
            e["vendor"] = vendor
        self.entries.append(e)
        shown = "%9.2f us" % us if us is not None else ("  checked" if self.args.smoke and err < 1e-2 else "   failed")
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
    for label, m, k, n_w, epi in shapes:
        if sw.over_budget():
            benchlib.log(f"[tune] budget spent before {label}")
            return
        swiglu = epi in ("swiglu", "geglu")
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
        cands = GEMM_SMOKE if sw.args.smoke else (GEMM_BIG if m >= 2048 else GEMM_SMALL)
        for cand in cands:
            cfg = dict(zip(GEMM_KEYS, cand))

            def fn(s, cfg=cfg, epi=epi):
                return xk.gemm(s["x"], s["w"], bias=s.get("b"), residual=s.get("r"), epilogue=epi, config=cfg)

            try:
                err = benchlib.rel_err(env, fn(s0), [ref])
                us = sw.timed(fn, make, set_bytes) if err < 1e-2 else None
            except Exception as e:  # noqa: BLE001 - out of resources etc.: record and go on
                sw.record("gemm", label, shape, cfg, None, float("inf"), dict(error=f"{type(e).__name__}: {str(e)[:120]}"))
                continue
            sw.record("gemm", label, shape, cfg, us, err,
                      dict(TFLOPs=round(flops / us / 1e6, 1)) if us else ({} if err < 1e-2 else dict(error="check failed")))
        del s0, ref
        if not sw.args.smoke:
            torch.cuda.empty_cache()


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


def tuned_entries(best, date: str, command: str, source: str):
    """The data file's "tuned" entries for the GEMM best configs (see --write-tuned)."""
    out = []
    for e in best:
        if e["kernel"] != "gemm":
            continue
        sh = e["shape"]
        out.append(dict(kernel="gemm", key=dict(epilogue=sh["epilogue"], m_bucket=1 << (sh["M"] - 1).bit_length(),
                                               k=sh["K"], n=sh["N"]),
                        config=e["config"], measured=dict(us=e["measured"]["us"]), date=date, command=command,
                        source=source))
    return out


def write_tuned(path: str, entries, device: str) -> None:
    """Replace the "tuned" section of a per-GPU data file, keeping the rest (routes, kept)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if device not in data.get("devices", []):
        data.setdefault("devices", []).append(device)
    data["tuned"] = entries
    from routes import dumps  # this folder's routes.py: the same layout as it writes

    benchlib.write_atomic(path, dumps(data) + "\n")


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
    sw = Sweep(env, args)
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
    best = mark_best(sw.entries)
    import triton

    gpu = "cpu (Triton interpreter)" if args.smoke else torch.cuda.get_device_properties(0).name
    res = dict(gpu=gpu, date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               command=" ".join([os.path.basename(sys.executable)] + sys.argv), smoke=args.smoke,
               torch=torch.__version__, triton=triton.__version__,
               copy_GBps=sw.bw / 1e9 if sw.bw else None, wall_s=round(time.time() - sw.t0, 1), entries=sw.entries)
    benchlib.write_atomic(os.path.join(args.out, "tune.json"), json.dumps(res, indent=1) + "\n")
    if args.write_tuned:
        tuned = tuned_entries(best, res["date"][:10], res["command"], os.path.join(args.out, "tune.json"))
        write_tuned(args.write_tuned, tuned, gpu)
        benchlib.log(f"[tune] {len(tuned)} tuned GEMM configs written to {args.write_tuned}")
    write_csv(os.path.join(args.out, "tune.csv"), sw.entries)
    benchlib.log("\nbest per shape:")
    for e in best:
        vendor = [x for x in sw.entries if x["label"] == e["label"] and x.get("vendor") and x["measured"]["us"]]
        ratio = "  ".join(f"{x['vendor'][:14]} x{x['measured']['us'] / e['measured']['us']:.2f}" for x in vendor)
        cand = " ".join(f"{k}={v}" for k, v in e["config"].items())
        benchlib.log(f"  {e['kernel']:11s} {e['label']:22s} {cand:60s} {e['measured']['us']:9.2f} us  {ratio}  "
                     f"{e['measured'].get('frac', '')}")
    bad = [e for e in sw.entries if not e["measured"]["rel_err"] < 1e-2]
    benchlib.log(f"[tune] {len(sw.entries)} entries, {len(bad)} failed their check or did not run; "
                 f"wrote tune.json and tune.csv to {args.out}")
    # A real sweep may meet configs that do not fit (recorded, not fatal); the smoke run must be clean.
    return 1 if (args.smoke and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
