"""A decode step's inputs in one launch: the attention mask(s), the position, the token's embedding
row and its RoPE cos/sin rows.

Built by torch, these are six launches ahead of the first layer (the mask's compare and its AND
with the valid keys, the position's subtraction, the embedding's gather, the cos and sin gathers):
12.6 us of an 8-layer Qwen3-30B-A3B-shaped step on an H100, each a launch boundary that no
programmatic dependent launch overlaps. Every output is a copy or a compare, so the values are
torch's bit for bit.

A grid of (rows, chunks of BLOCK elements) writes, for row b, with cur the cache slot the step
writes and pos = cur - pos_offset[b]:
    mask[b, 0, 0, s]  = s <= cur and key_valid[b, s]   (additive: 0 where true, the dtype's min else)
    wmask[b, 0, 0, s] = the same and s > cur - window  (sliding-window layers)
    pos[b, 0] = pos;  embeds[b, 0, :] = weight[tok[b]];  cos[b, 0, :] = cos_t[pos];  sin likewise
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from . import _backend

__all__ = ["step_prologue", "BLOCK"]

# Elements of each output one program writes (a mask chunk, an embedding chunk, a cos/sin chunk).
BLOCK = 1024


@triton.jit
def _store_mask(ptr, m, ok, ADDITIVE: tl.constexpr, mask_min):
    if ADDITIVE:
        tl.store(ptr, tl.where(m, 0.0, mask_min).to(ptr.dtype.element_ty), mask=ok)
    else:
        tl.store(ptr, m, mask=ok)


@triton.jit
def _prologue_kernel(
    CUR, POS_OFF, KEY_VALID, MASK, WMASK, POS, TOK, EMB, EMB_OUT, COS, SIN, COS_OUT, SIN_OUT,
    S, H, D, WINDOW, mask_min, stride_kv, stride_tok, stride_emb, stride_rope,
    BLOCK: tl.constexpr, ADDITIVE: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_EMB: tl.constexpr,
    HAS_ROPE: tl.constexpr, PDL: tl.constexpr = False,
):
    _backend.pdl_wait(PDL)
    row = tl.program_id(0)
    pid = tl.program_id(1)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    cur = tl.load(CUR)
    pos = cur - tl.load(POS_OFF + row)
    if pid == 0:
        tl.store(POS + row, pos)
    s_ok = offs < S
    valid = tl.load(KEY_VALID + row.to(tl.int64) * stride_kv + offs, mask=s_ok, other=0) != 0
    m = (offs <= cur) & valid
    _store_mask(MASK + row.to(tl.int64) * S + offs, m, s_ok, ADDITIVE, mask_min)
    if HAS_WINDOW:
        _store_mask(WMASK + row.to(tl.int64) * S + offs, m & (offs > cur - WINDOW), s_ok, ADDITIVE, mask_min)
    if HAS_EMB:
        h_ok = offs < H
        tok = tl.load(TOK + row * stride_tok)
        tl.store(EMB_OUT + row.to(tl.int64) * H + offs, tl.load(EMB + tok * stride_emb + offs, mask=h_ok), mask=h_ok)
    if HAS_ROPE:
        d_ok = offs < D
        tl.store(COS_OUT + row.to(tl.int64) * D + offs, tl.load(COS + pos * stride_rope + offs, mask=d_ok), mask=d_ok)
        tl.store(SIN_OUT + row.to(tl.int64) * D + offs, tl.load(SIN + pos * stride_rope + offs, mask=d_ok), mask=d_ok)


def step_prologue(
    cur: torch.Tensor,
    pos_offset: torch.Tensor,
    key_valid: torch.Tensor,
    *,
    tok: Optional[torch.Tensor] = None,
    weight: Optional[torch.Tensor] = None,
    tables: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
    window: Optional[int] = None,
    mask_dtype: torch.dtype = torch.bool,
) -> dict:
    """One decode step's inputs (see the module's docstring), with no host sync.

    cur: [] int64; pos_offset: [B] int64; key_valid: [B, S] bool; tok: [B, 1] int64 with weight
    [V, H] (the embedding table) or neither; tables: (cos [S', D], sin [S', D]) indexed by
    position, or None; window: the sliding window, or None for no sliding mask; mask_dtype: bool,
    or a float dtype for additive masks. Returns a dict of "mask" ([B, 1, 1, S]), "sliding_mask"
    (with window), "pos" ([B, 1] int64), "embeds" ([B, 1, H], with tok) and "cos"/"sin" ([B, 1, D],
    with tables)."""
    b, s = key_valid.shape
    if not (cur.dim() == 0 and pos_offset.shape == (b,) and key_valid.stride(1) == 1):
        raise ValueError(f"xpuinject_kernels: step_prologue: cur [], pos_offset [{b}] and a row-major key_valid "
                         f"[{b}, {s}] wanted, got {tuple(cur.shape)}, {tuple(pos_offset.shape)}")
    if cur.dtype != torch.int64 or pos_offset.dtype != torch.int64 or key_valid.dtype != torch.bool:
        raise ValueError("xpuinject_kernels: step_prologue: cur and pos_offset must be int64, key_valid bool")
    if (tok is None) != (weight is None):
        raise ValueError("xpuinject_kernels: step_prologue: tok and weight go together")
    dev = key_valid.device
    _backend.require_runnable(key_valid, "step_prologue")
    out = {"mask": torch.empty((b, 1, 1, s), dtype=mask_dtype, device=dev),
           "pos": torch.empty((b, 1), dtype=torch.int64, device=dev)}
    if window is not None:
        out["sliding_mask"] = torch.empty_like(out["mask"])
    h = d = 0
    if tok is not None:
        if not (tok.shape == (b, 1) and tok.dtype == torch.int64 and weight.dim() == 2 and weight.stride(1) == 1):
            raise ValueError(f"xpuinject_kernels: step_prologue: tok [{b}, 1] int64 and a row-major [V, H] weight "
                             f"wanted, got {tuple(tok.shape)} {tok.dtype} and {tuple(weight.shape)}")
        h = weight.shape[1]
        out["embeds"] = torch.empty((b, 1, h), dtype=weight.dtype, device=dev)
    if tables is not None:
        cos_t, sin_t = tables
        if not (cos_t.shape == sin_t.shape and cos_t.dim() == 2 and cos_t.stride() == sin_t.stride()
                and cos_t.stride(1) == 1):
            raise ValueError("xpuinject_kernels: step_prologue: cos and sin tables must be alike, [positions, D] "
                             "row-major")
        d = cos_t.shape[1]
        out["cos"] = torch.empty((b, 1, d), dtype=cos_t.dtype, device=dev)
        out["sin"] = torch.empty_like(out["cos"])
    additive = mask_dtype != torch.bool
    mask_min = torch.finfo(mask_dtype).min if additive else 0.0
    none = out["pos"]  # stands in for an absent tensor: its pointer is never read or written
    pdl = _backend.pdl(dev)
    _prologue_kernel[(b, _backend.cdiv(max(s, h, d), BLOCK))](
        cur, pos_offset, key_valid, out["mask"], out.get("sliding_mask", none), out["pos"],
        tok if tok is not None else none, weight if weight is not None else none, out.get("embeds", none),
        tables[0] if tables is not None else none, tables[1] if tables is not None else none,
        out.get("cos", none), out.get("sin", none),
        s, h, d, window or 0, mask_min, key_valid.stride(0), tok.stride(0) if tok is not None else 0,
        weight.stride(0) if weight is not None else 0, tables[0].stride(0) if tables is not None else 0,
        BLOCK=BLOCK, ADDITIVE=additive, HAS_WINDOW=window is not None, HAS_EMB=tok is not None,
        HAS_ROPE=tables is not None, PDL=pdl, num_warps=4, **_backend.pdl_kw(pdl),
    )
    _backend.count("step_prologue")
    return out
