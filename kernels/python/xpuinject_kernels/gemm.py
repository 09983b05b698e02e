"""GEMM on pre-packed K-major weights with fused epilogues.

    out[M, N] = epilogue(x[M, K] @ W[K, N] (+ bias[N]))

W is the transposed nn.Linear weight, [K, N] with unit column stride (packed offline: bf16,
K-major so each program streams contiguous [BLOCK_K, BLOCK_N] tiles), or the nn.Linear weight
itself seen as `weight.t()` (unit row stride, N-major), read in place: the lm_head uses this on
the embedding table it is tied to, and a decode step's GEMVs read some packed weights fastest
that way (packing.NMAJOR_ROLES). x is bf16/fp16 (fp32 accepted), any leading dims
(flattened to M). Accumulation is fp32; the dot runs in W's dtype (an fp16/fp32 activation tile is
rounded to W's dtype if they differ); the output is x's dtype, or `out_dtype`, rounded once after
the epilogue.

Epilogues (constexpr EPILOGUE, bias independent of it via HAS_BIAS):
  "none"       out = x@W
  "bias"       out = x@W + b                     (bias required)
  "swiglu"     W = [gate | up] concatenated along N ([K, 2I], gate columns first),
               out[M, I] = silu(x@Wg (+bg)) * (x@Wu (+bu)); bias, if any, is [2I] (gate | up).
               Each program computes the matching gate and up tiles (columns n and I + n) and
               never writes the [M, 2I] intermediate.
  "geglu"      as swiglu with gelu's tanh approximation for silu (Gemma's gelu_pytorch_tanh):
               out = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) * u, in fp32.
  "geglu_erf"  as geglu with the exact gelu (transformers' "gelu", Gemma 1's hidden_act):
               out = 0.5 g (1 + erf(g / sqrt(2))) * u, in fp32.
  "hardswish"  out = hardswish(x@W (+b))  = y * clamp(y + 3, 0, 6) / 6
  "residual"   out = x@W (+b) + r[M, N]

Memory access: tensor descriptors (`tl.make_tensor_descriptor`; an N-major weight, only when
asked, described as its [N, K] rows, each tile transposed in registers) when every operand passes
`_backend.tma_ok` (16-byte aligned base and row strides), else block pointers with boundary
checks — a misaligned descriptor gave silently wrong results on the H200. One 1-D grid with
GROUP_SIZE_M swizzling (Triton's matrix-multiplication tutorial, "L2 cache optimizations":
https://triton-lang.org/main/getting-started/tutorials/03-matrix-multiplication.html) so
consecutive programs reuse the same W column panel.

Stream-K (`config={..., "STREAM_K": P}`, _gemm_streamk_kernel): a prefill GEMM with few output
tiles, or a tile count that leaves its last wave part-empty, leaves SMs idle in the tiled grid
(M=512 K=4096 N=4608 at 128x256 tiles is 72 tiles for an H100's 132 SMs). The stream-K launch
runs P programs (streamk_programs: one per SM). Whole waves but the last run as the tiled grid
runs them; the last whole wave and the remainder are cut into work units of (tile, K step), tiles
in the swizzled order, each program a contiguous run of ceil(units / P) (the "data-parallel +
stream-K" hybrid of Osama et al., Stream-K: Work-centric Parallel Decomposition for Dense
Matrix Multiplication, 2023). A tile whose K steps span several programs is reduced in the same
launch, as gemv.py's split-K is: each program stores its fp32 partial to one of its two
workspace slots and counts itself in the tile's semaphore (_backend.semaphores); the program
that arrives last sums the slots in segment order, runs the epilogue and store, and puts the
semaphore back to 0. The result does not depend on arrival order, and no program waits on
another. It runs only when a config asks for it.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from . import _backend, _ops, gpus
from .contract import GEMM_EPILOGUES

__all__ = ["gemm", "add_rms_norm_gemm", "rms_norm_gemm", "gemm_ref", "streamk_programs", "EPILOGUES"]

# The fused epilogues (contract.json, which the planner's registry reads too).
EPILOGUES = GEMM_EPILOGUES
# constexpr codes
_EPI_NONE, _EPI_SWIGLU, _EPI_HARDSWISH, _EPI_RESIDUAL, _EPI_GEGLU, _EPI_GEGLU_ERF = 0, 1, 2, 3, 4, 5
_EPI_CODE = {"none": _EPI_NONE, "bias": _EPI_NONE, "swiglu": _EPI_SWIGLU, "hardswish": _EPI_HARDSWISH,
             "residual": _EPI_RESIDUAL, "geglu": _EPI_GEGLU, "geglu_erf": _EPI_GEGLU_ERF}
# The gated epilogues: W is [gate | up], each program computes both tiles.
_GATED = ("swiglu", "geglu", "geglu_erf")

_X_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_W_DTYPES = (torch.bfloat16, torch.float16)


@triton.jit
def _swizzle(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
    """Map a 1-D program id to (pid_m, pid_n) walking GROUP_SIZE_M row-tiles per column panel."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_SIZE_M * num_pid_n
    group = pid // per_group
    first_m = group * GROUP_SIZE_M
    rows = tl.minimum(num_pid_m - first_m, GROUP_SIZE_M)
    pid_m = first_m + (pid % per_group) % rows
    pid_n = (pid % per_group) // rows
    return pid_m, pid_n


@triton.jit
def _epilogue(acc, acc_up, b_ptr, offs_n, N, UP_OFF, HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr):
    """Bias and activation on fp32 tiles (residual is added by the caller, which owns the tile
    addressing)."""
    nmask = offs_n < N
    if HAS_BIAS:
        acc = acc + tl.load(b_ptr + offs_n, mask=nmask, other=0.0).to(tl.float32)[None, :]
        if EPILOGUE == 1 or (EPILOGUE == 4 or EPILOGUE == 5):
            acc_up = acc_up + tl.load(b_ptr + UP_OFF + offs_n, mask=nmask, other=0.0).to(tl.float32)[None, :]
    if EPILOGUE == 1:
        # silu(g) * u, sigmoid through exp: fp32, no intermediate rounding
        acc = acc / (1.0 + tl.exp(-acc)) * acc_up
    elif EPILOGUE == 4:
        # gelu_pytorch_tanh(g) * u; tanh(y) = 1 - 2 / (1 + exp(2y)) (saturates to +-1 without NaN)
        y = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = 0.5 * acc * (2.0 - 2.0 / (1.0 + tl.exp(2.0 * y))) * acc_up
    elif EPILOGUE == 5:
        # exact gelu(g) * u
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476)) * acc_up
    elif EPILOGUE == 2:
        acc = acc * tl.minimum(tl.maximum(acc + 3.0, 0.0), 6.0) / 6.0
    return acc


