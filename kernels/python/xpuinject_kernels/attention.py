"""Attention: causal flash-attention prefill (GQA, padding / general masks) and split-K decode.

Layouts (transformers' attention-function contract, transformers 5.17
integrations/sdpa_attention.py `sdpa_attention_forward` and models/llama/modeling_llama.py
`eager_attention_forward`):

    query [batch, heads,    seq_q, head_dim]   (any strides: transposed views of the projections)
    key   [batch, kv_heads, seq_k, head_dim]   heads % kv_heads == 0; query head h reads kv head
    value [batch, kv_heads, seq_k, head_dim]   h // (heads // kv_heads)  (repeat_kv's order)
    out   [batch, seq_q, heads, head_dim]      contiguous, in the input dtype

Numerics: scores and softmax in fp32 (exp2 with log2(e) folded into the scale), the probabilities
rounded to the value dtype before the P@V product (as FlashAttention does), fp32 accumulation,
one rounding of the output.

Masks (True / 0.0 = attend):
  * causal: queries are the LAST seq_q positions of the keys (bottom-right alignment, a KV-cache
    prefix): query i sees keys j <= i + seq_k - seq_q.
  * key_mask [batch, seq_k]: bool/integer (nonzero = attend) or additive float (added to the scaled
    scores; a value <= finfo(dtype).min, e.g. -inf or transformers' min, means "no weight").
  * attn_mask [batch, 1|heads, 1|seq_q, seq_k] (a general 4-D mask, same value conventions): loaded
    tile by tile from its own strides (broadcast dims cost nothing); tiles with no attended key
    are skipped, so a causal 4-D mask costs mask bytes but not the masked half of the FLOPs.
  * a query row with no attended key gets zeros (not NaN, not a uniform average).

Decode (one query token): flash-decoding. The KV length is cut into splits; one program per
(split, batch, kv head) handles the whole query-head group sharing that kv head (K/V read once
per group) and writes fp32 partial (max, sum, acc); a reduce kernel combines the splits.
"""

from __future__ import annotations

import contextlib
import math
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from . import _backend, _ops, gpus
from .contract import ATTENTION_HEAD_DIMS

__all__ = [
    "flash_attention_prefill",
    "decode_attention",
    "decode_num_splits",
    "attention_forward",
    "attention_ref",
    "register_transformers",
    "SUPPORTED_HEAD_DIMS",
]

# head_dim values with a tested kernel path (contract.json, which the planner reads too). The head
# dimension block is padded to a power of two with masks (80 -> 128, 96 -> 128), so other sizes
# would compile too, but only these are tested.
SUPPORTED_HEAD_DIMS = ATTENTION_HEAD_DIMS

_ACT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_LOG2E = 1.4426950408889634

# Mask kinds (constexpr MASK_KIND).
_MASK_NONE = 0
_MASK_KEY = 1  # one value per (batch[, head], key): a padding mask
_MASK_FULL = 2  # one value per (batch, head, query, key): a general 4-D mask

# Decode split sizing. A captured step's grid is fixed by the cache bucket while only the filled
# part is read (splits past the length exit at once), so a step needs many splits to keep enough
# programs reading. H200, one program per (split, batch, kv head), bucket 1024 filled to 561
# (benchmarks/bench_decode_step.py, docs/results/2026-12-01-h200/decode-step-kernels.json):
# 16 splits of 64 keys were the fastest or within 8% of it at both Llama shapes and batches 1 and
# 8 (8B batch 1: 6.8 us against 9.1 us with the earlier 4 splits of 256 keys). A split's partial
# write (2 * head_dim * 4 bytes per head) stays small next to the 2 * 64 * head_dim * 2 bytes of
# K/V it reads. MAX_SPLITS bounds the reduce kernel's tile (and the partial buffer).
_DECODE_MIN_KEYS_PER_SPLIT = 64
_DECODE_MAX_SPLITS = 64
_DECODE_PROGRAMS_PER_SM = 8

# Autotune keys use power-of-two buckets of the sequence lengths: keying on the raw lengths would
# re-benchmark every new prompt length during generation.


def _bucket(n: int) -> int:
    return _backend.next_pow2(max(1, int(n)))


# ---------------------------------------------------------------------------------------------
# Prefill kernel
# ---------------------------------------------------------------------------------------------


