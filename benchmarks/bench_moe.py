#!/usr/bin/env python3
"""The fused MoE kernel against transformers' own experts, one sparse MoE block at a time.

    PYTHONPATH=kernels/python python3 benchmarks/bench_moe.py --out DIR \\
        [--shapes qwen3-30b-a3b,mixtral-8x7b] [--tokens 1,8,64,2048]
    ... --sweep     # also time ours at each candidate launch config (SWEEP_DECODE / SWEEP_PREFILL)
    ... --write-tuned kernels/python/xpuinject_kernels/gpus/h200.json [--from-json DIR/moe.json]
    ... --smoke     # CPU, TRITON_INTERPRET=1: tiny shapes, every path checked, nothing timed
    ... --experts-layout nmajor   # ours on N-major copies of the packed experts (below)

Each case is one MoE block of a shape (SHAPES: router and experts as in the model's config.json)
built from transformers' own class (Qwen3MoeSparseMoeBlock, MixtralSparseMoeBlock) with random
weights, run on `tokens` tokens (batch 1). Paths, all routing included:
  ours        xpuinject_kernels.moe on the block's weights packed as the offline packer packs them
  grouped_mm  the block with experts_implementation "grouped_mm" (transformers/integrations/moe.py)
  grouped_mm_compiled  the same under torch.compile(fullgraph=True): stock's fastest setting in the
              whole-model eval (not under --smoke)
  batched_mm  the block with experts_implementation "batched_mm"
Before anything is timed each path's output is checked against the block's own experts loop
(experts_implementation "eager", the module's forward): ||out - ref|| / ||ref|| < 1e-2 (bf16
rounding; a routing choice that differed would move a token's row far more). Every path is then
timed by the same code (benchlib.time_calls: the calls captured in one CUDA graph, inputs rotating
over sets so each call routes its own tokens, median over replays). A path that cannot run at a
point (batched_mm copies each (token, expert) pair's weights: 2048 tokens of Mixtral would need
~1.4 TB) says why and has no figure.

Active bytes: the router, the distinct experts the set's tokens hit (gate, up and down weights,
read once) and the activations in and out; GB/s = those bytes / time (every path), and a share of
the device copy bandwidth measured first. roofline = active bytes / ROOFLINE_BPS (the H200's
4.2 TB/s, as the model's active-bytes roofline takes it); x roofline = time / that. ratio =
transformers' time / ours (> 1: ours faster).

--sweep: for each case, ours is also run at each candidate config of the path its token count
takes (decode at tokens <= moe.DECODE_MAX_TOKENS, else prefill), passed as moe(config=...), and at
the config it takes by itself (tuned data or heuristic, "default"); each is checked like the paths
above, then timed by the same timer. moe.json's row["sweep"] lists them with their GB/s of active
bytes, the best first; moe.md has the best beside the default. --write-tuned FILE puts each swept
case's best config into that per-GPU data file's "tuned" section as kernel "moe.decode" or
"moe.prefill" keyed by {hidden, inter, experts, top_k, tokens (rounded up to a power of 2)}, the
key moe.launch_config looks up; other entries stay, one of the same kernel and key is replaced.
With --from-json it writes from a moe.json an earlier --sweep run wrote, and runs nothing.

--experts-layout nmajor: ours reads each expert's gate_up and down N-major (the [K, N] views of
[N, K] copies of the packed tensors, nn.Linear's layout and the checkpoint's; the same values),
through the same kernels by their strides: what packing the experts that way would change.
--experts-layout blocked: ours reads them blocked (moe.blocked: each tile of --slab columns one
contiguous run; XPUINJECT_MOE_SLAB makes the package load them so), where their columns split into
such tiles. Neither with --write-tuned (the package packs them K-major).

ours' routing ms: its routing alone (router kernel and top-k, as its path runs them), by the same
timer; the rest of ours is the experts'.

--profile: each case's ours and grouped_mm_compiled again under torch.profiler (5 calls): device
time per kernel, in moe.json (row["profile"]) and the log.

Writes DIR/moe.json and DIR/moe.md; exit status 0 when every check of ours passed, 1 when one
failed, 2 on bad arguments or no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "kernels" / "python"), str(Path(__file__).resolve().parent)]

import benchlib  # noqa: E402

# One MoE layer of each model (config.json of Qwen/Qwen3-30B-A3B and mistralai/Mixtral-8x7B-v0.1).
SHAPES = {
    "qwen3-30b-a3b": dict(family="qwen3_moe", hidden=2048, experts=128, top_k=8, inter=768),
    "mixtral-8x7b": dict(family="mixtral", hidden=4096, experts=8, top_k=2, inter=14336),
}
# --smoke: small enough for the Triton interpreter; odd expert counts and a width off a power of two
SMOKE_SHAPES = {
    "qwen3-moe-tiny": dict(family="qwen3_moe", hidden=64, experts=6, top_k=2, inter=24),
    "mixtral-tiny": dict(family="mixtral", hidden=64, experts=5, top_k=3, inter=40),
}
TOKENS = (1, 8, 64, 2048)
# one decode-path and one prefill-path count (moe.DECODE_MAX_TOKENS is 8)
SMOKE_TOKENS = (3, 19)
PATHS = ("ours", "grouped_mm", "grouped_mm_compiled", "batched_mm")
PROFILE_CALLS = 5
ROOFLINE_BPS = 4.2e12  # H200 HBM3e, bytes/s
SETS = 8  # input sets rotated through: each call routes other tokens, so other experts are read
# --sweep candidates (moe.DECODE_KEYS): gate/up (BLOCK_N, BLOCK_K, SPLIT_K[, EW]), down (the same),
# num_warps, num_stages (decode_config). Short lists: each one compiles its kernels once.
SWEEP_DECODE = [
    ((64, 128, 1), (64, 128, 1), 4, 3),
    ((64, 128, 2), (64, 128, 2), 4, 3),
    ((64, 128, 4), (64, 128, 4), 4, 3),
    ((32, 256, 2), (32, 256, 2), 4, 3),
    ((128, 64, 2), (128, 64, 2), 4, 4),
    # narrower column tiles: twice the programs without a K split's partial sums (8 pairs of
    # Qwen3-30B-A3B at 64 columns fill 96 of the H200's 132 SMs)
    ((32, 128, 1), (32, 128, 1), 4, 4),
    ((32, 128, 1), (64, 128, 1), 4, 4),
    ((64, 128, 1), (32, 128, 1), 4, 4),
    ((32, 256, 1), (32, 256, 1), 4, 3),
    # around the H200's best at Qwen3-30B-A3B's one token (128 x 64 tiles, two splits, 4 stages:
    # fewer, wider programs than the 64 x 128 heuristic), each half of it varied alone
    ((128, 64, 1), (128, 64, 1), 4, 4),
    ((128, 64, 4), (128, 64, 4), 4, 4),
    ((128, 64, 2), (128, 64, 2), 4, 5),
    ((128, 64, 2), (64, 128, 1), 4, 4),
    ((64, 128, 2), (128, 64, 2), 4, 4),
    ((128, 128, 2), (128, 128, 2), 8, 3),
    # EW (the CUDA cores' multiply-add into a [BLOCK_K, BLOCK_N] fp32 accumulator, no 16-row
    # dot): wide, shallow tiles, the accumulators' registers bounded; each kernel alone, then both
    ((128, 32, 2, 1), (128, 32, 1, 1), 4, 3),
    ((128, 32, 4, 1), (128, 32, 2, 1), 4, 3),
    ((256, 16, 4, 1), (256, 16, 2, 1), 4, 3),
    ((64, 64, 2, 1), (64, 64, 1, 1), 4, 3),
    ((128, 32, 2, 1), (128, 32, 1, 1), 8, 4),
    ((128, 32, 2, 1), (128, 64, 2), 4, 4),
    ((128, 64, 2), (128, 32, 1, 1), 4, 4),
    # as many programs on every SM: at Qwen3-30B-A3B's one token, gate/up 8 experts x 6 tiles x 11
    # K splits = 528 = 4 x the H200's 132 SMs, down 8 x 16 tiles = 128
    ((128, 32, 11), (128, 64, 1), 4, 3),
    ((128, 32, 11, 1), (128, 32, 1, 1), 4, 3),
    ((64, 64, 11), (128, 64, 1), 4, 3),
    # the down launch with all of a token's slots in each program (DOWN_ALL: no partials, no
    # finishing program), narrow column tiles so a token's tiles still fill the SMs, beside the
    # H200 entry's gate/up
    ((128, 64, 2), (16, 128, 1, 0, 1), 4, 4),
    ((128, 64, 2), (32, 128, 1, 0, 1), 4, 4),
    ((128, 64, 2), (16, 256, 1, 1, 1), 4, 3),
    ((128, 64, 2), (32, 128, 1, 1, 1), 4, 3),
    ((128, 64, 2), (16, 512, 1, 1, 1), 4, 3),
]
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) of the prefill kernels
SWEEP_PREFILL = [
    (32, 128, 64, 4, 3),
    (64, 128, 64, 4, 3),
    (64, 128, 64, 8, 4),
    (128, 128, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 64, 64, 4, 3),
    (128, 64, 64, 8, 4),
    (64, 256, 64, 8, 3),
    (64, 128, 128, 8, 3),
]
SMOKE_SWEEP_DECODE = [((16, 32, 1), (16, 16, 1), 4, 1), ((32, 16, 2, 1), (32, 16, 3, 1), 4, 1)]
SMOKE_SWEEP_PREFILL = [(16, 16, 32, 4, 1), (32, 32, 16, 4, 1)]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="folder for moe.json and moe.md")
    p.add_argument("--shapes", default="", help=f"comma-separated, of {', '.join(SHAPES)} (default: all)")
    p.add_argument("--tokens", default="", help="comma-separated token counts (default: 1,8,64,2048)")
    p.add_argument("--smoke", action="store_true", help="CPU, TRITON_INTERPRET=1: tiny shapes, checks only")
    p.add_argument("--rep-ms", type=float, default=200.0, help="device time to spend timing each path")
    p.add_argument("--sweep", action="store_true", help="also time ours at each candidate launch config")
    p.add_argument("--experts-layout", choices=("kmajor", "nmajor", "blocked"), default="kmajor",
                   help="the layout ours reads the experts in (kmajor: as packed)")
    p.add_argument("--slab", type=int, default=128, help="--experts-layout blocked: columns per tile")
    p.add_argument("--profile", action="store_true",
                   help="also profile ours and grouped_mm_compiled: device time per kernel")
    p.add_argument("--write-tuned", default="", metavar="FILE",
                   help="a per-GPU data file (gpus/<gpu>.json): write each swept case's best config into it")
    p.add_argument("--from-json", default="", metavar="MOE_JSON",
                   help="with --write-tuned: take the sweep from this moe.json and run nothing")
    args = p.parse_args(argv)
    if args.from_json and not args.write_tuned:
        p.error("--from-json: only with --write-tuned")
    if args.write_tuned and args.experts_layout != "kmajor":
        p.error(f"--write-tuned: not with --experts-layout {args.experts_layout} (the package packs the experts "
                "K-major)")
    if args.write_tuned:
        if not (args.sweep or args.from_json):
            p.error("--write-tuned: needs --sweep (or --from-json): the best configs come from a sweep")
        if args.smoke and not args.from_json:
            p.error("--write-tuned: not with --smoke (interpreter times pick no GPU's configs)")
        for what, path in (("--write-tuned", args.write_tuned), ("--from-json", args.from_json)):
            if not path:
                continue
            try:
                with open(path, encoding="utf-8") as f:
                    json.load(f)
            except OSError as e:
                p.error(f"{what} {path}: {e.strerror}")
            except ValueError as e:
                p.error(f"{what} {path}: not JSON ({e})")
    table = SMOKE_SHAPES if args.smoke else SHAPES
    names = [s for s in args.shapes.split(",") if s] or list(table)
    for s in names:
        if s not in table:
            p.error(f"--shapes: unknown shape {s!r} (want one of {', '.join(table)})")
    args.shape_names = names
    try:
        args.token_list = [int(t) for t in args.tokens.split(",") if t] or list(SMOKE_TOKENS if args.smoke else TOKENS)
    except ValueError:
        p.error(f"--tokens: want comma-separated whole numbers, got {args.tokens!r}")
    if any(t < 1 for t in args.token_list):
        p.error(f"--tokens: counts must be at least 1, got {args.tokens!r}")
    args.timer = "graph"  # benchlib.time_calls: one CUDA graph of calls per path
    return args


def block(env, sh):
    """transformers' MoE block of the shape on the device in bf16, random weights scaled so the
    router spreads tokens and activations stay near unit size."""
    torch = env.torch
    import transformers

    if sh["family"] == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(hidden_size=sh["hidden"], moe_intermediate_size=sh["inter"],
                                          num_experts=sh["experts"], num_experts_per_tok=sh["top_k"],
                                          norm_topk_prob=True, num_hidden_layers=1)
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock as cls
    else:
        cfg = transformers.MixtralConfig(hidden_size=sh["hidden"], intermediate_size=sh["inter"],
                                         num_local_experts=sh["experts"], num_experts_per_tok=sh["top_k"],
                                         num_hidden_layers=1)
        from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock as cls
    before = torch.get_default_dtype()
    torch.set_default_dtype(env.dtype)
    try:
        with torch.device(env.dev):
            m = cls(cfg).eval()
    finally:
        torch.set_default_dtype(before)
    g = env.gen()
    h, i = sh["hidden"], sh["inter"]
    with torch.no_grad():
        m.gate.weight.copy_(env.randn(m.gate.weight.shape, g, h ** -0.5))
        m.experts.gate_up_proj.copy_(env.randn(m.experts.gate_up_proj.shape, g, h ** -0.5))
        m.experts.down_proj.copy_(env.randn(m.experts.down_proj.shape, g, i ** -0.5))
    return m, cfg


def set_experts(cfg, name):
    """The block's experts implementation: what PreTrainedModel.set_experts_implementation sets on
    a model's config (its experts module holds the same config object)."""
    cfg._experts_implementation = name


