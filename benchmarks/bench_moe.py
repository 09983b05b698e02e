#!/usr/bin/env python3
"""The fused MoE kernel against transformers' own experts, one sparse MoE block at a time.

    PYTHONPATH=kernels/python python3 benchmarks/bench_moe.py --out DIR \\
        [--shapes qwen3-30b-a3b,mixtral-8x7b] [--tokens 1,8,64,2048]
    ... --smoke     # CPU, TRITON_INTERPRET=1: tiny shapes, every path checked, nothing timed

Each case is one MoE block of a shape (SHAPES: router and experts as in the model's config.json)
built from transformers' own class (Qwen3MoeSparseMoeBlock, MixtralSparseMoeBlock) with random
weights, run on `tokens` tokens (batch 1). Paths, all routing included:
  ours        xpuinject_kernels.moe on the block's weights packed as the offline packer packs them
  grouped_mm  the block with experts_implementation "grouped_mm" (transformers/integrations/moe.py)
  batched_mm  the block with experts_implementation "batched_mm"
Before anything is timed each path's output is checked against the block's own experts loop
(experts_implementation "eager", the module's forward): ||out - ref|| / ||ref|| < 1e-2 (bf16
rounding; a routing choice that differed would move a token's row far more). Every path is then
timed by the same code (benchlib.time_calls: the calls captured in one CUDA graph, inputs rotating
over sets so each call routes its own tokens, median over replays). A path that cannot run at a
point (batched_mm copies each (token, expert) pair's weights: 2048 tokens of Mixtral would need
~1.4 TB) says why and has no figure.

Active bytes: the router, the distinct experts the set's tokens hit (gate, up and down weights,
read once) and the activations in and out; GB/s = those bytes / time, and a share of the device
copy bandwidth measured first. ratio = transformers' time / ours (> 1: ours faster).

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
PATHS = ("ours", "grouped_mm", "batched_mm")
SETS = 8  # input sets rotated through: each call routes other tokens, so other experts are read


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="folder for moe.json and moe.md")
    p.add_argument("--shapes", default="", help=f"comma-separated, of {', '.join(SHAPES)} (default: all)")
    p.add_argument("--tokens", default="", help="comma-separated token counts (default: 1,8,64,2048)")
    p.add_argument("--smoke", action="store_true", help="CPU, TRITON_INTERPRET=1: tiny shapes, checks only")
    p.add_argument("--rep-ms", type=float, default=200.0, help="device time to spend timing each path")
    args = p.parse_args(argv)
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


def run_case(env, name, sh, tokens, packed):
    """Check every path against the block's own experts loop, then time each (not under --smoke)."""
    torch = env.torch
    from xpuinject_kernels.moe import moe, route
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

    def ours(s):
        return moe(s["x"], rw, gu, dn, sh["top_k"], rule)

    def stock(impl):
        def fn(s):
            return m(s["x"])
        fn.impl = impl
        return fn

    fns = {"ours": ours, "grouped_mm": stock("grouped_mm"), "batched_mm": stock("batched_mm")}
    for path, fn in fns.items():
        res = row["paths"][path] = {}
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
    ours_ms = row["paths"]["ours"].get("ms")
    for path in PATHS:
        res = row["paths"][path]
        if res.get("ms"):
            res["GBps"] = row["active_bytes"] / (res["ms"] * 1e-3) / 1e9
            if env.bw:
                res["bw_frac"] = row["active_bytes"] / (res["ms"] * 1e-3) / env.bw
            if path != "ours" and ours_ms:
                res["ratio"] = res["ms"] / ours_ms
    return row


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
        return f"{s} ({res['GBps']:.0f} GB/s{frac})"
    return f"{s} ({res['ratio']:.2f}x)" if "ratio" in res else s


def table(rows):
    head = ["shape", "tokens", "experts hit", "active MB", "routing = stock", "ours ms (GB/s, % copy BW)",
            "grouped_mm ms (x)", "batched_mm ms (x)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        p = r["paths"]
        lines.append(f"| {r['shape']} | {r['tokens']} | {r['experts_hit']:.1f} | {r['active_bytes'] / 1e6:.1f} | "
                     f"{100 * r['routing_match']:.0f} % | {cell(p['ours'], True)} | {cell(p['grouped_mm'])} | "
                     f"{cell(p['batched_mm'])} |")
    notes = sorted({f"- {r['shape']} tokens {r['tokens']}, {k}: {v['error']}"
                    for r in rows for k, v in r["paths"].items() if "error" in v})
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv=None) -> int:
    args = parse_args(argv)
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
               transformers=transformers.__version__, rows=[])
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
        for tokens in args.token_list:
            row = run_case(env, name, sh, tokens, (m, cfg, rw, gu, dn))
            res["rows"].append(row)
            p = row["paths"]
            benchlib.log(f"[moe +{time.time() - t0:.0f}s] {name} tokens {tokens}: " +
                         ", ".join(f"{k} {cell(v, k == 'ours')}" for k, v in p.items()))
            benchlib.write_atomic(os.path.join(args.out, "moe.json"), json.dumps(res, indent=1, default=str) + "\n")
        del m, rw, gu, dn
        if not env.smoke:
            torch.cuda.empty_cache()
    failed = [r for r in res["rows"] if not r["paths"]["ours"].get("check_ok")]
    res["summary"] = dict(rows=len(res["rows"]), ours_failed=len(failed), wall_s=round(time.time() - t0, 1))
    md = (f"# MoE block: ours against transformers {transformers.__version__}'s experts "
          f"({'interpreter smoke, no timing' if env.smoke else res['env'].get('device', '?')})\n\n"
          f"command: `{res['command']}`  \ndate: {res['env']['date_utc']}  \n"
          "ms per call of the whole block (routing included), median; x = transformers' time / ours (> 1: ours "
          "faster); * = CUDA-graph capture failed, timed eagerly\n\n" + table(res["rows"]) + "\n")
    benchlib.write_atomic(os.path.join(args.out, "moe.json"), json.dumps(res, indent=1, default=str) + "\n")
    benchlib.write_atomic(os.path.join(args.out, "moe.md"), md)
    benchlib.log(md)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
