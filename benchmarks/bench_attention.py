#!/usr/bin/env python3
"""Attention: causal flash prefill and split-K decode (GQA), ours against PyTorch's
scaled_dot_product_attention (enable_gqa, and on K/V repeated to every head).

    python3 benchmarks/bench_attention.py --out DIR [--quick] [--only prefill|decode]
    python3 benchmarks/bench_attention.py --smoke --out DIR     # CPU, TRITON_INTERPRET=1, checks only

Ours writes [b, s, h, d] (what the o projection reads); SDPA returns [b, h, s, d], and the
transpose copy transformers then makes is not charged to it here. Targets: prefill >= SDPA at
S = 2048; decode >= SDPA at KV length 2048 and 8192.
"""

from __future__ import annotations

import sys

import benchlib
from benchlib import Case

KINDS = ("prefill", "decode")


def target(kind: str, params):
    if kind not in KINDS:
        raise ValueError(f"bench_attention: unknown kind {kind!r}")
    if kind == "prefill":
        return (">= SDPA", "ratio_torch", 1.0) if params["seq"] == 2048 else None
    return (">= SDPA", "ratio_torch", 1.0) if params["kv_len"] in (2048, 8192) else None


def sdpa(torch, q, k, v, causal):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def attn_ref(env, inp, causal):
    """fp32 attention on K/V repeated to every query head (plain SDPA, no GQA: the fp32
    memory-efficient kernel instead of a math fallback that would build the [S, S] scores), as
    [b, s, h, d]."""
    g = inp["q"].shape[1] // inp["k"].shape[1]
    q = inp["q"].float()
    k = inp["k"].float().repeat_interleave(g, dim=1)
    v = inp["v"].float().repeat_interleave(g, dim=1)
    o = env.torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return o.transpose(1, 2)


def sdpa_rep(env, inp, causal):
    """SDPA with K/V expanded to every query head once per set (transformers' repeat_kv, cached in
    the set so the expansion is not timed): the strongest plain-SDPA baseline whichever backend
    enable_gqa would pick."""
    if "_krep" not in inp:
        g = inp["q"].shape[1] // inp["k"].shape[1]
        inp["_krep"] = inp["k"].repeat_interleave(g, dim=1)
        inp["_vrep"] = inp["v"].repeat_interleave(g, dim=1)
    return env.torch.nn.functional.scaled_dot_product_attention(inp["q"], inp["_krep"], inp["_vrep"], is_causal=causal)


def case_prefill(env, name, cfg, s):
    torch, xk = env.torch, env.xk
    h, kv, d = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]

    def make(g):
        return dict(q=env.randn((1, h, s, d), g), k=env.randn((1, kv, s, d), g), v=env.randn((1, kv, s, d), g))

    comps = {"torch": [("SDPA(is_causal, enable_gqa)", lambda inp: sdpa(torch, inp["q"], inp["k"], inp["v"], True),
                        lambda o: o.transpose(1, 2)),
                       ("SDPA(is_causal) on K/V repeated to all heads (repeat not timed)",
                        lambda inp: sdpa_rep(env, inp, True), lambda o: o.transpose(1, 2))]}
    flops = 4 * h * s * s * d / 2  # QK^T and PV, causal half
    b = (2 * h + 2 * kv) * s * d * 2
    params = dict(seq=s, H=h, KV=kv, D=d)
    return Case("prefill", name, f"S={s} H={h} KV={kv} D={d}", params, make,
                ours=lambda inp: xk.flash_attention_prefill(inp["q"], inp["k"], inp["v"], causal=True),  # [b, s, h, d]
                ref=lambda inp: [attn_ref(env, inp, True)],
                bytes_=b, flops=flops, set_bytes=b - h * s * d * 2, competitors=comps,
                notes="ours writes [b, s, h, d] (what the o projection reads); SDPA's [b, h, s, d] needs a "
                      "transpose copy in transformers that is not timed here",
                target=target("prefill", params))


def case_decode(env, name, cfg, batch, kv_len):
    torch, xk = env.torch, env.xk
    h, kv, d = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]

    def make(g):
        return dict(q=env.randn((batch, h, 1, d), g), k=env.randn((batch, kv, kv_len, d), g),
                    v=env.randn((batch, kv, kv_len, d), g))

    comps = {"torch": [("SDPA(enable_gqa)", lambda inp: sdpa(torch, inp["q"], inp["k"], inp["v"], False),
                        lambda o: o.transpose(1, 2)),
                       ("SDPA on K/V repeated to all heads (repeat not timed)",
                        lambda inp: sdpa_rep(env, inp, False), lambda o: o.transpose(1, 2))]}
    flops = 4 * batch * h * kv_len * d
    b = 2 * batch * kv * kv_len * d * 2 + 2 * batch * h * d * 2
    params = dict(batch=batch, kv_len=kv_len, H=h, KV=kv, D=d)
    return Case("decode", name, f"B={batch} L={kv_len} H={h} KV={kv} D={d}", params, make,
                ours=lambda inp: xk.decode_attention(inp["q"], inp["k"], inp["v"]),  # [b, 1, h, d]
                ref=lambda inp: [attn_ref(env, inp, False)],
                bytes_=b, flops=flops, set_bytes=b - batch * h * d * 2, competitors=comps,
                target=target("decode", params))


def cases(env, kind, name, cfg):
    if kind == "prefill":
        return [case_prefill(env, name, cfg, s) for s in env.args.prefill]
    return [case_decode(env, name, cfg, b, length) for b, length in env.args.decode]


def main(argv=None) -> int:
    return benchlib.main([sys.modules[__name__]], argv, __doc__.split("\n\n")[0])


if __name__ == "__main__":
    sys.exit(main())
