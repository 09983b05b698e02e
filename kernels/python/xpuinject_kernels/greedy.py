"""Greedy token selection of a generation step in one launch: argmax over the vocabulary, then the
step's bookkeeping (finished rows emit pad, the token is appended, EOS finishes a row, the slot
advances).

Over a 128K vocabulary at batch 1, torch's argmax reduces the row in one block (38 us on an
H200, 0.8 % of a Llama-3.1-8B decode step), and the bookkeeping around it is eight more small
launches. Here a grid of (rows, vocabulary chunks) finds each chunk's maximum; the chunk of a row
that arrives last (a per-row semaphore, `_backend.semaphores`) reads every chunk's maximum in one
load and takes the first maximum -- torch.argmax's tie rule, the lowest index -- and does that
row's bookkeeping;
the row that finishes last advances the step counters. NaN scores are not treated specially
(torch's argmax would pick the first NaN): logits of a working model have none.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import _backend

__all__ = ["greedy_select", "BLOCK"]

# Vocabulary entries one program scans (fp32 in registers: 16 per thread at 8 warps).
BLOCK = 4096


@triton.jit
def _greedy_kernel(
    LOGITS, WS_V, WS_I, SEM, UNFINISHED, N_GEN, OUT, CUR, PAD, EOS, TOK,
    V, B, N_EOS, stride_lb, stride_ob, stride_tb,
    CHUNKS: tl.constexpr, BLOCK: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_E: tl.constexpr,
    PDL: tl.constexpr = False,
):
    _backend.pdl_wait(PDL)
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    offs = chunk * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(LOGITS + row.to(tl.int64) * stride_lb + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
    best_v = tl.max(x, 0)
    # first index of the maximum in this chunk
    best_i = tl.min(tl.where(x == best_v, offs, V), 0)
    tl.store(WS_V + row * CHUNKS + chunk, best_v)
    tl.store(WS_I + row * CHUNKS + chunk, best_i)
    tl.debug_barrier()
    arrived = tl.atomic_add(SEM + row, 1)
    if arrived == CHUNKS - 1:
        # Every chunk's maximum in one load (one round trip, not one per chunk): the largest, and
        # of chunks tied at it the lowest index, which is the earliest chunk's (torch's rule).
        offs_c = tl.arange(0, BLOCK_C)
        c_ok = offs_c < CHUNKS
        vs = tl.load(WS_V + row * CHUNKS + offs_c, mask=c_ok, other=float("-inf"), cache_modifier=".cg")
        is_ = tl.load(WS_I + row * CHUNKS + offs_c, mask=c_ok, other=V, cache_modifier=".cg")
        v = tl.max(vs, 0)
        i = tl.min(tl.where(c_ok & (vs == v), is_, V), 0)
        alive = tl.load(UNFINISHED + row).to(tl.int32)
        nxt = tl.where(alive != 0, i.to(tl.int64), tl.load(PAD))
        cur = tl.load(CUR)
        tl.store(OUT + row.to(tl.int64) * stride_ob + cur + 1, nxt)
        tl.store(TOK + row * stride_tb, nxt)
        offs_e = tl.arange(0, BLOCK_E)
        eos = tl.load(EOS + offs_e, mask=offs_e < N_EOS, other=-1)
        hit = tl.max((eos == nxt).to(tl.int32), 0)
        tl.store(UNFINISHED + row, ((alive != 0) & (hit == 0)).to(UNFINISHED.dtype.element_ty))
        # any row alive before this step: the step counts toward n_gen
        tl.atomic_max(SEM + B + 1, alive)
        tl.atomic_xchg(SEM + row, 0)
        tl.debug_barrier()
        done = tl.atomic_add(SEM + B, 1)
        if done == B - 1:
            # every row has read CUR and counted itself: advance the step
            any_alive = tl.atomic_xchg(SEM + B + 1, 0)
            tl.store(N_GEN, tl.load(N_GEN) + any_alive.to(tl.int64))
            tl.store(CUR, cur + 1)
            tl.atomic_xchg(SEM + B, 0)


def greedy_select(logits: torch.Tensor, unfinished: torch.Tensor, n_gen: torch.Tensor, out: torch.Tensor,
                  cur: torch.Tensor, pad: torch.Tensor, eos: torch.Tensor, tok: torch.Tensor) -> None:
    """In place, with no host sync (the runtime's state tensors, see runtime._Slot):
        nxt = where(unfinished, argmax(logits, -1), pad); out[:, cur + 1] = nxt; tok[:, 0] = nxt
        unfinished &= nxt not in eos (ids, -1 padded); n_gen += any(unfinished before); cur += 1
    logits: [B, V] (any float dtype, compared in fp32 as generate compares them)."""
    b, v = logits.shape
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    if not (unfinished.shape == (b,) and out.dim() == 2 and out.shape[0] == b and tok.shape[0] == b
            and cur.dim() == 0 and n_gen.dim() == 0 and pad.dim() == 0 and eos.dim() == 1):
        raise ValueError(f"xpuinject_kernels: greedy_select: state shapes do not fit logits [{b}, {v}]")
    if out.dtype != torch.int64 or tok.dtype != torch.int64 or cur.dtype != torch.int64 or n_gen.dtype != torch.int64:
        raise ValueError("xpuinject_kernels: greedy_select: out, tok, cur and n_gen must be int64")
    _backend.require_runnable(logits, "greedy_select")
    chunks = _backend.cdiv(v, BLOCK)
    ws_v = torch.empty((b * chunks,), dtype=torch.float32, device=logits.device)
    ws_i = torch.empty((b * chunks,), dtype=torch.int32, device=logits.device)
    sem = _backend.semaphores(logits.device, b + 2)
    pdl = _backend.pdl(logits.device)
    _greedy_kernel[(b, chunks)](
        logits, ws_v, ws_i, sem, unfinished, n_gen, out, cur, pad, eos, tok,
        v, b, eos.shape[0], logits.stride(0), out.stride(0), tok.stride(0),
        CHUNKS=chunks, BLOCK=BLOCK, BLOCK_C=max(2, _backend.next_pow2(chunks)),
        BLOCK_E=max(2, _backend.next_pow2(eos.shape[0])),
        PDL=pdl, num_warps=8, **_backend.pdl_kw(pdl),
    )
    _backend.count("greedy_select")
