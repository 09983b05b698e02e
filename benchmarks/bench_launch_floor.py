#!/usr/bin/env python3
"""What a decode step's launches cost apart from their bytes, at the Qwen3-30B-A3B attention
projections, on a CUDA GPU: the fastest plain read of a projection's weight bytes, the same bytes
read in one launch or two, a tiny launch between two reads, and the GEMVs that read them (ours
and cuBLAS).

    PYTHONPATH=kernels/python python3 benchmarks/bench_launch_floor.py [--layers 48] [--replays 20]

Every sequence runs once per layer on that layer's own buffers (48 layers: nothing a model would
not find in L2 is served from it), all layers captured in one CUDA graph, timed by the same code
(benchlib.graph_us_per_layer), with and without programmatic dependent launch (PDL):
  read MB [P programs, BLOCK, stages]   a kernel that only sums the bytes: the floor of one launch
  read a + read b                       two launches, against one `read a+b` of the same bytes:
                                        what a launch boundary costs
  read a + tiny + read b                a one-program launch between them (a norm, a reduce)
  --early                               the second read loading its first blocks before its PDL
                                        wait, at grids of 1-4 programs an SM
  --barrier                             both reads in one persistent launch with a grid-wide
                                        barrier between them (and a one-program step between two
                                        barriers): whether a launch that spans a layer's
                                        dependent steps could beat a launch per step
  gemv / cuBLAS                         the projections themselves (gemv.py at its own config;
                                        torch.mm on the same K-major weight)
  --tma                                 the GEMV probe on K-major weights with its tiles loaded
                                        through host-side tensor descriptors (TMA on sm_90+)
                                        against the same tiles by pointer loads, at the attention
                                        projections and 8 of 128 experts' gate/up and down
The gap between a projection and the read floor of its bytes is what a better GEMV could win;
the gap between two launches and one is what fusing launches could win.
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
from xpuinject_kernels import _backend  # noqa: E402
from xpuinject_kernels.gemv import gemv  # noqa: E402

SHAPES = {"qkv": (2048, 5120), "o": (4096, 2048)}


@triton.jit
def _read_kernel(ptr, out, n, BLOCK: tl.constexpr, STAGES: tl.constexpr, PDL: tl.constexpr,
                 EARLY: tl.constexpr = 0):
    """Sum this program's contiguous share of n bf16 elements (one fp32 per program out).
    EARLY: the share's first EARLY blocks are loaded before the PDL wait (the bytes are no
    launch's output), so they stream while the launch ahead finishes."""
    pid = tl.program_id(0)
    per = tl.cdiv(tl.cdiv(n, tl.num_programs(0)), BLOCK) * BLOCK
    lo = pid * per
    hi = tl.minimum(lo + per, n)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for j in tl.static_range(EARLY):
        offs = lo + j * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(ptr + offs, mask=offs < hi, other=0.0).to(tl.float32)
    _backend.pdl_wait(PDL)
    for i in tl.range(lo + EARLY * BLOCK, hi, BLOCK, num_stages=STAGES):
        offs = i + tl.arange(0, BLOCK)
        acc += tl.load(ptr + offs, mask=offs < hi, other=0.0).to(tl.float32)
    tl.store(out + pid, tl.sum(acc))


