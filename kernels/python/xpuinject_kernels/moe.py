"""Fused sparse mixture-of-experts: routing on the device, then SwiGLU experts over only the
experts the tokens picked.

    out[t] = sum_j  w[t, j] * down_e( silu(gate_e(x[t])) * up_e(x[t]) ),   e = ids[t, j]

Weights, packed offline (inject/plan/rules_moe.go): router [H, E] K-major; gate_up [E, H, 2I],
each expert's K-major [gate | up]; down [E, I, H], each expert's K-major down projection.

Routing (transformers 5.17 Qwen3MoeTopKRouter, MixtralTopKRouter): logits = x @ router in fp32,
softmax in fp32 (one Triton program per token), then top-k by torch.topk on the device, so ties
resolve exactly as torch.topk resolves them there; the chosen probabilities are renormalized to sum
1 ("softmax-topk-norm", Mixtral's "softmax-topk-norm-fp32") or not ("softmax-topk"); the Qwen3
rules round the weights to the activation dtype as the stock router does, Mixtral's keeps them
fp32. The logits are rounded to the activation dtype before the softmax, as the stock router's
F.linear rounds them, so from the same activations the kernel picks stock's experts, ties included
(one expert swapped moves a block's output far more than any rounding: 0.3 of max error on the
qwen3_moe fixture from one near-tied token). Nothing syncs with the host and nothing has a
data-dependent shape (no nonzero), so a decode step can be captured in a graph.

Two expert paths, both reading only the experts hit:
  decode (tokens <= DECODE_MAX_TOKENS): one program per (token, slot) and column tile runs the
      gate/up GEMV of that slot's expert with the SwiGLU epilogue; then one program per token and
      column tile sums the slots' down GEMVs, each scaled by its routing weight, and writes the
      token's output row: no sort, no atomics, no padding to a 16-row dot tile.
  prefill: the (token, slot) pairs are sorted by expert on the device (a stable argsort) and laid
      out in BLOCK_M-row blocks, each block one expert's (padded with -1); a grouped GEMM over the
      blocks (tl.dot) computes gate/up with the SwiGLU epilogue, and a second one the down
      projection with the routing weight in its epilogue, written to the pair's own row; the top_k
      rows of each token are summed in fp32 and rounded once. The block count is a static bound
      (cdiv(pairs, BLOCK_M) + experts); blocks past the last one exit at once.
The SwiGLU product is rounded to the activation dtype (as the stock expert's is) before the down
projection; every GEMM accumulates in fp32.
"""

from __future__ import annotations

from typing import Tuple

import torch
import triton
import triton.language as tl

from . import _backend, _ops

__all__ = ["ROUTERS", "DECODE_MAX_TOKENS", "moe", "moe_ref", "route", "route_ref"]

# The routing rules (models/moe.go's Router* names, which plans record).
ROUTERS = ("softmax-topk", "softmax-topk-norm", "softmax-topk-norm-fp32")
# Largest token count the decode path runs (GEMV programs, one per token and slot).
DECODE_MAX_TOKENS = 8

_ACT_DTYPES = (torch.bfloat16, torch.float16)


