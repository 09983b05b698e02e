"""Decode-sized GEMM (M <= 16 rows) on pre-packed K-major weights: split-K, reduced in the kernel.

    out[M, N] = epilogue(x[M, K] @ W[K, N] (+ bias[N]))       the epilogues of gemm.py

At decode a projection is one pass over its weight, and what limits it is how many programs
stream that weight at once. A [K, N] weight cut into N tiles alone leaves most of the GPU idle
at N = 4096 (64 tiles of 64 columns for 132 SMs on an H200), and a second launch that sums
split-K partials (as cuBLAS's splitKreduce does) costs a launch. Here the grid is (N tiles,
K splits): each program multiplies one [K / SPLIT_K, BLOCK_N] slab, stores its fp32 partial, and
counts itself in a per-tile semaphore; the program that arrives last sums the partials in split
order (so the result does not depend on arrival order), runs the epilogue, writes the output and
puts the semaphore back to 0 for the next launch. One launch, any epilogue, and deterministic.

The semaphores are one zeroed int32 buffer per device (`_backend.semaphores`) that every launch
leaves zeroed; launches on one stream are ordered, so they share it. A launch killed midway
would leave counts behind, which is why only this module and the attention decode kernel use it.

The dot runs through tl.dot on a 16-row tile (rows past M load as zeros): the weight stream is
the cost, and the tensor cores take the padding for free. Accumulation is fp32; the output is
rounded once after the epilogue, as in gemm.py.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from . import _backend, gpus
from .gemm import _EPI_CODE, _GATED, _epilogue
from .rmsnorm import rows_rstd
from .rope import _qkv_rope_epilogue

__all__ = ["MAX_M", "gemv", "supports", "heuristic_config", "CONFIG_KEYS", "CONFIG_FLAGS"]

# Rows a launch covers (one tl.dot tile); larger M takes gemm.py's tiled kernel.
MAX_M = 16
_BLOCK_M = 16
CONFIG_KEYS = ("BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages")
# Switches a config may add (0 or 1, 0 where absent): EW on a K-major weight at one row (N-major
# weights take EW at one row always); PTR, the weight tiles through each thread's pointer loads
# where descriptors or block pointers are the device's default (a class they read slower).
CONFIG_FLAGS = ("EW", "PTR")


@triton.jit
def _finish(acc, acc_up, b_ptr, r_ptr, o_ptr, offs_m, offs_n, out_ok, N, UP_OFF, stride_rm, stride_om, res_scale,
            HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr):
    """Epilogue, the residual (EPILOGUE 3: res_scale times the branch, plus the residual) and the
    one rounding store of a finished tile."""
    acc = _epilogue(acc, acc_up, b_ptr, offs_n, N, UP_OFF, HAS_BIAS, EPILOGUE)
    if EPILOGUE == 3:
        acc = acc * res_scale + tl.load(r_ptr + offs_m[:, None] * stride_rm + offs_n[None, :], mask=out_ok,
                            other=0.0).to(tl.float32)
    tl.store(o_ptr + offs_m[:, None] * stride_om + offs_n[None, :], acc.to(o_ptr.dtype.element_ty), mask=out_ok)


@triton.jit
def _gemv_kernel(
    x_ptr, w_ptr, b_ptr, r_ptr, o_ptr, ws_ptr, sem_ptr, r0_ptr, nw_ptr, sum_ptr,
    M, N, K, K_PER_SPLIT, UP_OFF, N_WS,
    stride_xm, stride_wk, stride_wn, stride_rm, stride_om, stride_r0m, stride_sm, eps, res_scale,
    HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
    NORM: tl.constexpr = False, PDL: tl.constexpr = False, ROW_NORM: tl.constexpr = False,
    # W is [K, N] read by its strides: K-major (stride_wn 1, the packed layout) or the [K, N] view
    # of an N-major [N, K] weight (stride_wk 1, nn.Linear's own); the launch specializes the unit
    # stride, so each layout's tile loads run along its contiguous axis.
    # EW (one row; BLOCK_M = 1): multiply-add the weight tile into an fp32 accumulator of its shape
    # on the CUDA cores and reduce it once at the end, instead of a 16-row tl.dot. N-major weights
    # always (on the H200, at each path's best config, the Qwen3-30B-A3B attention projections took
    # 6.99 and 6.39 us against 8.38 and 7.27 through the dot on the transposed tile,
    # bench_launch_floor.py); K-major ones where the config's EW switch says so.
    EW: tl.constexpr = False, EW_STAGES: tl.constexpr = None,
    ROWS: tl.constexpr = 1, BLOCK_R: tl.constexpr = 16,
    # ROPE: the output is a decode token's fused q|k|v projection and each N tile one head of
    # TILE_N = head_dim columns; the finished tile is normalized, rotated and written to the query
    # or the static cache (rope.py's _qkv_rope_epilogue; rope_cache.qkv_rope_cache_write).
    ROPE: tl.constexpr = False, TILE_N=0, QO=None, KC=None, VC=None, COS=None, SIN=None, COUNTER=None,
    QW=None, KW=None, HQ=0, HK=0, HALF=0, L=0, sqo=0, skcb=0, skch=0, skcn=0, svcb=0, svch=0, svcn=0,
    scb=0, ssb=0, eps_qk=0.0, NORM_QK: tl.constexpr = False, NORM_ROUND: tl.constexpr = True,
    NORM_AFTER: tl.constexpr = False,
    # HEAD_TILES > 1: a head spans that many BLOCK_N tiles (the EW path's narrow ones); the program
    # that finishes the head's last (tile, split) sums all of them and runs the epilogue on the
    # head, BLOCK_D (head_dim's power of two) wide.
    HEAD_TILES: tl.constexpr = 1, BLOCK_D: tl.constexpr = 0,
    # TMA: w_desc, a host-side tensor descriptor over the K-major weight with a [BLOCK_K, BLOCK_N]
    # box, feeds the dot's weight tiles (one bulk copy a tile on sm_90+). A tile's rows past K and
    # columns past N_w load as zeros; columns past a tile's own (a gate tile reaching into up, a
    # head's power-of-two tile into the next head) are computed and never stored. Not with EW.
    TMA: tl.constexpr = False, w_desc=None,
    # BLOCK_PTR: the dot's weight tiles through block pointers (_backend.weight_block_ptr: XPU's 2D
    # block loads), with the descriptor's zero fill and its reach past a tile's own columns.
    BLOCK_PTR: tl.constexpr = False,
):
    _backend.pdl_wait(PDL)
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    gated: tl.constexpr = EPILOGUE == 1 or (EPILOGUE == 4 or EPILOGUE == 5)
    wty = w_ptr.dtype.element_ty
    aty = x_ptr.dtype.element_ty
    offs_m = tl.arange(0, BLOCK_M)
    m_ok = offs_m < M
    head = pid_n // HEAD_TILES
    if ROPE:
        # a head a tile (BLOCK_N, a power of two, covers head_dim's TILE_N columns), or HEAD_TILES
        # tiles a head
        offs_t = (pid_n % HEAD_TILES) * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_n = head * TILE_N + offs_t
        n_ok = (offs_t < TILE_N) & (offs_n < N)
    else:
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < N
    k_lo = pid_k * K_PER_SPLIT
    k_hi = tl.minimum(k_lo + K_PER_SPLIT, K)
    if NORM:
        # The prologue of add_rms_norm: every program needs each row's rstd over the whole row of
        # s = x + r0 (rounded to the activation dtype, as the add kernel rounds it). The rows are
        # tiny next to the weight slab, and L2 serves them.
        ss = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            offs = k0 + tl.arange(0, BLOCK_K)
            ok = m_ok[:, None] & (offs < K)[None, :]
            xs = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs[None, :], mask=ok, other=0.0)
            rs = tl.load(r0_ptr + offs_m[:, None] * stride_r0m + offs[None, :], mask=ok, other=0.0)
            sv = (xs.to(tl.float32) + rs.to(tl.float32)).to(aty).to(tl.float32)
            ss += tl.sum(sv * sv, axis=1)
        rstd = 1.0 / tl.sqrt(ss / K + eps)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # gated epilogues only (DCE'd otherwise)
    acc2 = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)  # EW only (DCE'd otherwise)
    acc2_up = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)
    if ROW_NORM:
        # Each row's rstd over all K, every program on its own (the ROWS rows there are, not the
        # dot's padding). On the H200 the squares summed inside the weight loop instead doubled
        # the GEMV's time (benchmarks/bench_fused_norm.py).
        rstd = rows_rstd(x_ptr, x_ptr, 0, M, K, stride_xm, 0, eps, ROWS, BLOCK_M, BLOCK_R, False)
    n0 = head * TILE_N + (pid_n % HEAD_TILES) * BLOCK_N if ROPE else pid_n * BLOCK_N  # the tile's first column
    if BLOCK_PTR:
        # advanced down K in the loop (made inside it, Intel's pipeliner rejects them)
        w_bp = _backend.block_ptr(w_ptr, K, N_WS, stride_wk, stride_wn, k_lo, n0, BLOCK_K, BLOCK_N)
        wu_bp = _backend.block_ptr(w_ptr, K, N_WS, stride_wk, stride_wn, k_lo, UP_OFF + n0, BLOCK_K, BLOCK_N)
    # EW_STAGES: the weight loads go through shared memory that many deep, as the dot's do (they
    # feed no dot, so the pipeliner would leave them as plain loads); None: the launch's stages
    for k0 in tl.range(k_lo, k_hi, BLOCK_K, num_stages=EW_STAGES):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < k_hi
        a_ok = m_ok[:, None] & k_ok[None, :]
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :], mask=a_ok, other=0.0)
        if ROW_NORM:
            # the dot takes x * weight (one rounding); rstd, a per-row scalar, scales the
            # accumulator at the end
            a = a.to(tl.float32) * tl.load(nw_ptr + offs_k, mask=k_ok, other=0.0).to(tl.float32)[None, :]
        if NORM:
            # Llama's RMSNorm order (rmsnorm.py): round the sum, normalize in fp32, round, then the
            # weight, rounded once more; the first N tile's programs write the new residual.
            sv = (a.to(tl.float32) + tl.load(r0_ptr + offs_m[:, None] * stride_r0m + offs_k[None, :], mask=a_ok,
                                             other=0.0).to(tl.float32)).to(aty)
            tl.store(sum_ptr + offs_m[:, None] * stride_sm + offs_k[None, :], sv, mask=a_ok & (pid_n == 0))
            nv = (sv.to(tl.float32) * rstd[:, None]).to(aty).to(tl.float32)
            nw = tl.load(nw_ptr + offs_k, mask=k_ok, other=0.0).to(tl.float32)
            a = (nw[None, :] * nv).to(aty)
        a = a.to(wty)
        w_rows = w_ptr + offs_k.to(tl.int64)[:, None] * stride_wk + offs_n[None, :] * stride_wn
        w_ok = k_ok[:, None] & n_ok[None, :]
        if EW:
            # bf16 x bf16 products are exact in fp32, as the tensor cores' are
            ak = tl.reshape(a.to(tl.float32), (BLOCK_K,))[:, None]  # the one row, down K
            acc2 += tl.load(w_rows, mask=w_ok, other=0.0).to(tl.float32) * ak
            if gated:
                acc2_up += tl.load(w_rows + UP_OFF * stride_wn, mask=w_ok, other=0.0).to(tl.float32) * ak
        elif TMA:
            acc = tl.dot(a, w_desc.load([k0, n0]), acc)
            if gated:
                acc_up = tl.dot(a, w_desc.load([k0, UP_OFF + n0]), acc_up)
        elif BLOCK_PTR:
            acc = tl.dot(a, tl.load(w_bp, boundary_check=(0, 1), padding_option="zero"), acc)
            w_bp = tl.advance(w_bp, (BLOCK_K, 0))
            if gated:
                acc_up = tl.dot(a, tl.load(wu_bp, boundary_check=(0, 1), padding_option="zero"), acc_up)
                wu_bp = tl.advance(wu_bp, (BLOCK_K, 0))
        else:
            acc = tl.dot(a, tl.load(w_rows, mask=w_ok, other=0.0), acc)
            if gated:
                acc_up = tl.dot(a, tl.load(w_rows + UP_OFF * stride_wn, mask=w_ok, other=0.0), acc_up)
    if EW:
        acc = tl.sum(acc2, axis=0)[None, :]
        acc_up = tl.sum(acc2_up, axis=0)[None, :]

    out_ok = m_ok[:, None] & n_ok[None, :]
    if SPLIT_K * HEAD_TILES > 1:
        # Partials [SPLIT_K, M, N_WS] fp32 (gated: the up half at column offset N of each row).
        ws_tile = ws_ptr + (pid_k * M + offs_m[:, None]) * N_WS + offs_n[None, :]
        tl.store(ws_tile, acc, mask=out_ok)
        if gated:
            tl.store(ws_tile + N, acc_up, mask=out_ok)
        # Every thread's partial is stored before the (acq_rel, device-scope) count is taken.
        tl.debug_barrier()
        arrived = tl.atomic_add(sem_ptr + head, 1)
        if arrived == SPLIT_K * HEAD_TILES - 1:
            # The last program of the tile, or (HEAD_TILES > 1) of the head's tiles, sums each
            # tile's partials in split order, then runs the head's rope epilogue.
            for t in tl.static_range(HEAD_TILES):
                if HEAD_TILES > 1:
                    in_head = t * BLOCK_N + tl.arange(0, BLOCK_N)
                    offs_h = head * TILE_N + in_head
                    ok_h = m_ok[:, None] & ((in_head < TILE_N) & (offs_h < N))[None, :]
                else:
                    offs_h = offs_n
                    ok_h = out_ok
                acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for s in range(0, SPLIT_K):
                    part = ws_ptr + (s * M + offs_m[:, None]) * N_WS + offs_h[None, :]
                    # .cg: read at L2, where the other programs' stores are, never a stale L1 line
                    acc += tl.load(part, mask=ok_h, other=0.0, cache_modifier=".cg")
                    if gated:
                        acc_up += tl.load(part + N, mask=ok_h, other=0.0, cache_modifier=".cg")
                if ROW_NORM:
                    acc = acc * rstd[:, None]
                    acc_up = acc_up * rstd[:, None]
                _finish(acc, acc_up, b_ptr, r_ptr, o_ptr, offs_m, offs_h, ok_h, N, UP_OFF, stride_rm, stride_om,
                        res_scale, HAS_BIAS, EPILOGUE)
            if ROPE:
                _qkv_rope_epilogue(o_ptr, offs_m, m_ok, stride_om, head, TILE_N, QO, KC, VC, COS, SIN, COUNTER, QW,
                                   KW, HQ, HK, HALF, L, sqo, skcb, skch, skcn, svcb, svch, svcn, scb, ssb, eps_qk,
                                   BLOCK_M, BLOCK_D if HEAD_TILES > 1 else BLOCK_N, NORM_QK, NORM_ROUND,
                                   NORM_AFTER)
            tl.atomic_xchg(sem_ptr + head, 0)
    else:
        if ROW_NORM:
            acc = acc * rstd[:, None]
            acc_up = acc_up * rstd[:, None]
        _finish(acc, acc_up, b_ptr, r_ptr, o_ptr, offs_m, offs_n, out_ok, N, UP_OFF, stride_rm, stride_om,
                res_scale, HAS_BIAS, EPILOGUE)
        if ROPE:
            _qkv_rope_epilogue(o_ptr, offs_m, m_ok, stride_om, pid_n, TILE_N, QO, KC, VC, COS, SIN, COUNTER, QW, KW,
                               HQ, HK, HALF, L, sqo, skcb, skch, skcn, svcb, svch, svcn, scb, ssb, eps_qk,
                               BLOCK_M, BLOCK_N, NORM_QK, NORM_ROUND, NORM_AFTER)


def supports(m: int, kmajor: bool, be: str, n: int = 0) -> bool:
    """Whether a gemm call of m rows takes this kernel: decode-sized M on a packed K-major weight,
    or on an N-major one of at most NMAJOR_MAX_N outputs (the lm_head's weight.t() view of a tied
    embedding, vocabulary-wide, has N tiles enough without split-K)."""
    return 0 < m <= MAX_M and (kmajor or 0 < n <= NMAJOR_MAX_N) and be in ("cuda", "xpu", "cpu")


# Outputs up to which an N-major weight takes this kernel (every projection of an 8B model; not a
# vocabulary of 49152 or more).
NMAJOR_MAX_N = 32768


# Programs the heuristic aims for per SM. On the H200 the decode projections were fastest at
# 1.5-3 per SM: fewer leave HBM idle, more add partials and a longer reduce for nothing
# (benchmarks/bench_decode_step.py; docs/results/2026-12-01-h200/decode-step-kernels-gemv.json).
_PROGRAMS_PER_SM = 1.5


def heuristic_config(be: str, m: int, n: int, k: int, n_b_tiles: int, units: int,
                     block_n: Optional[int] = None, kmajor: bool = True) -> triton.Config:
    """A launch config from the shape alone. K-major: 64 x 128 tiles (128-byte rows of a bf16
    weight), and the fewest K splits (a power of two) that put _PROGRAMS_PER_SM weight tiles in
    flight on each of the device's `units` compute units (a gated program streams two), each split
    at least two BLOCK_K steps deep. N-major: 16 output rows by 256-deep K runs (512 contiguous
    bytes a row), _NMAJOR_PROGRAMS_PER_SM. block_n: a width the caller needs (a head's); then K
    steps keep the tile's bytes."""
    if kmajor:
        block_n = block_n or 64
        block_k = 64 if block_n >= 128 else 128
        per_sm = _PROGRAMS_PER_SM
    elif m == 1:  # EW: 8 KB tiles, 512-deep K runs once K is 4096 or more
        block_k = 512 if k >= 4096 else 256
        block_n = block_n or 4096 // block_k
        block_k = max(64, min(block_k, 4096 // block_n))
        per_sm = _NMAJOR_PROGRAMS_PER_SM
    else:
        block_n = block_n or 32
        block_k = 128
        per_sm = _PROGRAMS_PER_SM
    tiles = _backend.cdiv(n, block_n) * n_b_tiles
    split = 1
    while tiles * split < per_sm * units and k // (split * 2) >= 2 * block_k:
        split *= 2
    return triton.Config({"BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split}, num_warps=4,
                         num_stages=3 if be == "cuda" else 2)


# On the H200 the EW path was fastest on the Qwen3-30B-A3B attention projections at one K split:
# qkv (K 2048) 16 x 256 tiles 6.99 us, o (K 4096) 8 x 512 tiles 6.39 us, against 8.56 and 7.97 for
# the K-major GEMV at its tuned configs (benchmarks/bench_launch_floor.py --nmajor).
_NMAJOR_PROGRAMS_PER_SM = 0.9


def _config_key(epilogue: str, m_bucket: int, k: int, n_w: int, head_dim: int = 0) -> dict:
    # a rope epilogue's class also names its head_dim: its tiles are heads, so the sweep that
    # tunes the class (benchmarks/tune.py) needs it to lay the heads out
    key = {"epilogue": epilogue, "m_bucket": m_bucket, "k": k, "n": n_w}
    return dict(key, head_dim=head_dim) if head_dim else key


_BEST: dict = {}


def launch_config(be, device, epilogue, m, n, k, n_w, dtypes, tile_n: int = 0, kmajor: bool = True) -> triton.Config:
    """The config a launch takes: tuned for this GPU (gpus/<gpu>.json, kernel "gemv"), else the
    shape heuristic (recorded as such), kept per problem class. tile_n: a rope epilogue's head_dim
    (its tiles are heads, and the launcher sets BLOCK_N from it). epilogue names the class: the
    launcher appends "+rope" and, on an N-major weight, "+nmajor"."""
    m_bucket = _backend.next_pow2(m)
    lkey = (be, _backend.is_interpret(), dtypes, m_bucket, n, k, epilogue, tile_n, kmajor)
    cfg = _BEST.get(lkey)
    if cfg is not None:
        _backend.count("gemv.launch_cached")
        return cfg
    key = _config_key(epilogue, m_bucket, k, n_w, tile_n)
    n_b = 2 if epilogue.split("+")[0] in _GATED else 1
    cfg = gpus.tuned_config("gemv", key, device)
    base, *rest = epilogue.split("+")
    if cfg is None and base == "residual" and "rope" not in rest:
        # the residual epilogue streams the weight as the plain projection does: that class's
        # tuned config, where the GPU has one
        cfg = gpus.tuned_config("gemv", _config_key("+".join(["none"] + rest), m_bucket, k, n_w, tile_n), device)
    if cfg is None:
        units = _backend.compute_units(device)
        # the EW path's rope tiles are narrow (HEAD_TILES a head); the dot's a head wide
        block_n = _backend.next_pow2(tile_n) if tile_n and (kmajor or m > 1) else None
        if _backend.is_interpret():
            cfg = heuristic_config(be, m, n, k, n_b, units, block_n, kmajor)
        else:
            # an explicit autotune request still gets this config: a GEMV has one knob that
            # matters (the split count), which the shape sets
            def shape_cfg():
                return heuristic_config(be, m, n, k, n_b, units, block_n, kmajor)

            cfg = gpus.heuristic_config("gemv", key, shape_cfg) or shape_cfg()
    _BEST[lkey] = cfg
    return cfg


def gemv(x2: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor], r2: Optional[torch.Tensor],
         o2: torch.Tensor, epilogue: str, config: Optional[triton.Config] = None,
         norm: Optional[tuple] = None, row_norm: Optional[tuple] = None, rope: Optional[dict] = None,
         res_scale: float = 1.0) -> torch.Tensor:
    """o2[M, N] = epilogue(x2 @ w (+ bias)) (+ r2): the operands as gemm.py's launcher checked and
    shaped them (rows with unit column stride; w K-major [K, N_w]). Writes and returns o2.
    norm = (residual [M, K], weight [K], eps, sum_out [M, K]): the GEMM's input is
    rms_norm(x2 + residual) in Llama's order, and sum_out gets x2 + residual (add_rms_norm's
    two outputs, without their launch).
    row_norm = (weight [K], eps): the GEMM's input is RMSNorm(x2) * weight: each program sums the
    rows' squares first, the dot takes x2 * weight rounded once to w's dtype, and the accumulator
    is scaled by each row's rstd before the bias and epilogue.
    rope: rope_cache.qkv_rope_cache_write's launch arguments (its kernel's keyword names): o2 is a
    decode token's q|k|v projection, one head of head_dim TILE_N columns a tile, and each finished
    head also goes, normalized and rotated, to the query or the static cache (rope.py's
    _qkv_rope_epilogue). Its configs are a class of their own (epilogue "<epilogue>+rope"), whose
    BLOCK_N is head_dim's power of two. config (a triton.Config) may add EW=1 (CONFIG_FLAGS): one
    row on a K-major weight through the CUDA cores' multiply-add; and PTR=1: the dot's weight tiles
    through pointer loads, never descriptors or block pointers."""
    be = _backend.backend(x2)
    m, k = x2.shape
    n_w = w.shape[1]
    gated = epilogue in _GATED
    n = n_w // 2 if gated else n_w
    kmajor = w.stride(1) == 1
    if not kmajor and w.stride(0) != 1:
        raise ValueError(f"xpuinject_kernels: gemv: weight strides {tuple(w.stride())}: want K-major [K, N] rows "
                         "or the [K, N] view of an N-major weight")
    if rope is not None and (gated or epilogue not in ("none", "bias") or r2 is not None):
        raise ValueError(f"xpuinject_kernels: gemv: the rope epilogue follows 'none' or 'bias', not {epilogue!r}")
    tile_n = rope["TILE_N"] if rope is not None else 0
    cls = epilogue + ("+rope" if rope is not None else "") + ("" if kmajor else "+nmajor")
    cfg = config or launch_config(be, x2.device, cls, m, n, k, n_w,
                                  (x2.dtype, w.dtype, o2.dtype, None if r2 is None else r2.dtype), tile_n, kmajor)
    kw = cfg.kwargs
    ew = m == 1 and (not kmajor or bool(kw.get("EW", 0)))
    block_k = kw["BLOCK_K"]
    split = max(1, min(int(kw["SPLIT_K"]), _backend.cdiv(k, block_k)))
    k_per = _backend.cdiv(_backend.cdiv(k, split), block_k) * block_k  # whole BLOCK_K steps per split
    split = _backend.cdiv(k, k_per)
    block_n = kw["BLOCK_N"]
    tiles = _backend.cdiv(n, block_n)
    head_tiles = 1
    if rope is not None and ew and block_n < tile_n and tile_n % block_n == 0:
        # the EW path's narrow tiles, head_tiles a head (the rope epilogue waits for all of them)
        head_tiles = tile_n // block_n
        tiles = _backend.cdiv(n, tile_n) * head_tiles
    elif rope is not None:
        block_n = _backend.next_pow2(tile_n)
        tiles = _backend.cdiv(n, tile_n)
    if norm is not None and row_norm is not None:
        raise ValueError("xpuinject_kernels: gemv: norm and row_norm are exclusive")
    if split * head_tiles > 1:
        ws = torch.empty((split * m * n_w,), dtype=torch.float32, device=x2.device)
        sem = _backend.semaphores(x2.device, tiles)
    else:
        ws = sem = o2  # unused
    r0, nw, eps, s_out = norm if norm is not None else (x2, x2, 0.0, x2)
    if row_norm is not None:
        nw, eps = row_norm
    rows = _backend.next_pow2(m)  # the row norm's rows (the dot pads to _BLOCK_M)
    pdl = _backend.pdl(x2.device)
    loads = ew or not kmajor or bool(kw.get("PTR", 0))  # the tiles through pointer loads
    block_ptr = not loads and _backend.weight_block_ptr(x2.device)
    tma = (not loads and not block_ptr and _backend.weight_tma(x2.device)
           and _backend.tma_box_ok(w, (block_k, block_n), [n] * gated + [tile_n] * bool(tile_n)))
    if tma:
        _backend.count("gemv.tma")
    if block_ptr:
        _backend.count("gemv.block_ptr")
    _gemv_kernel[(tiles, split)](
        x2, w, bias if bias is not None else w, r2 if r2 is not None else o2, o2, ws, sem, r0, nw, s_out,
        m, n, k, k_per, n if gated else 0, n_w,
        x2.stride(0), w.stride(0), w.stride(1), r2.stride(0) if r2 is not None else 0, o2.stride(0), r0.stride(0),
        s_out.stride(0), float(eps), float(res_scale),
        HAS_BIAS=bias is not None, EPILOGUE=_EPI_CODE[epilogue],
        BLOCK_M=1 if ew else _BLOCK_M, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split, NORM=norm is not None,
        ROW_NORM=row_norm is not None, ROWS=rows, BLOCK_R=min(_backend.next_pow2(k), max(16, 2048 // rows)),
        EW=ew, EW_STAGES=cfg.num_stages if ew else None, HEAD_TILES=head_tiles,
        BLOCK_D=_backend.next_pow2(tile_n) if tile_n else 0,
        PDL=pdl, TMA=tma, w_desc=_backend.weight_desc(w, (block_k, block_n)) if tma else None, BLOCK_PTR=block_ptr,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **(rope or {}), **_backend.pdl_kw(pdl),
    )
    _backend.count("gemv")
    _backend.count(f"gemv.{epilogue}")
    if ew:
        _backend.count("gemv.ew")
    if rope is not None:
        _backend.count("gemv.rope" if head_tiles == 1 else "gemv.rope_head_tiles")
    return o2
