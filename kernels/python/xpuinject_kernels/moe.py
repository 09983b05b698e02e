"""Fused sparse mixture-of-experts: routing on the device, then SwiGLU experts over only the
experts the tokens picked.

    out[t] = sum_j  w[t, j] * down_e( silu(gate_e(x[t])) * up_e(x[t]) ),   e = ids[t, j]

Weights, packed offline (inject/plan/rules_moe.go): router [H, E] K-major; gate_up [E, H, 2I],
each expert's K-major [gate | up]; down [E, I, H], each expert's K-major down projection.
The kernels read the experts by their strides (the packed K-major layout, or N-major [K, N] views)
or blocked ([E, N / S, K, S]: each tile of S columns one contiguous run, `blocked`).

Routing (transformers 5.17 Qwen3MoeTopKRouter, MixtralTopKRouter): logits = x @ router in fp32
from programs over (token tile, 16-expert tile), each tile's last one to finish running the fp32
softmax over all the experts of its tokens, then the top-k, so ties resolve exactly as torch.topk
resolves them on the device: on CUDA that last program selects them itself (largest first,
equal scores by lowest index, the set CUDA's torch.topk selects), and for a prefill makes their
routing weights too, where torch.topk and four torch ops would follow it; elsewhere torch.topk
runs on the probabilities. The chosen probabilities are renormalized to sum
1 ("softmax-topk-norm", Mixtral's "softmax-topk-norm-fp32") or not ("softmax-topk"); the Qwen3
rules round the weights to the activation dtype as the stock router does, Mixtral's keeps them
fp32. The logits are rounded to the activation dtype before the softmax, as the stock router's
F.linear rounds them, so from the same activations the kernel picks stock's experts, ties included
(one expert swapped moves a block's output far more than any rounding: 0.3 of max error on the
qwen3_moe fixture from one near-tied token). Nothing syncs with the host and nothing has a
data-dependent shape (no nonzero), so a decode step can be captured in a graph.

Two expert paths, both reading only the experts hit:
  decode (tokens <= DECODE_MAX_TOKENS): at decode the cost is streaming the hit experts' weights,
      so the grid spreads them over the GPU as gemv.py does: one program per (token, slot),
      column tile and K split runs a 16-row tl.dot (row 0 the token's) on bf16 weight tiles;
      the split that finishes last for a tile (a per-tile semaphore) sums the splits in split
      order and applies SwiGLU. The down kernel likewise stores per (pair, split) fp32 partials
      of its column tile, and the token's program that finishes last sums them in (slot, split)
      order, each slot scaled by its routing weight (renormalized and rounded there, as `route`
      does it), and rounds the row once: deterministic, no atomics on data, no sort. A residual
      given to `moe` is added there too (the decoder layer's add after the block). A config's
      DOWN_ALL instead gives each (token, column tile) one down program that runs the token's
      slots one after another and sums them as that finishing program does: no partials, no
      semaphore, the same bits.
  prefill: the (token, slot) pairs are grouped by expert on the device (a histogram and prefix
      sum, then per-expert atomic cursors: two launches) and laid out in BLOCK_M-row blocks, each
      block one expert's (padded with -1); a grouped GEMM over the blocks (tl.dot; GROUP_BLOCKS
      row blocks at a time through every column tile, for L2 reuse) computes
      gate/up with the SwiGLU epilogue, and a second one the down projection with the routing
      weight in its epilogue, written to the pair's own row; one launch sums the top_k rows of
      each token in slot order in fp32 and rounds once (and adds the residual). The block count is a static bound
      (cdiv(pairs, BLOCK_M) + experts); blocks past the last one exit at once. BLOCK_M follows
      the rows an expert gets on average (pairs / experts).
Launch constants come from a `config=` argument (sweeps), else the GPU's tuned entries
(gpus/<gpu>.json, kernels "moe.decode" and "moe.prefill"), else a heuristic from the shape
(`launch_config`). The decode launches use programmatic dependent launch where the GPU has it.
The SwiGLU product is rounded to the activation dtype (as the stock expert's is) before the down
projection; every GEMM accumulates in fp32.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from . import _backend, _ops, gpus
from .rmsnorm import rows_rstd

__all__ = ["ROUTERS", "DECODE_MAX_TOKENS", "CONFIG_KEYS", "CONFIG_FLAGS", "moe", "add_rms_norm_moe", "moe_ref", "route",
           "blocked", "unblocked",
           "decode_route", "fused_topk", "route_ref", "launch_config", "heuristic_config"]

# The routing rules (models/moe.go's Router* names, which plans record).
ROUTERS = ("softmax-topk", "softmax-topk-norm", "softmax-topk-norm-fp32")
# Largest token count the decode path runs (GEMV programs, one per token and slot).
DECODE_MAX_TOKENS = 8
# About how many programs the router's decode launch spreads the hidden size over (split-K).
ROUTER_PROGRAMS = 64
# Warps of a router program at decode sizes where launches overlap (PDL). With one, the programs
# waiting on the launch ahead likely hold fewer of its SMs' slots (PDL off, the router's own time
# did not move); on the H200 the Qwen3-30B-A3B decode step was 0.628 ms against 0.632 at 4
# (benchmarks/profile_decode.py, two rounds each, BENCHMARKS.md), though ptxas reports a 4-byte
# spill at 255 registers for the add + RMSNorm form. Elsewhere 4, as before.
ROUTER_DECODE_WARPS_PDL = 1

# The decode router's two latency cuts: each program's weight tile loaded before the PDL wait (its
# split one K step), and the top-k by one sort of the keys instead of TOP_K reductions in a chain.
# Together they took the Qwen3-30B-A3B-shaped decode step from 0.8030 to 0.7989 ms on an H100
# (benchmarks/ab_step.py, two rounds each, BENCHMARKS.md). XPUINJECT_ROUTER_W_EARLY and
# XPUINJECT_ROUTER_SORT_TOPK = 0 turn them off.
ROUTER_W_EARLY = _backend.env_switch("XPUINJECT_ROUTER_W_EARLY") is not False
ROUTER_SORT_TOPK = _backend.env_switch("XPUINJECT_ROUTER_SORT_TOPK") is not False
# Largest weight tile (elements) a router program loads before its wait; a deeper split loops as before.
ROUTER_EARLY_ELEMS = 8192

_ACT_DTYPES = (torch.bfloat16, torch.float16)


@triton.jit
def _router_kernel(x_ptr, w_ptr, p_ptr, ws_ptr, sem_ptr, ids_ptr, vals_ptr, r_ptr, nw_ptr, s_ptr, n_ptr, T, H, E,
                   K_PER_SPLIT, stride_x, stride_w, stride_p, stride_r, eps, BLOCK_T: tl.constexpr,
                   BLOCK_K: tl.constexpr, BLOCK_E: tl.constexpr,
                   BLOCK_ALL: tl.constexpr, SPLIT_K: tl.constexpr, TOP_K: tl.constexpr = 0,
                   RULE: tl.constexpr = -1, TOPK_P2: tl.constexpr = 1, PDL: tl.constexpr = False,
                   ROWS_T: tl.constexpr = 16, NORM: tl.constexpr = False, BLOCK_H: tl.constexpr = 16,
                   W_EARLY: tl.constexpr = False, SORT_TOPK: tl.constexpr = False):
    """Logits of BLOCK_T tokens for BLOCK_E experts over one K_PER_SPLIT slice of the hidden size
    (a tl.dot tile); the token tile's last program to finish sums the SPLIT_K slices in order,
    rounds the logits and runs the fp32 softmax over all the experts of its tokens in place, or
    with TOP_K > 0 selects each token's TOP_K experts from it (ids, probabilities; largest
    first, equal scores by lowest index) and writes only those: the probabilities themselves
    (RULE -1, for a kernel that applies the rule later), or the routing weights by RULE (0:
    rounded to the activation dtype; 1: renormalized over the TOP_K, then rounded; 2:
    renormalized, fp32), the sum in slot order, the division IEEE's as torch's. The last program
    works on ROWS_T rows (every token of the tile: fewer than BLOCK_T at decode), so its chain
    of reductions runs over the tokens there are, not the dot's padding.
    NORM: x is the attention's output and r the residual stream; the router's input is the
    post-attention add + RMSNorm of add_rms_norm (Llama's order: s = x + r rounded, normalized in
    fp32, rounded, times the weight nw, rounded), each program taking its rows' sums of squares
    over all H in BLOCK_H chunks; the programs of the first expert tile write s (s_ptr) and the
    normalized rows (n_ptr), [T, H] each, for the experts' kernels.
    W_EARLY: the split is one BLOCK_K step, and the program loads its weight tile before the PDL
    wait (the weights are no launch's output), so only the activations' read follows the launch
    ahead. SORT_TOPK: the top-k by one sort of the keys instead of TOP_K reductions in a chain;
    the same set, in the same order."""
    pid_t = tl.program_id(0)
    pid_e = tl.program_id(1)
    pid_s = tl.program_id(2)
    offs_e = pid_e * BLOCK_E + tl.arange(0, BLOCK_E)
    e_ok = offs_e < E
    k_lo = pid_s * K_PER_SPLIT
    k_hi = tl.minimum(k_lo + K_PER_SPLIT, H)
    if W_EARLY:
        offs_k = k_lo + tl.arange(0, BLOCK_K)
        w_early = tl.load(w_ptr + offs_k.to(tl.int64)[:, None] * stride_w + offs_e[None, :],
                          mask=(offs_k < k_hi)[:, None] & e_ok[None, :], other=0.0)
    _backend.pdl_wait(PDL)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = offs_t < T
    rows = offs_t.to(tl.int64)
    wty = w_ptr.dtype.element_ty
    aty = x_ptr.dtype.element_ty
    acc = tl.zeros((BLOCK_T, BLOCK_E), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < k_hi
        if W_EARLY:
            w = w_early
        else:
            # the weight tile first: with NORM its loads stream while the rows' norm is summed
            w = tl.load(w_ptr + offs_k.to(tl.int64)[:, None] * stride_w + offs_e[None, :],
                        mask=k_ok[:, None] & e_ok[None, :], other=0.0)
        xm = t_ok[:, None] & k_ok[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_x + offs_k[None, :], mask=xm, other=0.0)
        if NORM:
            # The rows' rstd over all H (ROWS_T rows: the tile's tokens, in BLOCK_H chunks), then
            # spread over the dot's BLOCK_T rows. The launcher makes the split one BLOCK_K step,
            # so this runs once; summed before the loop, it held the weight's loads back (1.5x
            # the router's time on the H200, benchmarks/bench_fused_norm.py).
            rstd = rows_rstd(x_ptr, r_ptr, pid_t * BLOCK_T, T, H, stride_x, stride_r, eps, ROWS_T, BLOCK_T, BLOCK_H,
                             True)
            sv = (x.to(tl.float32) + tl.load(r_ptr + rows[:, None] * stride_r + offs_k[None, :], mask=xm,
                                             other=0.0).to(tl.float32)).to(aty)
            nv = (sv.to(tl.float32) * rstd[:, None]).to(aty).to(tl.float32)
            x = (tl.load(nw_ptr + offs_k, mask=k_ok, other=0.0).to(tl.float32)[None, :] * nv).to(aty)
            out_at = rows[:, None] * H + offs_k[None, :]
            tl.store(s_ptr + out_at, sv, mask=xm & (pid_e == 0))
            tl.store(n_ptr + out_at, x, mask=xm & (pid_e == 0))
        acc = tl.dot(x.to(wty), w, acc)
    if SPLIT_K == 1:
        # Rounded to the activation dtype first, as the stock router's F.linear output is: from the
        # same activations the experts picked are then stock's, near-ties included.
        acc = acc.to(x_ptr.dtype.element_ty).to(tl.float32)
        tl.store(p_ptr + rows[:, None] * stride_p + offs_e[None, :], acc, mask=t_ok[:, None] & e_ok[None, :])
    else:  # this slice's fp32 partial logits: ws [SPLIT_K, T, E]
        part = ws_ptr + (pid_s * T + rows[:, None]) * E + offs_e[None, :]
        tl.store(part, acc, mask=t_ok[:, None] & e_ok[None, :])
    tl.debug_barrier()
    arrived = tl.atomic_add(sem_ptr + pid_t, 1)
    if arrived == tl.num_programs(1) * SPLIT_K - 1:
        _select_topk(p_ptr, ws_ptr, ids_ptr, vals_ptr, pid_t, T, E, stride_p, x_ptr.dtype.element_ty, BLOCK_T, ROWS_T,
                     BLOCK_ALL, SPLIT_K, TOP_K, RULE, TOPK_P2, SORT_TOPK)
        tl.atomic_xchg(sem_ptr + pid_t, 0)


@triton.jit
def _select_topk(p_ptr, ws_ptr, ids_ptr, vals_ptr, pid_t, T, E, stride_p, aty: tl.constexpr, BLOCK_T: tl.constexpr,
                 ROWS_T: tl.constexpr, BLOCK_ALL: tl.constexpr, SPLIT_K: tl.constexpr, TOP_K: tl.constexpr,
                 RULE: tl.constexpr, TOPK_P2: tl.constexpr, SORT_TOPK: tl.constexpr):
    """The router's finishing step for token tile pid_t, once every split has stored its logits:
    the rounded logits (p, SPLIT_K 1) or the splits' fp32 partials (ws [SPLIT_K, T, E]) summed in
    split order and rounded, the fp32 softmax over all the experts, then the probabilities in
    place (TOP_K 0) or the top-k ids and values by RULE (_router_kernel says how)."""
    # the tile's tokens, ROWS_T of them (every token of the tile: fewer than BLOCK_T at decode)
    tr = pid_t * BLOCK_T + tl.arange(0, ROWS_T)
    tr_ok = tr < T
    trow = tr.to(tl.int64)
    offs = tl.arange(0, BLOCK_ALL)
    ok = tr_ok[:, None] & (offs < E)[None, :]
    tile = p_ptr + trow[:, None] * stride_p + offs[None, :]
    if SPLIT_K == 1:
        logits = tl.load(tile, mask=ok, other=float("-inf"), cache_modifier=".cg")
    else:
        # the slices in a fixed order, so a token's logits (and experts) do not vary by run
        logits = tl.zeros((ROWS_T, BLOCK_ALL), dtype=tl.float32)
        for s in tl.static_range(SPLIT_K):
            logits += tl.load(ws_ptr + (s * T + trow[:, None]) * E + offs[None, :], mask=ok, other=0.0,
                              cache_modifier=".cg")
        logits = tl.where(ok, logits.to(aty).to(tl.float32), float("-inf"))
    m = tl.where(tr_ok, tl.max(logits, axis=1), 0.0)  # rows past T: no -inf - -inf
    ex = tl.where(ok, tl.exp(logits - m[:, None]), 0.0)
    probs = ex / tl.where(tr_ok, tl.sum(ex, axis=1), 1.0)[:, None]
    if TOP_K == 0:
        tl.store(tile, probs, mask=ok)
    else:
        # CUDA's torch.topk selects this set: every score above the k-th, then those equal to
        # it by lowest index (aten/src/ATen/native/cuda/TensorTopK.cu, gatherTopK). One key
        # per expert orders both ways at once, so each pick is one reduction: a probability
        # is >= 0, so its bits order as int32 do; below them the index, reversed.
        pbits = probs.to(tl.int32, bitcast=True).to(tl.int64)
        key = tl.where(ok, (pbits << 32) | (BLOCK_ALL - 1 - offs)[None, :], -1)
        out = trow * TOP_K
        slots = tl.arange(0, TOPK_P2)
        picked = tl.zeros((ROWS_T, TOPK_P2), dtype=tl.float32)
        total = tl.zeros((ROWS_T,), dtype=tl.float32)
        if SORT_TOPK:
            # every key sorted, largest first (keys are distinct: the index is in them); the
            # first TOP_K columns are the picks, in slot order. tl.sort, not tl.topk: the XPU
            # backend's Triton has no topk.
            top = tl.sort(key, dim=1, descending=True)
            tk_ok = tr_ok[:, None] & (offs < TOP_K)[None, :]
            at = out[:, None] + offs[None, :]
            tl.store(ids_ptr + at, (BLOCK_ALL - 1 - (top & 0xFFFFFFFF)).to(tl.int32), mask=tk_ok)
            ranked = (top >> 32).to(tl.int32).to(tl.float32, bitcast=True)
            if RULE < 0:
                tl.store(vals_ptr + at, ranked, mask=tk_ok)
            else:
                for j in tl.static_range(TOP_K):  # slot order, as the chain sums them
                    v = tl.sum(tl.where(offs[None, :] == j, ranked, 0.0), axis=1)
                    picked = tl.where(slots[None, :] == j, v[:, None], picked)
                    total += v
        else:
            for j in tl.static_range(TOP_K):
                best = tl.max(key, axis=1)
                idx = (BLOCK_ALL - 1 - (best & 0xFFFFFFFF)).to(tl.int32)
                val = (best >> 32).to(tl.int32).to(tl.float32, bitcast=True)
                tl.store(ids_ptr + out + j, idx, mask=tr_ok)
                if RULE < 0:
                    tl.store(vals_ptr + out + j, val, mask=tr_ok)
                else:
                    picked = tl.where(slots[None, :] == j, val[:, None], picked)
                    total += val
                key = tl.where(key == best[:, None], -1, key)
        if RULE >= 0:
            wts = picked
            if RULE != 0:  # IEEE division, as torch divides (Triton's `/` is div.full.f32)
                wts = tl.math.div_rn(wts, tl.where(tr_ok, total, 1.0)[:, None])
            if RULE != 2:
                wts = wts.to(aty).to(tl.float32)
            tl.store(vals_ptr + out[:, None] + slots[None, :], wts, mask=tr_ok[:, None] & (slots < TOP_K)[None, :])


@triton.jit
def _cols(offs_n, stride_wn, stride_wt, SLAB: tl.constexpr):
    """Element offsets of weight columns offs_n within an expert's slab: strided (SLAB 0: K-major
    or N-major, column n at n * stride_wn) or blocked (column n in tile n // SLAB, stride_wt
    apart, at n % SLAB within it)."""
    if SLAB > 0:
        cols = (offs_n // SLAB).to(tl.int64) * stride_wt + (offs_n % SLAB) * stride_wn
    else:
        cols = offs_n * stride_wn
    return cols


@triton.jit
def _ew_step(acc, rows, w_ok, xv):
    """EW: one [BLOCK_K, BLOCK_N] weight tile times the token's K slice xv (fp32), multiply-added
    into an fp32 accumulator of the tile's shape on the CUDA cores and reduced over K once, after
    the loop, instead of a 16-row tl.dot whose 15 zero rows the tensor cores multiply for nothing
    (gemv.py's EW path on nn.Linear's layout). bf16 x bf16 products are exact in fp32. The loop
    takes EW_STAGES (the launch's stages) itself: its loads feed no dot, which the pipeliner would
    leave as plain loads."""
    return acc + tl.load(rows, mask=w_ok, other=0.0).to(tl.float32) * xv[:, None]


@triton.jit
def _decode_gate_up_kernel(x_ptr, ids_ptr, w_ptr, act_ptr, ws_ptr, sem_ptr, H, I, TOP_K, K_PER_SPLIT,
                           stride_x, stride_we, stride_wk, stride_wn, stride_act,
                           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
                           PDL: tl.constexpr = False, EW: tl.constexpr = False, EW_STAGES: tl.constexpr = None,
                           stride_wt=0, SLAB: tl.constexpr = 0, TMA: tl.constexpr = False, w_desc=None,
                           BLOCK_PTR: tl.constexpr = False):
    """gate/up of one (token, slot) pair's expert for BLOCK_N columns over one K split, as a
    16-row tl.dot (row 0 the token's, the rest zeros), or EW (_ew_step); the split that finishes
    last sums the splits in split order and writes silu(gate) * up. TMA: the dot's weight tiles
    come through w_desc, a host-side descriptor over the K-major [E, H, 2I] weights with a
    [1, BLOCK_K, BLOCK_N] box (rows past H load as zeros; a gate tile's columns past I are up's,
    computed and never stored). BLOCK_PTR: the same tiles through block pointers over the expert's
    [H, 2I] slab (_backend.weight_block_ptr)."""
    _backend.pdl_wait(PDL)
    pair = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    tok = (pair // TOP_K).to(tl.int64)
    e = tl.load(ids_ptr + pair).to(tl.int64)
    wty = w_ptr.dtype.element_ty
    offs_m = tl.arange(0, 16)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < I
    k_lo = pid_k * K_PER_SPLIT
    k_hi = tl.minimum(k_lo + K_PER_SPLIT, H)
    wbase = w_ptr + e * stride_we
    cols_g = _cols(offs_n, stride_wn, stride_wt, SLAB)[None, :]
    cols_u = _cols(I + offs_n, stride_wn, stride_wt, SLAB)[None, :]
    g = tl.zeros((16, BLOCK_N), dtype=tl.float32)
    u = tl.zeros((16, BLOCK_N), dtype=tl.float32)
    g2 = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)  # EW only (DCE'd otherwise)
    u2 = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)
    if BLOCK_PTR:  # advanced down K in the loop (made inside it, Intel's pipeliner rejects them)
        g_bp = _backend.block_ptr(wbase, H, 2 * I, stride_wk, stride_wn, k_lo, pid_n * BLOCK_N, BLOCK_K, BLOCK_N)
        u_bp = _backend.block_ptr(wbase, H, 2 * I, stride_wk, stride_wn, k_lo, I + pid_n * BLOCK_N, BLOCK_K, BLOCK_N)
    for k0 in tl.range(k_lo, k_hi, BLOCK_K, num_stages=EW_STAGES):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < k_hi
        rows = wbase + offs_k.to(tl.int64)[:, None] * stride_wk
        w_ok = k_ok[:, None] & n_ok[None, :]
        if EW:
            xv = tl.load(x_ptr + tok * stride_x + offs_k, mask=k_ok, other=0.0).to(wty).to(tl.float32)
            g2 = _ew_step(g2, rows + cols_g, w_ok, xv)
            u2 = _ew_step(u2, rows + cols_u, w_ok, xv)
        else:
            a = tl.load(x_ptr + tok * stride_x + offs_m[:, None] * 0 + offs_k[None, :],
                        mask=(offs_m[:, None] == 0) & k_ok[None, :], other=0.0).to(wty)
            if TMA:
                g = tl.dot(a, w_desc.load([e.to(tl.int32), k0, pid_n * BLOCK_N]).reshape(BLOCK_K, BLOCK_N), g)
                u = tl.dot(a, w_desc.load([e.to(tl.int32), k0, I + pid_n * BLOCK_N]).reshape(BLOCK_K, BLOCK_N), u)
            elif BLOCK_PTR:
                g = tl.dot(a, tl.load(g_bp, boundary_check=(0, 1), padding_option="zero"), g)
                u = tl.dot(a, tl.load(u_bp, boundary_check=(0, 1), padding_option="zero"), u)
                g_bp = tl.advance(g_bp, (BLOCK_K, 0))
                u_bp = tl.advance(u_bp, (BLOCK_K, 0))
            else:
                g = tl.dot(a, tl.load(rows + cols_g, mask=w_ok, other=0.0), g)
                u = tl.dot(a, tl.load(rows + cols_u, mask=w_ok, other=0.0), u)
    if EW:
        gv = tl.sum(g2, axis=0)
        uv = tl.sum(u2, axis=0)
    else:
        gv = tl.sum(g, axis=0)  # row 0; the zero rows add nothing
        uv = tl.sum(u, axis=0)
    if SPLIT_K > 1:
        # partials [pairs, SPLIT_K, 2I] fp32: gate at column n, up at I + n
        part = ws_ptr + (pair.to(tl.int64) * SPLIT_K + pid_k) * (2 * I) + offs_n
        tl.store(part, gv, mask=n_ok)
        tl.store(part + I, uv, mask=n_ok)
        tl.debug_barrier()
        sem = sem_ptr + pair * tl.num_programs(1) + pid_n
        arrived = tl.atomic_add(sem, 1)
        if arrived == SPLIT_K - 1:
            gv = tl.zeros((BLOCK_N,), dtype=tl.float32)
            uv = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for s in range(0, SPLIT_K):
                p = ws_ptr + (pair.to(tl.int64) * SPLIT_K + s) * (2 * I) + offs_n
                gv += tl.load(p, mask=n_ok, other=0.0, cache_modifier=".cg")
                uv += tl.load(p + I, mask=n_ok, other=0.0, cache_modifier=".cg")
            h = gv * tl.sigmoid(gv) * uv
            tl.store(act_ptr + pair.to(tl.int64) * stride_act + offs_n, h.to(act_ptr.dtype.element_ty), mask=n_ok)
            tl.atomic_xchg(sem, 0)
    else:
        h = gv * tl.sigmoid(gv) * uv
        tl.store(act_ptr + pair.to(tl.int64) * stride_act + offs_n, h.to(act_ptr.dtype.element_ty), mask=n_ok)


@triton.jit
def _add_residual(acc, res_row, mask, oty: tl.constexpr, HAS_RES: tl.constexpr):
    """The block's fp32 output rounded to oty, then (HAS_RES) plus the residual row, rounded
    again: what `residual + block(x)` computes from the rounded block output."""
    out = acc.to(oty)
    if HAS_RES:
        out = (out.to(tl.float32) + tl.load(res_row, mask=mask, other=0.0).to(tl.float32)).to(oty)
    return out


@triton.jit
def _down_row(arow, wbase, cols, k_lo, k_hi, n_ok, stride_wk, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              EW: tl.constexpr, EW_STAGES: tl.constexpr, TMA: tl.constexpr = False, w_desc=None, e=0, n0=0,
              BLOCK_PTR: tl.constexpr = False, I=0, H=0, stride_wn=1):
    """One (token, slot) pair's down GEMV over K rows [k_lo, k_hi) for a column tile, fp32: a
    16-row tl.dot (row 0 the pair's activation row arow), or EW (_ew_step). TMA: the dot's tiles
    of expert e from column n0 come through w_desc ([E, I, H], a [1, BLOCK_K, BLOCK_N] box);
    BLOCK_PTR: through block pointers over the expert's [I, H] slab at wbase."""
    wty = wbase.dtype.element_ty
    offs_m = tl.arange(0, 16)
    acc = tl.zeros((16, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)  # EW only (DCE'd otherwise)
    if BLOCK_PTR:  # advanced down K in the loop (made inside it, Intel's pipeliner rejects them)
        w_bp = _backend.block_ptr(wbase, I, H, stride_wk, stride_wn, k_lo, n0, BLOCK_K, BLOCK_N)
    for k0 in tl.range(k_lo, k_hi, BLOCK_K, num_stages=EW_STAGES):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < k_hi
        rows = wbase + offs_k.to(tl.int64)[:, None] * stride_wk + cols
        w_ok = k_ok[:, None] & n_ok[None, :]
        if EW:
            av = tl.load(arow + offs_k, mask=k_ok, other=0.0)
            acc2 = _ew_step(acc2, rows, w_ok, av.to(wty).to(tl.float32))
        else:
            a = tl.load(arow + offs_m[:, None] * 0 + offs_k[None, :], mask=(offs_m[:, None] == 0) & k_ok[None, :],
                        other=0.0).to(wty)
            if TMA:
                acc = tl.dot(a, w_desc.load([e, k0, n0]).reshape(BLOCK_K, BLOCK_N), acc)
            elif BLOCK_PTR:
                acc = tl.dot(a, tl.load(w_bp, boundary_check=(0, 1), padding_option="zero"), acc)
                w_bp = tl.advance(w_bp, (BLOCK_K, 0))
            else:
                acc = tl.dot(a, tl.load(rows, mask=w_ok, other=0.0), acc)
    return tl.sum(acc2, axis=0) if EW else tl.sum(acc, axis=0)


@triton.jit
def _decode_down_kernel(act_ptr, ids_ptr, vals_ptr, w_ptr, out_ptr, res_ptr, ws_ptr, sem_ptr, H, I, K_PER_SPLIT,
                        stride_act, stride_we, stride_wk, stride_wn, stride_out, stride_res,
                        TOP_K: tl.constexpr, RULE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        SPLIT_K: tl.constexpr, HAS_RES: tl.constexpr = False, PDL: tl.constexpr = False,
                        EW: tl.constexpr = False, EW_STAGES: tl.constexpr = None, stride_wt=0,
                        SLAB: tl.constexpr = 0, ALL_SLOTS: tl.constexpr = False, TMA: tl.constexpr = False,
                        w_desc=None, BLOCK_PTR: tl.constexpr = False):
    """The down GEMV of one (token, slot) pair for BLOCK_N output columns over one K split (a
    16-row tl.dot, or EW: _ew_step), stored as an fp32 partial; the token's program that finishes
    last for the tile sums the partials in (slot, split) order, each slot's scaled by its routing
    weight, and rounds the row once (then adds the residual row, HAS_RES, as _add_residual does).
    ALL_SLOTS (SPLIT_K 1): one program per (token, column tile) runs the token's slots one after
    another and sums them as that last program would, with no partials, semaphore or finishing
    program: the same bits as SPLIT_K 1. TMA: the weight tiles through w_desc; BLOCK_PTR: through
    block pointers (_down_row)."""
    if ALL_SLOTS:
        _decode_down_all_slots(act_ptr, ids_ptr, vals_ptr, w_ptr, out_ptr, res_ptr, H, I, stride_act, stride_we,
                               stride_wk, stride_wn, stride_out, stride_res, stride_wt, TOP_K, RULE, BLOCK_N, BLOCK_K,
                               HAS_RES, PDL, EW, EW_STAGES, SLAB)
        return
    _backend.pdl_wait(PDL)
    pair = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    tok = pair // TOP_K
    e = tl.load(ids_ptr + pair).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < H
    k_lo = pid_k * K_PER_SPLIT
    k_hi = tl.minimum(k_lo + K_PER_SPLIT, I)
    cols = _cols(offs_n, stride_wn, stride_wt, SLAB)[None, :]
    part = _down_row(act_ptr + pair.to(tl.int64) * stride_act, w_ptr + e * stride_we, cols, k_lo, k_hi, n_ok,
                     stride_wk, BLOCK_N, BLOCK_K, EW, EW_STAGES, TMA, w_desc, e.to(tl.int32), pid_n * BLOCK_N,
                     BLOCK_PTR, I, H, stride_wn)
    # partials [pairs, SPLIT_K, H] fp32
    tl.store(ws_ptr + (pair.to(tl.int64) * SPLIT_K + pid_k) * H + offs_n, part, mask=n_ok)
    tl.debug_barrier()
    sem = sem_ptr + tok * tl.num_programs(1) + pid_n
    arrived = tl.atomic_add(sem, 1)
    if arrived == TOP_K * SPLIT_K - 1:
        # The routing weights from the top-k probabilities, in slot order: RULE 0 keeps them
        # (rounded to the activation dtype), 1 renormalizes and rounds, 2 renormalizes in fp32.
        vbase = vals_ptr + tok * TOP_K
        total = tl.load(vbase)
        for j in tl.static_range(1, TOP_K):
            total += tl.load(vbase + j)
        out = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for j in tl.static_range(TOP_K):
            wt = _routing_weight(vbase, j, total, RULE, out_ptr.dtype.element_ty)
            y = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for s in range(0, SPLIT_K):
                y += tl.load(ws_ptr + ((tok * TOP_K + j).to(tl.int64) * SPLIT_K + s) * H + offs_n, mask=n_ok,
                             other=0.0, cache_modifier=".cg")
            out += wt * y
        out = _add_residual(out, res_ptr + tok.to(tl.int64) * stride_res + offs_n, n_ok, out_ptr.dtype.element_ty,
                            HAS_RES)
        tl.store(out_ptr + tok.to(tl.int64) * stride_out + offs_n, out, mask=n_ok)
        tl.atomic_xchg(sem, 0)


@triton.jit
def _routing_weight(vbase, j, total, RULE: tl.constexpr, oty: tl.constexpr):
    """Slot j's routing weight from the top-k probabilities (RULE 0: kept, rounded to oty; 1:
    renormalized by total, then rounded; 2: renormalized, fp32)."""
    wt = tl.load(vbase + j)
    if RULE != 0:  # IEEE division, as torch divides (Triton's `/` is div.full.f32)
        wt = tl.math.div_rn(wt, total)
    if RULE != 2:
        wt = wt.to(oty).to(tl.float32)
    return wt


@triton.jit
def _decode_down_all_slots(act_ptr, ids_ptr, vals_ptr, w_ptr, out_ptr, res_ptr, H, I, stride_act, stride_we,
                           stride_wk, stride_wn, stride_out, stride_res, stride_wt, TOP_K: tl.constexpr,
                           RULE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           HAS_RES: tl.constexpr, PDL: tl.constexpr, EW: tl.constexpr, EW_STAGES: tl.constexpr,
                           SLAB: tl.constexpr):
    """_decode_down_kernel's ALL_SLOTS form: program (token, column tile)."""
    _backend.pdl_wait(PDL)
    tok = tl.program_id(0).to(tl.int64)
    pid_n = tl.program_id(1)
    oty: tl.constexpr = out_ptr.dtype.element_ty
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < H
    cols = _cols(offs_n, stride_wn, stride_wt, SLAB)[None, :]
    vbase = vals_ptr + tok * TOP_K
    total = tl.load(vbase)
    for j in tl.static_range(1, TOP_K):
        total += tl.load(vbase + j)
    out = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for j in range(0, TOP_K):
        pair = tok * TOP_K + j
        y = _down_row(act_ptr + pair * stride_act, w_ptr + tl.load(ids_ptr + pair).to(tl.int64) * stride_we, cols, 0,
                      I, n_ok, stride_wk, BLOCK_N, BLOCK_K, EW, EW_STAGES)
        # the split finisher's sum of one split (0 + y), then the slot's weight, in slot order
        out += _routing_weight(vbase, j, total, RULE, oty) * (tl.zeros((BLOCK_N,), dtype=tl.float32) + y)
    out = _add_residual(out, res_ptr + tok * stride_res + offs_n, n_ok, oty, HAS_RES)
    tl.store(out_ptr + tok * stride_out + offs_n, out, mask=n_ok)


@triton.jit
def _block_tile(NBLOCKS, N_TILES, GROUP_B: tl.constexpr):
    """(row block, column tile) of this program: GROUP_B row blocks at a time run through every
    column tile, the blocks fastest, so a group's activation rows stay in L2 across the column
    tiles, and the blocks of one expert in it share each weight tile."""
    pid = tl.program_id(0)
    per_group = GROUP_B * N_TILES
    first = (pid // per_group) * GROUP_B
    size = tl.minimum(NBLOCKS - first, GROUP_B)
    b = first + (pid % per_group) % size
    return b, (pid % per_group) // size


@triton.jit
def _grouped_gate_up_kernel(x_ptr, rows_ptr, bexp_ptr, w_ptr, act_ptr, H, I, E, TOP_K, NBLOCKS, N_TILES,
                            stride_x, stride_we, stride_wk, stride_wn, stride_act,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_B: tl.constexpr, stride_wt=0, SLAB: tl.constexpr = 0):
    b, pid_n = _block_tile(NBLOCKS, N_TILES, GROUP_B)
    e = tl.load(bexp_ptr + b).to(tl.int64)
    if e < E:
        offs_m = b * BLOCK_M + tl.arange(0, BLOCK_M)
        pair = tl.load(rows_ptr + offs_m)
        mmask = pair >= 0
        tok = tl.where(mmask, pair // TOP_K, 0).to(tl.int64)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        nmask = offs_n < I
        wbase = w_ptr + e * stride_we
        cols_g = _cols(offs_n, stride_wn, stride_wt, SLAB)[None, :]
        cols_u = _cols(I + offs_n, stride_wn, stride_wt, SLAB)[None, :]
        g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, H, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            kmask = offs_k < H
            x = tl.load(x_ptr + tok[:, None] * stride_x + offs_k[None, :], mask=mmask[:, None] & kmask[None, :],
                        other=0.0)
            m2 = kmask[:, None] & nmask[None, :]
            wg = tl.load(wbase + offs_k[:, None] * stride_wk + cols_g, mask=m2, other=0.0)
            wu = tl.load(wbase + offs_k[:, None] * stride_wk + cols_u, mask=m2, other=0.0)
            x = x.to(wg.dtype)
            g = tl.dot(x, wg, g)
            u = tl.dot(x, wu, u)
        h = g * tl.sigmoid(g) * u
        tl.store(act_ptr + offs_m.to(tl.int64)[:, None] * stride_act + offs_n[None, :], h.to(act_ptr.dtype.element_ty),
                 mask=mmask[:, None] & nmask[None, :])


@triton.jit
def _grouped_down_kernel(act_ptr, rows_ptr, bexp_ptr, wts_ptr, w_ptr, y_ptr, H, I, E, NBLOCKS, N_TILES,
                         stride_act, stride_we, stride_wk, stride_wn, stride_y,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_B: tl.constexpr, stride_wt=0, SLAB: tl.constexpr = 0):
    b, pid_n = _block_tile(NBLOCKS, N_TILES, GROUP_B)
    e = tl.load(bexp_ptr + b).to(tl.int64)
    if e < E:
        offs_m = b * BLOCK_M + tl.arange(0, BLOCK_M)
        pair = tl.load(rows_ptr + offs_m)
        mmask = pair >= 0
        safe = tl.where(mmask, pair, 0).to(tl.int64)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        nmask = offs_n < H
        wbase = w_ptr + e * stride_we
        cols = _cols(offs_n, stride_wn, stride_wt, SLAB)[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, I, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            kmask = offs_k < I
            a = tl.load(act_ptr + offs_m.to(tl.int64)[:, None] * stride_act + offs_k[None, :],
                        mask=mmask[:, None] & kmask[None, :], other=0.0)
            w = tl.load(wbase + offs_k[:, None] * stride_wk + cols, mask=kmask[:, None] & nmask[None, :], other=0.0)
            acc = tl.dot(a.to(w.dtype), w, acc)
        wt = tl.load(wts_ptr + safe, mask=mmask, other=0.0).to(tl.float32)
        acc = acc * wt[:, None]
        tl.store(y_ptr + safe[:, None] * stride_y + offs_n[None, :], acc, mask=mmask[:, None] & nmask[None, :])


@triton.jit
def _layout_count_kernel(ids_ptr, sem_ptr, cur_ptr, bexp_ptr, P, E, NBLOCKS,
                         BLOCK_M: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_E: tl.constexpr,
                         BLOCK_B: tl.constexpr):
    """Expert counts of BLOCK_P pairs, added into sem[0:E]; the program that finishes last turns
    them into each expert's run of whole BLOCK_M blocks (its start as the expert's cursor, and
    where its pairs end), each block's expert, and puts the counters back to 0."""
    pid = tl.program_id(0)
    offs = pid * BLOCK_P + tl.arange(0, BLOCK_P)
    # pairs past P land in bin E, which is no expert's (BLOCK_E > E)
    e = tl.load(ids_ptr + offs, mask=offs < P, other=E).to(tl.int32)
    hist = tl.histogram(e, BLOCK_E)
    be = tl.arange(0, BLOCK_E)
    e_ok = be < E
    tl.atomic_add(sem_ptr + be, hist, mask=e_ok & (hist > 0))
    tl.debug_barrier()
    arrived = tl.atomic_add(sem_ptr + E, 1)
    if arrived == tl.num_programs(0) - 1:
        counts = tl.where(e_ok, tl.atomic_xchg(sem_ptr + be, 0, mask=e_ok), 0)  # read and reset
        padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
        pad_end = tl.cumsum(padded, 0)
        start = pad_end - padded
        tl.store(cur_ptr + be, start, mask=e_ok)
        tl.store(cur_ptr + E + be, start + counts, mask=e_ok)
        # a block's expert: how many runs end at or before its first row (searchsorted, right)
        for b0 in range(0, NBLOCKS, BLOCK_B):
            offs_b = b0 + tl.arange(0, BLOCK_B)
            ended = e_ok[None, :] & (pad_end[None, :] <= (offs_b * BLOCK_M)[:, None])
            tl.store(bexp_ptr + offs_b, tl.sum(ended.to(tl.int32), axis=1), mask=offs_b < NBLOCKS)
        tl.atomic_xchg(sem_ptr + E, 0)


@triton.jit
def _layout_place_kernel(ids_ptr, cur_ptr, bexp_ptr, rows_ptr, P, E, R,
                         BLOCK_M: tl.constexpr, BLOCK_P: tl.constexpr):
    """Rows offs of the layout: each pair among them takes the next row of its expert's run, and
    each of them that no pair takes (a run's tail, the blocks past the last run) gets -1."""
    offs = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    ok = offs < P
    e = tl.load(ids_ptr + offs, mask=ok, other=0).to(tl.int32)
    # The atomics hand out a run's rows in whatever order the pairs reach them, so the order
    # within a run varies from call to call. No output depends on it: the grouped GEMMs compute
    # each row alone and write it to its pair's own row of y, summed per token in slot order.
    dest = tl.atomic_add(cur_ptr + e, 1, mask=ok, sem="relaxed")
    tl.store(rows_ptr + dest, offs, mask=ok)
    r_ok = offs < R
    eb = tl.load(bexp_ptr + offs // BLOCK_M, mask=r_ok, other=E)
    in_run = eb < E
    fill_end = tl.load(cur_ptr + E + eb, mask=r_ok & in_run, other=0)
    tl.store(rows_ptr + offs, tl.full((BLOCK_P,), -1, tl.int32), mask=r_ok & (~in_run | (offs >= fill_end)))


@triton.jit
def _topk_sum_kernel(y_ptr, out_ptr, res_ptr, H, stride_y, stride_out, stride_res, TOP_K: tl.constexpr,
                     BLOCK_H: tl.constexpr, HAS_RES: tl.constexpr = False):
    """out[t] = y[t * TOP_K] + ... + y[t * TOP_K + TOP_K - 1] for BLOCK_H columns: fp32, in slot
    order, rounded once (then plus the residual row, HAS_RES)."""
    tok = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ok = offs < H
    row = y_ptr + tok * TOP_K * stride_y + offs
    acc = tl.load(row, mask=ok, other=0.0)
    for j in tl.static_range(1, TOP_K):
        acc += tl.load(row + j * stride_y, mask=ok, other=0.0)
    out = _add_residual(acc, res_ptr + tok * stride_res + offs, ok, out_ptr.dtype.element_ty, HAS_RES)
    tl.store(out_ptr + tok * stride_out + offs, out, mask=ok)


def _err(msg: str) -> ValueError:
    return ValueError(f"xpuinject_kernels: moe: {msg}")


def blocked(w: torch.Tensor, slab: int) -> torch.Tensor:
    """Experts' [E, K, N] weights (any strides) in the blocked layout [E, N / slab, K, slab]: each
    slab-wide column tile's K rows one contiguous run, so a decode program's weight slab is one
    stretch of memory rather than K short rows a full row apart (what the packed K-major layout
    gives it). Every kernel here reads either layout; the expert math is the same."""
    e, k, n = w.shape
    if slab <= 0 or n % slab:
        raise _err(f"blocked layout: {n} columns do not split into tiles of {slab}")
    return w.reshape(e, k, n // slab, slab).permute(0, 2, 1, 3).contiguous()


def unblocked(w: torch.Tensor) -> torch.Tensor:
    """The [E, K, N] view of experts' weights, from either layout (blocked: a copy)."""
    if w.dim() != 4:
        return w
    e, t, k, slab = w.shape
    return w.permute(0, 2, 1, 3).reshape(e, k, t * slab)


def _geometry(w: torch.Tensor):
    """(experts, K, N, stride_we, stride_wk, stride_wn, stride_wt, slab) of experts' weights:
    [E, K, N] strided (slab 0), or blocked [E, N / slab, K, slab]."""
    if w.dim() == 4:
        e, t, k, slab = w.shape
        return e, k, t * slab, w.stride(0), w.stride(2), w.stride(3), w.stride(1), slab
    e, k, n = w.shape
    return e, k, n, w.stride(0), w.stride(1), w.stride(2), 0, 0


def _check(x, router_w, gate_up_w, down_w, top_k, router, residual=None):
    if router not in ROUTERS:
        raise _err(f"router {router!r}: want one of {', '.join(ROUTERS)}")
    if x.dtype not in _ACT_DTYPES:
        raise _err(f"activation dtype {x.dtype}: want bf16 or fp16")
    if x.shape[-1] != router_w.shape[0] or router_w.dim() != 2:
        raise _err(f"router weight {tuple(router_w.shape)} does not match hidden size {x.shape[-1]} (want [H, E])")
    h, e = router_w.shape
    if gate_up_w.dim() not in (3, 4) or down_w.dim() not in (3, 4):
        raise _err(f"gate_up weight {tuple(gate_up_w.shape)}, down weight {tuple(down_w.shape)}: want [experts, K, N] "
                   "each, or blocked [experts, N / slab, K, slab]")
    ge, gk, gn, *_, gslab = _geometry(gate_up_w)
    if ge != e or gk != h or gn % 2:
        raise _err(f"gate_up weight {tuple(gate_up_w.shape)}: want [experts={e}, hidden={h}, 2*intermediate]"
                   + (" (blocked)" if gslab else ""))
    i = gn // 2
    if gslab and i % gslab:
        raise _err(f"gate_up weight {tuple(gate_up_w.shape)}: blocked tiles of {gslab} straddle the gate and up halves "
                   f"(intermediate {i})")
    de, dk, dn, *_, dslab = _geometry(down_w)
    if (de, dk, dn) != (e, i, h):
        raise _err(f"down weight {tuple(down_w.shape)}: want [experts={e}, intermediate={i}, hidden={h}]"
                   + (" (blocked)" if dslab else ""))
    if not 1 <= top_k <= e:
        raise _err(f"top_k {top_k}: want 1 to {e}")
    if router_w.stride(-1) != 1:
        raise _err("router weight must have unit stride along its last dim (K-major, as packed)")
    for name, w in (("gate_up", gate_up_w), ("down", down_w)):
        if w.dim() == 4:
            if not w.is_contiguous():
                raise _err(f"{name} weight: a blocked layout must be contiguous")
        elif w.stride(-1) != 1 and w.stride(1) != 1:
            raise _err(f"{name} weight strides {tuple(w.stride())}: want each expert K-major (unit stride along the "
                       "last dim, as packed) or N-major (along dim 1: the [K, N] view of nn.Linear's [N, K])")
    if residual is not None:
        if tuple(residual.shape) != tuple(x.shape) or residual.dtype != x.dtype or residual.device != x.device:
            raise _err(f"residual {tuple(residual.shape)} {residual.dtype} on {residual.device}: want x's shape "
                       f"{tuple(x.shape)}, dtype {x.dtype} and device {x.device}")
        if residual.stride(-1) != 1:
            raise _err("residual must have a unit stride along its last dim")
    return h, e, i


# Launch constants a `config=` may set, per path (the rest come from the tuned data or the
# heuristic). Decode: the gate/up kernel's N tile, K step and K splits, then the down kernel's.
DECODE_KEYS = ("BLOCK_N", "BLOCK_K", "SPLIT_K", "DOWN_BLOCK_N", "DOWN_BLOCK_K", "DOWN_SPLIT_K", "num_warps",
               "num_stages")
PREFILL_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")
CONFIG_KEYS = {"decode": DECODE_KEYS, "prefill": PREFILL_KEYS}
# Switches a decode config may add (0 or 1, 0 where absent): the gate/up and the down kernel
# multiply-add on the CUDA cores (_ew_step) instead of a 16-row tl.dot; DOWN_ALL: one down program
# per (token, column tile) runs all the token's slots (no K split, no partials or finishing program;
# DOWN_SPLIT_K is then 1).
DECODE_FLAGS = ("EW", "DOWN_EW", "DOWN_ALL")
CONFIG_FLAGS = {"decode": DECODE_FLAGS, "prefill": ()}

# Weight tiles in flight per SM that the decode heuristic aims for: gemv.py's figure for the
# H200's decode projections (1.5-3 per SM streamed HBM best).
_PROGRAMS_PER_SM = 1.5


def _splits(programs: int, k: int, block_k: int, units: int) -> int:
    """The fewest K splits (a power of two) that put _PROGRAMS_PER_SM programs on each compute
    unit, each split at least two BLOCK_K steps deep (gemv.heuristic_config's rule)."""
    split = 1
    while programs * split < _PROGRAMS_PER_SM * units and k // (split * 2) >= 2 * block_k:
        split *= 2
    return split


def _prefill_fits(c: dict) -> bool:
    """Whether a prefill config fits one Hopper SM: the gate/up kernel's x tile and two weight
    tiles per stage in shared memory, and its two fp32 accumulators in registers."""
    bm, bn, bk = c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"]
    smem = (bm * bk + 2 * bk * bn) * 2 * max(1, c["num_stages"])
    return smem <= _backend.CUDA_SMEM_BYTES and 2 * bm * bn <= _backend.CUDA_ACC_PER_THREAD * 32 * c["num_warps"]


def heuristic_config(path: str, be: str, h: int, i: int, e: int, top_k: int, t: int, units: int) -> dict:
    """A launch config from the problem's shape alone."""
    pairs = t * top_k
    if _backend.is_interpret():
        # Small tiles: several N tiles, K loops and K splits (the split reduction) on the tests'
        # shapes, and few programs, which the interpreter runs one by one.
        if path == "decode":
            return dict(BLOCK_N=16, BLOCK_K=32, SPLIT_K=2, DOWN_BLOCK_N=32, DOWN_BLOCK_K=16, DOWN_SPLIT_K=2,
                        num_warps=4, num_stages=1)
        return dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=1)
    stages = 3 if be == "cuda" else 2
    if path == "decode":
        # 64 x 128 weight tiles (128-byte rows of bf16), split along K until the hit experts'
        # weights stream from every SM.
        bk = min(128, max(16, _backend.next_pow2(h)))
        dbk = min(128, max(16, _backend.next_pow2(i)))
        return dict(BLOCK_N=64, BLOCK_K=bk, SPLIT_K=_splits(pairs * _backend.cdiv(i, 64), h, bk, units),
                    DOWN_BLOCK_N=64, DOWN_BLOCK_K=dbk,
                    DOWN_SPLIT_K=_splits(pairs * _backend.cdiv(h, 64), i, dbk, units), num_warps=4, num_stages=stages)
    # The row tile from the rows an expert gets on average: a tile much taller than that is
    # mostly padding, a much shorter one re-reads the expert's weights per tile.
    rows = pairs / e
    bm = 16 if rows < 24 else 32 if rows < 48 else 64 if rows < 160 else 128
    bn = min(128, max(16, _backend.next_pow2(min(h, i))))
    c = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=64, num_warps=8 if bm >= 64 else 4, num_stages=stages)
    while be == "cuda" and not _prefill_fits(c) and c["num_stages"] > 2:
        c["num_stages"] -= 1
    return c


def _config_key(h, i, e, top_k, t) -> dict:
    return {"hidden": h, "inter": i, "experts": e, "top_k": top_k, "tokens": _backend.next_pow2(t)}


_CONFIGS: dict = {}


def launch_config(path: str, device: torch.device, h: int, i: int, e: int, top_k: int, t: int,
                  config: Optional[dict] = None) -> dict:
    """The launch constants of the decode or prefill path: `config` (for sweeps; keys it leaves
    out as below), else this GPU's tuned entry (gpus/<gpu>.json, kernel "moe.decode" or
    "moe.prefill", keyed by hidden, inter, experts, top_k and the token count's power-of-2
    bucket), else the shape heuristic; kept per problem class."""
    be = _backend.backend(device)
    lkey = (be, _backend.is_interpret(), path, h, i, e, top_k, _backend.next_pow2(t))
    cfg = _CONFIGS.get(lkey)
    if cfg is None:
        key = _config_key(h, i, e, top_k, t)
        kernel = f"moe.{path}"
        units = _backend.compute_units(device)
        tuned = gpus.tuned_config(kernel, key, device)
        if tuned is not None:
            cfg = dict(tuned.kwargs, num_warps=tuned.num_warps, num_stages=tuned.num_stages)
        elif _backend.is_interpret():
            cfg = heuristic_config(path, be, h, i, e, top_k, t, units)
        else:
            def heur():
                c = heuristic_config(path, be, h, i, e, top_k, t, units)
                return triton.Config({k: v for k, v in c.items() if not k.startswith("num_")},
                                     num_warps=c["num_warps"], num_stages=c["num_stages"])
            got = gpus.heuristic_config(kernel, key, heur) or heur()
            cfg = dict(got.kwargs, num_warps=got.num_warps, num_stages=got.num_stages)
        missing = sorted(set(CONFIG_KEYS[path]) - set(cfg))
        if missing:
            raise _err(f"the {kernel} config {cfg} lacks {', '.join(missing)}")
        _CONFIGS[lkey] = cfg
    if config:
        cfg = dict(cfg, **_backend.launch_config(config, CONFIG_KEYS[path], f"moe {path}", CONFIG_FLAGS[path]))
    return cfg


def _router_probs(x2: torch.Tensor, router_w: torch.Tensor, top_k: int = 0, router: Optional[str] = None,
                  norm: Optional[tuple] = None):
    """softmax(round(x2 @ router_w)) [T, E] fp32, from programs over (token, expert tile); with
    top_k > 0 instead (the top-k probabilities [T, top_k] fp32, their expert ids [T, top_k] int32),
    selected in the same launch, largest first, equal scores by lowest index; with a router rule
    too, the routing weights by that rule in place of the probabilities (as `route` makes them).
    norm = (residual [T, H], weight [H], eps, s_out [T, H], normed_out [T, H]), decode sizes only:
    the router reads add_rms_norm(x2, residual)'s normalized rows, which the launch writes to
    normed_out (and the sum to s_out)."""
    t = x2.shape[0]
    h, e = router_w.shape
    probs = torch.empty((t, e), dtype=torch.float32, device=x2.device)
    vals = torch.empty((t, top_k) if top_k else (1,), dtype=torch.float32, device=x2.device)
    ids = torch.empty((t, top_k) if top_k else (1,), dtype=torch.int32, device=x2.device)
    if t == 0:
        return (vals, ids) if top_k else probs
    _backend.require_runnable(x2, "moe")
    interp = _backend.is_interpret()
    # 16 x 16 logit tiles; a prefill's 64-token tiles read the router once per 64 tokens (16 with
    # the top-k: its int64 keys, one per expert, stay in registers).
    block_t = 16 if t <= DECODE_MAX_TOKENS or interp or top_k else 64
    block_e = 16
    block_k = min(64 if interp else 128, max(16, _backend.next_pow2(h)))
    grid_te = _backend.cdiv(t, block_t) * _backend.cdiv(e, block_e)
    # At decode the tiles alone are few (8 for Qwen3-30B-A3B's 128 experts, 1 for Mixtral's 8),
    # each streaming the whole hidden size: split it so about ROUTER_PROGRAMS programs read.
    split = max(1, min(_backend.cdiv(h, block_k), ROUTER_PROGRAMS // grid_te)) if t <= DECODE_MAX_TOKENS else 1
    k_per, split = _split(h, block_k, split)
    decode = t <= DECODE_MAX_TOKENS
    # the weight tile held in registers across the wait: up to 16 KB (a 512-deep split of 16 experts)
    w_early = decode and ROUTER_W_EARLY and _backend.next_pow2(k_per) * block_e <= ROUTER_EARLY_ELEMS
    if norm is not None or w_early:  # one step per split: the norm in the loop runs once
        block_k = _backend.next_pow2(k_per)
    grid = (_backend.cdiv(t, block_t), _backend.cdiv(e, block_e), split)
    ws = torch.empty((split, t, e) if split > 1 else (1,), dtype=torch.float32, device=x2.device)
    sem = _backend.semaphores(x2.device, grid[0])
    pdl = _backend.pdl(x2.device)
    rows_t = min(block_t, _backend.next_pow2(t))
    warps = ROUTER_DECODE_WARPS_PDL if t <= DECODE_MAX_TOKENS and pdl else 4
    if norm is not None:
        if t > DECODE_MAX_TOKENS:
            raise ValueError(f"xpuinject_kernels: moe: the router's norm runs at decode sizes (<= {DECODE_MAX_TOKENS} "
                             f"tokens), got {t}")
        r2, nw, eps, s_out, n_out = norm
    else:
        r2, nw, eps, s_out, n_out = x2, x2, 0.0, x2, x2
    # the norm's row chunk: about 2048 fp32 values a program holds at once
    block_h = min(_backend.next_pow2(h), max(16, 2048 // rows_t), 64 if interp else 1 << 30)
    _router_kernel[grid](x2, router_w, probs, ws, sem, ids, vals, r2, nw, s_out, n_out, t, h, e, k_per, x2.stride(0),
                         router_w.stride(0), probs.stride(0), r2.stride(0), float(eps), BLOCK_T=block_t,
                         BLOCK_K=block_k, BLOCK_E=block_e,
                         BLOCK_ALL=max(16, _backend.next_pow2(e)), SPLIT_K=split, TOP_K=top_k,
                         RULE=-1 if router is None else _RULE[router], TOPK_P2=_backend.next_pow2(max(top_k, 1)),
                         PDL=pdl, ROWS_T=rows_t, NORM=norm is not None, BLOCK_H=block_h, W_EARLY=w_early,
                         SORT_TOPK=bool(top_k) and decode and ROUTER_SORT_TOPK, num_warps=warps,
                         num_stages=3 if x2.device.type == "cuda" else 2, **_backend.pdl_kw(pdl))
    return (vals, ids) if top_k else probs


def route(x: torch.Tensor, router_w: torch.Tensor, top_k: int, router: str,
          fused: Optional[bool] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Expert ids [T, top_k] (largest first) and routing weights [T, top_k] (fp32) of the tokens
    x [T, H]. fused (default: fused_topk): the router launch selects the experts and makes their
    weights itself (ids int32); else torch.topk and torch ops do (ids int64)."""
    if fused if fused is not None else fused_topk(x.device):
        vals, ids = _router_probs(x.reshape(-1, x.shape[-1]), router_w, top_k, router)
        return ids, vals
    probs = _router_probs(x.reshape(-1, x.shape[-1]), router_w)
    vals, ids = torch.topk(probs, top_k, dim=-1)
    if router != "softmax-topk":
        vals = vals / vals.sum(dim=-1, keepdim=True)
    if router != "softmax-topk-norm-fp32":
        vals = vals.to(x.dtype).float()
    return ids, vals


_RULE = {"softmax-topk": 0, "softmax-topk-norm": 1, "softmax-topk-norm-fp32": 2}


def _split(k: int, block_k: int, split: int) -> Tuple[int, int]:
    """(K per split in whole BLOCK_K steps, splits that are not empty)."""
    split = max(1, min(int(split), _backend.cdiv(k, block_k)))
    k_per = _backend.cdiv(_backend.cdiv(k, split), block_k) * block_k
    return k_per, _backend.cdiv(k, k_per)


def fused_topk(device: torch.device) -> bool:
    """Whether the router launch selects the top-k itself: on CUDA, whose torch.topk selects by
    the kernel's rule (equal scores by lowest index). Elsewhere torch.topk may break ties
    otherwise (CPU's does), so it runs there, and a tie falls as it falls for torch.topk."""
    return device.type == "cuda" and not _backend.is_interpret()


def _expert_tiles(w: torch.Tensor, slab: int, stride_wn: int, ew: bool, block_k: int, block_n: int,
                  starts=()) -> Tuple[bool, bool]:
    """(tensor descriptor, block pointers): how a decode launch reads these experts' weight tiles
    on the dot path over K-major [E, K, N] weights. Block pointers where _backend.weight_block_ptr
    says so; else a descriptor where _backend.weight_tma does and TMA takes the box (starts:
    _backend.tma_box_ok's); else neither, the pointer loads."""
    if ew or slab or stride_wn != 1:
        return False, False
    if _backend.weight_block_ptr(w.device):
        return False, True
    return _backend.weight_tma(w.device) and _backend.tma_box_ok(w, (1, block_k, block_n), starts), False


def decode_route(x2: torch.Tensor, router_w: torch.Tensor, top_k: int,
                 fused: Optional[bool] = None, norm: Optional[tuple] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """The decode path's routing of tokens x2 [T, H]: (top-k probabilities, expert ids). fused
    (default: fused_topk) selects them in the router's own launch, largest first; else
    torch.topk runs on the router's probabilities. norm: as _router_probs takes it."""
    if fused if fused is not None else fused_topk(x2.device):
        return _router_probs(x2, router_w, top_k, norm=norm)
    return torch.topk(_router_probs(x2, router_w, norm=norm), top_k, dim=-1)


def _decode(x2, router_w, gate_up_w, down_w, top_k, router, o2, cfg, r2=None, norm=None):
    """The decode path: the router with its top-k, gate/up and down GEMV launches; the routing
    weights' renormalization and rounding, and the residual add (r2), run in the down kernel's
    reduction. norm = (weight, eps): x2 is the attention's output and r2 the residual stream,
    and the router's launch runs the post-attention add + RMSNorm (add_rms_norm's two outputs
    feed the experts and the residual add)."""
    t, h = x2.shape
    _, i, _, d_we, d_wk, d_wn, d_wt, d_slab = _geometry(down_w)
    _, _, _, g_we, g_wk, g_wn, g_wt, g_slab = _geometry(gate_up_w)
    dev = x2.device
    if norm is not None:
        s2 = torch.empty((t, h), dtype=x2.dtype, device=dev)
        n2 = torch.empty((t, h), dtype=x2.dtype, device=dev)
        vals, ids = decode_route(x2, router_w, top_k, norm=(r2, norm[0], norm[1], s2, n2))
        x2, r2 = n2, s2
    else:
        vals, ids = decode_route(x2, router_w, top_k)
    pairs = t * top_k
    pdl = _backend.pdl(dev)
    launch = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **_backend.pdl_kw(pdl))
    act = torch.empty((pairs, i), dtype=x2.dtype, device=dev)
    bn, bk = cfg["BLOCK_N"], cfg["BLOCK_K"]
    k_per, split = _split(h, bk, cfg["SPLIT_K"])
    tiles = _backend.cdiv(i, bn)
    ws = torch.empty((pairs * split * 2 * i,) if split > 1 else (1,), dtype=torch.float32, device=dev)
    sem = _backend.semaphores(dev, max(pairs * tiles, t * _backend.cdiv(h, cfg["DOWN_BLOCK_N"])))
    ew = bool(cfg.get("EW", 0))
    tma, bptr = _expert_tiles(gate_up_w, g_slab, g_wn, ew, bk, bn, starts=(i,))  # up's tiles start at column I
    _decode_gate_up_kernel[(pairs, tiles, split)](
        x2, ids, gate_up_w, act, ws, sem, h, i, top_k, k_per, x2.stride(0), g_we, g_wk, g_wn, act.stride(0), BLOCK_N=bn,
        BLOCK_K=bk, SPLIT_K=split, PDL=pdl, EW=ew, EW_STAGES=cfg["num_stages"] if ew else None, stride_wt=g_wt,
        SLAB=g_slab, TMA=tma, w_desc=_backend.weight_desc(gate_up_w, (1, bk, bn)) if tma else None, BLOCK_PTR=bptr,
        **launch)
    bn, bk = cfg["DOWN_BLOCK_N"], cfg["DOWN_BLOCK_K"]
    down_ew = bool(cfg.get("DOWN_EW", 0))
    all_slots = bool(cfg.get("DOWN_ALL", 0))
    k_per, split = _split(i, bk, 1 if all_slots else cfg["DOWN_SPLIT_K"])
    ws = torch.empty((1,) if all_slots else (pairs * split * h,), dtype=torch.float32, device=dev)
    tma_d, bptr_d = (False, False) if all_slots else _expert_tiles(down_w, d_slab, d_wn, down_ew, bk, bn)
    _decode_down_kernel[(t if all_slots else pairs, _backend.cdiv(h, bn), split)](
        act, ids, vals, down_w, o2, o2 if r2 is None else r2, ws, sem, h, i, k_per, act.stride(0), d_we, d_wk, d_wn,
        o2.stride(0), 0 if r2 is None else r2.stride(0), TOP_K=top_k, RULE=_RULE[router], BLOCK_N=bn, BLOCK_K=bk,
        SPLIT_K=split, HAS_RES=r2 is not None, PDL=pdl, EW=down_ew, EW_STAGES=cfg["num_stages"] if down_ew else None,
        stride_wt=d_wt, SLAB=d_slab, ALL_SLOTS=all_slots, TMA=tma_d,
        w_desc=_backend.weight_desc(down_w, (1, bk, bn)) if tma_d else None, BLOCK_PTR=bptr_d, **launch)
    for took, name in ((tma, "tma"), (tma_d, "tma"), (bptr, "block_ptr"), (bptr_d, "block_ptr")):
        if took:  # one count a launch that read its weights so
            _backend.count(f"moe.decode_{name}")
    _backend.count("moe.decode")
    if ew or down_ew:
        _backend.count("moe.decode_ew")


# Row blocks the grouped GEMMs run through all their column tiles at a time (_block_tile): a
# 2048-token Qwen3-30B-A3B prefill's 8 blocks hold 4 MB of activation rows, well within L2.
GROUP_BLOCKS = 8

# Pairs per program of the layout kernels: a 16384-pair prefill (2048 tokens, top-8) is 16
# histogram programs, and its rows 24 placing ones at BLOCK_M 64.
_LAYOUT_BLOCK = 1024


def _blocks(ids: torch.Tensor, experts: int, block_m: int):
    """The prefill layout, all on the device in two launches: pair ids (token * top_k + slot)
    grouped by expert (in no fixed order within an expert), each expert's run padded with -1
    to whole BLOCK_M blocks; and each block's expert (`experts` for the blocks past the last)."""
    flat = ids.reshape(-1)
    pairs = flat.numel()
    nblocks = _backend.cdiv(pairs, block_m) + experts
    dev = ids.device
    rows = torch.empty((nblocks * block_m,), dtype=torch.int32, device=dev)
    bexp = torch.empty((nblocks,), dtype=torch.int32, device=dev)
    cur = torch.empty((2 * experts,), dtype=torch.int32, device=dev)  # cursors, then pair ends
    # counts in sem[0:experts], the programs' arrivals in sem[experts]; all put back to 0
    sem = _backend.semaphores(dev, experts + 1)
    block_e = _backend.next_pow2(experts + 1)
    _layout_count_kernel[(_backend.cdiv(pairs, _LAYOUT_BLOCK),)](
        flat, sem, cur, bexp, pairs, experts, nblocks, BLOCK_M=block_m, BLOCK_P=_LAYOUT_BLOCK, BLOCK_E=block_e,
        BLOCK_B=max(1, 8192 // block_e), num_warps=4)
    _layout_place_kernel[(_backend.cdiv(nblocks * block_m, _LAYOUT_BLOCK),)](
        flat, cur, bexp, rows, pairs, experts, nblocks * block_m, BLOCK_M=block_m, BLOCK_P=_LAYOUT_BLOCK,
        num_warps=4)
    return rows, bexp, nblocks


def _topk_sum(y: torch.Tensor, top_k: int, o2: torch.Tensor, r2: Optional[torch.Tensor] = None) -> None:
    """o2[t] = the fp32 sum of y's rows t * top_k ... t * top_k + top_k - 1, in slot order,
    rounded once to o2's dtype (then plus r2[t], rounded again)."""
    t, h = o2.shape
    block_h = min(32 if _backend.is_interpret() else 1024, _backend.next_pow2(h))
    _topk_sum_kernel[(t, _backend.cdiv(h, block_h))](y, o2, o2 if r2 is None else r2, h, y.stride(0), o2.stride(0),
                                                      0 if r2 is None else r2.stride(0), TOP_K=top_k,
                                                      BLOCK_H=block_h, HAS_RES=r2 is not None, num_warps=4)


def _moe(x, router_w, gate_up_w, down_w, top_k, router, residual=None, config=None):
    h, e, i = _check(x, router_w, gate_up_w, down_w, top_k, router, residual)
    x2 = x.reshape(-1, h)
    r2 = residual.reshape(-1, h) if residual is not None else None
    t = x2.shape[0]
    out = _backend.empty(x.shape, x.dtype, x.device)
    if t == 0:
        return out
    _backend.require_runnable(x, "moe")
    o2 = out.view(-1, h)
    if t <= DECODE_MAX_TOKENS:
        _decode(x2, router_w, gate_up_w, down_w, top_k, router, o2,
                launch_config("decode", x.device, h, i, e, top_k, t, config), r2)
        return out
    cfg = launch_config("prefill", x.device, h, i, e, top_k, t, config)
    ids, wts = route(x2, router_w, top_k, router)
    block_m, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    launch = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    rows, bexp, nblocks = _blocks(ids, e, block_m)
    act = torch.empty((nblocks * block_m, i), dtype=x.dtype, device=x.device)
    tiles = _backend.cdiv(i, bn)
    *_, g_we, g_wk, g_wn, g_wt, g_slab = _geometry(gate_up_w)
    *_, d_we, d_wk, d_wn, d_wt, d_slab = _geometry(down_w)
    _grouped_gate_up_kernel[(nblocks * tiles,)](
        x2, rows, bexp, gate_up_w, act, h, i, e, top_k, nblocks, tiles, x2.stride(0), g_we, g_wk, g_wn, act.stride(0),
        BLOCK_M=block_m, BLOCK_N=bn, BLOCK_K=bk, GROUP_B=GROUP_BLOCKS, stride_wt=g_wt, SLAB=g_slab, **launch)
    y = torch.empty((t * top_k, h), dtype=torch.float32, device=x.device)
    tiles = _backend.cdiv(h, bn)
    _grouped_down_kernel[(nblocks * tiles,)](
        act, rows, bexp, wts.reshape(-1).contiguous(), down_w, y, h, i, e, nblocks, tiles, act.stride(0), d_we, d_wk,
        d_wn, y.stride(0), BLOCK_M=block_m, BLOCK_N=bn, BLOCK_K=bk, GROUP_B=GROUP_BLOCKS, stride_wt=d_wt, SLAB=d_slab,
        **launch)
    _topk_sum(y, top_k, o2, r2)
    _backend.count("moe.prefill")
    return out


# Whether add_rms_norm_moe runs the norm in the router's launch: None (XPUINJECT_FUSE_MOE_NORM
# unset) where launches do not overlap (_backend.fuse_norm says why), True / False ("1" / "0")
# always / never.
FUSE_MOE_NORM = _backend.env_switch("XPUINJECT_FUSE_MOE_NORM")


def add_rms_norm_moe(x: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                     router_w: torch.Tensor, gate_up_w: torch.Tensor, down_w: torch.Tensor, top_k: int,
                     router: str) -> torch.Tensor:
    """s + moe(rms_norm(s)), s = x + residual: a decoder layer's post-attention add + RMSNorm
    (rmsnorm.add_rms_norm's numbers) and its MoE block with the residual add. At decode sizes the
    norm runs in the router's launch (one launch fewer) where FUSE_MOE_NORM lets it; else
    add_rms_norm, then moe. x, residual: [..., H] of one dtype; norm_weight: [H] of that dtype.
    The op: torch.ops.<ns>.add_rms_norm_moe."""
    if _ops.traced(x):
        return _ops.call("add_rms_norm_moe", x, residual, norm_weight, float(eps), router_w, gate_up_w, down_w,
                         top_k, router)
    return _add_rms_norm_moe(x, residual, norm_weight, eps, router_w, gate_up_w, down_w, top_k, router)


def _add_rms_norm_moe(x, residual, norm_weight, eps, router_w, gate_up_w, down_w, top_k, router):
    from .rmsnorm import add_rms_norm

    h = x.shape[-1]  # before _check: an unfused call leaves the checks to add_rms_norm and moe
    fused = (x.dtype in _ACT_DTYPES and residual.dtype == x.dtype and tuple(residual.shape) == tuple(x.shape)
             and norm_weight.dtype == x.dtype and tuple(norm_weight.shape) == (h,)
             and 0 < x.numel() // max(h, 1) <= DECODE_MAX_TOKENS
             and _backend.fuse_norm(FUSE_MOE_NORM, x.device))
    if not fused:
        s, normed = add_rms_norm(x, residual, norm_weight, eps)
        return moe(normed, router_w, gate_up_w, down_w, top_k, router, residual=s)
    if not eps >= 0.0:
        raise _err(f"add_rms_norm_moe: eps must be >= 0, got {eps}")
    h, e, i = _check(x, router_w, gate_up_w, down_w, top_k, router, residual)
    _backend.require_runnable(x, "moe")
    x2 = x.reshape(-1, h).contiguous()
    r2 = residual.reshape(-1, h)
    if r2.stride(-1) != 1:
        r2 = r2.contiguous()
    out = _backend.empty(x.shape, x.dtype, x.device)
    t = x2.shape[0]
    _decode(x2, router_w, gate_up_w, down_w, top_k, router, out.view(-1, h),
            launch_config("decode", x.device, h, i, e, top_k, t), r2, norm=(norm_weight.contiguous(), float(eps)))
    _backend.count("add_rms_norm_moe")
    return out


def _add_rms_norm_moe_fake(x, residual, norm_weight, eps, router_w, gate_up_w, down_w, top_k, router):
    _check(x, router_w, gate_up_w, down_w, top_k, router, residual)
    return torch.empty_like(x)


_ops.define(
    "add_rms_norm_moe",
    "(Tensor x, Tensor residual, Tensor norm_weight, float eps, Tensor router_w, Tensor gate_up_w, Tensor down_w, "
    "int top_k, str router) -> Tensor",
    _add_rms_norm_moe, _add_rms_norm_moe_fake,
)


def _moe_fake(x, router_w, gate_up_w, down_w, top_k, router, residual=None):
    _check(x, router_w, gate_up_w, down_w, top_k, router, residual)
    return torch.empty_like(x)


_ops.define(
    "moe",
    "(Tensor x, Tensor router_w, Tensor gate_up_w, Tensor down_w, int top_k, str router, Tensor? residual=None) "
    "-> Tensor",
    _moe, _moe_fake,
)


def moe(x: torch.Tensor, router_w: torch.Tensor, gate_up_w: torch.Tensor, down_w: torch.Tensor, top_k: int,
        router: str, config: Optional[dict] = None, *, residual: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The MoE block's output for x [..., H] (same shape and dtype), weights as packed (each
    expert's gate_up [H, 2I] and down [I, H] K-major, or the [K, N] views of N-major ones); with
    residual (x's shape and dtype), residual + that output, the sum in the block's last launch
    (rounded as the two separate steps round it). config: launch constants of the path the token
    count takes (DECODE_KEYS, with DECODE_FLAGS, or PREFILL_KEYS), to time one configuration
    (benchmarks/bench_moe.py --sweep); None takes launch_config's choice."""
    if config is None and _ops.traced(x):
        return _ops.call("moe", x, router_w, gate_up_w, down_w, top_k, router, residual)
    return _moe(x, router_w, gate_up_w, down_w, top_k, router, residual, config)


def _ref_logits(x, router_w):
    """The router logits as the kernel and the stock router round them, in fp64."""
    x2 = x.reshape(-1, x.shape[-1])
    return (x2.double() @ router_w.double()).to(x.dtype).double()


def route_ref(x, router_w, top_k, router):
    """fp64 routing: ids by torch.topk over the fp64 softmax, weights as `route` makes them."""
    probs = torch.softmax(_ref_logits(x, router_w), dim=-1)
    vals, ids = torch.topk(probs, top_k, dim=-1)
    if router != "softmax-topk":
        vals = vals / vals.sum(dim=-1, keepdim=True)
    return ids, vals


def moe_ref(x, router_w, gate_up_w, down_w, top_k, router, ids=None):
    """fp64 reference (routing by route_ref unless ids are given), unrounded."""
    x2 = x.double().reshape(-1, x.shape[-1])
    rids, vals = route_ref(x, router_w, top_k, router)
    if ids is not None:  # the kernel's choice where fp64 and fp32 order a near-tie differently
        ids = ids.long()
        probs = torch.softmax(_ref_logits(x, router_w), dim=-1)
        vals = probs.gather(1, ids.reshape(rids.shape))
        if router != "softmax-topk":
            vals = vals / vals.sum(dim=-1, keepdim=True)
        rids = ids.reshape(rids.shape)
    gate_up_w, down_w = unblocked(gate_up_w), unblocked(down_w)
    i = gate_up_w.shape[2] // 2
    out = torch.zeros_like(x2)
    for t in range(x2.shape[0]):
        for j in range(top_k):
            e = int(rids[t, j])
            gu = x2[t] @ gate_up_w[e].double()
            hmid = torch.nn.functional.silu(gu[:i]) * gu[i:]
            out[t] += vals[t, j] * (hmid @ down_w[e].double())
    return out.reshape(x.shape)