def batched_mm_bytes(sh, tokens):
    """What batched_mm's per-pair weight gathers (gate_up_proj[expert_ids], down_proj[expert_ids])
    allocate: 3 * H * I bf16 values per (token, expert) pair."""
    return tokens * sh["top_k"] * 3 * sh["hidden"] * sh["inter"] * 2


def active_bytes(sh, tokens, hit):
    """Router, the experts hit (mean distinct experts over the sets) and activations in and out."""
    h, i, e = sh["hidden"], sh["inter"], sh["experts"]
    return 2 * (h * e + hit * 3 * h * i + 2 * tokens * h)


def decode_config(gate_up, down, warps, stages) -> dict:
    """A SWEEP_DECODE entry as the launcher's config dict (moe.DECODE_KEYS; EW, DOWN_EW and DOWN_ALL
    only where on, as a tuned entry holds them)."""
    names = ("BLOCK_N", "BLOCK_K", "SPLIT_K", "EW", "ALL")
    c = dict(zip(names[:4], gate_up), **{f"DOWN_{n}": v for n, v in zip(names, down)}, num_warps=warps,
             num_stages=stages)
    return {k: v for k, v in c.items() if not (k.endswith(("EW", "ALL")) and not v)}


def sweep_configs(env, tokens):
    """(path, candidate configs) for a token count: moe's decode or prefill launch constants."""
    from xpuinject_kernels import moe as M

    if tokens <= M.DECODE_MAX_TOKENS:
        return "decode", [decode_config(*c) for c in (SMOKE_SWEEP_DECODE if env.smoke else SWEEP_DECODE)]
    out = [dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=w, num_stages=st)
           for bm, bn, bk, w, st in (SMOKE_SWEEP_PREFILL if env.smoke else SWEEP_PREFILL)]
    return "prefill", out