@triton.jit
def _tile_kernel(x, w, o, K, N, stride_k, stride_n, K_PER, GEMV: tl.constexpr, NMAJOR: tl.constexpr,
                 BK: tl.constexpr, BN: tl.constexpr, STAGES: tl.constexpr, PDL: tl.constexpr,
                 ids=None, stride_e=0, BLOCKED: tl.constexpr = False):
    """A GEMV's access pattern over W: program (n tile, k split) reads its [K_PER, BN] slab in BK
    steps; the weight K-major ([K, N], N contiguous: the package's packing) or N-major ([N, K], K
    contiguous: nn.Linear's). GEMV: multiply by x[K] and add the fp32 partial into o[N]
    (atomically: a timing probe, not a kernel); else only sum what it read. ids: grid axis 2 picks
    an expert, W the expert's slab stride_e elements on (a decode token's experts). BLOCKED: W is
    [N / BN, K, BN], each column tile's K rows contiguous (a layout packed for this tile width), so
    a program's slab is one contiguous run of memory."""
    _backend.pdl_wait(PDL)
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    if ids is not None:
        w += tl.load(ids + tl.program_id(2)).to(tl.int64) * stride_e
    offs_n = pid_n * BN + tl.arange(0, BN)
    n_ok = offs_n < N
    k_lo = pid_k * K_PER
    k_hi = tl.minimum(k_lo + K_PER, K)
    if NMAJOR:
        acc = tl.zeros((BN, BK), dtype=tl.float32)
    else:
        acc = tl.zeros((BK, BN), dtype=tl.float32)
    for k0 in tl.range(k_lo, k_hi, BK, num_stages=STAGES):
        offs_k = k0 + tl.arange(0, BK)
        k_ok = offs_k < k_hi
        if NMAJOR:
            t = tl.load(w + offs_n[:, None] * stride_n + offs_k[None, :] * stride_k,
                        mask=n_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
            if GEMV:
                t = t * tl.load(x + offs_k, mask=k_ok, other=0.0).to(tl.float32)[None, :]
        elif BLOCKED:
            t = tl.load(w + pid_n.to(tl.int64) * K * BN + offs_k[:, None] * BN + tl.arange(0, BN)[None, :],
                        mask=k_ok[:, None] & n_ok[None, :], other=0.0).to(tl.float32)
            if GEMV:
                t = t * tl.load(x + offs_k, mask=k_ok, other=0.0).to(tl.float32)[:, None]
        else:
            t = tl.load(w + offs_k[:, None] * stride_k + offs_n[None, :] * stride_n,
                        mask=k_ok[:, None] & n_ok[None, :], other=0.0).to(tl.float32)
            if GEMV:
                t = t * tl.load(x + offs_k, mask=k_ok, other=0.0).to(tl.float32)[:, None]
        acc += t
    if NMAJOR:
        r = tl.sum(acc, axis=1)
    else:
        r = tl.sum(acc, axis=0)
    if GEMV:
        tl.atomic_add(o + offs_n, r, mask=n_ok)
    else:
        tl.store(o + pid_n * tl.num_programs(1) + pid_k, tl.sum(r))


@triton.jit
def _tma_tile_kernel(x, w_desc, o, K, N, K_PER, GEMV: tl.constexpr, BK: tl.constexpr, BN: tl.constexpr,
                     STAGES: tl.constexpr, PDL: tl.constexpr, ids=None):
    """_tile_kernel's K-major pattern with each [BK, BN] tile loaded through a tensor descriptor
    (one bulk copy a tile on sm_90+ instead of each thread's 16-byte loads). ids: w_desc is over
    [experts, K, N] and grid axis 2 picks an expert. K_PER is a multiple of BK that divides K, so
    no tile crosses into the next split."""
    _backend.pdl_wait(PDL)
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    n0 = pid_n * BN
    offs_n = n0 + tl.arange(0, BN)
    k_lo = pid_k * K_PER
    k_hi = tl.minimum(k_lo + K_PER, K)
    if ids is not None:
        e = tl.load(ids + tl.program_id(2))
    acc = tl.zeros((BK, BN), dtype=tl.float32)
    for k0 in tl.range(k_lo, k_hi, BK, num_stages=STAGES):
        if ids is not None:
            t = w_desc.load([e, k0, n0]).reshape(BK, BN).to(tl.float32)
        else:
            t = w_desc.load([k0, n0]).to(tl.float32)
        if GEMV:
            offs_k = k0 + tl.arange(0, BK)
            t = t * tl.load(x + offs_k, mask=offs_k < k_hi, other=0.0).to(tl.float32)[:, None]
        acc += t
    r = tl.sum(acc, axis=0)
    if GEMV:
        tl.atomic_add(o + offs_n, r, mask=offs_n < N)
    else:
        tl.store(o + pid_n * tl.num_programs(1) + pid_k, tl.sum(r))


@triton.jit
def _grid_barrier(cnt, nprog, spins, SPIN_MAX: tl.constexpr):
    """Every program of the grid arrives on cnt, then polls it until all have. The counter only
    grows (by nprog a pass), so a replayed graph needs no reset. A program that polls SPIN_MAX
    times gives up and counts itself in spins: a grid that cannot be resident at once then times
    wrong instead of hanging."""
    tl.debug_barrier()
    old = tl.atomic_add(cnt, 1, sem="acq_rel")
    target = (old // nprog + 1) * nprog
    cur = old + 1
    n = 0
    while (cur < target) & (n < SPIN_MAX):
        cur = tl.atomic_add(cnt, 0, sem="acquire")  # an atomic: a volatile load's poll was hoisted out
        n += 1
    if cur < target:
        tl.atomic_add(spins, 1)
    tl.debug_barrier()


@triton.jit
def _barrier_kernel(a, b, out, na, nb, cnt, spins, tx, ty, BLOCK: tl.constexpr, STAGES: tl.constexpr,
                    PDL: tl.constexpr, EARLY: tl.constexpr = 0, TINY: tl.constexpr = False,
                    TINY_N: tl.constexpr = 2048, SPIN_MAX: tl.constexpr = 1 << 16):
    """_read_kernel's share of a, a grid barrier, then its share of b, in one launch; TINY: program
    0 runs _tiny_kernel's work between two barriers (a norm or a reduce between two GEMVs). EARLY:
    the first EARLY blocks of b are loaded before the barrier (b is no step's output), as a fused
    layer could load the next GEMV's weights while the grid gathers. Every program must be
    resident at once: the grid is at most 2 programs an SM."""
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    per_a = tl.cdiv(tl.cdiv(na, P), BLOCK) * BLOCK
    lo_a = pid * per_a
    hi_a = tl.minimum(lo_a + per_a, na)
    per_b = tl.cdiv(tl.cdiv(nb, P), BLOCK) * BLOCK
    lo_b = pid * per_b
    hi_b = tl.minimum(lo_b + per_b, nb)
    _backend.pdl_wait(PDL)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in tl.range(lo_a, hi_a, BLOCK, num_stages=STAGES):
        offs = i + tl.arange(0, BLOCK)
        acc += tl.load(a + offs, mask=offs < hi_a, other=0.0).to(tl.float32)
    for j in tl.static_range(EARLY):
        offs = lo_b + j * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(b + offs, mask=offs < hi_b, other=0.0).to(tl.float32)
    _grid_barrier(cnt, P, spins, SPIN_MAX)
    if TINY:
        if pid == 0:
            t = tl.arange(0, TINY_N)
            tl.store(ty + t, (tl.load(tx + t).to(tl.float32) * 2).to(ty.dtype.element_ty))
        _grid_barrier(cnt + 1, P, spins, SPIN_MAX)
    for i in tl.range(lo_b + EARLY * BLOCK, hi_b, BLOCK, num_stages=STAGES):
        offs = i + tl.arange(0, BLOCK)
        acc += tl.load(b + offs, mask=offs < hi_b, other=0.0).to(tl.float32)
    tl.store(out + pid, tl.sum(acc))


@triton.jit
def _tiny_kernel(x, y, n, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """One program: y = x * 2 over n elements (a norm's size of work)."""
    _backend.pdl_wait(PDL)
    offs = tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n) * 2, mask=offs < n)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--layouts", action="store_true",
                    help="also a GEMV's access pattern at many tiles, on K-major, N-major and blocked weights")
    ap.add_argument("--experts", action="store_true",
                    help="also the same probe over 8 of 128 experts' gate/up and down slabs, K-major, N-major and "
                         "blocked")
    ap.add_argument("--pads", default="", help="also the GEMVs and K-major reads on weights whose rows are "
                    "padded by these many elements (comma-separated; 0 is the packed layout)")
    ap.add_argument("--early", action="store_true",
                    help="also two reads in two launches where the second loads its first blocks before its "
                         "PDL wait, at several grids: whether loads issued ahead of the wait hide a launch boundary")
    ap.add_argument("--nmajor", action="store_true",
                    help="also our GEMV on the N-major weights at its heuristic's config and a sweep")
    ap.add_argument("--tma", action="store_true",
                    help="also the K-major GEMV probe with tensor-descriptor (TMA) tile loads against pointer "
                         "loads, at the attention projections and the experts")
    ap.add_argument("--barrier", action="store_true",
                    help="also both reads in one launch with a grid barrier between them, against one launch "
                         "without it and two launches, at 1 and 2 programs an SM")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_launch_floor: needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    w = {k: [torch.randn(kk, n, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(a.layers)]
         for k, (kk, n) in SHAPES.items()}
    both = [torch.randn(w["qkv"][0].numel() + w["o"][0].numel(), device=dev, dtype=torch.bfloat16)
            for _ in range(a.layers)]
    x = {k: torch.randn(1, kk, device=dev, dtype=torch.bfloat16) for k, (kk, _) in SHAPES.items()}
    o = {k: torch.empty(1, n, device=dev, dtype=torch.bfloat16) for k, (_, n) in SHAPES.items()}
    sink = torch.empty(16 * sms, device=dev, dtype=torch.float32)
    tx = torch.randn(2048, device=dev, dtype=torch.bfloat16)
    ty = torch.empty_like(tx)

    def timed(seq):
        return benchlib.graph_us_per_layer(seq, a.layers, a.replays)

    def read(t, cfg, pdl):
        p, block, stages, warps = cfg
        _read_kernel[(p,)](t, sink, t.numel(), BLOCK=block, STAGES=stages, PDL=pdl, num_warps=warps,
                           **_backend.pdl_kw(pdl))

    def tiny(pdl):
        _tiny_kernel[(1,)](tx, ty, tx.numel(), BLOCK=2048, PDL=pdl, num_warps=1, **_backend.pdl_kw(pdl))

    rows = []
    pdl_dev = _backend.pdl(dev)
    cands = [(p * sms, block, stages, warps) for p in (1, 2, 4, 8) for block in (2048, 8192)
             for stages in (1, 3) for warps in (4, 8)]
    best = {}
    for name, bufs in (("qkv", w["qkv"]), ("o", w["o"]), ("qkv+o", both)):
        mb = bufs[0].numel() * 2 / 1e6
        res = []
        for cfg in cands:
            us = timed(lambda i: read(bufs[i], cfg, pdl_dev))
            res.append((us, cfg))
        res.sort()
        best[name] = res[0][1]
        for us, (p, block, stages, warps) in res[:6]:
            rows.append((f"read {name} [P {p // sms}x SMs, BLOCK {block}, stages {stages}, warps {warps}]", us, mb))
        rows.append((f"read {name}: slowest of {len(res)} configs", res[-1][0], mb))
    cfg = best["qkv+o"]
    mb_q, mb_o = w["qkv"][0].numel() * 2 / 1e6, w["o"][0].numel() * 2 / 1e6
    for pdl in sorted({False, pdl_dev}, reverse=True):
        tag = f"PDL {'on' if pdl else 'off'}"
        rows.append((f"{tag}: read qkv+o, one launch", timed(lambda i: read(both[i], cfg, pdl)), mb_q + mb_o))
        rows.append((f"{tag}: read qkv", timed(lambda i: read(w["qkv"][i], cfg, pdl)), mb_q))
        rows.append((f"{tag}: read o", timed(lambda i: read(w["o"][i], cfg, pdl)), mb_o))
        rows.append((f"{tag}: read qkv + read o", timed(lambda i: (read(w["qkv"][i], cfg, pdl),
                                                                   read(w["o"][i], cfg, pdl))), mb_q + mb_o))
        rows.append((f"{tag}: read qkv + tiny + read o", timed(lambda i: (read(w["qkv"][i], cfg, pdl), tiny(pdl),
                                                                          read(w["o"][i], cfg, pdl))), mb_q + mb_o))
        rows.append((f"{tag}: tiny", timed(lambda i: tiny(pdl)), 0))
    for k in SHAPES:
        mb = w[k][0].numel() * 2 / 1e6
        rows.append((f"gemv {k} (its own config)", timed(lambda i: gemv(x[k], w[k][i], None, None, o[k], "none")), mb))
        rows.append((f"cuBLAS {k} (torch.mm)", timed(lambda i: torch.mm(x[k], w[k][i], out=o[k])), mb))
    rows.append(("gemv qkv + gemv o", timed(lambda i: (gemv(x["qkv"], w["qkv"][i], None, None, o["qkv"], "none"),
                                                       gemv(x["o"], w["o"][i], None, None, o["o"], "none"))),
                 mb_q + mb_o))
    if a.early and pdl_dev:
        rows += early_rows(sms, w, both, sink, tx, ty, timed)
    if a.barrier:
        rows += barrier_rows(sms, w, both, sink, tx, ty, timed, pdl_dev)
    if a.layouts:
        rows += layout_rows(a, dev, sms, w, x, timed)
    if a.nmajor:
        rows += nmajor_rows(a, dev, w, x, o, timed)
    if a.pads:
        rows += pad_rows(a, dev, x, o, timed)
    if a.experts:
        rows += expert_rows(dev)
    if a.tma:
        rows += tma_rows(dev, w, x, timed)
    print(f"{torch.cuda.get_device_name(dev)}, {a.layers} layers, {sms} SMs; us per layer "
          f"(median of {a.replays} replays); GB/s of the bytes read")
    print(f"{'sequence':72} {'us':>8} {'GB/s':>7}")
    for name, us, mb in rows:
        print(f"{name:72} {us:8.2f}" + (f" {mb * 1e3 / us:7.0f}" if mb else ""))
    return 0


def early_rows(sms, w, both, sink, tx, ty, timed):
    """With PDL: read qkv then read o in two launches, the second loading 0, 1 or 2 blocks of its
    share before its wait, at grids of 1, 2 and 4 programs an SM (smaller grids leave room on each
    SM for the next launch's programs while the one ahead runs), against both in one launch; and
    with a one-program launch between them (a norm or a reduce), which the early loads cross too."""
    rows = []
    mb_q, mb_o = w["qkv"][0].numel() * 2 / 1e6, w["o"][0].numel() * 2 / 1e6

    def read(t, p, block, early, warps=4):
        _read_kernel[(p,)](t, sink, t.numel(), BLOCK=block, STAGES=3, PDL=True, EARLY=early, num_warps=warps,
                           launch_pdl=True)

    def tiny():
        _tiny_kernel[(1,)](tx, ty, tx.numel(), BLOCK=2048, PDL=True, num_warps=1, launch_pdl=True)

    for mult in (1, 2, 4):
        p = mult * sms
        for block in (2048, 8192):
            tag = f"[P {mult}x SMs, BLOCK {block}]"
            rows.append((f"early: read qkv+o, one launch {tag}", timed(lambda i: read(both[i], p, block, 0)), mb_q + mb_o))
            for early in (0, 1, 2):
                rows.append((f"early: read qkv + read o, o loads {early} blocks before its wait {tag}",
                             timed(lambda i: (read(w["qkv"][i], p, block, 0), read(w["o"][i], p, block, early))),
                             mb_q + mb_o))
            for early in (0, 2):
                rows.append((f"early: read qkv + tiny + read o, o loads {early} blocks early {tag}",
                             timed(lambda i: (read(w["qkv"][i], p, block, 0), tiny(),
                                              read(w["o"][i], p, block, early))), mb_q + mb_o))
    return rows


def barrier_read(a, b, sink, cnt, spins, tx, ty, p, block, pdl, early=0, tiny=False):
    """One _barrier_kernel launch of p programs over a then b (cnt: two int32 counters)."""
    _barrier_kernel[(p,)](a, b, sink, a.numel(), b.numel(), cnt, spins, tx, ty, BLOCK=block, STAGES=3, PDL=pdl,
                          EARLY=early, TINY=tiny, TINY_N=tx.numel(), num_warps=4, **_backend.pdl_kw(pdl))


def barrier_rows(sms, w, both, sink, tx, ty, timed, pdl):
    """read qkv then read o: in one launch with nothing between them (the floor), one launch with
    a grid barrier between them (loading 0 or 2 blocks of o before it), two launches; and with a
    one-program step between them, as two barriers in one launch against three launches. Grids of
    1 and 2 programs an SM, so every program is resident at once. A row whose barrier ever gave up
    says so (the grid was not resident at once: its time is not a barrier's)."""
    rows = []
    layers = len(both)
    mb_q, mb_o = w["qkv"][0].numel() * 2 / 1e6, w["o"][0].numel() * 2 / 1e6
    cnt = torch.zeros(layers, 2, device=both[0].device, dtype=torch.int32)  # each layer its own counters
    spins = torch.zeros(1, device=both[0].device, dtype=torch.int32)

    def read(t, p, block):
        _read_kernel[(p,)](t, sink, t.numel(), BLOCK=block, STAGES=3, PDL=pdl, num_warps=4, **_backend.pdl_kw(pdl))

    def tiny():
        _tiny_kernel[(1,)](tx, ty, tx.numel(), BLOCK=2048, PDL=pdl, num_warps=1, **_backend.pdl_kw(pdl))

    def fused(p, block, early=0, tiny_=False):
        def seq(i):
            barrier_read(w["qkv"][i], w["o"][i], sink, cnt[i], spins, tx, ty, p, block, pdl, early, tiny_)
        spins.zero_()
        us = timed(seq)
        return us, int(spins.item())

    for mult in (1, 2):
        p = mult * sms
        for block in (2048, 8192):
            tag = f"[P {mult}x SMs, BLOCK {block}, PDL {'on' if pdl else 'off'}]"
            rows.append((f"barrier: read qkv+o, one launch {tag}", timed(lambda i: read(both[i], p, block)), mb_q + mb_o))
            for early in (0, 2):
                us, gave_up = fused(p, block, early)
                note = f" (barrier gave up {gave_up}x: not resident at once)" if gave_up else ""
                rows.append((f"barrier: read qkv | barrier | read o, one launch, o loads {early} blocks early {tag}"
                             f"{note}", us, mb_q + mb_o))
            rows.append((f"barrier: read qkv + read o, two launches {tag}",
                         timed(lambda i: (read(w["qkv"][i], p, block), read(w["o"][i], p, block))), mb_q + mb_o))
            us, gave_up = fused(p, block, 0, True)
            note = f" (barrier gave up {gave_up}x: not resident at once)" if gave_up else ""
            rows.append((f"barrier: read qkv | barrier | tiny | barrier | read o, one launch {tag}{note}", us,
                         mb_q + mb_o))
            rows.append((f"barrier: read qkv + tiny + read o, three launches {tag}",
                         timed(lambda i: (read(w["qkv"][i], p, block), tiny(), read(w["o"][i], p, block))), mb_q + mb_o))
    return rows


def nmajor_rows(a, dev, w, x, o, timed):
    """gemv.py on the [K, N] view of each projection's N-major copy: its own config (the N-major
    heuristic, or a tuned one), each config of a sweep (the best six and the slowest), and both
    projections in sequence against the K-major pair."""
    rows = []
    wn = {k: [t.t().contiguous().t() for t in w[k]] for k in SHAPES}
    # one row: the EW path (the CUDA cores' multiply-add); BN 128 is a head a tile (the rope epilogue's)
    cands = [(bn, bk, sp, st, 4) for bn, bk in ((16, 128), (16, 256), (16, 512), (8, 512), (32, 128), (32, 256))
             for sp in (1, 2, 4, 8) for st in (1, 3)]
    cands += [(128, bk, sp, st, 8) for bk in (32, 64, 128) for sp in (1, 2, 4, 8) for st in (1, 3)]
    for k, (kk, n) in SHAPES.items():
        mb = kk * n * 2 / 1e6
        rows.append((f"gemv {k} N-major (its own config)",
                     timed(lambda i: gemv(x[k], wn[k][i], None, None, o[k], "none")), mb))
        res = []
        for bn, bk, sp, st, nw in cands:
            if kk // sp < bk:
                continue
            cfg = triton.Config({"BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": sp}, num_warps=nw, num_stages=st)
            res.append((timed(lambda i: gemv(x[k], wn[k][i], None, None, o[k], "none", config=cfg)), bn, bk, sp, st, nw))
        res.sort()
        for us, bn, bk, sp, st, nw in res[:6] + [res[-1]]:
            rows.append((f"gemv {k} N-major [BN {bn} BK {bk} split {sp} stages {st} warps {nw}]", us, mb))
        for us, bn, bk, sp, st, nw in [r for r in res if r[1] == 128][:3]:
            rows.append((f"gemv {k} N-major, a head a tile [BN {bn} BK {bk} split {sp} stages {st} warps {nw}]", us, mb))
    mb = sum(kk * n * 2 / 1e6 for kk, n in SHAPES.values())
    rows.append(("gemv qkv + gemv o, N-major", timed(lambda i: (gemv(x["qkv"], wn["qkv"][i], None, None, o["qkv"], "none"),
                                                                gemv(x["o"], wn["o"][i], None, None, o["o"], "none"))), mb))
    return rows


def expert_rows(dev, layers=8, experts=128, top_k=8):
    """_tile_kernel (the GEMV probe) over top_k random experts of each layer's [experts, K, N]
    slabs, at Qwen3-30B-A3B's expert shapes (gate/up K 2048, N 1536; down K 768, N 2048), the
    weights K-major and N-major, each at its best tile of a few: what the experts' layout would
    change at decode."""
    rows = []
    o32 = torch.zeros(1 << 16, device=dev, dtype=torch.float32)
    pdl = _backend.pdl(dev)
    gen = torch.Generator().manual_seed(0)
    ids = [torch.randperm(experts, generator=gen)[:top_k].to(dev) for _ in range(layers)]
    for name, kk, n in (("experts gate/up", 2048, 1536), ("experts down", 768, 2048)):
        mb = top_k * kk * n * 2 / 1e6
        ws = [torch.randn(experts, kk, n, device=dev, dtype=torch.bfloat16) for _ in range(layers)]
        xe = torch.randn(kk, device=dev, dtype=torch.bfloat16)
        for layout, tiles in (("K-major", [(64, 64), (32, 128), (64, 128)]), ("N-major", [(256, 16), (512, 8), (128, 32)]),
                              ("blocked", [(64, 64), (32, 128), (64, 128), (128, 64), (64, 256)])):
            nmajor, blocked = layout == "N-major", layout == "blocked"
            sk, sn = (1, kk) if nmajor else (n, 1)
            res = []
            for bk, bn in tiles:
                for split in (1, 2, 4):
                    k_per = triton.cdiv(triton.cdiv(kk, split), bk) * bk
                    if k_per < bk or triton.cdiv(kk, k_per) != split:
                        continue

                    def seq(i, bk=bk, bn=bn, k_per=k_per):
                        _tile_kernel[(triton.cdiv(n, bn), triton.cdiv(kk, k_per), top_k)](
                            xe, ws[i], o32, kk, n, sk, sn, k_per, GEMV=True, NMAJOR=nmajor, BK=bk, BN=bn, STAGES=3,
                            PDL=pdl, ids=ids[i], stride_e=kk * n, BLOCKED=blocked, num_warps=4, **_backend.pdl_kw(pdl))
                    res.append((benchlib.graph_us_per_layer(seq, layers, 20), bk, bn, split))
            res.sort()
            for us, bk, bn, split in res[:2]:
                rows.append((f"gemv {name} {layout} probe [BK {bk}, BN {bn}, split {split}]", us, mb))
    return rows


def tma_rows(dev, w, x, timed, layers=8, experts=128, top_k=8):
    """The K-major GEMV probe by pointer loads (_tile_kernel) and by tensor-descriptor loads
    (_tma_tile_kernel), the same tiles, splits, stages and warps, read-only and multiplying by x:
    the attention projections on each layer's weights, then 8 of 128 experts' gate/up and down
    slabs a layer. The best four of each, and the slowest. Multiplying by x only: the read-only
    pattern is the --layouts rows'."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    rows = []
    o32 = torch.zeros(1 << 16, device=dev, dtype=torch.float32)
    pdl = _backend.pdl(dev)
    tiles = [(64, 64), (32, 128), (64, 128), (128, 64), (64, 256)]
    gen = torch.Generator().manual_seed(0)
    cases = []
    for k, (kk, n) in SHAPES.items():
        cases.append((k, kk, n, w[k], None, x[k][0], timed))
    for name, kk, n in (("experts gate/up", 2048, 1536), ("experts down", 768, 2048)):
        ws = [torch.randn(experts, kk, n, device=dev, dtype=torch.bfloat16) for _ in range(layers)]
        ids = [torch.randperm(experts, generator=gen)[:top_k].to(dev).to(torch.int32) for _ in range(layers)]
        cases.append((name, kk, n, ws, ids, torch.randn(kk, device=dev, dtype=torch.bfloat16),
                      lambda seq: benchlib.graph_us_per_layer(seq, layers, 20)))
    for name, kk, n, bufs, ids, xv, tm in cases:
        mb = (top_k if ids is not None else 1) * kk * n * 2 / 1e6
        for gemv_ in (True,):
            res = {"pointer": [], "TMA": []}
            for bk, bn in tiles:
                descs = [TensorDescriptor.from_tensor(b, [1, bk, bn] if ids is not None else [bk, bn]) for b in bufs]
                for split in (1, 2, 4, 8):
                    k_per = kk // split
                    if kk % split or k_per % bk:
                        continue
                    grid = (triton.cdiv(n, bn), split) + ((top_k,) if ids is not None else ())
                    warps = 8 if bk * bn >= 16384 else 4
                    for stages in (3, 4):
                        def ptr(i, bk=bk, bn=bn, k_per=k_per, grid=grid, warps=warps, stages=stages):
                            _tile_kernel[grid](xv, bufs[i], o32, kk, n, n, 1, k_per, GEMV=gemv_, NMAJOR=False, BK=bk,
                                               BN=bn, STAGES=stages, PDL=pdl, ids=None if ids is None else ids[i],
                                               stride_e=kk * n, num_warps=warps, **_backend.pdl_kw(pdl))

                        def tma(i, bk=bk, bn=bn, k_per=k_per, grid=grid, warps=warps, stages=stages, descs=descs):
                            _tma_tile_kernel[grid](xv, descs[i], o32, kk, n, k_per, GEMV=gemv_, BK=bk, BN=bn,
                                                   STAGES=stages, PDL=pdl, ids=None if ids is None else ids[i],
                                                   num_warps=warps, **_backend.pdl_kw(pdl))
                        cfg = (bk, bn, split, stages, warps)
                        res["pointer"].append((tm(ptr), cfg))
                        res["TMA"].append((tm(tma), cfg))
            for how, r in res.items():
                r.sort()
                what = f"{'gemv' if gemv_ else 'read'} {name} K-major, {how}"
                for us, (bk, bn, split, stages, warps) in r[:4]:
                    rows.append((f"{what} [BK {bk}, BN {bn}, split {split}, stages {stages}, warps {warps}]", us, mb))
                rows.append((f"{what}: slowest of {len(r)}", r[-1][0], mb))
    return rows


def pad_rows(a, dev, x, o, timed):
    """Our GEMV (its own config and the sweep's best two) and the best K-major read tile on
    weights whose row stride is N + pad elements (the view [:, :N] of a wider buffer)."""
    rows = []
    o32 = torch.zeros(1 << 16, device=dev, dtype=torch.float32)
    pdl = _backend.pdl(dev)
    cfgs = {"qkv": [None, (64, 128, 4, 3), (128, 64, 8, 3)], "o": [None, (64, 128, 4, 4), (64, 256, 4, 3)]}
    for k, (kk, n) in SHAPES.items():
        mb = kk * n * 2 / 1e6
        for pad in (int(p) for p in a.pads.split(",")):
            wp = [(torch.randn(kk, n + pad, device=dev, dtype=torch.bfloat16) * 0.02)[:, :n] for _ in range(a.layers)]
            for c in cfgs[k]:
                cfg = None if c is None else triton.Config({"BLOCK_N": c[0], "BLOCK_K": c[1], "SPLIT_K": c[2]},
                                                           num_warps=4, num_stages=c[3])
                name = "own config" if c is None else f"BN {c[0]} BK {c[1]} split {c[2]} stages {c[3]}"
                rows.append((f"pad {pad}: gemv {k} [{name}]",
                             timed(lambda i: gemv(x[k], wp[i], None, None, o[k], "none", config=cfg)), mb))
            rows.append((f"pad {pad}: read {k} K-major [BK 64, BN 64, split 4]",
                         timed(lambda i: _tile_kernel[(triton.cdiv(n, 64), 4)](
                             x[k], wp[i], o32, kk, n, wp[i].stride(0), 1, kk // 4, GEMV=False, NMAJOR=False, BK=64, BN=64,
                             STAGES=3, PDL=pdl, num_warps=4, **_backend.pdl_kw(pdl))), mb))
    return rows


def layout_rows(a, dev, sms, w, x, timed):
    """The _tile_kernel sweep: the best tiles of each (projection, read or GEMV, layout), and
    cuBLAS on the N-major weight (F.linear's own layout)."""
    rows = []
    o32 = torch.zeros(1 << 16, device=dev, dtype=torch.float32)
    pdl = _backend.pdl(dev)
    kmajor_tiles = [(64, 64), (32, 128), (16, 256), (128, 64), (64, 128), (32, 256), (16, 512), (8, 512)]
    nmajor_tiles = [(512, 8), (256, 16), (1024, 4), (512, 16), (1024, 8), (256, 32), (2048, 2), (2048, 4)]
    for k, (kk, n) in SHAPES.items():
        mb = kk * n * 2 / 1e6
        wn = [t.t().contiguous() for t in w[k]]  # [N, K]
        for layout, tiles in (("K-major", kmajor_tiles), ("N-major", nmajor_tiles), ("blocked", kmajor_tiles)):
            nmajor, blocked = layout == "N-major", layout == "blocked"
            bufs = wn if nmajor else w[k]
            sk, sn = (1, kk) if nmajor else (n, 1)
            for gemv_ in (False, True):
                res = []
                for bk, bn in tiles:
                    for split in (1, 2, 4, 8, 16):
                        k_per = triton.cdiv(triton.cdiv(kk, split), bk) * bk
                        progs = triton.cdiv(n, bn) * triton.cdiv(kk, k_per)
                        if k_per < bk or progs > 4096 or triton.cdiv(kk, k_per) != split:
                            continue
                        warps = 8 if bk * bn >= 8192 else 4

                        def seq(i, bk=bk, bn=bn, k_per=k_per, warps=warps):
                            _tile_kernel[(triton.cdiv(n, bn), triton.cdiv(kk, k_per))](
                                x[k], bufs[i], o32, kk, n, sk, sn, k_per, GEMV=gemv_, NMAJOR=nmajor, BK=bk, BN=bn,
                                STAGES=3, PDL=pdl, BLOCKED=blocked, num_warps=warps, **_backend.pdl_kw(pdl))
                        res.append((timed(seq), bk, bn, split, progs))
                res.sort()
                what = f"{'gemv' if gemv_ else 'read'} {k} {layout}"
                for us, bk, bn, split, progs in res[:4]:
                    rows.append((f"{what} [BK {bk}, BN {bn}, split {split}: {progs} programs]", us, mb))
                rows.append((f"{what}: slowest of {len(res)}", res[-1][0], mb))
        rows.append((f"cuBLAS {k} N-major (F.linear)",
                     timed(lambda i: torch.nn.functional.linear(x[k], wn[i])), mb))
    return rows


if __name__ == "__main__":
    sys.exit(main())