@triton.jit
def _mainloop(acc, acc_up, x_ptr, w_ptr, x_desc, w_desc, wu_desc, M, N, K, off_m, off_n, kk_lo, kk_hi,
              stride_xm, stride_wk, stride_wn, UP_OFF,
              EPILOGUE: tl.constexpr, USE_DESC: tl.constexpr, W_KMAJOR: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc (and, gated, acc_up) plus the tile's products over K steps [kk_lo, kk_hi). USE_DESC:
    through the caller's descriptors (made once a program: each costs a write and a fence);
    else block pointers of x_ptr and w_ptr, made here."""
    wty = w_ptr.dtype.element_ty
    GATED: tl.constexpr = EPILOGUE == 1 or (EPILOGUE == 4 or EPILOGUE == 5)
    if USE_DESC:
        for kk in range(kk_lo, kk_hi):
            k0 = kk * BLOCK_K
            a = x_desc.load([off_m, k0]).to(wty)
            if W_KMAJOR:
                acc = tl.dot(a, w_desc.load([k0, off_n]), acc)
                if GATED:
                    acc_up = tl.dot(a, wu_desc.load([k0, off_n]), acc_up)
            else:
                acc = tl.dot(a, tl.trans(w_desc.load([off_n, k0])), acc)
                if GATED:
                    acc_up = tl.dot(a, tl.trans(wu_desc.load([off_n, k0])), acc_up)
    else:
        x_bp = tl.make_block_ptr(x_ptr, shape=(M, K), strides=(stride_xm, 1), offsets=(off_m, kk_lo * BLOCK_K),
                                 block_shape=(BLOCK_M, BLOCK_K), order=(1, 0))
        # order names the contiguous dimension: N for a packed K-major W, K for weight.t()
        if W_KMAJOR:
            w_bp = tl.make_block_ptr(w_ptr, shape=(K, N), strides=(stride_wk, stride_wn),
                                     offsets=(kk_lo * BLOCK_K, off_n), block_shape=(BLOCK_K, BLOCK_N), order=(1, 0))
        else:
            w_bp = tl.make_block_ptr(w_ptr, shape=(K, N), strides=(stride_wk, stride_wn),
                                     offsets=(kk_lo * BLOCK_K, off_n), block_shape=(BLOCK_K, BLOCK_N), order=(0, 1))
        if GATED:
            if W_KMAJOR:
                wu_bp = tl.make_block_ptr(w_ptr + UP_OFF * stride_wn, shape=(K, N), strides=(stride_wk, stride_wn),
                                          offsets=(kk_lo * BLOCK_K, off_n), block_shape=(BLOCK_K, BLOCK_N),
                                          order=(1, 0))
            else:
                wu_bp = tl.make_block_ptr(w_ptr + UP_OFF * stride_wn, shape=(K, N), strides=(stride_wk, stride_wn),
                                          offsets=(kk_lo * BLOCK_K, off_n), block_shape=(BLOCK_K, BLOCK_N),
                                          order=(0, 1))
        for kk in range(kk_lo, kk_hi):
            a = tl.load(x_bp, boundary_check=(0, 1), padding_option="zero").to(wty)
            acc = tl.dot(a, tl.load(w_bp, boundary_check=(0, 1), padding_option="zero"), acc)
            if GATED:
                acc_up = tl.dot(a, tl.load(wu_bp, boundary_check=(0, 1), padding_option="zero"), acc_up)
                wu_bp = tl.advance(wu_bp, (BLOCK_K, 0))
            x_bp = tl.advance(x_bp, (0, BLOCK_K))
            w_bp = tl.advance(w_bp, (BLOCK_K, 0))
    return acc, acc_up


@triton.jit
def _in_descs(x_ptr, w_ptr, M, N, K, stride_xm, stride_wk, stride_wn, UP_OFF,
              EPILOGUE: tl.constexpr, W_KMAJOR: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The operands' tensor descriptors: x, W, and (gated) W's up half, else W again."""
    GATED: tl.constexpr = EPILOGUE == 1 or (EPILOGUE == 4 or EPILOGUE == 5)
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[stride_xm, 1], block_shape=[BLOCK_M, BLOCK_K])
    # an N-major W is described as the [N, K] tensor it is and its tiles transposed in registers
    if W_KMAJOR:
        w_desc = tl.make_tensor_descriptor(w_ptr, shape=[K, N], strides=[stride_wk, 1], block_shape=[BLOCK_K, BLOCK_N])
    else:
        w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_wn, 1], block_shape=[BLOCK_N, BLOCK_K])
    wu_desc = w_desc
    if GATED:
        # the up half as its own [K, I] tensor: OOB columns of a gate tile read zeros, never up
        if W_KMAJOR:
            wu_desc = tl.make_tensor_descriptor(w_ptr + UP_OFF, shape=[K, N], strides=[stride_wk, 1],
                                                block_shape=[BLOCK_K, BLOCK_N])
        else:
            wu_desc = tl.make_tensor_descriptor(w_ptr + UP_OFF * stride_wn, shape=[N, K], strides=[stride_wn, 1],
                                                block_shape=[BLOCK_N, BLOCK_K])
    return x_desc, w_desc, wu_desc