@triton.jit
def _mma(a, b, acc, DOT_PREC: tl.constexpr, UPCAST: tl.constexpr):
    """tl.dot with fp32 accumulation. UPCAST (interpreter + bf16 only): triton 3.6's interpreter
    keeps bf16 as raw uint16 bits and its dot multiplies the bits; converting both operands to
    fp32 first is exact (bf16 products fit fp32) and keeps the GPU path's numerics."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc, input_precision=DOT_PREC)


@triton.jit
def _score(a, b, DOT_PREC: tl.constexpr, UPCAST: tl.constexpr):
    """a @ b with a fresh fp32 result (the scores). A separate function rather than
    _mma(a, b, None, ...): passing None through a jit parameter is rejected by older Triton
    releases (PyPI's triton-xpu 3.3: "'constexpr' object has no attribute 'handle'"), which
    scripts/xpu_compile_check.py compiles these kernels with."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a, b, input_precision=DOT_PREC)


@triton.jit
def _scaled(raw, qk_scale, cap_l2, SOFTCAP: tl.constexpr):
    """Scores in log2 units. SOFTCAP: cap * tanh(raw * scaling / cap) (Gemma 2's
    attn_logit_softcapping, transformers 5.17 models/gemma2/modeling_gemma2.py
    eager_attention_forward), with qk_scale = scaling / cap and cap_l2 = cap * log2(e); tanh as
    1 - 2 / (exp(2x) + 1), its exponent clamped where fp32's tanh is already +-1 (|x| > 43), so
    exp2 neither overflows nor underflows. Otherwise raw * qk_scale, qk_scale = scaling * log2(e)."""
    if SOFTCAP:
        y = tl.minimum(tl.maximum(raw * qk_scale * 2.8853900817779268, -126.0), 126.0)
        t = 1.0 - 2.0 / (tl.math.exp2(y) + 1.0)
        return t * cap_l2
    else:
        return raw * qk_scale


@triton.jit
def _prefill_block(
    acc, l_i, m_i, q, k_base, v_base, m_base,
    offs_m, offs_d, start_n,
    stride_kn, stride_kd, stride_vn, stride_vd, stride_mm, stride_mn,
    SEQ_Q, SEQ_K, causal_off, qk_scale, mask_min, cap_l2, window,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
    APPLY_CAUSAL: tl.constexpr, CHECK_N: tl.constexpr,
    MASK_KIND: tl.constexpr, MASK_ADD: tl.constexpr, DOT_PREC: tl.constexpr, UPCAST: tl.constexpr,
    SOFTCAP: tl.constexpr, SLIDING: tl.constexpr,
):
    """One BLOCK_N key block of the online softmax. CHECK_N: the block may run past SEQ_K;
    APPLY_CAUSAL: the block crosses the diagonal; SLIDING: query i (at position i + causal_off)
    sees only keys j > i + causal_off - window (transformers' sliding_window_overlay)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_n64 = offs_n.to(tl.int64)
    n_ok = offs_n < SEQ_K
    d_ok = offs_d < HEAD_DIM

    # ---- which (query, key) pairs get weight, and the additive bias ----
    keep = tl.full([BLOCK_N], 1, tl.int1)[None, :]
    if CHECK_N:
        keep = keep & n_ok[None, :]
    if APPLY_CAUSAL:
        keep = keep & (offs_n[None, :] <= offs_m[:, None] + causal_off)
    if SLIDING:
        keep = keep & (offs_n[None, :] > offs_m[:, None] + causal_off - window)
    bias = tl.zeros([BLOCK_N], dtype=tl.float32)[None, :]
    if MASK_KIND == 1:
        mv = tl.load(m_base + offs_n64 * stride_mn, mask=n_ok, other=0)
        if MASK_ADD:
            mvf = mv.to(tl.float32)
            kk = mvf > mask_min
            keep = keep & kk[None, :]
            bias = tl.where(kk, mvf, 0.0)[None, :] * 1.4426950408889634
        else:
            keep = keep & (mv != 0)[None, :]
    if MASK_KIND == 2:
        mptr = m_base + offs_m.to(tl.int64)[:, None] * stride_mm + offs_n64[None, :] * stride_mn
        mok = (offs_m[:, None] < SEQ_Q) & n_ok[None, :]
        mv = tl.load(mptr, mask=mok, other=0)
        if MASK_ADD:
            mvf = mv.to(tl.float32)
            kk = (mvf > mask_min) & mok
            keep = keep & kk
            bias = tl.where(kk, mvf, 0.0) * 1.4426950408889634
        else:
            keep = keep & (mv != 0)

    # A general mask can exclude whole tiles (the upper triangle of a causal 4-D mask, left
    # padding): skip their K/V loads and both dots.
    live = True
    if MASK_KIND == 2:
        live = tl.max(keep.to(tl.int32)) > 0
    if live:
        k_ptrs = k_base + offs_n64[None, :] * stride_kn + offs_d[:, None] * stride_kd
        if CHECK_N:
            k = tl.load(k_ptrs, mask=n_ok[None, :] & d_ok[:, None], other=0.0)
        elif HEAD_DIM != BLOCK_D:
            k = tl.load(k_ptrs, mask=d_ok[:, None], other=0.0)
        else:
            k = tl.load(k_ptrs)
        s = _scaled(_score(q, k, DOT_PREC, UPCAST), qk_scale, cap_l2, SOFTCAP) + bias
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row with nothing attended so far keeps m = -inf; shift by 0 so exp2 gives 0, not NaN.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v_ptrs = v_base + offs_n64[:, None] * stride_vn + offs_d[None, :] * stride_vd
        if CHECK_N:
            v = tl.load(v_ptrs, mask=n_ok[:, None] & d_ok[None, :], other=0.0)
        elif HEAD_DIM != BLOCK_D:
            v = tl.load(v_ptrs, mask=d_ok[None, :], other=0.0)
        else:
            v = tl.load(v_ptrs)
        acc = _mma(p.to(v.dtype), v, acc, DOT_PREC, UPCAST)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _prefill_kernel(
    Q, K, V, O, M,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_mb, stride_mh, stride_mm, stride_mn,
    H, GROUP, SEQ_Q, SEQ_K, qk_scale, mask_min, cap_l2, window,
    SEQ_Q_BUCKET, SEQ_K_BUCKET,  # autotune keys only
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr, MASK_ADD: tl.constexpr, DOT_PREC: tl.constexpr,
    UPCAST: tl.constexpr, SOFTCAP: tl.constexpr, SLIDING: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    num_m = tl.cdiv(SEQ_Q, BLOCK_M)
    # Causal: the last query blocks do the most work; launch them first for a better tail.
    if IS_CAUSAL:
        start_m = num_m - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    # int64 before multiplying by strides: batch*stride can pass 2^31.
    off_b = (pid_bh // H).to(tl.int64)
    off_h = (pid_bh % H).to(tl.int64)
    off_kvh = off_h // GROUP

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    m_ok = offs_m < SEQ_Q
    d_ok = offs_d < HEAD_DIM

    q_ptrs = (Q + off_b * stride_qb + off_h * stride_qh
              + offs_m.to(tl.int64)[:, None] * stride_qm + offs_d[None, :] * stride_qd)
    q = tl.load(q_ptrs, mask=m_ok[:, None] & d_ok[None, :], other=0.0)
    k_base = K + off_b * stride_kb + off_kvh * stride_kh
    v_base = V + off_b * stride_vb + off_kvh * stride_vh
    m_base = M + off_b * stride_mb + off_h * stride_mh

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    causal_off = SEQ_K - SEQ_Q
    if IS_CAUSAL:
        # Keys <= start_m*BLOCK_M + causal_off are visible to every row of this block: whole
        # blocks below that need no causal test; the rest up to the last row's diagonal do.
        full_hi = ((start_m * BLOCK_M + causal_off + 1) // BLOCK_N) * BLOCK_N
        hi = tl.minimum((start_m + 1) * BLOCK_M, SEQ_Q) + causal_off
    else:
        full_hi = (SEQ_K // BLOCK_N) * BLOCK_N
        hi = SEQ_K
    lo = 0
    if SLIDING:
        # Blocks wholly older than the first row's window carry no weight: start past them.
        lo = (tl.maximum(start_m * BLOCK_M + causal_off - window + 1, 0) // BLOCK_N) * BLOCK_N
        full_hi = tl.maximum(full_hi, lo)

    for start_n in range(lo, full_hi, BLOCK_N):
        acc, l_i, m_i = _prefill_block(
            acc, l_i, m_i, q, k_base, v_base, m_base, offs_m, offs_d, start_n,
            stride_kn, stride_kd, stride_vn, stride_vd, stride_mm, stride_mn,
            SEQ_Q, SEQ_K, causal_off, qk_scale, mask_min, cap_l2, window,
            HEAD_DIM, BLOCK_D, BLOCK_N, False, False, MASK_KIND, MASK_ADD, DOT_PREC, UPCAST, SOFTCAP, SLIDING)
    for start_n in range(full_hi, hi, BLOCK_N):
        acc, l_i, m_i = _prefill_block(
            acc, l_i, m_i, q, k_base, v_base, m_base, offs_m, offs_d, start_n,
            stride_kn, stride_kd, stride_vn, stride_vd, stride_mm, stride_mn,
            SEQ_Q, SEQ_K, causal_off, qk_scale, mask_min, cap_l2, window,
            HEAD_DIM, BLOCK_D, BLOCK_N, IS_CAUSAL, True, MASK_KIND, MASK_ADD, DOT_PREC, UPCAST, SOFTCAP, SLIDING)

    # Fully masked rows: l = 0 and acc = 0 -> output 0.
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    o_ptrs = (O + off_b * stride_ob + off_h * stride_oh
              + offs_m.to(tl.int64)[:, None] * stride_om + offs_d[None, :] * stride_od)
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=m_ok[:, None] & d_ok[None, :])


# ---------------------------------------------------------------------------------------------
# Decode kernels (flash-decoding)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _decode_split_kernel(
    Q, K, V, M, LENS, PM, PL, PACC, O, SEM,
    stride_lens, LEN_ADD, GRID_SLOT, TOTAL,
    stride_qb, stride_qh, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_mb, stride_mh, stride_mn,
    stride_ob, stride_oh, stride_od,
    H, H_KV, GROUP, SEQ_K, SPLIT_SIZE, NUM_SPLITS, qk_scale, mask_min, cap_l2, window,
    SPLIT_BUCKET,  # autotune key only
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_G: tl.constexpr,
    HAS_LENS: tl.constexpr, MASK_KIND: tl.constexpr, MASK_ADD: tl.constexpr, DOT_PREC: tl.constexpr,
    UPCAST: tl.constexpr, SINGLE: tl.constexpr, SOFTCAP: tl.constexpr, SLIDING: tl.constexpr,
    ADVANCE: tl.constexpr, BLOCK_N: tl.constexpr, PDL: tl.constexpr = False,
):
    _backend.pdl_wait(PDL)
    pid_s = tl.program_id(0)
    pid_bk = tl.program_id(1)
    off_b = (pid_bk // H_KV).to(tl.int64)
    off_kvh = (pid_bk % H_KV).to(tl.int64)

    offs_g = tl.arange(0, BLOCK_G)
    g_ok = offs_g < GROUP
    heads = off_kvh * GROUP + offs_g  # int64 query heads of this group
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM

    q = tl.load(Q + off_b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :] * stride_qd,
                mask=g_ok[:, None] & d_ok[None, :], other=0.0)
    k_base = K + off_b * stride_kb + off_kvh * stride_kh
    v_base = V + off_b * stride_vb + off_kvh * stride_vh
    m_base = M + off_b * stride_mb + heads * stride_mh  # [BLOCK_G] row bases (stride_mh 0: shared)

    kv_end = SEQ_K
    if HAS_LENS:
        # LEN_ADD: keys written since the length was counted (the token a fused RoPE + cache
        # write just stored, whose counter this launch advances)
        lens = tl.load(LENS + off_b * stride_lens)
        kv_end = tl.minimum(lens.to(tl.int32) + LEN_ADD, SEQ_K)
    start = pid_s * SPLIT_SIZE
    end = tl.minimum(start + SPLIT_SIZE, kv_end)
    if SLIDING:
        # The query sits at kv_end - 1: keys before kv_end - window get no weight and are not read.
        start = tl.maximum(start, kv_end - window)

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    for start_n in range(start, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        offs_n64 = offs_n.to(tl.int64)
        n_ok = offs_n < end
        k = tl.load(k_base + offs_n64[None, :] * stride_kn + offs_d[:, None] * stride_kd,
                    mask=n_ok[None, :] & d_ok[:, None], other=0.0)
        s = _scaled(_score(q, k, DOT_PREC, UPCAST), qk_scale, cap_l2, SOFTCAP)  # [BLOCK_G, BLOCK_N]
        keep = n_ok[None, :] & g_ok[:, None]
        if MASK_KIND == 1:
            mv = tl.load(m_base[:, None] + offs_n64[None, :] * stride_mn, mask=keep, other=0)
            if MASK_ADD:
                mvf = mv.to(tl.float32)
                keep = keep & (mvf > mask_min)
                s = s + tl.where(keep, mvf, 0.0) * 1.4426950408889634
            else:
                keep = keep & (mv != 0)
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(v_base + offs_n64[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                    mask=n_ok[:, None] & d_ok[None, :], other=0.0)
        acc = _mma(p.to(v.dtype), v, acc, DOT_PREC, UPCAST)
        m_i = m_new

    if SINGLE:
        # One split covers the cache: normalize here and skip the reduce launch (a launch costs
        # ~25 us of host time on the H200 machine, as much as the kernel for short caches).
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        out = acc / l_safe[:, None]
        tl.store(O + off_b * stride_ob + heads[:, None] * stride_oh + offs_d[None, :] * stride_od,
                 out.to(O.dtype.element_ty), mask=g_ok[:, None] & d_ok[None, :])
    else:
        # Partials: PM/PL [B, H, NUM_SPLITS], PACC [B, H, NUM_SPLITS, HEAD_DIM], contiguous fp32.
        # An empty split (past a sequence's valid length) writes m = -inf, l = 0, acc = 0.
        row = (off_b * H + heads) * NUM_SPLITS + pid_s
        tl.store(PM + row, m_i, mask=g_ok)
        tl.store(PL + row, l_i, mask=g_ok)
        tl.store(PACC + row[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=g_ok[:, None] & d_ok[None, :])
    if ADVANCE and SINGLE:
        # One split (no reduce launch): the last program of the grid advances the cache counter;
        # every program read it before counting itself here.
        tl.debug_barrier()
        done = tl.atomic_add(SEM + GRID_SLOT, 1)
        if done == TOTAL - 1:
            tl.store(LENS, lens + LEN_ADD)
            tl.atomic_xchg(SEM + GRID_SLOT, 0)


# Warps of a decode reduce program where launches overlap (PDL): fewer warps likely leave the
# launch ahead more of the SM while the programs wait on it. On the H200 the Qwen3-30B-A3B decode
# step was 0.628 ms against 0.632 at 4 (BENCHMARKS.md). Elsewhere 4, as before.
_REDUCE_WARPS_PDL = 1


@triton.jit
def _decode_reduce_kernel(
    PM, PL, PACC, O, LENS,
    stride_ob, stride_oh, stride_od,
    H, NUM_SPLITS, LEN_ADD,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, ADVANCE: tl.constexpr,
    PDL: tl.constexpr = False,
):
    _backend.pdl_wait(PDL)
    pid = tl.program_id(0).to(tl.int64)  # b * H + h
    off_b = pid // H
    off_h = pid % H
    offs_s = tl.arange(0, BLOCK_S)
    s_ok = offs_s < NUM_SPLITS
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    rows = pid * NUM_SPLITS + offs_s
    m = tl.load(PM + rows, mask=s_ok, other=float("-inf"))
    l = tl.load(PL + rows, mask=s_ok, other=0.0)
    a = tl.load(PACC + rows[:, None] * HEAD_DIM + offs_d[None, :], mask=s_ok[:, None] & d_ok[None, :], other=0.0)
    m_max = tl.max(m, 0)
    m_safe = tl.where(m_max == float("-inf"), 0.0, m_max)
    w = tl.math.exp2(m - m_safe)  # 0 for empty splits (m = -inf)
    l_tot = tl.sum(w * l, 0)
    acc = tl.sum(w[:, None] * a, 0)
    l_safe = tl.where(l_tot == 0.0, 1.0, l_tot)
    out = acc / l_safe
    tl.store(O + off_b * stride_ob + off_h * stride_oh + offs_d * stride_od,
             out.to(O.dtype.element_ty), mask=d_ok)
    if ADVANCE:
        # the split launch before this one read the cache counter: advance it (one program)
        if pid == 0:
            tl.store(LENS, tl.load(LENS) + LEN_ADD)


# ---------------------------------------------------------------------------------------------
# Autotune configs
# ---------------------------------------------------------------------------------------------


def _prefill_bytes(cfg: triton.Config, block_d: int) -> int:
    """Live bytes of one prefill program in registers: q tile (bf16) + fp32 acc + fp32 scores/probs
    + one K or V tile (bf16)."""
    bm, bn = cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"]
    return bm * block_d * 2 + bm * block_d * 4 + bm * bn * 4 + bn * block_d * 2


def _prefill_smem(cfg: triton.Config, block_d: int) -> int:
    """Shared memory of one prefill program on CUDA: the q tile (a tl.dot operand) and a K and a
    V tile per pipeline stage, bf16. The H200 refused 128x64 x 3 stages at head_dim 256 for
    exactly this: 64 KiB of q + 192 KiB of K/V = 262144 bytes against 232448."""
    bm, bn = cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"]
    return bm * block_d * 2 + cfg.num_stages * 2 * bn * block_d * 2


def _prefill_configs(be: str):
    if _backend.is_interpret():
        # One small config: the interpreter runs every program in numpy. 16x16 keeps tl.dot legal
        # (all dims >= 16) and makes a seq of 33 cross several blocks, exercising the tails.
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=4, num_stages=1)]
    if be == "xpu":
        # grf_mode "256" (large register file) on every config, as the huggingface/kernels
        # xpu-kernels skill asks (https://github.com/huggingface/kernels, skills/xpu-kernels);
        # Intel's Triton FA tutorial shape (128x64, 16 warps) for head_dim 128, 8 warps for the
        # smaller head dims, a 64-row tile for short prompts. The pruner drops configs whose live
        # tiles exceed the register file (spills cost more than a smaller tile).
        cfgs = [
            ({"BLOCK_M": 128, "BLOCK_N": 64}, 16, 3),
            ({"BLOCK_M": 128, "BLOCK_N": 64}, 8, 3),
            ({"BLOCK_M": 128, "BLOCK_N": 32}, 8, 3),
            ({"BLOCK_M": 64, "BLOCK_N": 64}, 8, 2),
            ({"BLOCK_M": 64, "BLOCK_N": 32}, 4, 2),
            # head_dim 256 (Gemma): the only tile whose live registers fit the file there
            ({"BLOCK_M": 64, "BLOCK_N": 64}, 16, 2),
        ]
        return [triton.Config({**kw, "grf_mode": "256"}, num_warps=w, num_stages=s) for kw, w, s in cfgs]
    # CUDA (Hopper): 128-row query tiles, 64/128-key blocks, 4/8 warps, 2-3 stages (the space the
    # Triton fused-attention tutorial tunes over for H100); 64-row tiles only for short prompts.
    cfgs = [
        ({"BLOCK_M": 128, "BLOCK_N": 64}, 4, 3),
        ({"BLOCK_M": 128, "BLOCK_N": 64}, 8, 3),
        ({"BLOCK_M": 128, "BLOCK_N": 128}, 8, 3),
        ({"BLOCK_M": 128, "BLOCK_N": 128}, 8, 2),
        ({"BLOCK_M": 128, "BLOCK_N": 64}, 4, 2),
        # head_dim 256 (Gemma): the 128-row tile whose q, K/V stages and output tile all fit
        ({"BLOCK_M": 128, "BLOCK_N": 64}, 8, 2),
        ({"BLOCK_M": 64, "BLOCK_N": 64}, 4, 2),
    ]
    return [triton.Config(kw, num_warps=w, num_stages=s) for kw, w, s in cfgs]


def _prefill_prune(be: str):
    def prune(configs, named_args, **kwargs):
        configs = list(configs)
        if len(configs) <= 1:
            return configs
        block_d = kwargs.get("BLOCK_D", named_args.get("BLOCK_D", 128))
        seq_q = named_args.get("SEQ_Q_BUCKET", kwargs.get("SEQ_Q_BUCKET"))
        keep = []
        for c in configs:
            if be == "xpu":
                budget = c.num_warps * _backend.XPU_GRF_BYTES_PER_THREAD * _backend.XPU_TILE_FRACTION
                if _prefill_bytes(c, block_d) > budget:
                    continue
            else:
                # Hopper: q and the K and V stages live in shared memory, the fp32 output tile in
                # registers (a 128x256 tile over 4 warps would spill: head_dim 256).
                if _prefill_smem(c, block_d) > _backend.CUDA_SMEM_BYTES:
                    continue
                if c.kwargs["BLOCK_M"] * block_d > _backend.CUDA_ACC_PER_THREAD * 32 * c.num_warps:
                    continue
            keep.append(c)
        # 64-row tiles only where a 128-row tile would be mostly padding, or where none fits
        # (head_dim 256 on XPU).
        if isinstance(seq_q, int):
            def rows_ok(c):
                if c.kwargs["BLOCK_M"] < 128:
                    return seq_q <= 64
                return seq_q > 64 or be == "xpu"

            keep = [c for c in keep if rows_ok(c)] or keep
        if not keep:
            keep = [min(configs, key=lambda c: _prefill_bytes(c, block_d))]
        return keep

    return prune


def _decode_configs(be: str):
    if _backend.is_interpret():
        return [triton.Config({"BLOCK_N": 16}, num_warps=4, num_stages=1)]
    if be == "xpu":
        # Memory bound: the group's q tile is tiny, K/V blocks stream through; grf_mode "256"
        # (the xpu-kernels skill) so 128-key blocks of head_dim 128 stay in registers.
        cfgs = [({"BLOCK_N": 64}, 4, 2), ({"BLOCK_N": 128}, 8, 2), ({"BLOCK_N": 32}, 4, 3)]
        return [triton.Config({**kw, "grf_mode": "256"}, num_warps=w, num_stages=s) for kw, w, s in cfgs]
    # CUDA: 64/128-key blocks with 2-3 stages to keep loads in flight (bandwidth bound).
    cfgs = [({"BLOCK_N": 64}, 4, 2), ({"BLOCK_N": 64}, 4, 3), ({"BLOCK_N": 128}, 4, 2), ({"BLOCK_N": 128}, 8, 3)]
    return [triton.Config(kw, num_warps=w, num_stages=s) for kw, w, s in cfgs]


_FNS = {}


def _prefill_fn(be: str):
    # Built once per (backend, interpreter) by _backend.autotuned; the local cache also skips
    # rebuilding the config lists on every call (host time matters for decode).
    key = ("prefill", be, _backend.is_interpret())
    fn = _FNS.get(key)
    if fn is not None:
        return fn
    fn = _FNS[key] = _backend.autotuned(
        "attention.prefill", _prefill_kernel, be, _prefill_configs(be),
        key=["SEQ_Q_BUCKET", "SEQ_K_BUCKET", "HEAD_DIM", "IS_CAUSAL", "MASK_KIND"],
        prune=_prefill_prune(be),
    )
    return fn


def _decode_fn(be: str):
    key = ("decode", be, _backend.is_interpret())
    fn = _FNS.get(key)
    if fn is not None:
        return fn
    fn = _FNS[key] = _backend.autotuned(
        "attention.decode", _decode_split_kernel, be, _decode_configs(be),
        key=["SPLIT_BUCKET", "HEAD_DIM", "BLOCK_G", "MASK_KIND", "SINGLE"],
        # one split advances the cache counter in this launch: every config timed starts from it
        restore_value=["LENS"],
    )
    return fn


_CONFIGS: dict = {}  # (kernel, device, problem key) -> its launch config, or None (autotune)

# Launch constants of each kernel's config, all required by `_forced_config`.
_CONFIG_KEYS = {"attention.prefill": ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"),
                "attention.decode": ("BLOCK_N", "num_warps", "num_stages")}
# kernel -> (the config every launch takes, the class key of the last launch): _forced_config.
_FORCED: dict = {}


@contextlib.contextmanager
def _forced_config(kernel: str, config: dict):
    """Inside the block every launch of `kernel` ("attention.prefill" or "attention.decode")
    takes these launch constants, as a tuned config would be launched, and the block's value
    holds the class key of the last one, what a tuned entry for it needs: benchmarks/tune.py
    times a candidate config so."""
    keys = _CONFIG_KEYS.get(kernel)
    if keys is None:
        raise ValueError(f"attention: config for unknown kernel {kernel!r} (want {', '.join(_CONFIG_KEYS)})")
    c = _backend.launch_config(config, keys, kernel)
    missing = [k for k in keys if k not in c]
    if missing:
        raise ValueError(f"attention: {kernel}: config lacks {', '.join(missing)} (want all of {', '.join(keys)})")
    seen: dict = {}
    prev = _FORCED.get(kernel)
    _FORCED[kernel] = (triton.Config({k: c[k] for k in keys[:-2]}, num_warps=c["num_warps"],
                                     num_stages=c["num_stages"]), seen)
    try:
        yield seen
    finally:
        if prev is None:
            del _FORCED[kernel]
        else:
            _FORCED[kernel] = prev


def _launch_config(kernel: str, device: torch.device, heuristic, **key):
    """The config of this problem class on this GPU, looked up once per class: tuned on its model
    (gpus/<gpu>.json), else on a GPU `heuristic()`; None autotunes as the two functions above do
    (the interpreter's one config, or XPUINJECT_AUTOTUNE=1: gpus.heuristic_config)."""
    if _FORCED:
        forced = _FORCED.get(kernel)
        if forced is not None:
            forced[1].clear()
            forced[1].update(key)
            return forced[0]
    k = (kernel, device.type, device.index, tuple(key.items()))
    try:
        return _CONFIGS[k]
    except KeyError:
        cfg = gpus.tuned_config(kernel, key, device)
        if cfg is None and not _backend.is_interpret():
            cfg = gpus.heuristic_config(kernel, key, heuristic)
        _CONFIGS[k] = cfg
        return cfg


def _prefill_heuristic(be: str, seq_q: int, block_d: int) -> triton.Config:
    """A prefill class no tuned config covers: the first config the pruner keeps for it (each
    list is in order of preference)."""
    return _prefill_prune(be)(_prefill_configs(be), {"SEQ_Q_BUCKET": _bucket(seq_q), "BLOCK_D": block_d})[0]


def _decode_heuristic(be: str) -> triton.Config:
    """A decode class no tuned config covers: 64-key blocks (one per 64-key split on CUDA)."""
    return _decode_configs(be)[0]


# ---------------------------------------------------------------------------------------------
# Validation helpers
# ---------------------------------------------------------------------------------------------


def _check_qkv(where: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Tuple[int, int, int, int, int, int]:
    for name, t in (("query", q), ("key", k), ("value", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"attention: {where}: {name} is {type(t).__name__}, want a torch.Tensor")
        if t.dim() != 4:
            raise ValueError(f"attention: {where}: {name} has shape {tuple(t.shape)}, want 4-D [batch, heads, seq, head_dim]")
    if q.dtype not in _ACT_DTYPES:
        raise ValueError(f"attention: {where}: query dtype {q.dtype} unsupported (want bfloat16, float16 or float32)")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"attention: {where}: dtypes differ: query {q.dtype}, key {k.dtype}, value {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"attention: {where}: devices differ: query {q.device}, key {k.device}, value {v.device}")
    b, h, sq, d = q.shape
    bk, hk, sk, dk = k.shape
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"attention: {where}: value shape {tuple(v.shape)} != key shape {tuple(k.shape)}")
    if bk != b:
        raise ValueError(f"attention: {where}: key batch {bk} != query batch {b}")
    if dk != d:
        raise ValueError(f"attention: {where}: key head_dim {dk} != query head_dim {d}")
    if d not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"attention: {where}: head_dim {d} unsupported (supported: {SUPPORTED_HEAD_DIMS})")
    if hk < 1 or h % hk != 0:
        raise ValueError(f"attention: {where}: query heads {h} not a multiple of kv heads {hk}")
    if b == 0 or h == 0 or sq == 0:
        raise ValueError(f"attention: {where}: empty query {tuple(q.shape)}")
    if sk == 0:
        raise ValueError(f"attention: {where}: empty key/value {tuple(k.shape)}")
    return b, h, sq, d, hk, sk


def _mask_operand(where: str, mask: torch.Tensor, q: torch.Tensor):
    """Return (tensor the kernel reads, additive flag, threshold) for a bool/int/float mask."""
    if mask.device != q.device:
        raise ValueError(f"attention: {where}: mask on {mask.device}, query on {q.device}")
    if mask.dtype == torch.bool:
        return mask.view(torch.uint8), False, 0.0
    if mask.dtype in (torch.uint8, torch.int8):
        return mask, False, 0.0
    if mask.dtype in (torch.int16, torch.int32, torch.int64):
        # transformers' 2-D attention_mask is int64 0/1; the kernel reads a byte per key.
        return (mask != 0).view(torch.uint8), False, 0.0
    if mask.dtype in (torch.float16, torch.bfloat16, torch.float32):
        # Values <= finfo.min (transformers' eager/additive masks use exactly finfo(dtype).min, or
        # -inf) mean "no weight"; anything else is a bias added to the scaled scores.
        return mask, True, float(torch.finfo(mask.dtype).min)
    raise ValueError(f"attention: {where}: mask dtype {mask.dtype} unsupported (want bool, integer, float16, bfloat16 or float32)")


def _variants(where: str, scaling: float, softcap, window):
    """(qk_scale, cap_l2, window, SOFTCAP, SLIDING) for the kernels from the public arguments:
    softcap None/0 (off) or > 0; window None/0 (off) or a key count >= 1."""
    if softcap is not None and not (isinstance(softcap, (int, float)) and math.isfinite(softcap) and softcap >= 0):
        raise ValueError(f"attention: {where}: softcap {softcap!r}, want None or a finite number >= 0")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
        raise ValueError(f"attention: {where}: window {window!r}, want None or an integer >= 0 (keys)")
    if softcap:
        qk_scale, cap_l2 = float(scaling) / float(softcap), float(softcap) * _LOG2E
    else:
        qk_scale, cap_l2 = float(scaling) * _LOG2E, 0.0
    return qk_scale, cap_l2, int(window or 0), bool(softcap), bool(window)


def _upcast(dtype: torch.dtype) -> bool:
    return dtype == torch.bfloat16 and _backend.is_interpret()


def _dot_prec(dtype: torch.dtype) -> str:
    # fp32 inputs: full-precision dots (tf32 would lose ~3 decimal digits); bf16/fp16 ignore it.
    return "ieee" if dtype == torch.float32 else "tf32"


# ---------------------------------------------------------------------------------------------
# Launchers
# ---------------------------------------------------------------------------------------------


def flash_attention_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scaling: Optional[float] = None,
    causal: bool = True,
    key_mask: Optional[torch.Tensor] = None,
    attn_mask: Optional[torch.Tensor] = None,
    softcap: Optional[float] = None,
    window: Optional[int] = None,
) -> torch.Tensor:
    """Flash attention over q [b, h, sq, d], k/v [b, hk, sk, d] -> out [b, sq, h, d] (q.dtype).

    causal: bottom-right aligned (queries are the last sq of sk positions; needs sq <= sk).
    key_mask: [b, sk] padding mask; attn_mask: general [b|1, h|1, sq|1, sk] mask (module docstring
    for value conventions). Both may be given; they combine (a pair needs both).
    softcap: scores become softcap * tanh(scores / softcap) before masks (Gemma 2).
    window: sliding window of that many keys: query i (position i + sk - sq) sees keys
    j > i + sk - sq - window, on top of any mask.
    The op: torch.ops.<ns>.attention_prefill (_ops.py).
    """
    if _ops.traced(q):
        return _ops.call("attention_prefill", q, k, v, scaling, bool(causal), key_mask, attn_mask, softcap, window)
    return _prefill(q, k, v, scaling, causal, key_mask, attn_mask, softcap, window)


def _prefill_fake(q, k, v, scaling, causal, key_mask, attn_mask, softcap=None, window=None):
    where = "flash_attention_prefill"
    b, h, sq, d, hk, sk = _check_qkv(where, q, k, v)
    if causal and sq > sk:
        raise ValueError(f"attention: {where}: causal with seq_q {sq} > seq_k {sk} (queries must be the last seq_q keys)")
    return q.new_empty((b, sq, h, d))


def _prefill(q, k, v, scaling, causal, key_mask, attn_mask, softcap=None, window=None) -> torch.Tensor:
    where = "flash_attention_prefill"
    b, h, sq, d, hk, sk = _check_qkv(where, q, k, v)
    be = _backend.require_runnable(q, where)
    if causal and sq > sk:
        raise ValueError(f"attention: {where}: causal with seq_q {sq} > seq_k {sk} (queries must be the last seq_q keys)")
    if scaling is None:
        scaling = 1.0 / math.sqrt(d)
    qk_scale, cap_l2, win, has_cap, sliding = _variants(where, scaling, softcap, window)
    if key_mask is not None and attn_mask is not None:
        # Fold the key mask into the general one (both broadcast to [b, 1, 1|sq, sk]).
        km = key_mask if key_mask.dtype == torch.bool or key_mask.dtype.is_floating_point else key_mask != 0
        am = attn_mask
        if km.dtype == torch.bool and am.dtype == torch.bool:
            attn_mask = am & km[:, None, None, :]
        else:
            to_add = lambda t: t if t.dtype.is_floating_point else torch.where(t, 0.0, float("-inf")).to(torch.float32)  # noqa: E731
            attn_mask = to_add(am).to(torch.float32) + to_add(km).to(torch.float32)[:, None, None, :]
        key_mask = None

    mask_kind, mask_add, mask_min = _MASK_NONE, False, 0.0
    m_t = q  # dummy pointer when there is no mask (never read: MASK_KIND 0)
    sm = (0, 0, 0, 0)
    if key_mask is not None:
        if key_mask.dim() != 2 or tuple(key_mask.shape) != (b, sk):
            raise ValueError(f"attention: {where}: key_mask shape {tuple(key_mask.shape)}, want [batch {b}, seq_k {sk}]")
        m_t, mask_add, mask_min = _mask_operand(where, key_mask, q)
        sm = (m_t.stride(0), 0, 0, m_t.stride(1))
        mask_kind = _MASK_KEY
    elif attn_mask is not None:
        if attn_mask.dim() != 4:
            raise ValueError(f"attention: {where}: attn_mask shape {tuple(attn_mask.shape)}, want 4-D [batch, 1|heads, seq_q, seq_k]")
        mb, mh, mq, mk = attn_mask.shape
        if mb not in (1, b) or mh not in (1, h) or mq not in (1, sq) or mk != sk:
            raise ValueError(
                f"attention: {where}: attn_mask shape {tuple(attn_mask.shape)} does not broadcast to "
                f"[batch {b}, heads {h}, seq_q {sq}, seq_k {sk}]")
        m_t, mask_add, mask_min = _mask_operand(where, attn_mask, q)
        m_t = m_t.expand(b, h, sq, sk)  # a view: broadcast dims get stride 0
        sm = tuple(m_t.stride())
        mask_kind = _MASK_FULL

    out = _backend.empty((b, sq, h, d), q.dtype, q.device)
    block_d = max(16, _backend.next_pow2(d))
    tuned = _launch_config(
        "attention.prefill", q.device, lambda: _prefill_heuristic(be, sq, block_d), seq_q_bucket=_bucket(sq),
        seq_k_bucket=_bucket(sk), head_dim=d, is_causal=bool(causal), mask_kind=mask_kind)
    if tuned is not None:
        launch = _prefill_kernel[(_backend.cdiv(sq, tuned.kwargs["BLOCK_M"]), b * h)]
        extra = tuned.all_kwargs()
    else:
        launch = _prefill_fn(be)[lambda meta: (_backend.cdiv(sq, meta["BLOCK_M"]), b * h)]
        extra = {}
    launch(
        q, k, v, out, m_t,
        *q.stride(), *k.stride(), *v.stride(),
        out.stride(0), out.stride(2), out.stride(1), out.stride(3),
        *sm,
        h, h // hk, sq, sk, qk_scale, mask_min, cap_l2, win,
        _bucket(sq), _bucket(sk),
        HEAD_DIM=d, BLOCK_D=block_d,
        IS_CAUSAL=bool(causal), MASK_KIND=mask_kind, MASK_ADD=mask_add, DOT_PREC=_dot_prec(q.dtype),
        UPCAST=_upcast(q.dtype), SOFTCAP=has_cap, SLIDING=sliding, **extra,
    )
    _backend.count("attention.prefill")
    _backend.count(("attention.prefill.mask_key", "attention.prefill.mask_full", "attention.prefill.nomask")[
        {_MASK_KEY: 0, _MASK_FULL: 1, _MASK_NONE: 2}[mask_kind]])
    return out


def _num_compute_units(device: torch.device) -> int:
    return _backend.compute_units(device)


def decode_num_splits(batch: int, kv_heads: int, seq_k: int, device: torch.device) -> int:
    """How many KV splits a decode step uses: ~8 programs per SM overall, >= 64 keys per split."""
    target = _DECODE_PROGRAMS_PER_SM * _num_compute_units(device)
    want = _backend.cdiv(target, max(1, batch * kv_heads))
    cap = _backend.cdiv(seq_k, _DECODE_MIN_KEYS_PER_SPLIT)
    return max(1, min(want, cap, _DECODE_MAX_SPLITS))


def decode_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scaling: Optional[float] = None,
    kv_lens: Optional[torch.Tensor] = None,
    key_mask: Optional[torch.Tensor] = None,
    num_splits: Optional[int] = None,
    softcap: Optional[float] = None,
    window: Optional[int] = None,
    advance: bool = False,
) -> torch.Tensor:
    """One-token attention: q [b, h, 1, d] against a KV cache k/v [b, hk, L, d] -> [b, 1, h, d].

    kv_lens: int tensor [b] or 0-d (one length for every row), read on the device: keys >= kv_lens[b]
    are ignored and never read (a static cache's counter: a captured step reads only the filled
    part of its bucket).
    key_mask: [b, L] or [b, 1|h, L] (or a 4-D [b, 1|h, 1, L] transformers mask): conventions as in
    the module docstring. num_splits: override the split count (tests); default from the GPU size.
    softcap, window: as flash_attention_prefill's; the query is the last valid key's position
    (kv_lens[b] - 1, or seq_k - 1), so keys before kv_lens[b] - window are not read.
    advance: kv_lens (0-d) is a static cache layer's counter read before this step's key was
    written at slot kv_lens (rope_cache_write): the step attends over kv_lens + 1 keys and the
    launch then adds 1 to the counter, as StaticLayer.update would, with no launch of its own.
    The ops: torch.ops.<ns>.attention_decode, and attention_decode_advance (which mutates kv_lens).
    """
    if advance:
        if not isinstance(kv_lens, torch.Tensor) or kv_lens.dim() != 0:
            raise ValueError("attention: decode_attention: advance=True needs kv_lens, a 0-d counter tensor")
        if _ops.traced(q):
            return _ops.call("attention_decode_advance", q, k, v, scaling, kv_lens, key_mask, num_splits, softcap, window)
        return _decode_advance(q, k, v, scaling, kv_lens, key_mask, num_splits, softcap, window)
    if _ops.traced(q):
        return _ops.call("attention_decode", q, k, v, scaling, kv_lens, key_mask, num_splits, softcap, window)
    return _decode(q, k, v, scaling, kv_lens, key_mask, num_splits, softcap, window)


