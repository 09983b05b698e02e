#!/usr/bin/env python3
"""GEMM on the packed K-major weight with its fused epilogues, at every Llama projection: ours
against cuBLAS (F.linear on the nn.Linear weight, matmul/addmm on the packed one), and the fused
SwiGLU GEMM against the stock LlamaMLP gate/up, torch.compile of it, Liger's SwiGLU, and cuBLAS
on the concatenated weight alone.

    python3 benchmarks/bench_gemm.py --out DIR [--quick] [--only gemm|swiglu] [--m 1,2048]
    python3 benchmarks/bench_gemm.py --smoke --out DIR     # CPU, TRITON_INTERPRET=1, checks only

Rows: qkv (plain, bias), o (plain, residual), gate_up (plain), down (plain, residual); swiglu is
gate_up with silu(gate)*up in the epilogue ([M, I] written once). Targets at M = 2048 and 16384:
gemm >= 0.95x the fastest cuBLAS variant; swiglu >= 0.95x cuBLAS on the concatenated weight alone
(so the fused epilogue must cost nothing).
"""

from __future__ import annotations

import sys

import benchlib
from benchlib import Case, gemm_inputs

KINDS = ("swiglu", "gemm")

# (projection, K, N, epilogues) from a model config
PROJECTIONS = (
    ("qkv", lambda c: c["hidden"], lambda c: (c["heads"] + 2 * c["kv_heads"]) * c["head_dim"], ("none", "bias")),
    ("o", lambda c: c["heads"] * c["head_dim"], lambda c: c["hidden"], ("none", "residual")),
    ("gate_up", lambda c: c["hidden"], lambda c: 2 * c["inter"], ("none",)),
    ("down", lambda c: c["inter"], lambda c: c["hidden"], ("none", "residual")),
)


def target(kind: str, m: int):
    if kind not in KINDS:
        raise ValueError(f"bench_gemm: unknown kind {kind!r}")
    if m not in (2048, 16384):
        return None
    if kind == "swiglu":
        return (">=0.95x cuBLAS mm alone", "ratio_mm", 0.95)
    return (">=0.95x cuBLAS", "ratio_torch", 0.95)


def case_swiglu(env, name, cfg, m):
    torch, xk = env.torch, env.xk
    F = torch.nn.functional
    k, i = cfg["hidden"], cfg["inter"]

    def ref(inp):
        y = inp["x"].float() @ inp["w"].float()
        return [F.silu(y[:, :i]) * y[:, i:]]

    def stock(inp):  # LlamaMLP: act_fn(gate_proj(x)) * up_proj(x)
        wn = inp["w_nk"]
        return F.silu(F.linear(inp["x"], wn[:i])) * F.linear(inp["x"], wn[i:])

    def packed(inp):  # one cuBLAS GEMM on the concatenated K-major weight, then silu * mul
        y = torch.matmul(inp["x"], inp["w"])
        return F.silu(y[:, :i]) * y[:, i:]

    def mm_cmp(y):
        return [F.silu(y[:, :i].float()) * y[:, i:].float()]

    comps = {"torch": [("LlamaMLP gate/up (2x F.linear, silu, mul)", stock, None),
                       ("matmul(x, W_gate_up) + silu*mul", packed, None)],
             # cuBLAS alone on the concatenated weight: the floor the fused epilogue is held to
             # (checked through silu*mul applied in fp32 to its [M, 2I] output)
             "mm_only": [("F.linear(x, W_gate_up)", lambda inp: F.linear(inp["x"], inp["w_nk"]), mm_cmp),
                         ("matmul(x, W_gate_up)", lambda inp: torch.matmul(inp["x"], inp["w"]), mm_cmp)]}
    if env.liger is not None:
        L = env.liger
        vs = [("LigerSwiGLUMLP: 2x F.linear + LigerSiLUMulFunction",
               lambda inp: L["silu_mul"].apply(F.linear(inp["x"], inp["w_nk"][:i]), F.linear(inp["x"], inp["w_nk"][i:])),
               None)]
        if L["gate_up"] is not None:
            vs.append(("F.linear(x, W_gate_up) + LigerFusedGateUpSiLUMulFunction",
                       lambda inp: L["gate_up"].apply(F.linear(inp["x"], inp["w_nk"])), None))
        comps["liger"] = vs

    def mlp_plain(x, wn):
        return F.silu(F.linear(x, wn[:i])) * F.linear(x, wn[i:])

    flops = 2 * m * k * 2 * i
    b = m * k * 2 + k * 2 * i * 2 + m * i * 2
    return Case("swiglu", name, f"M={m} K={k} N=2x{i}", dict(M=m, K=k, N=2 * i),
                make=lambda g: gemm_inputs(env, g, m, k, 2 * i),  # [K, 2I] gate | up
                ours=lambda inp: xk.gemm(inp["x"], inp["w"], epilogue="swiglu"),
                ref=ref, bytes_=b, flops=flops, set_bytes=m * k * 2 + k * 2 * i * 2, competitors=comps,
                compile_fns=[("LlamaMLP gate/up", mlp_plain, lambda inp: (inp["x"], inp["w_nk"]))],
                notes="ours: one GEMM over [K, 2I] with silu(gate)*up in the epilogue, [M, I] written once",
                target=target("swiglu", m))


