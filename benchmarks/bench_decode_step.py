#!/usr/bin/env python3
"""The decode step on a GPU: each kernel it runs, and the whole step, against the paths users have.

    PYTHONPATH=kernels/python:harness/python python3 benchmarks/bench_decode_step.py --out DIR \\
        [--shapes 1b,8b] [--batches 1,8] [--parts kernels,model,profile] [--steps 100]
    ... --smoke     # CPU, TRITON_INTERPRET=1: a tiny shape, every part's code runs, nothing is timed

kernels: every kernel of one decode step at Llama-3.2-1B's and Llama-3.1-8B's shapes, M = batch
tokens, against what the unfused / vendor path runs for the same work (cuBLAS, SDPA with
`enable_gqa`, SDPA on K/V repeated per head -- the copies that route implies are charged to it --,
RoPE + two `index_copy_` cache writes). Each case runs as in the model: one call per decoder layer
on that layer's own weights and cache (so nothing is served from L2 that a model would not get),
captured in a CUDA graph and replayed; time per call and GB/s of the fewest bytes the work moves
(weights and K/V up to the cache's filled length read once, outputs written once), and that as a
share of the device-to-device copy bandwidth measured first. Each GEMM also runs every decode
launch config of gemv.py with --sweep, so the table says which config each shape wants.

model: a random-weight model of each shape built in memory, the package's layers bound by
`kernelize` (they pack the model's own weights), timed by the eval's own latency code
(harness/python/latency.py: every path the same loop) on stock compiled (the anchor), stock
graph, injected graph and injected compiled; the injected model under each route set (which
sub-operations go to cuBLAS / SDPA), so a route is priced with the glue it implies.

profile: torch.profiler over eager injected decode steps: device time per kernel.

Writes DIR/decode-step.json as each part ends, and prints the tables last.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "kernels" / "python"), str(ROOT / "harness" / "python")]
PKG = str(ROOT / "kernels" / "python" / "xpuinject_kernels")

SHAPES = {
    "1b": dict(hidden=2048, inter=8192, layers=16, heads=32, kv=8, head_dim=64, vocab=128256, tie=True),
    "8b": dict(hidden=4096, inter=14336, layers=32, heads=32, kv=8, head_dim=128, vocab=128256, tie=False),
    "tiny": dict(hidden=128, inter=96, layers=2, heads=4, kv=2, head_dim=32, vocab=512, tie=False),
}
CTX = 512  # prompt tokens before the timed steps (the eval's decode context)
# gemv.py launch configs the kernels part sweeps: (BLOCK_N, BLOCK_K) tiles x K splits
GEMV_TILES = ((64, 128), (128, 64), (64, 256), (32, 256))
GEMV_SPLITS = (1, 2, 4, 8, 16, 32)

T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------------------


class Timer:
    """Time per call of fn(i) over a model's layers i = 0..n-1: captured once in a CUDA graph,
    replayed, device events (the decode step runs these kernels inside a graph)."""

    def __init__(self, torch, device, smoke):
        self.torch, self.device, self.smoke = torch, device, smoke

    def __call__(self, fn, layers, reps=20):
        if self.smoke:
            for i in range(layers):  # the calls run; there is nothing to time on the CPU
                fn(i)
            return None
        from benchlib import graph_us_per_layer

        return graph_us_per_layer(fn, layers, reps)


def copy_bandwidth(torch, device):
    x = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(10):
        y.copy_(x)
    b.record()
    b.synchronize()
    return 2 * x.numel() * 10 / (a.elapsed_time(b) * 1e-3)


def kernel_cases(torch, sh, M, device, smoke, sweep=False):
    """(name, variants {label: fn(i)}, bytes, check) for one shape and batch M: every kernel of the
    decode step on per-layer data."""
    from xpuinject_kernels import attention, rmsnorm, rope, rope_cache
    from xpuinject_kernels.gemm import gemm

    dt = torch.bfloat16
    L = sh["layers"] if not smoke else 2
    H, KV, D, hid, inter = sh["heads"], sh["kv"], sh["head_dim"], sh["hidden"], sh["inter"]
    bucket = 1024 if not smoke else 64
    length = CTX + 49 if not smoke else 37  # filled slots when a step runs
    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(dt).to(device)

    cases = []
    # --- GEMMs: per-layer K-major weights
    x_h = rnd(M, hid)
    for name, K, N, epi in (("qkv_proj", hid, (H + 2 * KV) * D, "none"), ("o_proj", H * D, hid, "none"),
                            ("gate_up_proj", hid, 2 * inter, "swiglu"), ("down_proj", inter, hid, "residual")):
        ws = [rnd(K, N, scale=K ** -0.5) for _ in range(L)]
        x = x_h if K == hid else rnd(M, K)
        res = rnd(M, N)
        n_out = N // 2 if epi == "swiglu" else N
        byt = K * N * 2 + M * K * 2 + M * n_out * 2 + (M * N * 2 if epi == "residual" else 0)

        def cublas(i, ws=ws, x=x, res=res, epi=epi):
            y = torch.matmul(x, ws[i])
            if epi == "swiglu":
                a, b = y.chunk(2, dim=-1)
                return torch.nn.functional.silu(a) * b
            return y + res if epi == "residual" else y

        r_of = lambda epi, res: res if epi == "residual" else None  # noqa: E731
        variants = {"cuBLAS": cublas,
                    "ours": lambda i, ws=ws, x=x, res=res, epi=epi: gemm(x, ws[i], residual=r_of(epi, res), epilogue=epi),
                    # the tiled kernel (no split-K) that decode GEMMs took before gemv.py
                    "ours tiled": lambda i, ws=ws, x=x, res=res, epi=epi: gemm(
                        x, ws[i], residual=r_of(epi, res), epilogue=epi, use_descriptors=False)}
        if sweep and not smoke:
            import triton

            from xpuinject_kernels import gemv

            n_out = N // 2 if epi == "swiglu" else N
            for bn, bk in GEMV_TILES:
                for split in GEMV_SPLITS:
                    if split * bk > K:
                        continue
                    cfg = triton.Config({"BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split}, num_warps=4, num_stages=3)

                    def run(i, ws=ws, x=x, res=res, epi=epi, cfg=cfg, n_out=n_out):
                        o = torch.empty(x.shape[0], n_out, dtype=x.dtype, device=x.device)
                        return gemv.gemv(x, ws[i], None, r_of(epi, res), o, epi, cfg)

                    variants[f"gemv {bn}x{bk} split{split}"] = run
        cases.append((f"{name} K={K} N={N}", variants, byt, "cuBLAS"))

    # --- attention over a static cache bucket, filled to `length`
    ks = [rnd(M, KV, bucket, D) for _ in range(L)]
    vs = [rnd(M, KV, bucket, D) for _ in range(L)]
    q = rnd(M, H, 1, D)
    counter = torch.tensor(length, device=device)
    mask = torch.zeros(M, 1, 1, bucket, dtype=torch.bool, device=device)
    mask[..., :length] = True
    scale = 1 / math.sqrt(D)
    rep = H // KV

    def sdpa_repeat(i):
        k = ks[i][:, :, None].expand(M, KV, rep, bucket, D).reshape(M, H, bucket, D)
        v = vs[i][:, :, None].expand(M, KV, rep, bucket, D).reshape(M, H, bucket, D)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)

    variants = {
        "SDPA gqa": lambda i: torch.nn.functional.scaled_dot_product_attention(
            q, ks[i], vs[i], attn_mask=mask, scale=scale, enable_gqa=True),
        "SDPA repeat_kv": sdpa_repeat,
        "ours": lambda i: attention.decode_attention(q, ks[i], vs[i], scaling=scale, kv_lens=counter, key_mask=mask),
        "ours no mask": lambda i: attention.decode_attention(q, ks[i], vs[i], scaling=scale, kv_lens=counter),
    }
    for n_split in ((2, 4, 8, 16, 32) if sweep else ()):  # the split count sets a step's parallelism
        variants[f"ours splits={n_split}"] = (lambda i, n_split=n_split: attention.decode_attention(
            q, ks[i], vs[i], scaling=scale, kv_lens=counter, key_mask=mask, num_splits=n_split))
    cases.append((f"attention decode L={length}/{bucket}", variants,
                  2 * M * KV * length * D * 2 + 2 * M * H * D * 2, "SDPA repeat_kv"))

    # --- RoPE + cache write (the 0-d counter is read, not advanced: the case repeats the same slot)
    qkv = rnd(M, 1, (H + 2 * KV) * D)
    qv, kv_, vv = qkv.split([H * D, KV * D, KV * D], dim=-1)
    qv, kv_, vv = qv.view(M, 1, H, D), kv_.view(M, 1, KV, D), vv.view(M, 1, KV, D)
    cos, sin = rnd(1, 1, D), rnd(1, 1, D)
    pos = torch.tensor([length], device=device)

    def unfused(i):
        qr, kr = rope.apply_rope(qv.transpose(1, 2), kv_.transpose(1, 2), cos, sin)
        ks[i].index_copy_(2, pos, kr)
        vs[i].index_copy_(2, pos, vv.transpose(1, 2))
        return qr

    cases.append(("rope + cache write", {
        "rope + index_copy x2": unfused,
        "ours fused": lambda i: rope_cache.rope_cache_write(qv, kv_, vv, cos, sin, ks[i], vs[i], counter),
    }, 2 * M * (H + 2 * KV) * D * 2, "rope + index_copy x2"))

    # --- token selection over the vocabulary: the runtime's greedy step (argmax + bookkeeping)
    from xpuinject_kernels import greedy

    V = sh["vocab"]
    logits = rnd(M, V)
    st = dict(unfinished=torch.ones(M, dtype=torch.bool, device=device), n_gen=torch.zeros((), dtype=torch.long, device=device),
              out=torch.zeros(M, 4 * L + 8, dtype=torch.long, device=device), cur=torch.zeros((), dtype=torch.long, device=device),
              pad=torch.zeros((), dtype=torch.long, device=device), eos=torch.full((4,), -1, dtype=torch.long, device=device),
              tok=torch.zeros(M, 1, dtype=torch.long, device=device))

    def torch_select(i):
        st["cur"].zero_()
        nxt = logits.float().argmax(-1)
        alive = st["unfinished"]
        st["n_gen"].add_(alive.any().long())
        nxt = torch.where(alive, nxt, st["pad"])
        st["out"].index_copy_(1, (st["cur"] + 1).view(1), nxt[:, None])
        st["unfinished"].logical_and_(~(nxt[:, None] == st["eos"][None, :]).any(-1))
        st["tok"].copy_(nxt[:, None])
        st["cur"].add_(1)

    def fused_select(i):
        st["cur"].zero_()
        greedy.greedy_select(logits, **st)

    cases.append((f"greedy select V={V}", {"torch ops": torch_select, "ours": fused_select}, M * V * 2, "torch ops"))

    # --- norms
    w = rnd(hid)
    r = rnd(M, hid)
    cases.append((f"rms_norm H={hid}", {
        "torch": lambda i: (x_h.float() * torch.rsqrt(x_h.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(dt) * w,
        "ours": lambda i: rmsnorm.rms_norm(x_h, w, 1e-5)}, 2 * M * hid * 2 + hid * 2, "torch"))
    cases.append((f"add_rms_norm H={hid}", {
        "ours": lambda i: rmsnorm.add_rms_norm(x_h, r, w, 1e-5)}, 4 * M * hid * 2 + hid * 2, None))
    return cases, L


def run_kernels(torch, args, device, res):
    timer = Timer(torch, device, args.smoke)
    bw = None if args.smoke else copy_bandwidth(torch, device)
    res["copy_bandwidth_Bps"] = bw
    rows = res.setdefault("kernels", [])
    for shape in args.shapes:
        for M in args.batches:
            cases, layers = kernel_cases(torch, SHAPES[shape], M, device, args.smoke, args.sweep)
            for name, variants, nbytes, base in cases:
                row = {"shape": shape, "M": M, "case": name, "bytes": nbytes, "us": {}, "base": base}
                for label, fn in variants.items():
                    try:
                        row["us"][label] = timer(fn, layers)
                    except Exception as e:  # one variant failing must not cost the table
                        row["us"][label] = None
                        row.setdefault("errors", {})[label] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                        log(f"{shape} M={M} {name} {label}: {row['errors'][label]}")
                rows.append(row)
                if not args.smoke:
                    log(kernel_line(row, bw))


def kernel_line(row, bw):
    parts = []
    for label, us in row["us"].items():
        if us is None:
            parts.append(f"{label} failed")
            continue
        gbs = row["bytes"] / (us * 1e-6) / 1e9
        parts.append(f"{label} {us:.1f}us {gbs:.0f}GB/s {100 * gbs * 1e9 / bw:.0f}%")
    return f"{row['shape']} M={row['M']} {row['case']}: " + "; ".join(parts)


# ---------------------------------------------------------------------------------------------
# whole model
# ---------------------------------------------------------------------------------------------


def build(torch, transformers, sh, device, layers=None):
    cfg = transformers.LlamaConfig(
        hidden_size=sh["hidden"], intermediate_size=sh["inter"], num_hidden_layers=layers or sh["layers"],
        num_attention_heads=sh["heads"], num_key_value_heads=sh["kv"], head_dim=sh["head_dim"],
        vocab_size=sh["vocab"], max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=sh["tie"],
        bos_token_id=0, eos_token_id=1,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    )
    torch.manual_seed(0)
    with torch.device(device):
        m = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.uniform_(0.8, 1.2)
    return m.to(torch.bfloat16).eval(), cfg


# Route sets: which decode sub-operations go to cuBLAS / SDPA (M <= 64 tokens), bound on the
# injected model's modules.
ROUTE_SETS = {
    "planned": (("qkv_proj", "o_proj", "attention-decode"), ("down_proj",)),  # cuBLAS GEMMs and SDPA
    "gemms-cublas": (("qkv_proj", "o_proj"), ("down_proj",)),  # our attention, cuBLAS GEMMs
    "all-ours": ((), ()),
    "qkv-cublas": (("qkv_proj",), ()),  # ours for o and down (gemv.py at M <= 16)
    "shipped": None,  # what gpus/h200.json routes for the shape, as the planner matches it
}


def shipped_routes(sh):
    """(attention routes, MLP routes) the shipped gpus/h200.json gives the shape's modules: GEMM
    routes by name, K and N within their token class, attention routes by head_dim."""
    from benchlib import token_classes

    with open(os.path.join(PKG, "gpus", "h200.json"), encoding="utf-8") as f:
        routes = json.load(f)["routes"]
    bounds = {name: (lo, hi or None) for name, (lo, hi) in token_classes().items()}
    bounds[None] = (0, None)
    h, kv, d, hid, inter = sh["heads"], sh["kv"], sh["head_dim"], sh["hidden"], sh["inter"]
    shapes = {"qkv_proj": (hid, (h + 2 * kv) * d), "o_proj": (h * d, hid), "down_proj": (inter, hid),
              "gate_up_proj": (hid, 2 * inter)}
    attn, mlp = [], []
    for r in routes:
        if r.get("gemm"):
            if shapes.get(r["gemm"]) == (r["k"], r["n"]):
                (mlp if r["gemm"] in ("down_proj", "gate_up_proj") else attn).append((r["op"], *bounds[r.get("tokens")]))
        elif d in r.get("head_dims", ()):
            attn.append((r["op"], 0, None))
    return tuple(attn), tuple(mlp)


def set_routes(model, routes, vendor_attr, sh):
    """Bind a route set (ROUTE_SETS value; None: shipped_routes of shape sh) on the modules."""
    if routes is None:
        attn_ops, mlp_ops = shipped_routes(sh)
    else:
        attn_ops, mlp_ops = (tuple((op, 0, None) if op.startswith("attention") else (op, 1, 64) for op in ops)
                             for ops in routes)
    for mod in model.modules():
        cls = type(mod).__name__
        ops = attn_ops if cls.endswith("Attention") else mlp_ops if cls.endswith("MLP") else None
        if ops is not None:
            setattr(mod, vendor_attr, ops)


def run_model(torch, transformers, args, device, res):
    import latency as L
    from xpuinject_kernels import _backend, decoder, kernelize
    from xpuinject_kernels import runtime as rt
    from xpuinject_kernels.contract import VENDOR_ATTR

    out = res.setdefault("model", [])
    for shape in args.shapes:
        sh = SHAPES[shape]
        stock, cfg = build(torch, transformers, sh, device, 2 if args.smoke else None)
        injected = copy.deepcopy(stock)
        kernelize(injected, use_kernels=False)
        paths = L.Paths(stock, injected, rt, {})
        if args.smoke:
            paths.compile = lambda fn: fn
        n = 3 if args.smoke else args.steps
        ctx = 16 if args.smoke else CTX
        cache_len = rt.cache_bucket(ctx + 2 * L.WARMUP + n + 1)
        for B in args.batches:
            ids = torch.randint(0, cfg.vocab_size, (B, ctx), generator=torch.Generator().manual_seed(B)).to(device)
            row = {"shape": shape, "batch": B, "context": ctx, "cache_len": cache_len, "steps": n, "ms": {}, "setup_s": {}}
            todo = [(p, None) for p in ("stock_compiled", "stock_graph") if p in args.stock]
            todo += [(f"injected_graph[{r}]", r) for r in args.routes]
            todo += [(f"injected_compiled[{r}]", r) for r in args.compiled_routes]
            # each injected row again with the add + RMSNorm in the gate/up GEMV, and without
            # programmatic dependent launch
            base_rows = [(label, r) for label, r in todo if r is not None]
            if args.fuse_norm:
                todo += [(f"{label[:-1]}+fused-norm]", r) for label, r in base_rows]
            if args.no_pdl:
                todo += [(f"{label[:-1]}+no-pdl]", r) for label, r in base_rows]
            fuse_was, pdl_was = decoder.FUSE_DECODE_NORM, _backend.PDL_ENABLED
            for label, routes in todo:
                path = label.split("[")[0]
                decoder.FUSE_DECODE_NORM = label.endswith("+fused-norm]")
                _backend.PDL_ENABLED = pdl_was and not label.endswith("+no-pdl]")
                if args.smoke and path.endswith("graph"):
                    path = path.replace("graph", "eager")
                if routes is not None:
                    set_routes(injected, ROUTE_SETS[routes], VENDOR_ATTR, sh)
                    # recompile: the routes are Python state dynamo guards on
                    paths._decoders.pop((path, paths.experts), None)
                t = time.time()
                try:
                    ms, setup = L.decode_point(paths, path, ids, cfg, cache_len, n)
                except Exception as e:
                    ms, setup = None, None
                    row.setdefault("errors", {})[label] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                    log(f"{shape} b{B} {label}: {row['errors'][label]}")
                row["ms"][label] = ms
                row["setup_s"][label] = setup
                log(f"{shape} b{B} {label}: {ms if ms is None else round(ms, 3)} ms/token ({time.time() - t:.1f}s)")
                torch.cuda.empty_cache() if device.type == "cuda" else None
            decoder.FUSE_DECODE_NORM, _backend.PDL_ENABLED = fuse_was, pdl_was
            base = row["ms"].get("stock_compiled")
            row["ratios"] = {k: v / base for k, v in row["ms"].items() if isinstance(v, float) and isinstance(base, float)}
            out.append(row)
            save(args, res)
        if "profile" in args.parts:
            set_routes(injected, None, VENDOR_ATTR, sh)
            fuse_was, decoder.FUSE_DECODE_NORM = decoder.FUSE_DECODE_NORM, args.fuse_norm or decoder.FUSE_DECODE_NORM
            profile(torch, args, device, injected, cfg, shape, res, rt)
            decoder.FUSE_DECODE_NORM = fuse_was
        del stock, injected, paths
        if device.type == "cuda":
            torch.cuda.empty_cache()


def profile(torch, args, device, model, cfg, shape, res, rt):
    """Device time per kernel over eager decode steps of the injected model on its planned
    routes (with the fused decode norm under --fuse-norm)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    from xpuinject_kernels import decoder

    rows = res.setdefault("profile", [])
    for B in args.batches:
        ids = torch.randint(0, cfg.vocab_size, (B, CTX if not args.smoke else 16)).to(device)
        r = rt.Runtime(model, graphs=False)
        steps = 5
        gen = r.start(ids, max_new_tokens=steps + 3, eos_token_id=[])
        gen.step()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with prof(activities=acts) as p:
            for _ in range(steps):
                gen.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
        r.release()
        table = p.key_averages().table(sort_by="device_time_total" if device.type == "cuda" else "cpu_time_total",
                                       row_limit=25, max_name_column_width=70)
        rows.append({"shape": shape, "batch": B, "steps": steps, "fused_norm": decoder.FUSE_DECODE_NORM, "table": table})
        log(f"profile {shape} b{B} ({steps} eager steps):\n{table}")