@triton.jit
def _router_softmax_kernel(x_ptr, w_ptr, p_ptr, H, E, stride_x, stride_w, stride_p,
                           BLOCK_K: tl.constexpr, BLOCK_E: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs_e = tl.arange(0, BLOCK_E)
    acc = tl.zeros((BLOCK_E,), dtype=tl.float32)
    for k0 in range(0, H, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + row * stride_x + offs_k, mask=offs_k < H, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs_k[:, None] * stride_w + offs_e[None, :],
                    mask=(offs_k[:, None] < H) & (offs_e[None, :] < E), other=0.0).to(tl.float32)
        acc += tl.sum(x[:, None] * w, axis=0)
    # Rounded to the activation dtype first, as the stock router's F.linear output is: from the
    # same activations the experts picked are then stock's, near-ties included.
    acc = acc.to(x_ptr.dtype.element_ty).to(tl.float32)
    logits = tl.where(offs_e < E, acc, float("-inf"))
    m = tl.max(logits, axis=0)
    e = tl.exp(logits - m)
    e = tl.where(offs_e < E, e, 0.0)
    tl.store(p_ptr + row * stride_p + offs_e, e / tl.sum(e, axis=0), mask=offs_e < E)


@triton.jit
def _decode_gate_up_kernel(x_ptr, ids_ptr, w_ptr, act_ptr, H, I, TOP_K, stride_x, stride_we, stride_wk, stride_act,
                           BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    pair = tl.program_id(0)
    pid_n = tl.program_id(1)
    tok = (pair // TOP_K).to(tl.int64)
    e = tl.load(ids_ptr + pair).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = offs_n < I
    g = tl.zeros((BLOCK_N,), dtype=tl.float32)
    u = tl.zeros((BLOCK_N,), dtype=tl.float32)
    wbase = w_ptr + e * stride_we
    for k0 in range(0, H, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        kmask = offs_k < H
        x = tl.load(x_ptr + tok * stride_x + offs_k, mask=kmask, other=0.0).to(tl.float32)
        m2 = kmask[:, None] & nmask[None, :]
        wg = tl.load(wbase + offs_k[:, None] * stride_wk + offs_n[None, :], mask=m2, other=0.0).to(tl.float32)
        wu = tl.load(wbase + offs_k[:, None] * stride_wk + (I + offs_n)[None, :], mask=m2, other=0.0).to(tl.float32)
        g += tl.sum(x[:, None] * wg, axis=0)
        u += tl.sum(x[:, None] * wu, axis=0)
    h = g * tl.sigmoid(g) * u
    tl.store(act_ptr + pair.to(tl.int64) * stride_act + offs_n, h.to(act_ptr.dtype.element_ty), mask=nmask)


@triton.jit
def _decode_down_kernel(act_ptr, ids_ptr, wts_ptr, w_ptr, out_ptr, H, I, stride_act, stride_we, stride_wk, stride_out,
                        TOP_K: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    tok = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = offs_n < H
    out = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        pair = tok * TOP_K + j
        e = tl.load(ids_ptr + pair).to(tl.int64)
        wt = tl.load(wts_ptr + pair).to(tl.float32)
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for k0 in range(0, I, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            kmask = offs_k < I
            a = tl.load(act_ptr + pair.to(tl.int64) * stride_act + offs_k, mask=kmask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + e * stride_we + offs_k[:, None] * stride_wk + offs_n[None, :],
                        mask=kmask[:, None] & nmask[None, :], other=0.0).to(tl.float32)
            acc += tl.sum(a[:, None] * w, axis=0)
        out += wt * acc
    tl.store(out_ptr + tok.to(tl.int64) * stride_out + offs_n, out.to(out_ptr.dtype.element_ty), mask=nmask)


@triton.jit
def _grouped_gate_up_kernel(x_ptr, rows_ptr, bexp_ptr, w_ptr, act_ptr, H, I, E, TOP_K,
                            stride_x, stride_we, stride_wk, stride_act,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    b = tl.program_id(0)
    pid_n = tl.program_id(1)
    e = tl.load(bexp_ptr + b).to(tl.int64)
    if e < E:
        offs_m = b * BLOCK_M + tl.arange(0, BLOCK_M)
        pair = tl.load(rows_ptr + offs_m)
        mmask = pair >= 0
        tok = tl.where(mmask, pair // TOP_K, 0).to(tl.int64)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        nmask = offs_n < I
        wbase = w_ptr + e * stride_we
        g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, H, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            kmask = offs_k < H
            x = tl.load(x_ptr + tok[:, None] * stride_x + offs_k[None, :], mask=mmask[:, None] & kmask[None, :],
                        other=0.0)
            m2 = kmask[:, None] & nmask[None, :]
            wg = tl.load(wbase + offs_k[:, None] * stride_wk + offs_n[None, :], mask=m2, other=0.0)
            wu = tl.load(wbase + offs_k[:, None] * stride_wk + (I + offs_n)[None, :], mask=m2, other=0.0)
            x = x.to(wg.dtype)
            g = tl.dot(x, wg, g)
            u = tl.dot(x, wu, u)
        h = g * tl.sigmoid(g) * u
        tl.store(act_ptr + offs_m.to(tl.int64)[:, None] * stride_act + offs_n[None, :], h.to(act_ptr.dtype.element_ty),
                 mask=mmask[:, None] & nmask[None, :])


@triton.jit
def _grouped_down_kernel(act_ptr, rows_ptr, bexp_ptr, wts_ptr, w_ptr, y_ptr, H, I, E,
                         stride_act, stride_we, stride_wk, stride_y,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    b = tl.program_id(0)
    pid_n = tl.program_id(1)
    e = tl.load(bexp_ptr + b).to(tl.int64)
    if e < E:
        offs_m = b * BLOCK_M + tl.arange(0, BLOCK_M)
        pair = tl.load(rows_ptr + offs_m)
        mmask = pair >= 0
        safe = tl.where(mmask, pair, 0).to(tl.int64)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        nmask = offs_n < H
        wbase = w_ptr + e * stride_we
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, I, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            kmask = offs_k < I
            a = tl.load(act_ptr + offs_m.to(tl.int64)[:, None] * stride_act + offs_k[None, :],
                        mask=mmask[:, None] & kmask[None, :], other=0.0)
            w = tl.load(wbase + offs_k[:, None] * stride_wk + offs_n[None, :], mask=kmask[:, None] & nmask[None, :],
                        other=0.0)
            acc = tl.dot(a.to(w.dtype), w, acc)
        wt = tl.load(wts_ptr + safe, mask=mmask, other=0.0).to(tl.float32)
        acc = acc * wt[:, None]
        tl.store(y_ptr + safe[:, None] * stride_y + offs_n[None, :], acc, mask=mmask[:, None] & nmask[None, :])


def _err(msg: str) -> ValueError:
    return ValueError(f"xpuinject_kernels: moe: {msg}")


def _check(x, router_w, gate_up_w, down_w, top_k, router):
    if router not in ROUTERS:
        raise _err(f"router {router!r}: want one of {', '.join(ROUTERS)}")
    if x.dtype not in _ACT_DTYPES:
        raise _err(f"activation dtype {x.dtype}: want bf16 or fp16")
    if x.shape[-1] != router_w.shape[0] or router_w.dim() != 2:
        raise _err(f"router weight {tuple(router_w.shape)} does not match hidden size {x.shape[-1]} (want [H, E])")
    h, e = router_w.shape
    if gate_up_w.dim() != 3 or gate_up_w.shape[0] != e or gate_up_w.shape[1] != h or gate_up_w.shape[2] % 2:
        raise _err(f"gate_up weight {tuple(gate_up_w.shape)}: want [experts={e}, hidden={h}, 2*intermediate]")
    i = gate_up_w.shape[2] // 2
    if tuple(down_w.shape) != (e, i, h):
        raise _err(f"down weight {tuple(down_w.shape)}: want [experts={e}, intermediate={i}, hidden={h}]")
    if not 1 <= top_k <= e:
        raise _err(f"top_k {top_k}: want 1 to {e}")
    for name, w in (("router", router_w), ("gate_up", gate_up_w), ("down", down_w)):
        if w.stride(-1) != 1:
            raise _err(f"{name} weight must have unit stride along its last dim (K-major, as packed)")
    return h, e, i


def route(x: torch.Tensor, router_w: torch.Tensor, top_k: int, router: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """Expert ids [T, top_k] (int64, torch.topk's order) and routing weights [T, top_k] (fp32)
    of the tokens x [T, H]."""
    x2 = x.reshape(-1, x.shape[-1])
    t = x2.shape[0]
    h, e = router_w.shape
    probs = torch.empty((t, e), dtype=torch.float32, device=x.device)
    if t:
        _backend.require_runnable(x, "moe")
        _router_softmax_kernel[(t,)](x2, router_w, probs, h, e, x2.stride(0), router_w.stride(0), probs.stride(0),
                                     BLOCK_K=min(64, _backend.next_pow2(h)), BLOCK_E=max(16, _backend.next_pow2(e)))
    vals, ids = torch.topk(probs, top_k, dim=-1)
    if router != "softmax-topk":
        vals = vals / vals.sum(dim=-1, keepdim=True)
    if router != "softmax-topk-norm-fp32":
        vals = vals.to(x.dtype).float()
    return ids, vals


def _blocks(ids: torch.Tensor, experts: int, block_m: int):
    """The prefill layout, all on the device: pair ids (token * top_k + slot) sorted by expert,
    each expert's run padded with -1 to whole BLOCK_M blocks; and each block's expert
    (`experts` for the blocks past the last)."""
    flat = ids.reshape(-1)
    pairs = flat.numel()
    nblocks = _backend.cdiv(pairs, block_m) + experts
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(experts, dtype=torch.int64, device=ids.device).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    pad_end = torch.cumsum(padded, 0)
    pad_start = pad_end - padded
    start = torch.cumsum(counts, 0) - counts
    sorted_e = flat[order]
    rank = torch.arange(pairs, device=ids.device) - start[sorted_e]
    rows = torch.full((nblocks * block_m,), -1, dtype=torch.int32, device=ids.device)
    rows.scatter_(0, pad_start[sorted_e] + rank, order.to(torch.int32))
    bstart = torch.arange(nblocks, device=ids.device) * block_m
    bexp = torch.searchsorted(pad_end, bstart, right=True).to(torch.int32)
    return rows, bexp, nblocks


def _moe(x, router_w, gate_up_w, down_w, top_k, router):
    h, e, i = _check(x, router_w, gate_up_w, down_w, top_k, router)
    x2 = x.reshape(-1, h)
    t = x2.shape[0]
    out = _backend.empty(x.shape, x.dtype, x.device)
    if t == 0:
        return out
    _backend.require_runnable(x, "moe")
    ids, wts = route(x2, router_w, top_k, router)
    o2 = out.view(-1, h)
    if t <= DECODE_MAX_TOKENS:
        ids32 = ids.to(torch.int32).reshape(-1)
        wts = wts.reshape(-1).contiguous()
        act = torch.empty((t * top_k, i), dtype=x.dtype, device=x.device)
        bn, bk = min(64, _backend.next_pow2(i)), min(64, _backend.next_pow2(h))
        _decode_gate_up_kernel[(t * top_k, _backend.cdiv(i, bn))](
            x2, ids32, gate_up_w, act, h, i, top_k, x2.stride(0), gate_up_w.stride(0), gate_up_w.stride(1), act.stride(0),
            BLOCK_K=bk, BLOCK_N=bn)
        bn, bk = min(64, _backend.next_pow2(h)), min(64, _backend.next_pow2(i))
        _decode_down_kernel[(t, _backend.cdiv(h, bn))](
            act, ids32, wts, down_w, o2, h, i, act.stride(0), down_w.stride(0), down_w.stride(1), o2.stride(0),
            TOP_K=top_k, BLOCK_K=bk, BLOCK_N=bn)
        _backend.count("moe.decode")
        return out
    block_m = 16
    rows, bexp, nblocks = _blocks(ids, e, block_m)
    act = torch.empty((nblocks * block_m, i), dtype=x.dtype, device=x.device)
    bn, bk = min(64, max(16, _backend.next_pow2(i))), min(64, max(16, _backend.next_pow2(h)))
    _grouped_gate_up_kernel[(nblocks, _backend.cdiv(i, bn))](
        x2, rows, bexp, gate_up_w, act, h, i, e, top_k, x2.stride(0), gate_up_w.stride(0), gate_up_w.stride(1),
        act.stride(0), BLOCK_M=block_m, BLOCK_N=bn, BLOCK_K=bk)
    y = torch.empty((t * top_k, h), dtype=torch.float32, device=x.device)
    bn, bk = min(64, max(16, _backend.next_pow2(h))), min(64, max(16, _backend.next_pow2(i)))
    _grouped_down_kernel[(nblocks, _backend.cdiv(h, bn))](
        act, rows, bexp, wts.reshape(-1).contiguous(), down_w, y, h, i, e, act.stride(0), down_w.stride(0),
        down_w.stride(1), y.stride(0), BLOCK_M=block_m, BLOCK_N=bn, BLOCK_K=bk)
    o2.copy_(y.view(t, top_k, h).sum(dim=1))
    _backend.count("moe.prefill")
    return out


def _moe_fake(x, router_w, gate_up_w, down_w, top_k, router):
    _check(x, router_w, gate_up_w, down_w, top_k, router)
    return torch.empty_like(x)


_ops.define(
    "moe",
    "(Tensor x, Tensor router_w, Tensor gate_up_w, Tensor down_w, int top_k, str router) -> Tensor",
    _moe, _moe_fake,
)


def moe(x: torch.Tensor, router_w: torch.Tensor, gate_up_w: torch.Tensor, down_w: torch.Tensor, top_k: int,
        router: str) -> torch.Tensor:
    """The MoE block's output for x [..., H] (same shape and dtype), weights as packed."""
    if _ops.traced(x):
        return _ops.call("moe", x, router_w, gate_up_w, down_w, top_k, router)
    return _moe(x, router_w, gate_up_w, down_w, top_k, router)


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
        probs = torch.softmax(_ref_logits(x, router_w), dim=-1)
        vals = probs.gather(1, ids.reshape(rids.shape))
        if router != "softmax-topk":
            vals = vals / vals.sum(dim=-1, keepdim=True)
        rids = ids.reshape(rids.shape)
    i = gate_up_w.shape[2] // 2
    out = torch.zeros_like(x2)
    for t in range(x2.shape[0]):
        for j in range(top_k):
            e = int(rids[t, j])
            gu = x2[t] @ gate_up_w[e].double()
            hmid = torch.nn.functional.silu(gu[:i]) * gu[i:]
            out[t] += vals[t, j] * (hmid @ down_w[e].double())
    return out.reshape(x.shape)
