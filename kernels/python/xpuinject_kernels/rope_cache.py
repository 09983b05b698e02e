"""RoPE and the KV-cache write in one kernel, for a transformers static cache.

    q_rot = rope(q);  k_cache[:, :, c + s] = rope(k[:, s]);  v_cache[:, :, c + s] = v[:, s]

with c the cache layer's own device-side write counter (`StaticLayer.cumulative_length`, a 0-d
int64 tensor, transformers 5.17 cache_utils.py) read on the device, so a captured decode step
writes where the counter says without a host sync. The rotation is rope.py's (rotate-half, fp32
math, one rounding; cos/sin of rotary_dim < head_dim columns rotate only the first rotary_dim
channels, and the rest are copied as they are; zero-width cos/sin, a NoPE layer's, rotate none).
The counter is not advanced here: every program reads it, so the caller advances it after the
launch, as StaticLayer.update does (`cumulative_length.add_(seq)`).

Per-head q/k RMSNorm (qwen3's and Gemma 3's q_norm / k_norm), when given their weights: each q
and k head is first normalized over head_dim as rmsnorm.py's kernel does it -- fp32 sum of squares
in the same order (the same 1-D block per head, launched with rms_norm's warps for that row),
then Llama's order (round to the activation dtype, times the weight, round: norm_round=True) or
Gemma's (times the fp32 1 + w, round once: norm_round=False) -- and the rotation takes that
rounded output, so the result is bit for bit the norm kernel's followed by this one.

Replaces, per decoder layer: the RoPE kernel, the two `index_copy_` cache writes and the
`arange + counter` index they need, and with the norms their own launches. A slot at or past the
cache's length is not written (the stock update raises there; a device kernel cannot, so it drops
the row instead of writing out of bounds -- the runtime sizes caches so that this never happens).

Layouts: q [B, S, Hq, D], k and v [B, S, Hk, D] (views of the projections: any strides with a
unit last stride), cos/sin [B or 1, S, D]; caches [B, Hk, L, D] with a unit last stride. Returns
q_rot as a [B, Hq, S, D] view of a contiguous [B, S, Hq, D] tensor (the projection's order: each
token's heads are one contiguous row).

Grid: (B * S, q head blocks + k/v head blocks): a token's q heads and its k/v heads run in
programs of their own, so a single decode token still spreads over several programs.

At decode (S = 1) `qkv_rope_cache_write` does all of this inside the QKV projection's GEMV
(gemv.py's rope epilogue): each of its N tiles is one head, so the program that finishes a
head's K splits normalizes and rotates that head once and writes it to the query or the cache.
The decoder layers take it at decode over a static cache (XPUINJECT_FUSE_QKV_ROPE=0 turns it
off).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from . import _backend, _ops
from .rope import ROPE_NUM_WARPS, _cs, _rotate, check_norm_weights, half_block, heads_per_program, norm_warps

__all__ = ["rope_cache_write", "rope_cache_write_ref", "qkv_rope_cache_write", "qkv_rope_ok"]

_ACT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _rope_cache_kernel(
    Q, K, V, QO, KC, VC, COS, SIN, COUNTER, QW, KW,
    S, HQ, HK, HALF, PASS, D, L, NQB,
    sqb, sqs, sqh, skb, sks, skh, svb, svs, svh,
    sqob, sqos, sqoh,
    skcb, skch, skcn, svcb, svch, svcn,
    scb, scs, ssb, sss, eps,
    BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_PASS: tl.constexpr,
    NORM: tl.constexpr = False, NORM_ROUND: tl.constexpr = True, PDL: tl.constexpr = False,
    NORM_AFTER: tl.constexpr = False,
):
    _backend.pdl_wait(PDL)
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
                BLOCK_H, BLOCK_HALF, BLOCK_D, BLOCK_PASS, NORM, NORM_ROUND, NORM_AFTER)
    else:
        slot = tl.load(COUNTER).to(tl.int64) + s
        h0 = (blk - NQB) * BLOCK_H
        heads = h0 + tl.arange(0, BLOCK_H)
        hmask = (heads < HK) & (slot < L)
        _rotate(K + b * skb + s * sks, KC + b * skcb + slot * skcn, cos_row, sin_row, heads, hmask,
                skh, skch, HALF, PASS, KW, h0, HK, D, eps,
                BLOCK_H, BLOCK_HALF, BLOCK_D, BLOCK_PASS, NORM, NORM_ROUND, NORM_AFTER)
        cols = tl.arange(0, BLOCK_D)
        mask = hmask[:, None] & (cols < D)[None, :]
        h64 = heads.to(tl.int64)[:, None]
        v = tl.load(V + b * svb + s * svs + h64 * svh + cols[None, :], mask=mask, other=0.0)
        tl.store(VC + b * svcb + slot * svcn + h64 * svch + cols[None, :], v.to(VC.dtype.element_ty), mask=mask)


def rope_cache_write(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                     k_cache: torch.Tensor, v_cache: torch.Tensor, counter: torch.Tensor,
                     q_norm_weight: Optional[torch.Tensor] = None, k_norm_weight: Optional[torch.Tensor] = None,
                     eps: float = 1e-6, norm_round: bool = True, norm_after: bool = False) -> torch.Tensor:
    """Rotate q and k, write rotated k and v into the caches at slots counter + [0, S); returns
    q_rot [B, Hq, S, D]. The caller advances `counter` by S afterwards.

    q_norm_weight, k_norm_weight ([D], given together): RMSNorm each q and k head over head_dim
    with eps first, as rmsnorm.py does (norm_round=True: rms_norm, Llama/Qwen3's order, the
    weight's dtype must not widen the output past q's; False: rms_norm_gemma, the weight the
    folded fp32 1 + w), so the result equals that kernel's norm followed by this one, bit for bit.
    norm_after: the norms run on the rotated heads instead (HunYuan's order), from the rotation's
    unrounded fp32 values.
    The op: torch.ops.<ns>.rope_cache_write (declares that it writes both caches)."""
    if _ops.traced(q):
        return _ops.call("rope_cache_write", q, k, v, cos, sin, k_cache, v_cache, counter, q_norm_weight, k_norm_weight,
                         float(eps), bool(norm_round), bool(norm_after))
    return _rope_cache_write(q, k, v, cos, sin, k_cache, v_cache, counter, q_norm_weight, k_norm_weight, eps, norm_round,
                             norm_after)


def _err(msg: str) -> ValueError:
    return ValueError(f"xpuinject_kernels: rope_cache_write: {msg}")


def _check(q, k, v, cos, sin, k_cache, v_cache, counter, q_norm_weight=None, k_norm_weight=None, eps=1e-6,
           norm_round=True):
    for name, t in (("q", q), ("k", k), ("v", v), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise _err(f"{name} must be a 4-D tensor, got {tuple(getattr(t, 'shape', ())) or type(t).__name__}")
        if t.dtype not in _ACT_DTYPES:
            raise _err(f"{name} dtype {t.dtype} not supported (want bfloat16, float16 or float32)")
        if t.stride(-1) != 1:
            raise _err(f"{name} needs a unit last stride, got strides {tuple(t.stride())}")
        if t.device != q.device:
            raise _err(f"{name} on {t.device}, q on {q.device}")
    b, s, hq, d = q.shape
    hk = k.shape[2]
    if tuple(k.shape) != (b, s, hk, d) or tuple(v.shape) != (b, s, hk, d):
        raise _err(f"k {tuple(k.shape)} and v {tuple(v.shape)} must be [batch {b}, seq {s}, kv_heads, {d}]")
    if hk == 0 or hq % hk != 0:
        raise _err(f"{hq} query heads are not a multiple of {hk} kv heads")
    if d % 2 != 0:
        raise _err(f"head_dim {d} must be even for rotate-half")
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if c.shape[0] != b or c.shape[1] != hk or c.shape[3] != d:
            raise _err(f"{name} shape {tuple(c.shape)}: want [batch {b}, kv_heads {hk}, cache_len, {d}]")
        if c.dtype != k.dtype:
            raise _err(f"{name} dtype {c.dtype} != k dtype {k.dtype}")
    if k_cache.shape[2] != v_cache.shape[2]:
        raise _err(f"k_cache holds {k_cache.shape[2]} slots, v_cache {v_cache.shape[2]}")
    if not isinstance(counter, torch.Tensor) or counter.numel() != 1 or counter.dtype not in (torch.int32, torch.int64):
        raise _err("counter must be a one-element int32/int64 tensor (the cache layer's cumulative_length)")
    if counter.device != q.device:
        raise _err(f"counter on {counter.device}, q on {q.device}")
    check_norm_weights(q, k, q_norm_weight, k_norm_weight, eps, norm_round, d, _err)
    cos, sin = _cs(cos, "cos", b, s, d), _cs(sin, "sin", b, s, d)
    if cos.shape[2] != sin.shape[2]:
        raise _err(f"cos has {cos.shape[2]} columns, sin {sin.shape[2]}")
    return cos, sin


def _rope_cache_write_fake(q, k, v, cos, sin, k_cache, v_cache, counter, q_norm_weight=None, k_norm_weight=None,
                           eps=1e-6, norm_round=True, norm_after=False):
    _check(q, k, v, cos, sin, k_cache, v_cache, counter, q_norm_weight, k_norm_weight, eps, norm_round)
    b, s, hq, d = q.shape
    return q.new_empty((b, s, hq, d)).transpose(1, 2)


def _rope_cache_write(q, k, v, cos, sin, k_cache, v_cache, counter, q_norm_weight=None, k_norm_weight=None, eps=1e-6,
                      norm_round=True, norm_after=False) -> torch.Tensor:
    cos, sin = _check(q, k, v, cos, sin, k_cache, v_cache, counter, q_norm_weight, k_norm_weight, eps, norm_round)
    _backend.require_runnable(q, "rope_cache_write")
    b, s, hq, d = q.shape
    hk = k.shape[2]
    qo = _backend.empty((b, s, hq, d), q.dtype, q.device)
    if b * s == 0:
        return qo.transpose(1, 2)
    half = cos.shape[2] // 2
    npass = d - 2 * half
    bh = heads_per_program(hq, hk)
    nqb, nkb = _backend.cdiv(hq, bh), _backend.cdiv(hk, bh)
    scb = cos.stride(0) if cos.shape[0] == b and b > 1 else 0
    ssb = sin.stride(0) if sin.shape[0] == b and b > 1 else 0
    norm = q_norm_weight is not None
    block_d = _backend.next_pow2(d)
    warps = norm_warps(d) if norm else ROPE_NUM_WARPS
    qw = q_norm_weight.contiguous() if norm else q
    kw = k_norm_weight.contiguous() if norm else k
    pdl = _backend.pdl(q.device)
    _rope_cache_kernel[(b * s, nqb + nkb)](
        q, k, v, qo, k_cache, v_cache, cos, sin, counter.reshape(()), qw, kw,
        s, hq, hk, half, npass, d, k_cache.shape[2], nqb,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
        qo.stride(0), qo.stride(1), qo.stride(2),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        scb, cos.stride(1), ssb, sin.stride(1), float(eps),
        BLOCK_H=bh, BLOCK_HALF=half_block(half), BLOCK_D=block_d,
        BLOCK_PASS=_backend.next_pow2(npass) if npass else 0, NORM=norm, NORM_ROUND=bool(norm_round), PDL=pdl,
        NORM_AFTER=norm and bool(norm_after), num_warps=warps, **_backend.pdl_kw(pdl),
    )
    _backend.count("rope_cache_write")
    return qo.transpose(1, 2)


_ops.define(
    "rope_cache_write",
    "(Tensor q, Tensor k, Tensor v, Tensor cos, Tensor sin, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor counter, "
    "Tensor? q_norm_weight=None, Tensor? k_norm_weight=None, float eps=1e-06, bool norm_round=True, "
    "bool norm_after=False) -> Tensor",
    _rope_cache_write, _rope_cache_write_fake, mutates=("k_cache", "v_cache"),
)


def rope_cache_write_ref(q, k, v, cos, sin, k_cache, v_cache, counter, dtype=torch.float64, *,
                         q_norm_weight=None, k_norm_weight=None, eps: float = 1e-6) -> Tuple[torch.Tensor, ...]:
    """Reference in `dtype`: returns (q_rot [B, Hq, S, D], k_cache', v_cache') without touching
    the inputs; slots past the cache's end are dropped as the kernel drops them. With the norm
    weights (as the kernel takes them: Gemma's already 1 + w), q and k are first normalized per
    head, x * rsqrt(mean(x^2) + eps) * w, in `dtype` with no rounding."""
    from .rope import apply_rope_ref

    if q_norm_weight is not None:
        def norm(x, w):
            xd = x.to(dtype)
            return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.to(dtype)

        q, k = norm(q, q_norm_weight), norm(k, k_norm_weight)
    c, sn = cos, sin
    if c.dim() == 2:
        c, sn = c[None], sn[None]
    q_rot, k_rot = apply_rope_ref(q.transpose(1, 2), k.transpose(1, 2), c, sn, dtype=dtype)  # [B, H, S, D]
    kc, vc = k_cache.to(dtype).clone(), v_cache.to(dtype).clone()
    start = int(counter)
    for i in range(q.shape[1]):
        if start + i < kc.shape[2]:
            kc[:, :, start + i] = k_rot[:, :, i]
            vc[:, :, start + i] = v.to(dtype)[:, i]
    return q_rot, kc, vc


def qkv_rope_ok(x: torch.Tensor, w: torch.Tensor, k_cache: torch.Tensor, head_dim: int) -> bool:
    """Whether qkv_rope_cache_write takes a decode step of x [B, 1, K] on the packed weight w:
    B at most the GEMV's rows, w K-major or N-major (gemv.supports), x and the caches one
    half-precision dtype, and a head_dim of at most 256 (one head a tile)."""
    from . import gemv

    return (x.dim() == 3 and x.shape[1] == 1 and 0 < x.shape[0] <= gemv.MAX_M
            and x.dtype in (torch.bfloat16, torch.float16) and k_cache.dtype == x.dtype and w.dtype == x.dtype
            and w.dim() == 2 and (w.stride(1) == 1 or w.stride(0) == 1) and head_dim % 2 == 0 and head_dim <= 256
            and gemv.supports(x.shape[0], w.stride(1) == 1, _backend.backend(x), w.shape[1]))


def qkv_rope_cache_write(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor], cos: torch.Tensor,
                         sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, counter: torch.Tensor,
                         num_heads: int, q_norm_weight: Optional[torch.Tensor] = None,
                         k_norm_weight: Optional[torch.Tensor] = None, eps: float = 1e-6, norm_round: bool = True,
                         norm_after: bool = False, in_norm_weight: Optional[torch.Tensor] = None,
                         in_eps: float = 0.0) -> torch.Tensor:
    """A decode token's QKV projection, RoPE (with the q/k norms) and the static-cache write in
    one GEMV launch: qkv = x @ w (+ bias), split into num_heads q heads and the caches' kv heads,
    then rope_cache_write(q, k, v, cos, sin, k_cache, v_cache, counter, ...) -- the same values
    (the norm's sum of squares may run in another order, one rounding apart on a GPU). Returns
    q_rot [B, num_heads, 1, D]; the counter is not advanced (decode_attention(advance=True) does).

    Each program's tile is one head (gemv.py's rope epilogue): the program that finishes a head
    normalizes and rotates it in registers and writes it where the next launch reads it, so the
    RoPE + cache-write launch of the unfused step is gone. x: [B, 1, K] with B <= gemv.MAX_M
    (qkv_rope_ok); w: the packed [K, (num_heads + 2 kv_heads) D], K-major or the view of an
    N-major weight. in_norm_weight (with in_eps): x is the layer's input before its RMSNorm, run
    as gemm.rms_norm_gemm runs it (inside the GEMV where launches do not overlap, else its own
    launch first).
    The op: torch.ops.<ns>.qkv_rope_cache_write (declares that it writes both caches)."""
    if _ops.traced(x):
        return _ops.call("qkv_rope_cache_write", x, w, bias, cos, sin, k_cache, v_cache, counter, int(num_heads),
                         q_norm_weight, k_norm_weight, float(eps), bool(norm_round), bool(norm_after), in_norm_weight,
                         float(in_eps))
    return _qkv_rope_cache_write(x, w, bias, cos, sin, k_cache, v_cache, counter, num_heads, q_norm_weight,
                                 k_norm_weight, eps, norm_round, norm_after, in_norm_weight, in_eps)


def _qkv_check(x, w, bias, cos, sin, k_cache, v_cache, counter, num_heads, q_norm_weight, k_norm_weight, eps,
               norm_round, in_norm_weight, in_eps):
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[1] != 1:
        raise _err(f"qkv_rope_cache_write takes x [batch, 1, hidden], got {tuple(getattr(x, 'shape', ()))}")
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(c, torch.Tensor) or c.dim() != 4 or c.stride(-1) != 1:
            raise _err(f"{name} must be a 4-D [batch, kv_heads, cache_len, head_dim] tensor with a unit last stride")
    b, _, hidden = x.shape
    hk, d = k_cache.shape[1], k_cache.shape[3]
    if num_heads <= 0 or hk == 0 or num_heads % hk:
        raise _err(f"{num_heads} query heads are not a multiple of {hk} kv heads")
    n = (num_heads + 2 * hk) * d
    if not isinstance(w, torch.Tensor) or w.dim() != 2 or tuple(w.shape) != (hidden, n):
        raise _err(f"w shape {tuple(getattr(w, 'shape', ()))}: want [hidden {hidden}, ({num_heads} + 2*{hk}) * {d} = {n}]")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != n):
        raise _err(f"bias shape {tuple(bias.shape)}: want [{n}]")
    if d % 2:
        raise _err(f"head_dim {d} must be even for rotate-half")
    if not qkv_rope_ok(x, w, k_cache, d):
        raise _err(f"x {tuple(x.shape)} {x.dtype}, w {w.dtype} with strides {tuple(w.stride())}, caches {k_cache.dtype}, "
                   f"head_dim {d}: outside what the fused launch takes (qkv_rope_ok)")
    if in_norm_weight is not None and (in_norm_weight.dim() != 1 or in_norm_weight.shape[0] != hidden):
        raise _err(f"in_norm_weight shape {tuple(in_norm_weight.shape)}: want [hidden {hidden}]")
    if tuple(k_cache.shape[:2]) != (b, hk) or tuple(v_cache.shape) != tuple(k_cache.shape) or v_cache.dtype != x.dtype:
        raise _err(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} {v_cache.dtype}: want "
                   f"[batch {b}, kv_heads, cache_len, head_dim] each, of x's dtype {x.dtype}")
    for name, t in (("w", w), ("k_cache", k_cache), ("v_cache", v_cache), ("counter", counter)):
        if t.device != x.device:
            raise _err(f"{name} on {t.device}, x on {x.device}")
    if not isinstance(counter, torch.Tensor) or counter.numel() != 1 or counter.dtype not in (torch.int32, torch.int64):
        raise _err("counter must be a one-element int32/int64 tensor (the cache layer's cumulative_length)")
    check_norm_weights(x, x, q_norm_weight, k_norm_weight, eps, norm_round, d, _err)
    cos, sin = _cs(cos, "cos", b, 1, d), _cs(sin, "sin", b, 1, d)
    if cos.shape[2] != sin.shape[2]:
        raise _err(f"cos has {cos.shape[2]} columns, sin {sin.shape[2]}")
    return cos, sin


def _qkv_rope_cache_write_fake(x, w, bias, cos, sin, k_cache, v_cache, counter, num_heads, q_norm_weight=None,
                               k_norm_weight=None, eps=1e-6, norm_round=True, norm_after=False, in_norm_weight=None,
                               in_eps=0.0):
    _qkv_check(x, w, bias, cos, sin, k_cache, v_cache, counter, num_heads, q_norm_weight, k_norm_weight, eps,
               norm_round, in_norm_weight, in_eps)
    return x.new_empty((x.shape[0], 1, num_heads, k_cache.shape[3])).transpose(1, 2)


def _qkv_rope_cache_write(x, w, bias, cos, sin, k_cache, v_cache, counter, num_heads, q_norm_weight=None,
                          k_norm_weight=None, eps=1e-6, norm_round=True, norm_after=False, in_norm_weight=None,
                          in_eps=0.0, config=None) -> torch.Tensor:
    """The op's body; config (a triton.Config of the GEMV) launches it with those constants instead
    of its class's, as a sweep of the class does (benchmarks/tune.py)."""
    from . import gemv
    from .gemm import FUSE_INPUT_NORM, _row_norm_ok
    from .rmsnorm import rms_norm

    cos, sin = _qkv_check(x, w, bias, cos, sin, k_cache, v_cache, counter, num_heads, q_norm_weight, k_norm_weight,
                          eps, norm_round, in_norm_weight, in_eps)
    _backend.require_runnable(x, "qkv_rope_cache_write")
    b, _, hidden = x.shape
    hk, d = k_cache.shape[1], k_cache.shape[3]
    row_norm = None
    if in_norm_weight is not None:
        if _row_norm_ok(x, in_norm_weight, w) and _backend.fuse_norm(FUSE_INPUT_NORM, x.device):
            row_norm = (in_norm_weight.contiguous(), float(in_eps))
        else:
            x = rms_norm(x, in_norm_weight, in_eps)
    x2 = x.reshape(b, hidden)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    qkv = _backend.empty((b, w.shape[1]), x.dtype, x.device)
    qo = _backend.empty((b, 1, num_heads, d), x.dtype, x.device)
    norm = q_norm_weight is not None
    rope = dict(
        ROPE=True, TILE_N=d, QO=qo, KC=k_cache, VC=v_cache, COS=cos, SIN=sin, COUNTER=counter.reshape(()),
        QW=q_norm_weight.contiguous() if norm else qo, KW=k_norm_weight.contiguous() if norm else qo,
        HQ=num_heads, HK=hk, HALF=cos.shape[2] // 2, L=k_cache.shape[2], sqo=qo.stride(0),
        skcb=k_cache.stride(0), skch=k_cache.stride(1), skcn=k_cache.stride(2),
        svcb=v_cache.stride(0), svch=v_cache.stride(1), svcn=v_cache.stride(2),
        scb=cos.stride(0) if cos.shape[0] == b and b > 1 else 0, ssb=sin.stride(0) if sin.shape[0] == b and b > 1 else 0,
        eps_qk=float(eps), NORM_QK=norm, NORM_ROUND=bool(norm_round), NORM_AFTER=norm and bool(norm_after))
    gemv.gemv(x2, w, bias.contiguous() if bias is not None else None, None, qkv, "bias" if bias is not None else "none",
              config=config, row_norm=row_norm, rope=rope)
    _backend.count("qkv_rope_cache_write")
    return qo.transpose(1, 2)


_ops.define(
    "qkv_rope_cache_write",
    "(Tensor x, Tensor w, Tensor? bias, Tensor cos, Tensor sin, Tensor(a!) k_cache, Tensor(b!) v_cache, "
    "Tensor counter, int num_heads, Tensor? q_norm_weight=None, Tensor? k_norm_weight=None, float eps=1e-06, "
    "bool norm_round=True, bool norm_after=False, Tensor? in_norm_weight=None, float in_eps=0.0) -> Tensor",
    _qkv_rope_cache_write, _qkv_rope_cache_write_fake, mutates=("k_cache", "v_cache"),
)