def profile_path(env, fn, sets, cfg):
    """torch.profiler's device time per kernel over PROFILE_CALLS calls of fn, after a warm-up."""
    torch = env.torch
    from torch.profiler import ProfilerActivity, profile

    impl = getattr(fn, "impl", None)
    with torch.no_grad():
        if impl:
            set_experts(cfg, impl)
        try:
            fn(sets[0])
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
                for i in range(PROFILE_CALLS):
                    fn(sets[i % len(sets)])
                torch.cuda.synchronize()
        finally:
            set_experts(cfg, "eager")
    return p.key_averages().table(sort_by="device_time_total", row_limit=15, max_name_column_width=60)


def run_case(env, name, sh, tokens, packed, sweep=False, profile=False):
    """Check every path against the block's own experts loop, then time each (not under --smoke);
    with sweep, ours also at each candidate config (row["sweep"])."""
    torch = env.torch
    from xpuinject_kernels.moe import launch_config, moe, route
    from xpuinject_kernels.moe_layer import router_rule

    m, cfg, rw, gu, dn = packed
    rule = router_rule(m)
    g = env.gen()
    sets = [dict(x=env.randn((1, tokens, sh["hidden"]), g)) for _ in range(SETS if not env.smoke else 1)]
    row = dict(shape=name, tokens=tokens, params=sh, paths={})
    with torch.no_grad():
        set_experts(cfg, "eager")
        ref = m(sets[0]["x"])
        _, _, stock_ids = m.gate(sets[0]["x"].view(-1, sh["hidden"]))
        ids, _ = route(sets[0]["x"], rw, sh["top_k"], rule)
        # the same expert sets as the stock router picks (order within a token may differ)
        row["routing_match"] = float((ids.sort(-1).values == stock_ids.sort(-1).values).all(-1).float().mean())
        hit = sum(int(torch.unique(m.gate(s["x"].view(-1, sh["hidden"]))[2]).numel()) for s in sets) / len(sets)
    row["experts_hit"] = hit
    row["active_bytes"] = active_bytes(sh, tokens, hit)
    row["roofline_ms"] = row["active_bytes"] / ROOFLINE_BPS * 1e3

    def ours(s):
        return moe(s["x"], rw, gu, dn, sh["top_k"], rule)

    def stock(impl):
        def fn(s):
            return m(s["x"])
        fn.impl = impl
        return fn

    compiled = torch.compile(m, fullgraph=True, dynamic=False)

    def stock_compiled(s):
        return compiled(s["x"])
    stock_compiled.impl = "grouped_mm"

    fns = {"ours": ours, "grouped_mm": stock("grouped_mm"), "grouped_mm_compiled": stock_compiled,
           "batched_mm": stock("batched_mm")}
    for path, fn in fns.items():
        res = row["paths"][path] = {}
        if path == "grouped_mm_compiled" and env.smoke:
            res["error"] = "not under --smoke (torch.compile builds C++ on the CPU)"
            continue
        if path == "batched_mm" and not env.smoke:
            need = batched_mm_bytes(sh, tokens)
            free, _ = torch.cuda.mem_get_info()
            if need > free * 0.8:
                res["error"] = (f"its per-pair weight copies need {need / 1e9:.0f} GB, the device has "
                                f"{free / 1e9:.0f} GB free")
                continue
        impl = getattr(fn, "impl", None)
        try:
            with torch.no_grad():
                if impl:
                    set_experts(cfg, impl)
                out = fn(sets[0])
                res["rel_err"] = benchlib.rel_err(env, out, ref)
                res["check_ok"] = res["rel_err"] < benchlib.REL_TOL
                del out
                if not env.smoke and res["check_ok"]:
                    t = benchlib.time_calls(env, fn, sets)
                    res.update(ms=t["us"] / 1e3, timer=t["timer"])
        except Exception as e:  # noqa: BLE001 - one path that cannot run must not cost the others
            res["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
            if not env.smoke:
                torch.cuda.empty_cache()
        finally:
            set_experts(cfg, "eager")
    if not env.smoke and row["paths"]["ours"].get("check_ok"):
        # ours' routing alone, as its path runs it (router kernel and top-k): the rest of its time
        # is the experts'
        from xpuinject_kernels import moe as M

        def routing(s):
            x2 = s["x"].reshape(-1, sh["hidden"])
            if tokens <= M.DECODE_MAX_TOKENS:
                return M.decode_route(x2, rw, sh["top_k"])
            return route(x2, rw, sh["top_k"], rule)
        with torch.no_grad():
            row["ours_routing_ms"] = benchlib.time_calls(env, routing, sets)["us"] / 1e3
    if profile and not env.smoke:
        row["profile"] = {}
        for path in ("ours", "grouped_mm_compiled"):
            if row["paths"][path].get("check_ok"):
                row["profile"][path] = profile_path(env, fns[path], sets, cfg)
                benchlib.log(f"[moe] profile {name} tokens {tokens} {path} ({PROFILE_CALLS} calls):\n"
                             f"{row['profile'][path]}")
    if sweep:
        row["sweep"] = run_sweep(env, sh, tokens, sets, ref, (rw, gu, dn, rule), row["active_bytes"],
                                 launch_config, row["paths"]["ours"])
    ours_ms = row["paths"]["ours"].get("ms")
    for path in PATHS:
        res = row["paths"][path]
        if res.get("ms"):
            res["GBps"] = row["active_bytes"] / (res["ms"] * 1e-3) / 1e9
            res["x_roofline"] = res["ms"] / row["roofline_ms"]
            if env.bw:
                res["bw_frac"] = row["active_bytes"] / (res["ms"] * 1e-3) / env.bw
            if path != "ours" and ours_ms:
                res["ratio"] = res["ms"] / ours_ms
    return row


def run_sweep(env, sh, tokens, sets, ref, weights, active, launch_config, ours):
    """Ours at the default config (what it launches by itself: the "ours" path, whose check and
    time it takes) and at each candidate: checked against ref, then timed (not under --smoke);
    the fastest first."""
    torch = env.torch
    from xpuinject_kernels.moe import moe

    rw, gu, dn, rule = weights
    path, cands = sweep_configs(env, tokens)
    default = launch_config(path, sets[0]["x"].device, sh["hidden"], sh["inter"], sh["experts"], sh["top_k"], tokens)
    out = dict(path=path, kernel=f"moe.{path}", default=dict(default), configs=[])
    seen = []
    for label, cfg in [("default", dict(default))] + [("candidate", c) for c in cands]:
        if cfg in seen:
            continue
        seen.append(cfg)
        ent = dict(label=label, config=cfg)
        out["configs"].append(ent)
        if label == "default" and "rel_err" in ours:
            ent.update({k: ours[k] for k in ("rel_err", "check_ok", "ms", "timer", "error") if k in ours})
            if ent.get("ms"):
                ent["GBps"] = active / (ent["ms"] * 1e-3) / 1e9
            continue

        def fn(s, cfg=cfg):
            return moe(s["x"], rw, gu, dn, sh["top_k"], rule, config=cfg)
        try:
            with torch.no_grad():
                got = fn(sets[0])
                ent["rel_err"] = benchlib.rel_err(env, got, ref)
                ent["check_ok"] = bool(ent["rel_err"] < benchlib.REL_TOL)
                del got
                if not env.smoke and ent["check_ok"]:
                    t = benchlib.time_calls(env, fn, sets)
                    ent.update(ms=t["us"] / 1e3, timer=t["timer"], GBps=active / (t["us"] * 1e-6) / 1e9,
                               x_roofline=t["us"] * 1e-6 / (active / ROOFLINE_BPS))
                    if env.bw:
                        ent["bw_frac"] = active / (t["us"] * 1e-6) / env.bw
        except Exception as e:  # noqa: BLE001 - a config that does not compile or fit is recorded
            ent["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
    timed = [c for c in out["configs"] if c.get("ms")]
    out["configs"].sort(key=lambda c: (c.get("ms") is None, c.get("ms") or 0.0))
    if timed:
        best = min(timed, key=lambda c: c["ms"])
        dms = next((c["ms"] for c in timed if c["label"] == "default"), None)
        out["best"] = dict(config=best["config"], ms=best["ms"], GBps=best["GBps"], default_ms=dms,
                           speedup_vs_default=(dms / best["ms"]) if dms else None)
    return out


def sweep_table(rows):
    """Per swept case: the best config beside the default one."""
    head = ["shape", "tokens", "path", "default ms (GB/s)", "best ms (GB/s)", "best / default", "best config",
            "configs ok / run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        sw = r.get("sweep")
        if not sw:
            continue
        ok = sum(1 for c in sw["configs"] if c.get("check_ok"))
        d = next((c for c in sw["configs"] if c["label"] == "default"), {})
        b = sw.get("best")
        dcell = f"{d['ms']:.4f} ({d['GBps']:.0f})" if d.get("ms") else ("ok" if d.get("check_ok") else "failed")
        bcell = f"{b['ms']:.4f} ({b['GBps']:.0f})" if b else "-"
        ratio = f"{b['speedup_vs_default']:.2f}x" if b and b.get("speedup_vs_default") else "-"
        conf = " ".join(f"{k}={v}" for k, v in b["config"].items()) if b else "-"
        lines.append(f"| {r['shape']} | {r['tokens']} | {sw['path']} | {dcell} | {bcell} | {ratio} | {conf} | "
                     f"{ok} / {len(sw['configs'])} |")
    return "\n".join(lines)


def tuned_entries(res, source=""):
    """The "tuned" entries of a sweep's results (written to `source`, a moe.json): each swept
    case's best config, keyed as moe.launch_config looks it up."""
    out = []
    for r in res["rows"]:
        b = (r.get("sweep") or {}).get("best")
        if not b:
            continue
        p = r["params"]
        tokens = 1 << (int(r["tokens"]) - 1).bit_length()
        key = dict(hidden=p["hidden"], inter=p["inter"], experts=p["experts"], top_k=p["top_k"], tokens=tokens)
        out.append(dict(kernel=r["sweep"]["kernel"], key=key, config=b["config"],
                        measured=dict(shape=f"{r['shape']} tokens {r['tokens']}", ms=round(b["ms"], 5),
                                      default_ms=round(b["default_ms"], 5) if b.get("default_ms") else None,
                                      GBps=round(b["GBps"], 1)),
                        date=res["env"].get("date_utc", "")[:10], command=res.get("command", ""), source=source))
    return out


def write_tuned(path, entries, device):
    """Merge entries into a per-GPU data file's "tuned" section: an entry of the same kernel and
    key is replaced, every other entry (and the routes) stays."""
    import routes  # this folder's routes.py: the data files' layout

    key = lambda e: (e["kernel"], json.dumps(e["key"], sort_keys=True))  # noqa: E731
    new = {key(e) for e in entries}
    routes.write_tuned(path, entries, device, keep=lambda e: key(e) not in new)


def cell(res, ours=False):
    if "error" in res:
        return "cannot run"
    if not res.get("check_ok", False):
        return f"check failed (rel err {res.get('rel_err', float('nan')):.2g})"
    if "ms" not in res:
        return f"ok ({res['rel_err']:.1e})"
    s = f"{res['ms']:.4f}" + ("*" if res.get("timer") != "graph" else "")
    if ours:
        frac = f", {100 * res['bw_frac']:.0f} %" if "bw_frac" in res else ""
        return f"{s} ({res['GBps']:.0f} GB/s{frac}, {res['x_roofline']:.2f}x roofline)"
    return f"{s} ({res['ratio']:.2f}x, {res['GBps']:.0f} GB/s)" if "ratio" in res else f"{s} ({res['GBps']:.0f} GB/s)"


def table(rows):
    head = ["shape", "tokens", "experts hit", "active MB", "roofline ms", "routing = stock",
            "ours ms (GB/s, % copy BW, x roofline)", "ours' routing ms", "grouped_mm ms (x, GB/s)",
            "grouped_mm compiled ms (x, GB/s)", "batched_mm ms (x, GB/s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        p = r["paths"]
        rt = f"{r['ours_routing_ms']:.4f}" if r.get("ours_routing_ms") else "-"
        lines.append(f"| {r['shape']} | {r['tokens']} | {r['experts_hit']:.1f} | {r['active_bytes'] / 1e6:.1f} | "
                     f"{r['roofline_ms']:.4f} | {100 * r['routing_match']:.0f} % | {cell(p['ours'], True)} | {rt} | "
                     f"{cell(p['grouped_mm'])} | {cell(p['grouped_mm_compiled'])} | {cell(p['batched_mm'])} |")
    notes = sorted({f"- {r['shape']} tokens {r['tokens']}, {k}: {v['error']}"
                    for r in rows for k, v in r["paths"].items() if "error" in v})
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as f:
            prev = json.load(f)
        entries = tuned_entries(prev, os.path.relpath(args.from_json, ROOT))
        if not entries:
            benchlib.log(f"[moe] {args.from_json}: no swept case has a timed best config (run with --sweep on a GPU)")
            return 1
        write_tuned(args.write_tuned, entries, prev.get("env", {}).get("device", ""))
        benchlib.log(f"[moe] {len(entries)} tuned configs written to {args.write_tuned}")
        return 0
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    env = benchlib.setup(SimpleNamespace(smoke=args.smoke, cache_dir=None, timer=args.timer, rep_ms=args.rep_ms),
                         competitors=False)
    if env is None:
        return 2
    torch = env.torch
    import transformers

    from xpuinject_kernels import packing
    from xpuinject_kernels.contract import packed_attr

    res = dict(command=" ".join([os.path.basename(sys.executable)] + sys.argv), env=benchlib.environment(env),
               transformers=transformers.__version__, experts_layout=args.experts_layout, rows=[])
    if not env.smoke:
        res["copy_bandwidth"] = benchlib.copy_bandwidth(env)
        env.bw = res["copy_bandwidth"]["copy_GBps"] * 1e9
    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    for name in args.shape_names:
        sh = shapes[name]
        m, cfg = block(env, sh)
        packing.pack(m, "SparseMoE")  # the layout the offline packer writes, from the block's weights
        rw, gu, dn = (getattr(m, packed_attr("SparseMoE", r))
                      for r in ("router_weight", "gate_up_weight", "down_weight"))
        nmajor, slab = args.experts_layout == "nmajor", args.slab if args.experts_layout == "blocked" else 0
        gu = packing.experts_layout("gate_up_weight", gu, nmajor, slab)
        dn = packing.experts_layout("down_weight", dn, nmajor, slab)
        if slab:
            benchlib.log(f"[moe] {name}: gate/up {tuple(gu.shape)}, down {tuple(dn.shape)}"
                         f"{'' if gu.dim() == dn.dim() == 4 else ' (a 3-D one as packed: its columns do not split)'}")
        for tokens in args.token_list:
            row = run_case(env, name, sh, tokens, (m, cfg, rw, gu, dn), sweep=args.sweep, profile=args.profile)
            res["rows"].append(row)
            p = row["paths"]
            benchlib.log(f"[moe +{time.time() - t0:.0f}s] {name} tokens {tokens}: " +
                         ", ".join(f"{k} {cell(v, k == 'ours')}" for k, v in p.items()))
            benchlib.write_atomic(os.path.join(args.out, "moe.json"), json.dumps(res, indent=1, default=str) + "\n")
        del m, rw, gu, dn
        if not env.smoke:
            torch.cuda.empty_cache()
    failed = [r for r in res["rows"] if not r["paths"]["ours"].get("check_ok")]
    # a candidate config that fails its check is a kernel bug (one that does not fit is only noted)
    failed += [r for r in res["rows"] for c in (r.get("sweep") or {}).get("configs", [])
               if "rel_err" in c and not c["check_ok"]]
    res["summary"] = dict(rows=len(res["rows"]), ours_failed=len(failed), wall_s=round(time.time() - t0, 1))
    md = (f"# MoE block: ours against transformers {transformers.__version__}'s experts "
          f"({'interpreter smoke, no timing' if env.smoke else res['env'].get('device', '?')})\n\n"
          f"command: `{res['command']}`  \ndate: {res['env']['date_utc']}  \n"
          + ("ours reads the experts N-major (--experts-layout nmajor)  \n" if args.experts_layout == "nmajor" else "")
          + (f"ours reads the experts blocked, {args.slab} columns a tile (--experts-layout blocked)  \n"
             if args.experts_layout == "blocked" else "")
          + "ms per call of the whole block (routing included), median; x = transformers' time / ours (> 1: ours "
          "faster); * = CUDA-graph capture failed, timed eagerly\n\n" + table(res["rows"]) + "\n"
          + ("\n## Launch config sweep (ours)\n\n" + sweep_table(res["rows"]) + "\n" if args.sweep else ""))
    benchlib.write_atomic(os.path.join(args.out, "moe.json"), json.dumps(res, indent=1, default=str) + "\n")
    benchlib.write_atomic(os.path.join(args.out, "moe.md"), md)
    benchlib.log(md)
    if args.write_tuned:
        entries = tuned_entries(res, os.path.relpath(os.path.join(args.out, "moe.json"), ROOT))
        write_tuned(args.write_tuned, entries, res["env"].get("device", ""))
        benchlib.log(f"[moe] {len(entries)} tuned configs written to {args.write_tuned}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
