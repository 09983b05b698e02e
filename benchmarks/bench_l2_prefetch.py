#!/usr/bin/env python3
"""Whether a decode GEMV's weights asked into L2 ahead of it make it faster, at the Qwen3-30B-A3B
attention projections, on a CUDA GPU; and each projection at every gemv launch config (--sweep).

    PYTHONPATH=kernels/python python3 benchmarks/bench_l2_prefetch.py [--layers 48] [--busy-us 4,8] \
        [--sweep | --sweep-only]

A decode step alternates weight streams with latency-bound kernels (RoPE and the cache write,
attention, the router) during which HBM idles. Each sequence below runs once per layer on that
layer's own weights (48 layers: nothing is served from L2 that a model would not get), all
layers captured in one CUDA graph with programmatic dependent launch as the package launches,
timed by the same code (CUDA events around replays, median), and reported per layer:
  gemv                    the projection alone (gemv.py, its own launch config)
  busy                    a kernel that holds its programs for --busy-us and touches no memory,
                          standing in for the latency-bound kernels between weight streams
  busy + gemv             the two, as a step runs them now
  prefetch + busy (+ gemv)  a prefetch launch of the projection's weights first
  ... + stream            the MoE experts' 75 MB read between (evict_first or evict_normal loads),
                          to see whether the prefetched lines survive it
  gemv BLOCK_N .. (--sweep)  the projection alone at each launch config (--sweep-only: these
                          and the projection alone, no prefetch rows)
Prints one table; the gain is (busy + gemv) - (prefetch + busy + gemv). On the H200 it was
negative (BENCHMARKS.md), so the package's decode layers issue no prefetch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kernels" / "python"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import benchlib  # noqa: E402  (this folder is on sys.path when run as a script)
import tune  # noqa: E402
from xpuinject_kernels import _backend  # noqa: E402
from xpuinject_kernels.gemv import gemv  # noqa: E402

SHAPES = {"qkv": (2048, 5120, "none"), "o": (4096, 2048, "none")}
STREAM_BYTES = 75 << 20  # the 8 experts a Qwen3-30B-A3B token hits: gate/up and down


@triton.jit
def _globaltimer():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _busy_kernel(ns, PDL: tl.constexpr):
    _backend.pdl_wait(PDL)
    t0 = _globaltimer()
    t = t0
    while t - t0 < ns:
        t = _globaltimer()


@triton.jit
def _prefetch_kernel(ptr, nbytes, PDL: tl.constexpr, BLOCK: tl.constexpr = 512):
    """Ask L2 for this program's share of the nbytes at ptr in 128-byte lines
    (`prefetch.global.L2::evict_last`, PTX ISA "prefetch": a hint nothing waits for), then the
    PDL wait, so the launch may start while the kernel before it runs."""
    lines = (nbytes + 127) // 128
    per = (lines + tl.num_programs(0) - 1) // tl.num_programs(0)
    lo = tl.program_id(0) * per
    hi = tl.minimum(lo + per, lines)
    base = ptr.to(tl.pointer_type(tl.int8))
    for l0 in range(lo, hi, BLOCK):
        offs = tl.minimum(l0 + tl.arange(0, BLOCK), hi - 1).to(tl.int64)
        tl.inline_asm_elementwise("prefetch.global.L2::evict_last [$1]; // dummy $0", "=r,l",
                                  [base + offs * 128], dtype=tl.int32, is_pure=False, pack=1)
    _backend.pdl_wait(PDL)


@triton.jit
def _stream_kernel(ptr, out, n, FIRST: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    _backend.pdl_wait(PDL)
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(pid * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = i + tl.arange(0, BLOCK)
        if FIRST:
            v = tl.load(ptr + offs, mask=offs < n, other=0.0, eviction_policy="evict_first")
        else:
            v = tl.load(ptr + offs, mask=offs < n, other=0.0)
        acc += v.to(tl.float32)
    tl.store(out + pid, tl.sum(acc))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--busy-us", default="4,8")
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--sweep-only", action="store_true", help="the projections alone and the --sweep rows")
    ap.add_argument("--sweep", action="store_true", help="also each projection alone at each gemv config "
                    "of benchmarks/tune.py's decode list (GEMV), at 3 and 4 stages")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_l2_prefetch: needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    pdl = _backend.pdl(dev)
    kw = _backend.pdl_kw(pdl)
    x = {k: torch.randn(1, s[0], device=dev, dtype=torch.bfloat16) for k, s in SHAPES.items()}
    w = {k: [torch.randn(s[0], s[1], device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(a.layers)]
         for k, s in SHAPES.items()}
    o = {k: torch.empty(1, s[1], device=dev, dtype=torch.bfloat16) for k, s in SHAPES.items()}
    streams = [torch.randn(STREAM_BYTES // 2, device=dev, dtype=torch.bfloat16) for _ in range(a.layers)]
    sink = torch.empty(4 * sms, device=dev, dtype=torch.float32)

    def busy(us):
        _busy_kernel[(sms,)](int(us * 1000), PDL=pdl, num_warps=4, **kw)

    def prefetch(t):
        _prefetch_kernel[(sms,)](t, t.numel() * t.element_size(), PDL=pdl, num_warps=4, **kw)

    def stream(t, first):
        _stream_kernel[(4 * sms,)](t, sink, t.numel(), FIRST=first, BLOCK=2048, PDL=pdl, num_warps=8, **kw)

    def proj(k, i, cfg=None):
        gemv(x[k], w[k][i], None, None, o[k], SHAPES[k][2], config=cfg)

    def timed(seq):
        """Per-layer microseconds of seq(i) over every layer (benchlib.graph_us_per_layer)."""
        return benchlib.graph_us_per_layer(seq, a.layers, a.replays)

    def prefetch_rows(rows, k, mb):
        rows.append((k, "prefetch + gemv", timed(lambda i: (prefetch(w[k][i]), proj(k, i))), mb))
        for us in (float(u) for u in a.busy_us.split(",")):
            b = f"busy {us:g} us"
            rows.append((k, b, timed(lambda i: busy(us)), 0))
            rows.append((k, f"prefetch + {b}", timed(lambda i: (prefetch(w[k][i]), busy(us))), 0))
            rows.append((k, f"{b} + gemv", timed(lambda i: (busy(us), proj(k, i))), mb))
            rows.append((k, f"prefetch + {b} + gemv", timed(lambda i: (prefetch(w[k][i]), busy(us), proj(k, i))), mb))
        us = float(a.busy_us.split(",")[-1])
        b = f"busy {us:g} us"
        for first in (True, False):
            s = "stream evict_first" if first else "stream evict_normal"
            rows.append((k, f"{b} + {s} + gemv",
                         timed(lambda i: (busy(us), stream(streams[i], first), proj(k, i))), mb))
            rows.append((k, f"prefetch + {b} + {s} + gemv",
                         timed(lambda i: (prefetch(w[k][i]), busy(us), stream(streams[i], first), proj(k, i))), mb))
            rows.append((k, f"{b} + {s}", timed(lambda i: (busy(us), stream(streams[i], first))), 0))

    rows = []
    for k in SHAPES:
        mb = w[k][0].numel() * 2 / 1e6
        rows.append((k, "gemv", timed(lambda i: proj(k, i)), mb))
        if not a.sweep_only:
            prefetch_rows(rows, k, mb)
        if a.sweep or a.sweep_only:
            for bn, bk, sp, nw, st in [(bn, bk, sp, nw, st) for bn, bk, sp, nw, _ in tune.GEMV for st in (3, 4)]:
                cfg = triton.Config({"BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": sp}, num_warps=nw, num_stages=st)
                rows.append((k, f"gemv BLOCK_N {bn} BLOCK_K {bk} SPLIT_K {sp} stages {st}",
                             timed(lambda i: proj(k, i, cfg)), mb))
    print(f"{torch.cuda.get_device_name(dev)}, {a.layers} layers, PDL {pdl}; us per layer (median of {a.replays} replays)")
    from xpuinject_kernels.gemv import launch_config
    for k, (kk, n, epi) in SHAPES.items():
        c = launch_config("cuda", dev, epi, 1, n, kk, n, (torch.bfloat16,) * 3 + (None,))
        print(f"{k}: gemv's own config {c.kwargs} warps {c.num_warps} stages {c.num_stages}")
    print(f"{'proj':5} {'sequence':55} {'us':>8}")
    for k, name, us, mb in rows:
        print(f"{k:5} {name:55} {us:8.2f}" + (f"   ({mb:.1f} MB)" if mb else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