def _decode_advance(q, k, v, scaling, kv_lens, key_mask, num_splits, softcap=None, window=None) -> torch.Tensor:
    return _decode(q, k, v, scaling, kv_lens, key_mask, num_splits, softcap, window, advance=True)


def _decode_fake(q, k, v, scaling, kv_lens, key_mask, num_splits, softcap=None, window=None):
    where = "decode_attention"
    b, h, sq, d, hk, sk = _check_qkv(where, q, k, v)
    if sq != 1:
        raise ValueError(f"attention: {where}: query has {sq} tokens, decode takes exactly 1 (use flash_attention_prefill)")
    return q.new_empty((b, 1, h, d))


def _decode(q, k, v, scaling, kv_lens, key_mask, num_splits, softcap=None, window=None,
            advance: bool = False) -> torch.Tensor:
    """decode_attention's launches."""
    where = "decode_attention"
    b, h, sq, d, hk, sk = _check_qkv(where, q, k, v)
    if sq != 1:
        raise ValueError(f"attention: {where}: query has {sq} tokens, decode takes exactly 1 (use flash_attention_prefill)")
    be = _backend.require_runnable(q, where)
    if scaling is None:
        scaling = 1.0 / math.sqrt(d)
    qk_scale, cap_l2, win, has_cap, sliding = _variants(where, scaling, softcap, window)
    group = h // hk

    has_lens = kv_lens is not None
    lens_t, lens_stride = q, 0
    if has_lens:
        # [batch], or one length for every row (a 0-d tensor: a static cache layer's counter)
        if not isinstance(kv_lens, torch.Tensor) or not (kv_lens.dim() == 0 or (kv_lens.dim() == 1 and kv_lens.shape[0] == b)):
            raise ValueError(f"attention: {where}: kv_lens must be an integer tensor [batch {b}] or a 0-d one")
        if kv_lens.dtype not in (torch.int32, torch.int64) or kv_lens.device != q.device:
            raise ValueError(f"attention: {where}: kv_lens dtype {kv_lens.dtype} on {kv_lens.device}, want int32/int64 on {q.device}")
        lens_t = kv_lens.contiguous()
        lens_stride = 1 if kv_lens.dim() == 1 else 0

    mask_kind, mask_add, mask_min = _MASK_NONE, False, 0.0
    m_t, sm = q, (0, 0, 0)
    if key_mask is not None:
        km = key_mask
        if km.dim() == 4:
            if km.shape[2] != 1:
                raise ValueError(f"attention: {where}: 4-D mask {tuple(km.shape)} has {km.shape[2]} query rows, want 1")
            km = km[:, :, 0, :]
        if km.dim() == 2:
            km = km[:, None, :]
        if km.dim() != 3 or km.shape[0] not in (1, b) or km.shape[1] not in (1, h) or km.shape[2] != sk:
            raise ValueError(f"attention: {where}: key_mask shape {tuple(key_mask.shape)}, want [batch {b}, seq_k {sk}] "
                             f"or [batch, 1|heads, seq_k]")
        m_t, mask_add, mask_min = _mask_operand(where, km, q)
        m_t = m_t.expand(b, h, sk)
        sm = tuple(m_t.stride())
        mask_kind = _MASK_KEY

    if num_splits is None:
        num_splits = decode_num_splits(b, hk, sk, q.device)
    if not (1 <= int(num_splits) <= _DECODE_MAX_SPLITS):
        raise ValueError(f"attention: {where}: num_splits {num_splits} outside [1, {_DECODE_MAX_SPLITS}]")
    split_size = _backend.cdiv(sk, int(num_splits))
    split_size = _backend.cdiv(split_size, 16) * 16  # whole 16-key groups per split
    num_splits = _backend.cdiv(sk, split_size)

    block_d = max(16, _backend.next_pow2(d))
    block_g = max(16, _backend.next_pow2(group))  # tl.dot wants >= 16 rows
    single = num_splits == 1
    out = _backend.empty((b, 1, h, d), q.dtype, q.device)
    if single:
        pm = pl = pacc = out  # unused (SINGLE writes out directly)
    else:
        # One workspace for the partials (one allocation instead of three): m, l, acc.
        n = b * h * num_splits
        ws = _backend.empty((n * (d + 2),), torch.float32, q.device)
        pm, pl, pacc = ws[:n], ws[n:2 * n], ws[2 * n:]
    tuned = _launch_config(
        "attention.decode", q.device, lambda: _decode_heuristic(be), split_bucket=_bucket(split_size), head_dim=d,
        block_g=block_g, mask_kind=mask_kind, single=single)
    # one split with advance: the grid counts its programs in a semaphore (no reduce launch)
    sem = _backend.semaphores(q.device, b * hk + 1) if (advance and single) else out
    launch = (_decode_split_kernel if tuned is not None else _decode_fn(be))[(num_splits, b * hk)]
    pdl = _backend.pdl(q.device)
    launch(
        q, k, v, m_t, lens_t, pm, pl, pacc, out, sem,
        lens_stride, 1 if advance else 0, b * hk, num_splits * b * hk,
        q.stride(0), q.stride(1), q.stride(3),
        *k.stride(), *v.stride(),
        *sm,
        out.stride(0), out.stride(2), out.stride(3),
        h, hk, group, sk, split_size, num_splits, qk_scale, mask_min, cap_l2, win,
        _bucket(split_size),
        HEAD_DIM=d, BLOCK_D=block_d, BLOCK_G=block_g,
        HAS_LENS=has_lens, MASK_KIND=mask_kind, MASK_ADD=mask_add, DOT_PREC=_dot_prec(q.dtype),
        UPCAST=_upcast(q.dtype), SINGLE=single, SOFTCAP=has_cap, SLIDING=sliding, ADVANCE=advance,
        PDL=pdl, **(tuned.all_kwargs() if tuned is not None else {}), **_backend.pdl_kw(pdl),
    )
    _backend.count("attention.decode")
    if advance:
        _backend.count("attention.decode.advance")
    if single:
        return out
    _decode_reduce_kernel[(b * h,)](
        pm, pl, pacc, out, lens_t,
        out.stride(0), out.stride(2), out.stride(3),
        h, num_splits, 1 if advance else 0,
        HEAD_DIM=d, BLOCK_D=block_d, BLOCK_S=max(2, _backend.next_pow2(num_splits)), ADVANCE=advance,
        PDL=pdl, num_warps=_REDUCE_WARPS_PDL if pdl else 4, **_backend.pdl_kw(pdl),
    )
    _backend.count("attention.decode.split")
    return out


