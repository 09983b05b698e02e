#!/usr/bin/env python3
"""Rotary position embedding (rotate-half) on q and k: ours (out of place) against transformers'
apply_rotary_pos_emb (eager), torch.compile of the formula and Liger-Kernel's in-place
LigerRopeFunction, with q/k laid out as a stock Llama has them.

    python3 benchmarks/bench_rope.py --out DIR [--quick] [--m 1,4096]
    python3 benchmarks/bench_rope.py --smoke --out DIR     # CPU, TRITON_INTERPRET=1, checks only

Bytes counted: q and k read and written, cos and sin read. Target: at M >= 4096, >= 90% of the
measured copy bandwidth.
"""

from __future__ import annotations

import sys

import benchlib
from benchlib import Case

KINDS = ("rope",)


def target(m: int):
    return (">=90% copy BW", "bw_frac", 0.90) if m >= 4096 else None


def cos_sin(env, m, d, theta):
    """The model's rotary table for positions 0..M-1: cos/sin [1, M, D] in bf16."""
    torch = env.torch
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64, device=env.dev) / d))
    pos = torch.arange(m, dtype=torch.float64, device=env.dev)
    fr = torch.outer(pos, inv)
    emb = torch.cat([fr, fr], dim=-1)
    return emb.cos().to(env.dtype)[None], emb.sin().to(env.dtype)[None]


def rot_half(torch, x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_formula(torch, q, k, cos, sin):
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * c + rot_half(torch, q) * s, k * c + rot_half(torch, k) * s


def case_rope(env, name, cfg, m):
    torch, xk = env.torch, env.xk
    h, kv, d = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    cos0, sin0 = cos_sin(env, m, d, cfg["theta"])

    def make(g):
        # q/k as the stock model has them: projections viewed [1, M, heads, D], transposed to
        # [1, heads, M, D] (not contiguous in that order).
        q = env.randn((1, m, h, d), g).transpose(1, 2)
        k = env.randn((1, m, kv, d), g).transpose(1, 2)
        return dict(q=q, k=k, cos=cos0.clone(), sin=sin0.clone())

    def ref(inp):
        c, s = inp["cos"].float().unsqueeze(1), inp["sin"].float().unsqueeze(1)
        qf, kf = inp["q"].float(), inp["k"].float()
        return [qf * c + rot_half(torch, qf) * s, kf * c + rot_half(torch, kf) * s]

    if env.hf is not None:
        hf_rope = env.hf["rope"]
        eager = ("transformers apply_rotary_pos_emb", lambda inp: hf_rope(inp["q"], inp["k"], inp["cos"], inp["sin"]))
    else:
        eager = ("rotate_half formula", lambda inp: rope_formula(torch, inp["q"], inp["k"], inp["cos"], inp["sin"]))
    comps = {"torch": [(eager[0], eager[1], None)]}
    if env.liger is not None:
        L = env.liger["rope"]
        # LigerRopeFunction rotates q/k IN PLACE through their physical [b, s, h, d] layout (rope.py
        # rope_forward: transpose(1, 2), contiguous() is a no-op for this layout). Repeated calls
        # rotate the same buffers again: a rotation keeps the norm, timing is unaffected.
        comps["liger"] = [("LigerRopeFunction (in place)", lambda inp: L.apply(inp["q"], inp["k"], inp["cos"], inp["sin"]), None)]

    def rope_plain(q, k, cos, sin):
        return rope_formula(torch, q, k, cos, sin)

    b = 2 * (h + kv) * m * d * 2 + 2 * m * d * 2
    return Case("rope", name, f"M={m} H={h} KV={kv} D={d}", dict(M=m, H=h, KV=kv, D=d), make,
                ours=lambda inp: xk.apply_rope(inp["q"], inp["k"], inp["cos"], inp["sin"]),
                ref=ref, bytes_=b, flops=0, set_bytes=b, competitors=comps, mutates=("liger",),
                compile_fns=[("apply_rotary_pos_emb formula", rope_plain,
                              lambda inp: (inp["q"], inp["k"], inp["cos"], inp["sin"]))],
                target=target(m))


def cases(env, kind, name, cfg):
    return [case_rope(env, name, cfg, m) for m in env.args.m_list]


def main(argv=None) -> int:
    return benchlib.main([sys.modules[__name__]], argv, __doc__.split("\n\n")[0])


if __name__ == "__main__":
    sys.exit(main())