@triton.jit
def _out_descs(r_ptr, o_ptr, M, N, stride_rm, stride_om, EPILOGUE: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The output's tensor descriptor and (residual) the residual's, else the output's again."""
    o_desc = tl.make_tensor_descriptor(o_ptr, shape=[M, N], strides=[stride_om, 1], block_shape=[BLOCK_M, BLOCK_N])
    r_desc = o_desc
    if EPILOGUE == 3:
        r_desc = tl.make_tensor_descriptor(r_ptr, shape=[M, N], strides=[stride_rm, 1], block_shape=[BLOCK_M, BLOCK_N])
    return r_desc, o_desc


@triton.jit
def _store_tile(acc, acc_up, b_ptr, r_ptr, o_ptr, r_desc, o_desc, M, N, off_m, off_n, stride_rm, stride_om,
                UP_OFF, res_scale, HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr, USE_DESC: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """A finished tile: bias and activation (_epilogue), the residual (res_scale times the branch
    plus r), one rounding to the output dtype, the store."""
    offs_n = off_n + tl.arange(0, BLOCK_N)
    acc = _epilogue(acc, acc_up, b_ptr, offs_n, N, UP_OFF, HAS_BIAS, EPILOGUE)
    oty = o_ptr.dtype.element_ty
    if USE_DESC:
        if EPILOGUE == 3:
            acc = acc * res_scale + r_desc.load([off_m, off_n]).to(tl.float32)
        o_desc.store([off_m, off_n], acc.to(oty))
    else:
        if EPILOGUE == 3:
            r_bp = tl.make_block_ptr(r_ptr, shape=(M, N), strides=(stride_rm, 1), offsets=(off_m, off_n),
                                     block_shape=(BLOCK_M, BLOCK_N), order=(1, 0))
            acc = acc * res_scale + tl.load(r_bp, boundary_check=(0, 1), padding_option="zero").to(tl.float32)
        o_bp = tl.make_block_ptr(o_ptr, shape=(M, N), strides=(stride_om, 1), offsets=(off_m, off_n),
                                 block_shape=(BLOCK_M, BLOCK_N), order=(1, 0))
        tl.store(o_bp, acc.to(oty), boundary_check=(0, 1))


@triton.jit
def _gemm_kernel(
    x_ptr, w_ptr, b_ptr, r_ptr, o_ptr,
    M, N, K, M_BUCKET,
    stride_xm, stride_wk, stride_wn, stride_rm, stride_om,
    UP_OFF, res_scale,
    HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr, USE_DESC: tl.constexpr, W_KMAJOR: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
):
    # M_BUCKET (next power of 2 of M) is only an autotune key: one tuning per size class, not per M.
    pid = tl.program_id(0)
    pid_m, pid_n = _swizzle(pid, M, N, BLOCK_M, BLOCK_N, GROUP_SIZE_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # used by the gated epilogues only (DCE'd otherwise)
    if USE_DESC:
        x_desc, w_desc, wu_desc = _in_descs(x_ptr, w_ptr, M, N, K, stride_xm, stride_wk, stride_wn, UP_OFF,
                                            EPILOGUE, W_KMAJOR, BLOCK_M, BLOCK_N, BLOCK_K)
    else:
        x_desc, w_desc, wu_desc = x_ptr, w_ptr, w_ptr  # unused: block pointers
    acc, acc_up = _mainloop(acc, acc_up, x_ptr, w_ptr, x_desc, w_desc, wu_desc, M, N, K, off_m, off_n,
                            0, tl.cdiv(K, BLOCK_K), stride_xm, stride_wk, stride_wn, UP_OFF,
                            EPILOGUE, USE_DESC, W_KMAJOR, BLOCK_M, BLOCK_N, BLOCK_K)
    if USE_DESC:
        r_desc, o_desc = _out_descs(r_ptr, o_ptr, M, N, stride_rm, stride_om, EPILOGUE, BLOCK_M, BLOCK_N)
    else:
        r_desc, o_desc = r_ptr, o_ptr  # unused: block pointers
    _store_tile(acc, acc_up, b_ptr, r_ptr, o_ptr, r_desc, o_desc, M, N, off_m, off_n, stride_rm, stride_om,
                UP_OFF, res_scale, HAS_BIAS, EPILOGUE, USE_DESC, BLOCK_M, BLOCK_N)


@triton.jit
def _gemm_streamk_kernel(
    x_ptr, w_ptr, b_ptr, r_ptr, o_ptr, ws_ptr, sem_ptr,
    M, N, K, PER, DP_TILES,
    stride_xm, stride_wk, stride_wn, stride_rm, stride_om,
    UP_OFF, res_scale,
    HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr, USE_DESC: tl.constexpr, W_KMAJOR: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
):
    # Tiles in _swizzle order. The first DP_TILES run whole, program p taking tiles p, p + P, ...
    # (full waves: nothing to balance there); the rest are work units of (tile, K step) pairs,
    # program p owning units [p * PER, (p + 1) * PER), walked a tile segment at a time.
    pid = tl.program_id(0)
    progs = tl.num_programs(0)
    GATED: tl.constexpr = EPILOGUE == 1 or (EPILOGUE == 4 or EPILOGUE == 5)
    PARTS: tl.constexpr = 2 if GATED else 1  # fp32 partials a segment stores: gate and up, or one
    TILE: tl.constexpr = BLOCK_M * BLOCK_N
    k_tiles = tl.cdiv(K, BLOCK_K)
    # descriptors once a program, not once a tile
    if USE_DESC:
        x_desc, w_desc, wu_desc = _in_descs(x_ptr, w_ptr, M, N, K, stride_xm, stride_wk, stride_wn, UP_OFF,
                                            EPILOGUE, W_KMAJOR, BLOCK_M, BLOCK_N, BLOCK_K)
        r_desc, o_desc = _out_descs(r_ptr, o_ptr, M, N, stride_rm, stride_om, EPILOGUE, BLOCK_M, BLOCK_N)
    else:
        x_desc, w_desc, wu_desc = x_ptr, w_ptr, w_ptr  # unused: block pointers
        r_desc, o_desc = r_ptr, o_ptr
    for tile in range(pid, DP_TILES, progs):
        pid_m, pid_n = _swizzle(tile, M, N, BLOCK_M, BLOCK_N, GROUP_SIZE_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # gated epilogues only (DCE'd otherwise)
        acc, acc_up = _mainloop(acc, acc_up, x_ptr, w_ptr, x_desc, w_desc, wu_desc, M, N, K, pid_m * BLOCK_M,
                                pid_n * BLOCK_N, 0, k_tiles, stride_xm, stride_wk, stride_wn, UP_OFF,
                                EPILOGUE, USE_DESC, W_KMAJOR, BLOCK_M, BLOCK_N, BLOCK_K)
        _store_tile(acc, acc_up, b_ptr, r_ptr, o_ptr, r_desc, o_desc, M, N, pid_m * BLOCK_M, pid_n * BLOCK_N,
                    stride_rm, stride_om, UP_OFF, res_scale, HAS_BIAS, EPILOGUE, USE_DESC, BLOCK_M, BLOCK_N)
    total = (tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N) - DP_TILES) * k_tiles
    u_start = pid * PER
    u = u_start
    u_end = tl.minimum(u + PER, total)
    offs_t = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    while u < u_end:
        ts = u // k_tiles  # the tile's index among the stream-K ones
        kk_lo = u - ts * k_tiles
        kk_hi = tl.minimum(k_tiles, kk_lo + (u_end - u))
        pid_m, pid_n = _swizzle(DP_TILES + ts, M, N, BLOCK_M, BLOCK_N, GROUP_SIZE_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc, acc_up = _mainloop(acc, acc_up, x_ptr, w_ptr, x_desc, w_desc, wu_desc, M, N, K, off_m, off_n,
                                kk_lo, kk_hi, stride_xm, stride_wk, stride_wn, UP_OFF,
                                EPILOGUE, USE_DESC, W_KMAJOR, BLOCK_M, BLOCK_N, BLOCK_K)
        finish = (kk_lo == 0) & (kk_hi == k_tiles)
        if (kk_lo > 0) | (kk_hi < k_tiles):
            # A split tile: its segments belong to programs first .. last. Only a program's first
            # and last segments can be parts of a tile, so each program has two workspace slots
            # [2 * P, PARTS, BLOCK_M, BLOCK_N]: 2p for the segment holding its first unit, 2p + 1
            # for the one holding its last. The program that arrives last sums every slot in
            # segment order, so the result does not depend on arrival order, and nobody waits: no
            # program can stall on one that is not resident.
            first = (ts * k_tiles) // PER
            last = ((ts + 1) * k_tiles - 1) // PER
            slot = 2 * pid + (u != u_start).to(tl.int32)
            part = ws_ptr + slot.to(tl.int64) * (PARTS * TILE) + offs_t
            tl.store(part, acc)
            if GATED:
                tl.store(part + TILE, acc_up)
            # Every thread's partial is stored before the (acq_rel, device-scope) count is taken.
            tl.debug_barrier()
            arrived = tl.atomic_add(sem_ptr + ts, 1)
            finish = arrived == last - first
            if finish:
                acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for q in range(first, last + 1):
                    # program q's segment of this tile holds its first unit unless the tile began
                    # before q's range (only the first program's can)
                    s_at = ws_ptr + (2 * q + (q * PER < ts * k_tiles).to(tl.int32)).to(tl.int64) * (PARTS * TILE)
                    # .cg: read at L2, where the other programs' stores are, never a stale L1 line
                    acc += tl.load(s_at + offs_t, cache_modifier=".cg")
                    if GATED:
                        acc_up += tl.load(s_at + TILE + offs_t, cache_modifier=".cg")
                tl.atomic_xchg(sem_ptr + ts, 0)  # every segment arrived: zero for the next launch
        if finish:
            _store_tile(acc, acc_up, b_ptr, r_ptr, o_ptr, r_desc, o_desc, M, N, off_m, off_n, stride_rm, stride_om,
                        UP_OFF, res_scale, HAS_BIAS, EPILOGUE, USE_DESC, BLOCK_M, BLOCK_N)
        u += kk_hi - kk_lo


_BEST: dict = {}  # launch cache: problem class -> triton.Config (tuned for this GPU, or autotuned)

# On CUDA, decode-sized GEMMs (M <= 64) take block pointers even when aligned: on the H200 the
# descriptor path cost ~45 us more host time per launch (in-kernel TMA descriptors need a scratch
# allocation per launch) for no GPU-time gain (M=16 K=4096 N=6144: 18.0 us desc vs 14.3-15.4 us
# block pointers, CUDA-graph timed). Prefill shapes gain from descriptors (M=4096 swiglu 1587 us vs
# 1861 us). XPU keeps descriptors everywhere: they lower to 2D block loads there (the
# huggingface/kernels xpu-kernels skill, https://github.com/huggingface/kernels, skills/xpu-kernels).
CUDA_DESC_MIN_M = 65


def prefer_descriptors(be: str, m: int, aligned: bool) -> bool:
    """The automatic memory-path choice (use_descriptors=None)."""
    if not aligned or not _backend.has_descriptors():
        return False
    if be == "cuda" and m < CUDA_DESC_MIN_M:
        return False
    return True


def _autotuner(be: str, swiglu: bool):
    n_b = 2 if swiglu else 1
    return _backend.autotuned(
        "gemm.swiglu" if swiglu else "gemm", _gemm_kernel, be,
        _backend.gemm_configs(be, n_b_tiles=n_b),
        key=["M_BUCKET", "N", "K", "HAS_BIAS", "EPILOGUE", "USE_DESC", "W_KMAJOR"],
        prune=_backend.gemm_prune(be, n_b),
    )


def _as_rows(t: torch.Tensor) -> torch.Tensor:
    """[..., C] -> [rows, C] with unit column stride, without copying when a view exists."""
    c = t.shape[-1]
    if t.dim() == 2 and t.stride(-1) == 1:
        return t
    if t.stride(-1) == 1:
        try:
            return t.view(-1, c)
        except RuntimeError:
            pass
    return t.reshape(-1, c).contiguous()


def _err(msg: str) -> ValueError:
    return ValueError(f"xpuinject_kernels: gemm: {msg}")


_CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_SIZE_M", "num_warps", "num_stages")
# The optional seventh key: the programs of a stream-K launch (0 or absent: the tiled kernel).
_STREAM_K = "STREAM_K"


def _fixed_config(config: dict) -> Tuple[int, ...]:
    """gemm's `config=` as the op's values: the six _CONFIG_KEYS (every one required) in order,
    then STREAM_K where it is above 0."""
    sk = 0
    if isinstance(config, dict) and _STREAM_K in config:
        sk = config[_STREAM_K]
        if isinstance(sk, bool) or not isinstance(sk, int) or sk < 0:
            raise _err(f"config {_STREAM_K}={sk!r}: want an integer >= 0 (the stream-K programs; 0: the tiled kernel)")
        config = {k: v for k, v in config.items() if k != _STREAM_K}
    c = _backend.launch_config(config, _CONFIG_KEYS + (_STREAM_K,), "gemm")
    missing = [k for k in _CONFIG_KEYS if k not in c]
    if missing:
        raise _err(f"config lacks {', '.join(missing)} (want all of {', '.join(_CONFIG_KEYS)}; {_STREAM_K} optional)")
    return tuple(c[k] for k in _CONFIG_KEYS) + ((sk,) if sk > 0 else ())


# Whether a GEMM launched at its own config (tuned or heuristic, not one a caller forces) runs
# stream-K on that config's tiles where the tiled grid would leave its last wave under
# STREAMK_MAX_FILL full (XPUINJECT_STREAMK=1); unset or 0, never. Off until the GPU data says
# where it pays (benchmarks/bench_streamk.py).
STREAMK_AUTO = _backend.env_switch("XPUINJECT_STREAMK")
# The fill of the tiled grid's waves (tiles / (waves * SMs)) under which the automatic choice
# takes stream-K: 72 tiles on 132 SMs fill 0.55 of one wave, 192 fill 0.73 of two.
STREAMK_MAX_FILL = 0.8


def _auto_streamk(be: str, device: torch.device, m: int, n: int, cfg: triton.Config) -> int:
    """The stream-K programs for a launch at cfg, or 0 for the tiled grid (see STREAMK_AUTO)."""
    if not STREAMK_AUTO or be != "cuda" or _backend.is_interpret() or m < CUDA_DESC_MIN_M:
        return 0
    programs = _backend.compute_units(device)
    tiles = _backend.cdiv(m, cfg.kwargs["BLOCK_M"]) * _backend.cdiv(n, cfg.kwargs["BLOCK_N"])
    return programs if wave_fill(tiles, programs) < STREAMK_MAX_FILL else 0


def wave_fill(tiles: int, programs: int) -> float:
    """How full the tiled grid's waves are: tiles over the slots of the waves they take."""
    return tiles / (_backend.cdiv(tiles, programs) * programs)


def streamk_programs(device) -> int:
    """The programs a stream-K launch on `device` should take (config STREAM_K): one per SM on
    CUDA, one per Xe core on XPU, 8 under the interpreter (enough to split tiles)."""
    return _backend.compute_units(torch.device(device))


def _streamk_split(tiles: int, k_tiles: int, programs: int) -> Tuple[int, int, int, int]:
    """(tiles run whole, K steps per program over the rest, programs launched, most segments a
    tile is cut into) for `programs` stream-K programs over `tiles` tiles of k_tiles K steps.
    Whole waves but the last run whole (stream-K balances only what does not fill a wave; over
    all of them every tile would be cut, its partials written and read back); the last whole
    wave and the remainder are split into equal runs of K steps. Tiles that fill their waves run
    whole, all of them."""
    if tiles % programs == 0:
        dp = tiles
    else:
        dp = max(0, tiles // programs - 1) * programs
    total = (tiles - dp) * k_tiles
    if total == 0:
        return dp, 0, programs, 1
    per = _backend.cdiv(total, programs)
    sk = tiles - dp
    # A tile starting r units into a program's range is cut into 1 + (r + k_tiles - 1) // per
    # segments; r = tile * k_tiles mod per repeats every per / g tiles (g = gcd(k_tiles, per)),
    # and once every r is reached the largest is per - g.
    g = math.gcd(k_tiles, per)
    if sk >= per // g:
        segs = 1 + (per - g + k_tiles - 1) // per
    else:
        segs = max(1 + ((t * k_tiles) % per + k_tiles - 1) // per for t in range(sk))
    return dp, per, programs if dp else _backend.cdiv(total, per), segs


def gemm(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    residual: Optional[torch.Tensor] = None,
    epilogue: str = "none",
    use_descriptors: Optional[bool] = None,
    out_dtype: Optional[torch.dtype] = None,
    config: Optional[dict] = None,
    res_scale: float = 1.0,
) -> torch.Tensor:
    """out = epilogue(x @ w (+ bias)) with w [K, N]: pre-packed K-major, or a weight.t() view.

    x: [..., K]; w: [K, N] (swiglu: [K, 2I], gate | up); bias: [N] (swiglu: [2I]); residual:
    [..., N] for epilogue "residual". Returns [..., N] (swiglu: [..., I]) in out_dtype (default
    x.dtype; torch.float32 keeps the accumulator unrounded).
    use_descriptors: None = tensor descriptors when every operand is aligned, else block pointers;
    False forces block pointers; True requires descriptors (ValueError if an operand is misaligned
    or w is a weight.t() view, which block pointers read).
    config: launch constants {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_SIZE_M", "num_warps",
    "num_stages"}, all six, used instead of the autotuner's pick (for tuning); None autotunes.
    An optional seventh key "STREAM_K" > 0 runs the stream-K kernel instead, on that many
    programs (streamk_programs(device): one per SM); 0 or absent, the tiled kernel.
    res_scale: epilogue "residual" adds res_scale * (x @ w (+ bias)) to the residual, one fp32
    multiply-add rounded once (Granite's residual_multiplier); 1 elsewhere.
    The op: torch.ops.<ns>.gemm (config passed as the six values in that order, then STREAM_K
    when it is above 0).
    """
    fixed: Tuple[int, ...] = ()
    if config is not None:
        fixed = _fixed_config(config)
    if _ops.traced(x):
        return _ops.call("gemm", x, w, bias, residual, epilogue, use_descriptors, out_dtype, list(fixed), float(res_scale))
    return _gemm(x, w, bias, residual, epilogue, use_descriptors, out_dtype, fixed, float(res_scale))


def _check(x, w, bias, residual, epilogue, out_dtype, res_scale=1.0):
    """Check every operand; returns (w is K-major, N of the output, output shape, output dtype)."""
    if epilogue not in _EPI_CODE:
        raise _err(f"unknown epilogue {epilogue!r} (want one of {', '.join(EPILOGUES)})")
    if not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor):
        raise _err("x and w must be tensors")
    if x.dtype not in _X_DTYPES:
        raise _err(f"x dtype {x.dtype} not supported (want bfloat16, float16 or float32)")
    if w.dtype not in _W_DTYPES:
        raise _err(f"weight dtype {w.dtype} not supported (want the packed bfloat16 or float16 [K, N])")
    if w.dim() != 2:
        raise _err(f"weight shape {tuple(w.shape)}: want 2-D K-major [K, N]")
    if x.dim() < 1 or x.shape[-1] != w.shape[0]:
        raise _err(f"x shape {tuple(x.shape)} does not match weight [K, N] = {tuple(w.shape)} (x's last dim must be K)")
    if w.shape[0] == 0 or w.shape[1] == 0:
        raise _err(f"weight shape {tuple(w.shape)} has an empty dimension")
    if w.stride(-1) == 1:
        kmajor = True
    elif w.stride(0) == 1:
        kmajor = False  # weight.t() of a row-major nn.Linear weight
    else:
        raise _err(f"weight strides {tuple(w.stride())}: want K-major [K, N] rows or a transposed [N, K] weight")
    if out_dtype is None:
        out_dtype = x.dtype
    elif out_dtype not in _X_DTYPES:
        raise _err(f"out_dtype {out_dtype} not supported (want bfloat16, float16 or float32)")
    if w.device != x.device:
        raise _err(f"weight on {w.device}, x on {x.device}")
    n_w = w.shape[1]
    swiglu = epilogue in _GATED
    if swiglu and n_w % 2 != 0:
        raise _err(f"{epilogue} weight has {n_w} columns: want an even [K, 2I] (gate | up)")
    n = n_w // 2 if swiglu else n_w
    if epilogue == "bias" and bias is None:
        raise _err("epilogue 'bias' needs a bias tensor")
    if epilogue == "none" and bias is not None:
        raise _err("a bias was given with epilogue 'none' (use epilogue='bias')")
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.dim() != 1 or bias.shape[0] != n_w:
            raise _err(f"bias shape {tuple(getattr(bias, 'shape', ()))}: want [{n_w}]")
        if not bias.dtype.is_floating_point:
            raise _err(f"bias dtype {bias.dtype} not supported")
        if bias.device != x.device:
            raise _err(f"bias on {bias.device}, x on {x.device}")
    out_shape = tuple(x.shape[:-1]) + (n,)
    if epilogue == "residual":
        if not isinstance(residual, torch.Tensor) or tuple(residual.shape) != out_shape:
            raise _err(f"residual shape {tuple(getattr(residual, 'shape', ()))}: want {out_shape}")
        if not residual.dtype.is_floating_point:
            raise _err(f"residual dtype {residual.dtype} not supported")
        if residual.device != x.device:
            raise _err(f"residual on {residual.device}, x on {x.device}")
    elif residual is not None:
        raise _err(f"a residual was given with epilogue {epilogue!r} (use epilogue='residual')")
    if res_scale != 1.0 and epilogue != "residual":
        raise _err(f"res_scale {res_scale} scales the residual epilogue's branch; epilogue is {epilogue!r}")
    return kmajor, n, out_shape, out_dtype


def _gemm_fake(x, w, bias, residual, epilogue, use_descriptors, out_dtype, config, res_scale=1.0):
    _, _, out_shape, out_dtype = _check(x, w, bias, residual, epilogue, out_dtype, res_scale)
    return x.new_empty(out_shape, dtype=out_dtype)


def _gemm(x, w, bias, residual, epilogue, use_descriptors, out_dtype, config, res_scale=1.0) -> torch.Tensor:
    kmajor, n, out_shape, out_dtype = _check(x, w, bias, residual, epilogue, out_dtype, res_scale)
    fixed = None
    stream_k = 0
    if config:
        c = dict(zip(_CONFIG_KEYS + (_STREAM_K,), config))
        fixed = triton.Config({k: c[k] for k in _CONFIG_KEYS[:4]}, num_warps=c["num_warps"], num_stages=c["num_stages"])
        stream_k = c.get(_STREAM_K, 0)
    if bias is not None:
        bias = bias.contiguous()
    k, n_w = w.shape
    swiglu = epilogue in _GATED
    be = _backend.require_runnable(x, "gemm")
    out = _backend.empty(out_shape, out_dtype, x.device)
    x2 = _as_rows(x)
    m = x2.shape[0]
    if m == 0:
        return out
    o2 = out.view(-1, n)
    r2 = _as_rows(residual) if residual is not None else None
    if fixed is None and use_descriptors is None and gemv.supports(m, kmajor, be, n_w):
        # decode-sized M: split-K over the weight, reduced in the same launch (gemv.py)
        gemv.gemv(x2, w, bias, r2, o2, epilogue, res_scale=res_scale)
        _backend.count(f"gemm.{epilogue}")
        return out
    up_off = n if swiglu else 0

    # descriptors see an N-major weight as the [N, K] tensor it is
    w_rows = w if kmajor else w.t()
    operands = [x2, w_rows, o2] + ([r2] if r2 is not None else []) + ([w_rows[:, n:] if kmajor else w_rows[n:]]
                                                                       if swiglu else [])

    def aligned() -> bool:
        return all(_backend.tma_ok(t) for t in operands)

    if use_descriptors is None:
        # The cheap conditions first: a CUDA decode step never takes descriptors, so it skips
        # the alignment checks (~10 us of host time per call on the dev VM, of ~27 us).
        # an N-major weight takes block pointers unless asked: descriptors of its [N, K] rows are
        # not measured against them (and the XPU backend does not lower the transposed tile)
        use_desc = kmajor and prefer_descriptors(be, m, True) and aligned()
    elif use_descriptors:
        if not aligned():
            raise _err("use_descriptors=True but an operand is not 16-byte aligned (base or row stride)")
        if not _backend.has_descriptors():
            raise _err(f"use_descriptors=True but triton {triton.__version__} has no tl.make_tensor_descriptor")
        use_desc = True
    else:
        use_desc = False
    if use_desc:
        _backend.ensure_allocator(x.device)

    m_bucket = _backend.next_pow2(m)
    args = (
        x2, w, bias if bias is not None else w, r2 if r2 is not None else o2, o2,
        m, n, k, m_bucket,
        x2.stride(0), w.stride(0), w.stride(1), r2.stride(0) if r2 is not None else 0, o2.stride(0),
        up_off, float(res_scale),
    )
    flags = dict(HAS_BIAS=bias is not None, EPILOGUE=_EPI_CODE[epilogue], USE_DESC=use_desc, W_KMAJOR=kmajor)
    if stream_k > 0:
        _streamk(args, flags, fixed, swiglu, stream_k, x.device)
        _backend.count("gemm.desc" if use_desc else "gemm.blockptr")
        _backend.count(f"gemm.{epilogue}")
        return out
    # Launch cache: once the autotuner picked a config for this problem class, launch the jit
    # function with it directly. The autotuner's per-call bookkeeping cost ~40% of a ~120 us
    # launch on the H200 host (cProfile, M=16 decode GEMM); any config is correct, so a stale
    # entry could only cost speed.
    lkey = (be, _backend.is_interpret(), x.dtype, w.dtype, None if bias is None else bias.dtype,
            None if residual is None else residual.dtype, m_bucket, n, k, flags["HAS_BIAS"], flags["EPILOGUE"], use_desc,
            kmajor, out_dtype)
    cfg = fixed if fixed is not None else _BEST.get(lkey)
    if cfg is not None:
        _backend.count("gemm.launch_cached")
    else:
        # The config tuned on this GPU model (gpus/<gpu>.json); else the interpreter's one tile
        # sized by the problem, or on a GPU one derived from the shape (gpus.heuristic_config:
        # autotuning only when asked).
        cfg = gpus.tuned_config("gemm", {"epilogue": epilogue, "m_bucket": m_bucket, "k": k, "n": n_w}, x.device)
        if cfg is None and _backend.is_interpret():
            cfg = _backend.interpret_gemm_config(m, n)
        elif cfg is None:
            cfg = gpus.heuristic_config("gemm", {"epilogue": epilogue, "m_bucket": m_bucket, "k": k, "n": n_w},
                                        lambda: _backend.gemm_heuristic(be, m, n, k, 2 if swiglu else 1))
        if cfg is not None:
            _BEST[lkey] = cfg
    auto_sk = _auto_streamk(be, x.device, m, n, cfg) if cfg is not None and fixed is None else 0
    if auto_sk:
        _streamk(args, flags, cfg, swiglu, auto_sk, x.device)
    elif cfg is not None:
        grid = (_backend.cdiv(m, cfg.kwargs["BLOCK_M"]) * _backend.cdiv(n, cfg.kwargs["BLOCK_N"]),)
        _gemm_kernel[grid](*args, **flags, **cfg.all_kwargs())
    else:
        kern = _autotuner(be, swiglu)

        def grid(meta):
            return (_backend.cdiv(m, meta["BLOCK_M"]) * _backend.cdiv(n, meta["BLOCK_N"]),)

        kern[grid](*args, **flags)
        if getattr(kern, "best_config", None) is not None:
            _BEST[lkey] = kern.best_config
    _backend.count("gemm.desc" if use_desc else "gemm.blockptr")
    _backend.count(f"gemm.{epilogue}")
    return out


def _streamk(args, flags, cfg: triton.Config, gated: bool, programs: int, device: torch.device) -> None:
    """Launch _gemm_streamk_kernel on `programs` programs with _gemm_kernel's arguments; a
    workspace for the split tiles' partials (two slots a program) and their semaphores only
    where a tile is split."""
    x2, w, b, r, o, m, n, k, _m_bucket, *rest = args
    bm, bn, bk = cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"], cfg.kwargs["BLOCK_K"]
    tiles = _backend.cdiv(m, bm) * _backend.cdiv(n, bn)
    dp, per, grid, segs = _streamk_split(tiles, _backend.cdiv(k, bk), programs)
    if segs > 1:
        if tiles - dp > _backend.SEMAPHORES:
            raise _err(f"stream-K over {tiles - dp} split tiles needs a semaphore a tile, the buffer has "
                       f"{_backend.SEMAPHORES} (larger tiles, or no STREAM_K)")
        # [2 * grid, gate/up, BLOCK_M, BLOCK_N] fp32 partials; each slot read is written first
        ws = _backend.empty((2 * grid * (2 if gated else 1) * bm * bn,), torch.float32, device)
        sem = _backend.semaphores(device, tiles - dp)
    else:
        # never touched (every tile is whole), only typed as the split path takes them
        sem = _backend.semaphores(device, 1)
        ws = sem.view(torch.float32)
    _gemm_streamk_kernel[(grid,)](x2, w, b, r, o, ws, sem, m, n, k, max(per, 1), dp, *rest, **flags,
                                  **cfg.all_kwargs())
    _backend.count("gemm.streamk")


_ops.define(
    "gemm",
    "(Tensor x, Tensor w, Tensor? bias, Tensor? residual, str epilogue, bool? use_descriptors, ScalarType? out_dtype, "
    "int[] config, float res_scale=1.0) -> Tensor",
    _gemm, _gemm_fake,
)


def add_rms_norm_gemm(
    x: torch.Tensor,
    residual: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    w: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    epilogue: str = "none",
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(new_residual, out) = (x + residual, gemm(rms_norm(x + residual), w, bias, epilogue)): the
    post-attention add + RMSNorm (Llama's order, rmsnorm.py) and the next projection. A
    decode-sized call on a packed weight (gemv.py) runs it as one launch, the norm in the GEMV's
    prologue; any other call runs add_rms_norm, then gemm. x, residual: [..., K] of one dtype;
    norm_weight: [K] of that dtype. The op: torch.ops.<ns>.add_rms_norm_gemm."""
    if _ops.traced(x):
        return _ops.call("add_rms_norm_gemm", x, residual, norm_weight, float(eps), w, bias, epilogue)
    return _add_rms_norm_gemm(x, residual, norm_weight, eps, w, bias, epilogue)


def _fused_norm_ok(x, residual, norm_weight, w, epilogue) -> bool:
    same = residual.dtype == x.dtype and tuple(residual.shape) == tuple(x.shape)
    return same and _row_norm_ok(x, norm_weight, w, epilogue)


def _rows(t: torch.Tensor) -> int:
    return t.numel() // t.shape[-1] if t.shape[-1] else 0


def _add_rms_norm_gemm(x, residual, norm_weight, eps, w, bias, epilogue):
    from .rmsnorm import add_rms_norm

    if not _fused_norm_ok(x, residual, norm_weight, w, epilogue):
        new_res, normed = add_rms_norm(x, residual, norm_weight, eps)
        return new_res, gemm(normed, w, bias=bias, epilogue=epilogue)
    _, n, out_shape, out_dtype = _check(x, w, bias, None, epilogue, None)
    _backend.require_runnable(x, "add_rms_norm_gemm")
    x2, r0 = _as_rows(x), _as_rows(residual)
    new_res = _backend.empty(x.shape, x.dtype, x.device)
    out = _backend.empty(out_shape, out_dtype, x.device)
    gemv.gemv(x2, w, bias.contiguous() if bias is not None else None, None, out.view(-1, n), epilogue,
              norm=(r0, norm_weight.contiguous(), eps, new_res.view(-1, x.shape[-1])))
    _backend.count("add_rms_norm_gemm")
    return new_res, out


def _add_rms_norm_gemm_fake(x, residual, norm_weight, eps, w, bias, epilogue):
    _, _, out_shape, out_dtype = _check(x, w, bias, None, epilogue, None)
    return x.new_empty(x.shape), x.new_empty(out_shape, dtype=out_dtype)


_ops.define(
    "add_rms_norm_gemm",
    "(Tensor x, Tensor residual, Tensor norm_weight, float eps, Tensor w, Tensor? bias, str epilogue) -> (Tensor, Tensor)",
    _add_rms_norm_gemm, _add_rms_norm_gemm_fake,
)


# Whether rms_norm_gemm runs as one launch: None (XPUINJECT_FUSE_INPUT_NORM unset) where launches
# do not overlap (_backend.fuse_norm says why), True / False ("1" / "0") always / never.
FUSE_INPUT_NORM = _backend.env_switch("XPUINJECT_FUSE_INPUT_NORM")


def rms_norm_gemm(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    w: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    epilogue: str = "none",
) -> torch.Tensor:
    """gemm(rms_norm(x, norm_weight, eps), w, bias, epilogue): a decoder layer's input RMSNorm and
    the projection after it. A decode-sized call on a packed weight runs as one GEMV launch
    (gemv.py, row_norm) whose dot takes x * norm_weight and whose accumulator each row's rstd
    scales, the same math with one rounding of the normalized input where Llama's order has two,
    where FUSE_INPUT_NORM lets it; any other call runs rms_norm, then gemm. x: [..., K] bf16/fp16;
    norm_weight: [K] of x's dtype.
    The op: torch.ops.<ns>.rms_norm_gemm."""
    if _ops.traced(x):
        return _ops.call("rms_norm_gemm", x, norm_weight, float(eps), w, bias, epilogue)
    return _rms_norm_gemm(x, norm_weight, eps, w, bias, epilogue)


def _row_norm_ok(x: torch.Tensor, norm_weight: torch.Tensor, w: torch.Tensor, epilogue: str = "none") -> bool:
    """Whether a norm of x's rows by norm_weight may run inside a GEMV on w (rms_norm_gemm, and
    with a residual of x's shape and dtype add_rms_norm_gemm)."""
    return (epilogue != "residual" and x.dtype in (torch.bfloat16, torch.float16) and norm_weight.dtype == x.dtype
            and norm_weight.dim() == 1 and norm_weight.shape[0] == x.shape[-1] and w.dim() == 2
            and (w.stride(1) == 1 or w.stride(0) == 1)
            and gemv.supports(_rows(x), w.stride(1) == 1, _backend.backend(x), w.shape[1]))


def _rms_norm_gemm(x, norm_weight, eps, w, bias, epilogue):
    from .rmsnorm import rms_norm

    if not (_row_norm_ok(x, norm_weight, w, epilogue) and _backend.fuse_norm(FUSE_INPUT_NORM, x.device)):
        return gemm(rms_norm(x, norm_weight, eps), w, bias=bias, epilogue=epilogue)
    if not eps >= 0.0:
        raise _err(f"rms_norm_gemm: eps must be >= 0, got {eps}")
    _, n, out_shape, out_dtype = _check(x, w, bias, None, epilogue, None)
    _backend.require_runnable(x, "rms_norm_gemm")
    out = _backend.empty(out_shape, out_dtype, x.device)
    gemv.gemv(_as_rows(x), w, bias.contiguous() if bias is not None else None, None, out.view(-1, n), epilogue,
              row_norm=(norm_weight.contiguous(), float(eps)))
    _backend.count("rms_norm_gemm")
    return out


def _rms_norm_gemm_fake(x, norm_weight, eps, w, bias, epilogue):
    _, _, out_shape, out_dtype = _check(x, w, bias, None, epilogue, None)
    return x.new_empty(out_shape, dtype=out_dtype)


_ops.define(
    "rms_norm_gemm",
    "(Tensor x, Tensor norm_weight, float eps, Tensor w, Tensor? bias, str epilogue) -> Tensor",
    _rms_norm_gemm, _rms_norm_gemm_fake,
)


def gemm_ref(x, w, bias=None, residual=None, epilogue="none", res_scale=1.0):
    """fp32 reference: same math, no rounding until the caller casts."""
    y = x.float() @ w.float()
    if bias is not None:
        y = y + bias.float()
    if epilogue in _GATED:
        i = w.shape[1] // 2
        g, u = y[..., :i], y[..., i:]
        if epilogue == "geglu":
            return torch.nn.functional.gelu(g, approximate="tanh") * u
        if epilogue == "geglu_erf":
            return torch.nn.functional.gelu(g) * u
        return torch.nn.functional.silu(g) * u
    if epilogue == "hardswish":
        return torch.nn.functional.hardswish(y)
    if epilogue == "residual":
        return y * res_scale + residual.float()
    return y


from . import gemv  # noqa: E402  (gemv.py takes its epilogue from this module)