_ops.define("attention_prefill",
            "(Tensor q, Tensor k, Tensor v, float? scaling, bool causal, Tensor? key_mask, Tensor? attn_mask, "
            "float? softcap=None, int? window=None) -> Tensor",
            _prefill, _prefill_fake)
_ops.define("attention_decode",
            "(Tensor q, Tensor k, Tensor v, float? scaling, Tensor? kv_lens, Tensor? key_mask, int? num_splits, "
            "float? softcap=None, int? window=None) -> Tensor",
            _decode, _decode_fake)
_ops.define("attention_decode_advance",
            "(Tensor q, Tensor k, Tensor v, float? scaling, Tensor(a!) kv_lens, Tensor? key_mask, int? num_splits, "
            "float? softcap=None, int? window=None) -> Tensor",
            _decode_advance, _decode_fake, mutates=("kv_lens",))


# ---------------------------------------------------------------------------------------------
# Torch reference (fp32 or fp64, explicit softmax)
# ---------------------------------------------------------------------------------------------


def attention_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scaling: Optional[float] = None,
    causal: bool = True,
    key_mask: Optional[torch.Tensor] = None,
    attn_mask: Optional[torch.Tensor] = None,
    kv_lens: Optional[torch.Tensor] = None,
    dtype: torch.dtype = torch.float32,
    round_p_to: Optional[torch.dtype] = None,
    softcap: Optional[float] = None,
    window: Optional[int] = None,
) -> torch.Tensor:
    """Same semantics as the kernels, computed with an explicit [b, h, sq, sk] softmax in `dtype`
    (fp32 by default, fp64 for a tighter reference). Returns [b, sq, h, d] in `dtype`.
    round_p_to: round the normalized probabilities to this dtype before P@V (an oracle that mirrors
    the kernel's bf16 P operand)."""
    b, h, sq, d = q.shape
    hk, sk = k.shape[1], k.shape[2]
    if scaling is None:
        scaling = 1.0 / math.sqrt(d)
    qf, kf, vf = q.to(dtype), k.to(dtype), v.to(dtype)
    g = h // hk
    kf = kf.repeat_interleave(g, dim=1)
    vf = vf.repeat_interleave(g, dim=1)
    s = torch.matmul(qf, kf.transpose(-1, -2)) * scaling
    if softcap:
        s = torch.tanh(s / softcap) * softcap
    keep = torch.ones(b, h, sq, sk, dtype=torch.bool, device=q.device)
    bias = torch.zeros(b, h, sq, sk, dtype=dtype, device=q.device)

    def add_mask(m: torch.Tensor) -> None:
        nonlocal keep, bias
        if m.dtype == torch.bool or not m.dtype.is_floating_point:
            keep = keep & (m != 0)
        else:
            kk = m > torch.finfo(m.dtype).min
            keep = keep & kk
            bias = bias + torch.where(kk, m.to(dtype), torch.zeros((), dtype=dtype, device=m.device))

    if causal:
        i = torch.arange(sq, device=q.device)[:, None] + (sk - sq)
        j = torch.arange(sk, device=q.device)[None, :]
        keep = keep & (j <= i)
    if key_mask is not None:
        km = key_mask
        if km.dim() == 4:
            add_mask(km)
        else:
            if km.dim() == 2:
                km = km[:, None, :]
            add_mask(km[:, :, None, :])
    if attn_mask is not None:
        add_mask(attn_mask)
    if kv_lens is not None:
        j = torch.arange(sk, device=q.device)
        keep = keep & (j[None, None, None, :] < kv_lens.reshape(-1, 1, 1, 1))
    if window:
        # query i sits at position i + sk - sq, or, over a cache of kv_lens, at kv_lens - 1
        j = torch.arange(sk, device=q.device)[None, None, None, :]
        pos = torch.arange(sq, device=q.device)[None, None, :, None] + (sk - sq)
        if kv_lens is not None:
            pos = kv_lens.reshape(-1, 1, 1, 1) - 1
        keep = keep & (j > pos - window)
    s = torch.where(keep, s + bias, torch.full((), float("-inf"), dtype=dtype, device=q.device))
    row_any = keep.any(-1, keepdim=True)
    s = torch.where(row_any, s, torch.zeros((), dtype=dtype, device=q.device))
    p = torch.softmax(s, dim=-1) * row_any  # rows with nothing attended -> 0
    if round_p_to is not None:
        p = p.to(round_p_to).to(dtype)
    o = torch.matmul(p, vf)
    return o.transpose(1, 2).contiguous()