def case_gemm(env, name, m, proj, k, n, epi):
    torch, xk = env.torch, env.xk
    F = torch.nn.functional
    has_b, has_r = epi == "bias", epi == "residual"

    def ref(inp):
        y = inp["x"].float() @ inp["w"].float()
        if has_b:
            y = y + inp["b"].float()
        if has_r:
            y = y + inp["r"].float()
        return [y]

    if epi == "none":
        vs = [("F.linear (nn.Linear layout)", lambda inp: F.linear(inp["x"], inp["w_nk"])),
              ("matmul(x, W_kn)", lambda inp: torch.matmul(inp["x"], inp["w"]))]
        plain = lambda x, wn: F.linear(x, wn)  # noqa: E731
        cargs = lambda inp: (inp["x"], inp["w_nk"])  # noqa: E731
    elif epi == "bias":
        vs = [("F.linear(x, W, b) (cuBLAS bias epilogue)", lambda inp: F.linear(inp["x"], inp["w_nk"], inp["b"])),
              ("addmm(b, x, W_kn)", lambda inp: torch.addmm(inp["b"], inp["x"], inp["w"]))]
        plain = lambda x, wn, b: F.linear(x, wn, b)  # noqa: E731
        cargs = lambda inp: (inp["x"], inp["w_nk"], inp["b"])  # noqa: E731
    else:
        vs = [("r + F.linear(x, W) (stock residual add)", lambda inp: inp["r"] + F.linear(inp["x"], inp["w_nk"])),
              ("addmm(r, x, W_kn) (cuBLAS beta=1)", lambda inp: torch.addmm(inp["r"], inp["x"], inp["w"]))]
        plain = lambda x, wn, r: r + F.linear(x, wn)  # noqa: E731
        cargs = lambda inp: (inp["x"], inp["w_nk"], inp["r"])  # noqa: E731
    comps = {"torch": [(v, f, None) for v, f in vs]}
    # Default-mode inductor calls the same cuBLAS kernel, and the compiles cost minutes: opt in.
    compile_fns = [(vs[0][0], plain, cargs)] if env.args.compile_gemm else []
    flops = 2 * m * n * k
    b = m * k * 2 + k * n * 2 + m * n * 2 + (n * 2 if has_b else 0) + (m * n * 2 if has_r else 0)
    return Case("gemm", name, f"{proj}:{epi} M={m} K={k} N={n}", dict(M=m, K=k, N=n, proj=proj, epilogue=epi),
                make=lambda g: gemm_inputs(env, g, m, k, n, bias=has_b, residual=has_r),
                ours=lambda inp: xk.gemm(inp["x"], inp["w"], bias=inp.get("b"), residual=inp.get("r"), epilogue=epi),
                ref=ref, bytes_=b, flops=flops, set_bytes=b - m * n * 2, competitors=comps,
                compile_fns=compile_fns, target=target("gemm", m))


def cases(env, kind, name, cfg):
    out = []
    for m in env.args.m_list:
        if kind == "swiglu":
            out.append(case_swiglu(env, name, cfg, m))
            continue
        for proj, kf, nf, epis in PROJECTIONS:
            for epi in epis:
                out.append(case_gemm(env, name, m, proj, kf(cfg), nf(cfg), epi))
    return out


def main(argv=None) -> int:
    return benchlib.main([sys.modules[__name__]], argv, __doc__.split("\n\n")[0])


if __name__ == "__main__":
    sys.exit(main())
