"""Rotary position embedding on q and k, transformers' rotate-half convention.

    q_embed = q * cos + rotate_half(q) * sin,  rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])

(transformers 5.17 modeling_llama.py apply_rotary_pos_emb / rotate_half). cos/sin are taken as the
model's rotary embedding computed them ([batch, seq, head_dim], batch may be 1 and broadcast), so
every rope_scaling variant (Llama-3, YaRN, dynamic, ...) works unchanged: only the rotation is
fused here. Partial rotary (Phi-3's partial_rotary_factor): cos/sin carry rotary_dim < head_dim
columns, and only the first rotary_dim channels of each head rotate (rotate-half within them);
the rest pass through unchanged (transformers 5.17 models/phi3/modeling_phi3.py
apply_rotary_pos_emb). rotary_dim 0 (zero-width cos/sin views) rotates nothing: SmolLM3's NoPE
layers, whose q/k norms and cache write still run in the same launch.

Layout: q [batch, heads_q, seq, head_dim], k [batch, heads_k, seq, head_dim] (GQA: heads_k may
differ), any strides with a unit last stride (views of a fused qkv projection are fine).

In place or not: `apply_rope(..., inplace=False)` (default) returns new tensors laid out like q/k
(same dimension order) and leaves q/k untouched, like transformers' function; `inplace=True` writes the rotated values back
into q and k (through their strides) and returns them — no allocation, for callers that own q/k.

Numerics: fp32 math, one rounding to the activation dtype (stock rounds q*cos, rotate_half(q)*sin
and their sum separately in bf16; we are at least as close to the fp32 reference).

Per-head q/k RMSNorm (qwen3's and Gemma 3's q_norm / k_norm), when given their weights: each head
is first normalized over head_dim as rmsnorm.py's kernel does it -- the fp32 sum of squares in the
same order (the same 1-D block per head, launched with rms_norm's warps for that row), then Llama's
order (round, times the weight, round) or Gemma's (times the fp32 1 + w, round once) -- and the
rotation takes that rounded output: bit for bit the norm kernel followed by the rotation, without
the norms' two launches and the copies their strided inputs need. rope_cache.py shares these
helpers.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from . import _backend, _ops
from .rmsnorm import MAX_BLOCK
from .rmsnorm import num_warps as _norm_row_warps

__all__ = ["apply_rope", "apply_rope_ref", "rotate_half_ref"]

_ACT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _rope_one(
    x_ptr, o_ptr, cos_row, sin_row, b, s, h0, H,
    sxb, sxh, sxs, sob, soh, sos,
    HALF, PASS, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_PASS: tl.constexpr,
):
    heads = h0 + tl.arange(0, BLOCK_H)
    cols = tl.arange(0, BLOCK_HALF)
    hmask = heads < H
    cmask = cols < HALF
    mask = hmask[:, None] & cmask[None, :]
    # cos/sin halves for this token, fp32, broadcast over heads
    c1 = tl.load(cos_row + cols, mask=cmask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_row + HALF + cols, mask=cmask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_row + cols, mask=cmask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_row + HALF + cols, mask=cmask, other=0.0).to(tl.float32)
    # int64 offsets: batch*stride can exceed 2^31 for long KV
    hx = heads.to(tl.int64)[:, None] * sxh
    xrow = x_ptr + b * sxb + s * sxs
    x1 = tl.load(xrow + hx + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(xrow + hx + HALF + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    o1 = x1 * c1[None, :] - x2 * s1[None, :]
    o2 = x2 * c2[None, :] + x1 * s2[None, :]
    ho = heads.to(tl.int64)[:, None] * soh
    orow = o_ptr + b * sob + s * sos
    oty = o_ptr.dtype.element_ty
    tl.store(orow + ho + cols[None, :], o1.to(oty), mask=mask)
    tl.store(orow + ho + HALF + cols[None, :], o2.to(oty), mask=mask)
    if BLOCK_PASS > 0:  # partial rotary, out of place: channels past 2 * HALF are copied as they are
        pcols = 2 * HALF + tl.arange(0, BLOCK_PASS)
        pmask = hmask[:, None] & (tl.arange(0, BLOCK_PASS) < PASS)[None, :]
        xp = tl.load(xrow + hx + pcols[None, :], mask=pmask, other=0.0)
        tl.store(orow + ho + pcols[None, :], xp.to(oty), mask=pmask)


@triton.jit
def _rope_kernel(
    q_ptr, k_ptr, qo_ptr, ko_ptr, cos_ptr, sin_ptr,
    S, HQ, HK, HALF, PASS,
    sqb, sqh, sqs, skb, skh, sks,
    sqob, sqoh, sqos, skob, skoh, skos,
    scb, scs, ssb, sss,
    BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_PASS: tl.constexpr,
):
    # grid: (batch * seq,). One program rotates every q head and every k head of one token, so
    # the token's cos/sin row is fetched from memory once (each tile's load after the first hits
    # the cache), and q and k get tiles of their own height (a separate k program padded to q's
    # head block left 3/4 of its lanes idle on Llama's 32/8 heads).
    tok = tl.program_id(0).to(tl.int64)
    b = tok // S
    s = tok % S
    cos_row = cos_ptr + b * scb + s * scs
    sin_row = sin_ptr + b * ssb + s * sss
    for h0 in range(0, HQ, BLOCK_HQ):
        _rope_one(q_ptr, qo_ptr, cos_row, sin_row, b, s, h0, HQ,
                  sqb, sqh, sqs, sqob, sqoh, sqos, HALF, PASS, BLOCK_HQ, BLOCK_HALF, BLOCK_PASS)
    for h0 in range(0, HK, BLOCK_HK):
        _rope_one(k_ptr, ko_ptr, cos_row, sin_row, b, s, h0, HK,
                  skb, skh, sks, skob, skoh, skos, HALF, PASS, BLOCK_HK, BLOCK_HALF, BLOCK_PASS)


@triton.jit
def _head_rstd(x_row, h0, NH, sxh, D, eps, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    """1/rms over head_dim of heads h0 + [0, BLOCK_H), as a [BLOCK_H] vector. Each head's row is
    reduced as _rms_norm_kernel reduces a row (one 1-D block of BLOCK_D, the same expressions,
    launched with the same warps), so the sum runs in the same order and rstd equals its rstd."""
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    hidx = tl.arange(0, BLOCK_H)
    rstd = tl.zeros([BLOCK_H], dtype=tl.float32)
    for i in tl.static_range(BLOCK_H):
        # a head past the last reads the last one's row: in bounds, and never stored
        h = tl.minimum(h0 + i, NH - 1).to(tl.int64)
        x = tl.load(x_row + h * sxh + cols, mask=mask, other=0.0)
        xf = x.to(tl.float32)
        var = tl.sum(xf * xf, axis=0) / D
        rstd = tl.where(hidx == i, 1.0 / tl.sqrt(var + eps), rstd)
    return rstd


@triton.jit
def _normed(x, rstd, w, act_ty, ROUND: tl.constexpr):
    """The norm's output from fp32 x in _rms_norm_kernel's order: x * rstd (rounded to act_ty
    first when ROUND, Llama's order), times the fp32 weight, rounded to act_ty, back in fp32:
    exactly the value the unfused path's rope loads."""
    n = x * rstd
    if ROUND:
        n = n.to(act_ty).to(tl.float32)
    return (w * n).to(act_ty).to(tl.float32)


@triton.jit
def _rotate(x_row, o_row, cos_row, sin_row, heads, hmask, sxh, soh, HALF, PASS,
            W, h0, NH, D, eps,
            BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_PASS: tl.constexpr,
            NORM: tl.constexpr, NORM_ROUND: tl.constexpr, NORM_AFTER: tl.constexpr):
    """Rotate BLOCK_H heads (NORM: each normalized over head_dim first; with NORM_AFTER the
    rotated head instead, HunYuan's order, from its unrounded fp32 rotation) and store them."""
    act = x_row.dtype.element_ty
    before: tl.constexpr = NORM and not NORM_AFTER
    if before:
        rstd = _head_rstd(x_row, h0, NH, sxh, D, eps, BLOCK_H, BLOCK_D)[:, None]
    cols = tl.arange(0, BLOCK_HALF)
    cmask = cols < HALF
    mask = hmask[:, None] & cmask[None, :]
    c1 = tl.load(cos_row + cols, mask=cmask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_row + HALF + cols, mask=cmask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_row + cols, mask=cmask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_row + HALF + cols, mask=cmask, other=0.0).to(tl.float32)
    hx = heads.to(tl.int64)[:, None] * sxh
    x1 = tl.load(x_row + hx + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_row + hx + HALF + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if NORM:
        w1 = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
        w2 = tl.load(W + HALF + cols, mask=cmask, other=0.0).to(tl.float32)
    if before:
        x1 = _normed(x1, rstd, w1[None, :], act, NORM_ROUND)
        x2 = _normed(x2, rstd, w2[None, :], act, NORM_ROUND)
    o1 = x1 * c1[None, :] - x2 * s1[None, :]
    o2 = x2 * c2[None, :] + x1 * s2[None, :]
    if BLOCK_PASS > 0:  # partial rotary: the channels past 2 * HALF, unrotated (read before any store)
        pc = tl.arange(0, BLOCK_PASS)
        pcols = 2 * HALF + pc
        pmask = hmask[:, None] & (pc < PASS)[None, :]
        xp = tl.load(x_row + hx + pcols[None, :], mask=pmask, other=0.0).to(tl.float32)
        if NORM:
            wp = tl.load(W + pcols, mask=pc < PASS, other=0.0).to(tl.float32)
    if NORM_AFTER:
        ss = tl.sum(o1 * o1, axis=1) + tl.sum(o2 * o2, axis=1)
        if BLOCK_PASS > 0:
            ss += tl.sum(xp * xp, axis=1)
        rstd = (1.0 / tl.sqrt(ss / D + eps))[:, None]
        o1 = _normed(o1, rstd, w1[None, :], act, NORM_ROUND)
        o2 = _normed(o2, rstd, w2[None, :], act, NORM_ROUND)
    ho = heads.to(tl.int64)[:, None] * soh
    oty = o_row.dtype.element_ty
    tl.store(o_row + ho + cols[None, :], o1.to(oty), mask=mask)
    tl.store(o_row + ho + HALF + cols[None, :], o2.to(oty), mask=mask)
    if BLOCK_PASS > 0:
        if NORM:
            xp = _normed(xp, rstd, wp[None, :], act, NORM_ROUND)
        tl.store(o_row + ho + pcols[None, :], xp.to(oty), mask=pmask)


@triton.jit
def _rope_rows(X, rows, r_ok, sxr, COS, SIN, scr, ssr, W, HALF, D, eps, BLOCK_R: tl.constexpr,
               BLOCK_D: tl.constexpr, NORM: tl.constexpr, NORM_ROUND: tl.constexpr, NORM_AFTER: tl.constexpr):
    """[BLOCK_R, BLOCK_D] fp32 (unrounded) rows of X (heads, or tokens of one head) normalized
    (NORM; after the rotation with NORM_AFTER) and rotated as rope.py's _rotate does it, the same
    expressions, in registers: the rotate-half partner of each column is loaded beside it; columns
    past 2 * HALF (partial rotary) pass through. Row r rotates by cos/sin row r (row strides
    scr/ssr; 0: one row for all)."""
    act = X.dtype.element_ty
    cols = tl.arange(0, BLOCK_D)
    d_ok = cols < D
    rot = cols < 2 * HALF
    first = cols < HALF
    partner = tl.where(first, cols + HALF, cols - HALF)
    rows = rows.to(tl.int64)
    base = X + rows[:, None] * sxr
    x = tl.load(base + cols[None, :], mask=r_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
    xp = tl.load(base + partner[None, :], mask=r_ok[:, None] & rot[None, :], other=0.0).to(tl.float32)
    if NORM and not NORM_AFTER:
        # every head's sum of squares from the tile already loaded (one reduction, not a row at a
        # time as rmsnorm's kernel runs it: the same terms, summed in the tile's order)
        rstd = (1.0 / tl.sqrt(tl.sum(x * x, axis=1) / D + eps))[:, None]
        w = tl.load(W + cols, mask=d_ok, other=0.0).to(tl.float32)
        wp = tl.load(W + partner, mask=rot, other=0.0).to(tl.float32)
        x = _normed(x, rstd, w[None, :], act, NORM_ROUND)
        xp = _normed(xp, rstd, wp[None, :], act, NORM_ROUND)
    c_ok = r_ok[:, None] & rot[None, :]
    c = tl.load(COS + rows[:, None] * scr + cols[None, :], mask=c_ok, other=0.0).to(tl.float32)
    sn = tl.load(SIN + rows[:, None] * ssr + cols[None, :], mask=c_ok, other=0.0).to(tl.float32)
    o = tl.where(first[None, :], x * c - xp * sn, x * c + xp * sn)
    o = tl.where(rot[None, :], o, x)
    if NORM_AFTER:
        rstd = (1.0 / tl.sqrt(tl.sum(o * o, axis=1) / D + eps))[:, None]
        o = _normed(o, rstd, tl.load(W + cols, mask=d_ok, other=0.0).to(tl.float32)[None, :], act, NORM_ROUND)
    return o


@triton.jit
def _qkv_rope_epilogue(O, offs_m, m_ok, som, head, D, QO, KC, VC, COS, SIN, COUNTER, QW, KW, HQ, HK, HALF, L,
                       sqo, skcb, skch, skcn, svcb, svch, svcn, scb, ssb, eps,
                       BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, NORM: tl.constexpr, NORM_ROUND: tl.constexpr,
                       NORM_AFTER: tl.constexpr):
    """A decode GEMV's finished tile, one head of a fused q|k|v projection O [rows, (HQ + 2 HK) D]
    that this program has just stored (rounded): a q head is normalized (NORM) and rotated by
    _rope_rows into QO; a k head likewise into the static cache KC at slot COUNTER; a v head is
    copied into VC there. Row r (a batch row) takes cos/sin row r (stride scb/ssb, 0 when one row
    serves all); slots past the cache (L) are dropped, as rope_cache_write drops them. The tile is
    read back through global memory past a barrier: the rotate-half partner of each column is
    another thread's value."""
    tl.debug_barrier()
    rows = offs_m.to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    ok = m_ok[:, None] & (cols < D)[None, :]
    head = head.to(tl.int64)
    base = O + head * D
    if head < HQ:
        o = _rope_rows(base, rows, m_ok, som, COS, SIN, scb, ssb, QW, HALF, D, eps, BLOCK_M, BLOCK_D, NORM, NORM_ROUND,
                       NORM_AFTER)
        tl.store(QO + rows[:, None] * sqo + head * D + cols[None, :], o.to(QO.dtype.element_ty), mask=ok)
    elif head < HQ + HK:
        o = _rope_rows(base, rows, m_ok, som, COS, SIN, scb, ssb, KW, HALF, D, eps, BLOCK_M, BLOCK_D, NORM, NORM_ROUND,
                       NORM_AFTER)
        slot = tl.load(COUNTER).to(tl.int64)
        at = KC + rows[:, None] * skcb + (head - HQ) * skch + slot * skcn + cols[None, :]
        tl.store(at, o.to(KC.dtype.element_ty), mask=ok & (slot < L))
    else:
        slot = tl.load(COUNTER).to(tl.int64)
        v = tl.load(base + rows[:, None] * som + cols[None, :], mask=ok, other=0.0)
        at = VC + rows[:, None] * svcb + (head - HQ - HK) * svch + slot * svcn + cols[None, :]
        tl.store(at, v.to(VC.dtype.element_ty), mask=ok & (slot < L))


@triton.jit
def _rope_norm_kernel(
    Q, K, QO, KO, COS, SIN, QW, KW,
    S, HQ, HK, HALF, PASS, D, NQB,
    sqb, sqh, sqs, skb, skh, sks,
    sqob, sqoh, sqos, skob, skoh, skos,
    scb, scs, ssb, sss, eps,
    BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_PASS: tl.constexpr,
    NORM_ROUND: tl.constexpr, NORM_AFTER: tl.constexpr = False,
):
    # grid: (batch * seq, q head blocks + k head blocks). Each program normalizes its heads over
    # head_dim and rotates them (NORM_AFTER: rotates, then normalizes); a head is read whole
    # before any of it is written, so in place works.
    tok = tl.program_id(0).to(tl.int64)
    blk = tl.program_id(1)
    b = tok // S
    s = tok % S
    cos_row = COS + b * scb + s * scs
    sin_row = SIN + b * ssb + s * sss
    if blk < NQB:
        h0 = blk * BLOCK_H
        heads = h0 + tl.arange(0, BLOCK_H)
        _rotate(Q + b * sqb + s * sqs, QO + b * sqob + s * sqos, cos_row, sin_row, heads, heads < HQ,
                sqh, sqoh, HALF, PASS, QW, h0, HQ, D, eps,
                BLOCK_H, BLOCK_HALF, BLOCK_D, BLOCK_PASS, True, NORM_ROUND, NORM_AFTER)
    else:
        h0 = (blk - NQB) * BLOCK_H
        heads = h0 + tl.arange(0, BLOCK_H)
        _rotate(K + b * skb + s * sks, KO + b * skob + s * skos, cos_row, sin_row, heads, heads < HK,
                skh, skoh, HALF, PASS, KW, h0, HK, D, eps,
                BLOCK_H, BLOCK_HALF, BLOCK_D, BLOCK_PASS, True, NORM_ROUND, NORM_AFTER)


# Heads per program of the kernels that fuse the q/k norms: Llama-3.1-8B's 32 q heads take 4
# programs and its 8 k heads one, so a single decode token still spreads over several programs.
NORM_HEADS_PER_PROGRAM = 8


def heads_per_program(hq: int, hk: int) -> int:
    """BLOCK_H of those kernels: NORM_HEADS_PER_PROGRAM, or fewer when no head count needs that
    many (each head is normalized and rotated alone, so the grouping changes no number)."""
    return min(NORM_HEADS_PER_PROGRAM, _backend.next_pow2(max(hq, hk)))


def norm_warps(d: int) -> int:
    """The warps of a launch that fuses the q/k norms: those of rms_norm's own launch over a
    head_dim row. A block's layout (and so its sum's order) follows the warps, and the rstd must
    be the unfused one's."""
    return _norm_row_warps(min(_backend.next_pow2(d), MAX_BLOCK))


def check_norm_weights(q, k, q_norm_weight, k_norm_weight, eps, norm_round, d, _err) -> None:
    """The q/k norm operands of a kernel that fuses them; _err(msg) makes the op's error."""
    if (q_norm_weight is None) != (k_norm_weight is None):
        raise _err("q_norm_weight and k_norm_weight go together: give both or neither")
    if q_norm_weight is not None:
        for name, w, x in (("q_norm_weight", q_norm_weight, q), ("k_norm_weight", k_norm_weight, k)):
            if not isinstance(w, torch.Tensor) or w.dim() != 1 or w.shape[0] != d:
                raise _err(f"{name} shape {tuple(getattr(w, 'shape', ())) or type(w).__name__}: want [head_dim {d}]")
            if w.dtype not in _ACT_DTYPES:
                raise _err(f"{name} dtype {w.dtype} not supported (want bfloat16, float16 or float32)")
            if w.device != q.device:
                raise _err(f"{name} on {w.device}, q on {q.device}")
            if norm_round and torch.promote_types(w.dtype, x.dtype) != x.dtype:
                # Llama's order multiplies in the weight's dtype: the norm's output would be wider
                # than the activations the rotation and the cache hold
                raise _err(f"{name} dtype {w.dtype} would make the norm's output {torch.promote_types(w.dtype, x.dtype)}, "
                           f"not {x.dtype}: run the norm on its own")
        if not (eps >= 0.0):
            raise _err(f"eps must be >= 0, got {eps}")


# num_warps of the one-token-per-program kernel. H200 sweep of the previous (q and k in
# separate programs) layout (docs/results/2026-11-29-h200/sweep-rmsnorm-rope.csv), M=16384:
# 2-4 warps were best (1B: 32 heads x 32 half-columns per program, 2 warps 83% of copy BW,
# 8 warps 60%; 8B: 8 heads x 64, 4 warps 86%, 8 warps 57%); 8-16 warps, the old rule's choice,
# lost up to 30 points. Outcome with this kernel at 4 warps (bench-v2.csv there, same card):
# 92% (1B) and 93% (8B) of the copy bandwidth.
ROPE_NUM_WARPS = 4


def _check_qk(t: torch.Tensor, name: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"xpuinject_kernels: apply_rope: {name} must be a tensor")
    if t.dim() != 4:
        raise ValueError(
            f"xpuinject_kernels: apply_rope: {name} shape {tuple(t.shape)}: want [batch, heads, seq, head_dim]"
        )
    if t.dtype not in _ACT_DTYPES:
        raise ValueError(f"xpuinject_kernels: apply_rope: {name} dtype {t.dtype} not supported (want bfloat16, float16 or float32)")


def _cs(t: torch.Tensor, name: str, batch: int, seq: int, d: int) -> torch.Tensor:
    """Validate cos/sin [batch or 1, seq, rotary_dim] (rotary_dim even, <= head_dim d: partial
    rotary when smaller, none when 0); return a 3-D view with unit last stride."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"xpuinject_kernels: apply_rope: {name} must be a tensor")
    if t.dim() == 4 and t.shape[1] == 1:  # already unsqueezed at dim 1 ([b, 1, s, d])
        t = t[:, 0]
    if t.dim() == 2:  # [seq, head_dim]
        t = t.unsqueeze(0)
    if t.dim() != 3 or t.shape[0] not in (1, batch) or t.shape[1] != seq or not (0 <= t.shape[2] <= d) or t.shape[2] % 2:
        raise ValueError(
            f"xpuinject_kernels: apply_rope: {name} shape {tuple(t.shape)}: want [{batch} or 1, {seq}, rotary_dim] "
            f"with rotary_dim even and at most head_dim {d}"
        )
    if t.dtype not in _ACT_DTYPES:
        raise ValueError(f"xpuinject_kernels: apply_rope: {name} dtype {t.dtype} not supported")
    if t.stride(-1) != 1 and t.shape[2]:
        t = t.contiguous()
    return t


def apply_rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inplace: bool = False,
    config: Optional[dict] = None, *, q_norm_weight: Optional[torch.Tensor] = None,
    k_norm_weight: Optional[torch.Tensor] = None, eps: float = 1e-6, norm_round: bool = True,
    norm_after: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Rotate q [B, Hq, S, D] and k [B, Hk, S, D] by cos/sin [B or 1, S, D] (rotate-half).

    Returns (q_rot, k_rot): new tensors in q/k's dimension order, or q and k themselves when
    inplace=True.
    q/k may be non-contiguous views (unit last stride is not required: it is handled by a copy).
    config: launch constants {"tile_elems": elements per half-tile (sets the heads per tile),
    "num_warps": n}, either or both, instead of the defaults (for tuning); None uses them.
    q_norm_weight, k_norm_weight ([D], given together): RMSNorm each q and k head over head_dim
    with eps first, in the same launch, bit for bit rmsnorm.py's kernel (norm_round=True:
    rms_norm, Llama/Qwen3's order; False: rms_norm_gemma on the folded fp32 1 + w) followed by
    the rotation; config does not apply to that launch. norm_after: the norms run on the rotated
    heads instead (HunYuan's order), from the rotation's unrounded fp32 values.
    The ops: torch.ops.<ns>.apply_rope, and apply_rope_ (in place: it declares that it writes q
    and k) for inplace=True.
    """
    tile, warps = 0, 0
    if config is not None:
        cfg = _backend.launch_config(config, ("tile_elems", "num_warps"), "apply_rope")
        tile, warps = cfg.get("tile_elems", 0), cfg.get("num_warps", 0)
    norm = (q_norm_weight, k_norm_weight, float(eps), bool(norm_round), bool(norm_after))
    if inplace:
        if _ops.traced(q):
            _ops.call("apply_rope_", q, k, cos, sin, tile, warps, *norm)
        else:
            _apply_rope_(q, k, cos, sin, tile, warps, *norm)
        return q, k
    if _ops.traced(q):
        return _ops.call("apply_rope", q, k, cos, sin, tile, warps, *norm)
    return _apply_rope(q, k, cos, sin, tile, warps, *norm)


def _err(msg: str) -> ValueError:
    return ValueError(f"xpuinject_kernels: apply_rope: {msg}")


def _check_rope(q, k, cos, sin, q_norm_weight=None, k_norm_weight=None, eps=1e-6,
                norm_round=True) -> Tuple[torch.Tensor, torch.Tensor]:
    """Check every operand; returns cos/sin as 3-D views with unit last stride."""
    _check_qk(q, "q")
    _check_qk(k, "k")
    bq, hq, sq, d = q.shape
    bk, hk, sk, dk = k.shape
    if (bk, sk, dk) != (bq, sq, d):
        raise ValueError(
            f"xpuinject_kernels: apply_rope: k shape {tuple(k.shape)} incompatible with q shape {tuple(q.shape)} "
            "(batch, seq and head_dim must match)"
        )
    if d % 2 != 0:
        raise ValueError(f"xpuinject_kernels: apply_rope: head_dim {d} must be even for rotate-half")
    if k.dtype != q.dtype:
        raise ValueError(f"xpuinject_kernels: apply_rope: k dtype {k.dtype} != q dtype {q.dtype}")
    for t, n in ((k, "k"), (cos, "cos"), (sin, "sin")):
        if isinstance(t, torch.Tensor) and t.device != q.device:
            raise ValueError(f"xpuinject_kernels: apply_rope: {n} on {t.device}, q on {q.device}")
    check_norm_weights(q, k, q_norm_weight, k_norm_weight, eps, norm_round, d, _err)
    cos, sin = _cs(cos, "cos", bq, sq, d), _cs(sin, "sin", bq, sq, d)
    if cos.shape[2] != sin.shape[2]:
        raise ValueError(f"xpuinject_kernels: apply_rope: cos has {cos.shape[2]} columns, sin {sin.shape[2]}")
    return cos, sin


def _apply_rope(q, k, cos, sin, tile_elems: int, num_warps: int, q_norm_weight=None, k_norm_weight=None, eps=1e-6,
                norm_round=True, norm_after=False) -> Tuple[torch.Tensor, torch.Tensor]:
    cos, sin = _check_rope(q, k, cos, sin, q_norm_weight, k_norm_weight, eps, norm_round)
    _backend.require_runnable(q, "apply_rope")
    qi = q if q.stride(-1) == 1 else q.contiguous()
    ki = k if k.stride(-1) == 1 else k.contiguous()
    # Outputs in q/k's own dimension order: transformers' q/k are [B, S, H, D] projections viewed
    # as [B, H, S, D], and a contiguous [B, H, S, D] output made every token's heads land
    # S*D apart -- scattered 128-256-byte writes: 58% of the copy bandwidth at M=16384 on the
    # H200 against Liger's in-place 90% (docs/results/2026-11-29-h200/bench-v1.csv).
    qo = _backend.empty_like(qi)
    ko = _backend.empty_like(ki)
    if q.numel() == 0 and k.numel() == 0:
        return qo, ko
    if q_norm_weight is not None:
        _launch_norm(qi, ki, qo, ko, cos, sin, q_norm_weight, k_norm_weight, eps, norm_round, norm_after)
        _backend.count("apply_rope.norm")
        return qo, ko
    _launch(qi, ki, qo, ko, cos, sin, tile_elems or 2048, num_warps or ROPE_NUM_WARPS, copy_pass=True)
    _backend.count("apply_rope")
    return qo, ko


def _apply_rope_fake(q, k, cos, sin, tile_elems, num_warps, q_norm_weight=None, k_norm_weight=None, eps=1e-6,
                     norm_round=True, norm_after=False):
    _check_rope(q, k, cos, sin, q_norm_weight, k_norm_weight, eps, norm_round)
    qi = q if q.stride(-1) == 1 else q.contiguous()
    ki = k if k.stride(-1) == 1 else k.contiguous()
    return torch.empty_like(qi), torch.empty_like(ki)


def _apply_rope_(q, k, cos, sin, tile_elems: int, num_warps: int, q_norm_weight=None, k_norm_weight=None, eps=1e-6,
                 norm_round=True, norm_after=False) -> None:
    cos, sin = _check_rope(q, k, cos, sin, q_norm_weight, k_norm_weight, eps, norm_round)
    if q.stride(-1) != 1 or k.stride(-1) != 1:
        raise ValueError("xpuinject_kernels: apply_rope: inplace=True needs q and k with unit last stride")
    _backend.require_runnable(q, "apply_rope")
    if q.numel() == 0 and k.numel() == 0:
        return
    if q_norm_weight is not None:
        _launch_norm(q, k, q, k, cos, sin, q_norm_weight, k_norm_weight, eps, norm_round, norm_after)
        _backend.count("apply_rope.norm")
        return
    if cos.shape[2] == 0:  # nothing rotates and nothing is normalized: q and k are the result
        return
    _launch(q, k, q, k, cos, sin, tile_elems or 2048, num_warps or ROPE_NUM_WARPS)
    _backend.count("apply_rope.inplace")


def _apply_rope_inplace_fake(q, k, cos, sin, tile_elems, num_warps, q_norm_weight=None, k_norm_weight=None, eps=1e-6,
                             norm_round=True, norm_after=False):
    _check_rope(q, k, cos, sin, q_norm_weight, k_norm_weight, eps, norm_round)
    if q.stride(-1) != 1 or k.stride(-1) != 1:
        raise ValueError("xpuinject_kernels: apply_rope: inplace=True needs q and k with unit last stride")


_NORM_ARGS = ("Tensor? q_norm_weight=None, Tensor? k_norm_weight=None, float eps=1e-06, bool norm_round=True, "
              "bool norm_after=False")
_ops.define("apply_rope", "(Tensor q, Tensor k, Tensor cos, Tensor sin, int tile_elems, int num_warps, "
            f"{_NORM_ARGS}) -> (Tensor, Tensor)", _apply_rope, _apply_rope_fake)
_ops.define("apply_rope_", "(Tensor(a!) q, Tensor(b!) k, Tensor cos, Tensor sin, int tile_elems, int num_warps, "
            f"{_NORM_ARGS}) -> ()", _apply_rope_, _apply_rope_inplace_fake, mutates=("q", "k"))


def half_block(half: int) -> int:
    """BLOCK_HALF for a rotation of `half` column pairs: at least one lane, all masked when nothing
    rotates (rotary_dim 0)."""
    return max(1, _backend.next_pow2(half))


def _launch_norm(qi, ki, qo, ko, cos, sin, qw, kw, eps, norm_round, norm_after=False) -> None:
    """The launch of apply_rope with the q/k norms fused in, on validated operands."""
    bq, hq, sq, d = qi.shape
    hk = ki.shape[1]
    half = cos.shape[2] // 2
    npass = d - 2 * half
    bh = heads_per_program(hq, hk)
    nqb, nkb = _backend.cdiv(hq, bh), _backend.cdiv(hk, bh)
    scb = cos.stride(0) if cos.shape[0] == bq and bq > 1 else 0
    ssb = sin.stride(0) if sin.shape[0] == bq and bq > 1 else 0
    _rope_norm_kernel[(bq * sq, nqb + nkb)](
        qi, ki, qo, ko, cos, sin, qw.contiguous(), kw.contiguous(),
        sq, hq, hk, half, npass, d, nqb,
        qi.stride(0), qi.stride(1), qi.stride(2), ki.stride(0), ki.stride(1), ki.stride(2),
        qo.stride(0), qo.stride(1), qo.stride(2), ko.stride(0), ko.stride(1), ko.stride(2),
        scb, cos.stride(1), ssb, sin.stride(1), float(eps),
        BLOCK_H=bh, BLOCK_HALF=half_block(half), BLOCK_D=_backend.next_pow2(d),
        BLOCK_PASS=_backend.next_pow2(npass) if npass else 0, NORM_ROUND=bool(norm_round),
        NORM_AFTER=bool(norm_after), num_warps=norm_warps(d),
    )


def _launch(qi, ki, qo, ko, cos, sin, tile_elems: int = 2048, num_warps: int = ROPE_NUM_WARPS,
            copy_pass: bool = False) -> None:
    """The kernel launch of apply_rope on validated operands. tile_elems (elements per half-tile,
    which sets the heads per tile) and num_warps are the launch constants `config` sets.
    copy_pass: an out-of-place call copies the channels past rotary_dim (in place they stay)."""
    bq, hq, sq, d = qi.shape
    hk = ki.shape[1]
    half = cos.shape[2] // 2
    npass = d - 2 * half
    block_half = half_block(half)
    # heads per tile: up to ~2K elements per half-tile (a 128-dim head is 2 halves of 64); a
    # whole Llama token's q (32 heads) and k (8 heads) are then one tile each.
    cap = max(1, tile_elems // block_half)
    # cos/sin with batch 1 broadcast over the batch: stride 0
    scb = cos.stride(0) if cos.shape[0] == bq and bq > 1 else 0
    ssb = sin.stride(0) if sin.shape[0] == bq and bq > 1 else 0
    _rope_kernel[(bq * sq,)](
        qi, ki, qo, ko, cos, sin,
        sq, hq, hk, half, npass,
        qi.stride(0), qi.stride(1), qi.stride(2), ki.stride(0), ki.stride(1), ki.stride(2),
        qo.stride(0), qo.stride(1), qo.stride(2), ko.stride(0), ko.stride(1), ko.stride(2),
        scb, cos.stride(1), ssb, sin.stride(1),
        BLOCK_HQ=min(_backend.next_pow2(hq), cap), BLOCK_HK=min(_backend.next_pow2(hk), cap), BLOCK_HALF=block_half,
        BLOCK_PASS=_backend.next_pow2(npass) if copy_pass and npass else 0,
        num_warps=num_warps,
    )


def rotate_half_ref(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply_rope_ref(q, k, cos, sin, dtype=torch.float32):
    """Reference in `dtype` (transformers' formula with unsqueeze_dim=1, no intermediate
    rounding); cos/sin narrower than head_dim rotate only the first rotary_dim channels."""
    c = cos.to(dtype).unsqueeze(1)
    s = sin.to(dtype).unsqueeze(1)
    rd = c.shape[-1]

    def rot(x):
        x = x.to(dtype)
        r = x[..., :rd]
        return torch.cat((r * c + rotate_half_ref(r) * s, x[..., rd:]), dim=-1)

    return rot(q), rot(k)