# ---------------------------------------------------------------------------------------------
# transformers attention function
# ---------------------------------------------------------------------------------------------


def _module_name(module) -> str:
    idx = getattr(module, "layer_idx", None)
    cls = type(module).__name__
    return f"{cls} (layer_idx {idx})" if idx is not None else cls


def attention_forward(
    module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    is_causal: Optional[bool] = None,
    **kwargs,
) -> Tuple[torch.Tensor, None]:
    """transformers attention function (`AttentionInterface.register(name, attention_forward)`).

    Mirrors sdpa_attention_forward (transformers 5.17): `attention_mask` is None (causal implied by
    `is_causal`/`module.is_causal`, or no mask) or a 4-D [b, 1, q, k] bool (True = attend) /
    additive float mask that already holds causality and padding; GQA is handled in the kernel
    (no repeat_kv). With no mask, is_causal and kv_len > q_len (prefill into an empty static
    cache), keys past q_len are dropped exactly as sdpa does (upper-left alignment). `softcap`
    (Gemma 2's attn_logit_softcapping) caps the scaled scores as eager_attention_forward does;
    `sliding_window` applies where no mask came (a mask already holds the window). Returns
    (out [b, q, h, d], None). Unsupported inputs raise; nothing silently falls back.

    The mask only reaches this function if the name is also registered in transformers'
    AttentionMaskInterface (see `register_transformers`); otherwise transformers passes None and
    padding would be ignored.
    """
    who = _module_name(module)
    if dropout and float(dropout) > 0.0:
        raise ValueError(f"attention: {who}: dropout {dropout} > 0 is unsupported (training path); "
                         "the xpuinject kernels are inference-only (model.eval() sets dropout to 0)")
    for unsupported in ("position_bias", "s_aux", "sinks"):
        if kwargs.get(unsupported) is not None:
            raise ValueError(f"attention: {who}: argument {unsupported!r} is unsupported by the xpuinject kernels")
    if isinstance(query, torch.Tensor) and query.dim() == 4 and query.shape[-1] not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"attention: {who}: head_dim {query.shape[-1]} unsupported (supported: {SUPPORTED_HEAD_DIMS})")
    if attention_mask is not None and not isinstance(attention_mask, torch.Tensor):
        raise ValueError(f"attention: {who}: attention_mask of type {type(attention_mask).__name__} unsupported "
                         "(want None or a 4-D tensor; register the mask interface with register_transformers)")
    groups = getattr(module, "num_key_value_groups", None)
    if groups is not None and query.dim() == 4 and key.dim() == 4 and query.shape[1] != key.shape[1] * groups:
        raise ValueError(f"attention: {who}: query heads {query.shape[1]} != kv heads {key.shape[1]} x "
                         f"num_key_value_groups {groups}")

    q_len, kv_len = query.shape[2], key.shape[2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(q_len > 1 and attention_mask is None and causal)
    softcap = kwargs.get("softcap")
    # A mask from transformers already holds a sliding layer's window (masking_utils
    # sliding_window_causal_mask_function), and the keys it goes with need not end at the last
    # query (a static layer's whole buffer); without a mask the keys do end there.
    window = kwargs.get("sliding_window") if attention_mask is None else None
    try:
        if q_len == 1:
            out = decode_attention(query, key, value, scaling=scaling, key_mask=attention_mask, softcap=softcap,
                                   window=window)
        else:
            if causal and kv_len > q_len:
                # sdpa_attention_forward: only reachable when prefilling an empty static cache
                # (transformers returns no mask then); the valid keys are the first q_len.
                key, value = key[:, :, :q_len, :], value[:, :, :q_len, :]
            out = flash_attention_prefill(query, key, value, scaling=scaling, causal=causal, attn_mask=attention_mask,
                                          softcap=softcap, window=window)
    except ValueError as e:
        raise ValueError(f"attention: {who}: {e}") from e
    return out, None


def register_transformers(name: str = "xpuinject") -> None:
    """Register `attention_forward` under `name` with transformers, and the sdpa mask builder for
    the same name (without the latter transformers builds no mask for unknown names, see
    masking_utils._preprocess_mask_arguments in 5.17). Imports transformers lazily: the kernel
    package itself depends only on torch and triton."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    except ImportError as e:  # pragma: no cover - transformers is present wherever this is called
        raise RuntimeError(f"attention: register_transformers needs transformers >= 5: {e}") from e
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