# ---------------------------------------------------------------------------------------------


def save(args, res):
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "decode-step.json").write_text(json.dumps(res, indent=1, default=str))


def summary(res) -> str:
    lines = []
    bw = res.get("copy_bandwidth_Bps")
    if bw:
        lines.append(f"copy bandwidth {bw / 1e9:.0f} GB/s")
    for row in res.get("kernels", []):
        if bw:
            lines.append(kernel_line(row, bw))
    for row in res.get("model", []):
        ms = ", ".join(f"{k} {v:.3f}" for k, v in row["ms"].items() if isinstance(v, float))
        rat = ", ".join(f"{k} {v:.2f}x" for k, v in row.get("ratios", {}).items() if k != "stock_compiled")
        lines.append(f"model {row['shape']} b{row['batch']}: {ms} ms/token | vs stock_compiled: {rat}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default="1b,8b")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--parts", default="kernels,model,profile")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--routes", default="planned,gemms-cublas,all-ours", help="route sets for injected_graph")
    ap.add_argument("--compiled-routes", default="gemms-cublas", help="route sets for injected_compiled")
    ap.add_argument("--stock", default="stock_compiled,stock_graph", help="stock paths of the model part")
    ap.add_argument("--sweep", action="store_true", help="kernels part: every gemv config and split count too")
    ap.add_argument("--no-pdl", action="store_true",
                    help="model part: each injected row also without programmatic dependent launch")
    ap.add_argument("--fuse-norm", action="store_true",
                    help="model part: each injected row also with the add + RMSNorm in the gate/up GEMV")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    args.shapes = ["tiny"] if args.smoke else args.shapes.split(",")
    args.batches = [int(b) for b in args.batches.split(",")]
    args.parts = args.parts.split(",")
    args.stock = [p for p in args.stock.split(",") if p]
    args.routes = [r for r in args.routes.split(",") if r]
    args.compiled_routes = [r for r in args.compiled_routes.split(",") if r]
    for r in args.routes + args.compiled_routes:
        if r not in ROUTE_SETS:
            ap.error(f"unknown route set {r!r} (want {', '.join(ROUTE_SETS)})")
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    import transformers

    from xpuinject_kernels import apply_interpreter_fixes

    apply_interpreter_fixes()
    device = torch.device("cpu" if args.smoke else "cuda")
    res = {"args": vars(args), "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
           "torch": torch.__version__, "transformers": transformers.__version__}
    if "kernels" in args.parts:
        run_kernels(torch, args, device, res)
        save(args, res)
    if "model" in args.parts:
        run_model(torch, transformers, args, device, res)
    save(args, res)
    print(summary(res))


if __name__ == "__main__":
    main()
