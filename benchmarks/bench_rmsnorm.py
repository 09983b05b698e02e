#!/usr/bin/env python3
"""RMSNorm and fused residual-add + RMSNorm: ours against transformers' LlamaRMSNorm (eager),
torch.compile of the same expression and Liger-Kernel, at Llama-3.2-1B / 3.1-8B hidden sizes.

    python3 benchmarks/bench_rmsnorm.py --out DIR [--quick] [--only rmsnorm|add_rmsnorm] [--m 1,4096]
    python3 benchmarks/bench_rmsnorm.py --smoke --out DIR     # CPU, TRITON_INTERPRET=1, checks only

Bytes counted: x and y (and residual in, new residual out) once each, plus the weight. Target:
at M >= 4096, >= 90% of the measured copy bandwidth (a memory-bound op can do no better than a copy).
"""

from __future__ import annotations

import sys

import benchlib
from benchlib import Case

KINDS = ("rmsnorm", "add_rmsnorm")


def target(m: int):
    return (">=90% copy BW", "bw_frac", 0.90) if m >= 4096 else None


def rms_ref(torch, x, w, eps):
    xf = x.float()
    return w.float() * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps))


def rms_expr(torch, eps):
    def rms(x, w):  # LlamaRMSNorm.forward (transformers 5.17), the weight an argument so sets rotate
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return w * h.to(x.dtype)

    return rms


def hf_rmsnorm(env, inp, eps):
    """The set's own LlamaRMSNorm module (one per set, as one per layer), built on first use."""
    mod = inp.get("_hf")
    if mod is not None:
        return mod
    torch, weight = env.torch, inp["w"]
    if env.hf is not None:
        mod = env.hf["rmsnorm"](weight.shape[0], eps=eps).to(device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            mod.weight.copy_(weight)
        mod.eval()
    else:
        expr = rms_expr(torch, eps)

        def mod(x):
            return expr(x, weight)
    inp["_hf"] = mod
    return mod


def case_rmsnorm(env, name, cfg, m):
    torch, xk = env.torch, env.xk
    n, eps = cfg["hidden"], cfg["eps"]

    def make(g):
        return dict(x=env.randn((m, n), g), w=env.randn((n,), g, 0.1).float().add_(1.0).to(env.dtype))

    comps = {"torch": [("LlamaRMSNorm", lambda inp: hf_rmsnorm(env, inp, eps)(inp["x"]), None)]}
    if env.liger is not None:
        L = env.liger["rms"]
        comps["liger"] = [("LigerRMSNormFunction(llama)", lambda inp: L.apply(inp["x"], inp["w"], eps, 0.0, "llama", False), None)]
    b = 2 * m * n * 2 + n * 2
    return Case("rmsnorm", name, f"M={m} N={n}", dict(M=m, N=n), make,
                ours=lambda inp: xk.rms_norm(inp["x"], inp["w"], eps),
                ref=lambda inp: [rms_ref(torch, inp["x"], inp["w"], eps)],
                bytes_=b, flops=0, set_bytes=b, competitors=comps,
                compile_fns=[("LlamaRMSNorm.forward", rms_expr(torch, eps), lambda inp: (inp["x"], inp["w"]))],
                target=target(m))


def case_add_rmsnorm(env, name, cfg, m):
    torch, xk = env.torch, env.xk
    n, eps = cfg["hidden"], cfg["eps"]

    def make(g):
        return dict(x=env.randn((m, n), g), r=env.randn((m, n), g),
                    w=env.randn((n,), g, 0.1).float().add_(1.0).to(env.dtype))

    def ref(inp):
        s = inp["x"].float() + inp["r"].float()
        return [s, rms_ref(torch, s, inp["w"], eps)]

    def eager(inp):
        s = inp["x"] + inp["r"]
        return s, hf_rmsnorm(env, inp, eps)(s)

    comps = {"torch": [("x+r; LlamaRMSNorm", eager, None)]}
    if env.liger is not None:
        L = env.liger["add_rms"]
        # returns (Y, S): normed first
        comps["liger"] = [("LigerFusedAddRMSNormFunction(llama)",
                           lambda inp: L.apply(inp["x"], inp["r"], inp["w"], eps, 0.0, "llama", False),
                           lambda o: [o[1], o[0]])]
    rms = rms_expr(torch, eps)

    def add_rms(x, r, w):
        s = x + r
        return s, rms(s, w)

    b = 4 * m * n * 2 + n * 2
    return Case("add_rmsnorm", name, f"M={m} N={n}", dict(M=m, N=n), make,
                ours=lambda inp: xk.add_rms_norm(inp["x"], inp["r"], inp["w"], eps),  # (new_residual, normed)
                ref=ref, bytes_=b, flops=0, set_bytes=b, competitors=comps,
                compile_fns=[("x+r; LlamaRMSNorm.forward", add_rms, lambda inp: (inp["x"], inp["r"], inp["w"]))],
                target=target(m))


def cases(env, kind, name, cfg):
    make = case_rmsnorm if kind == "rmsnorm" else case_add_rmsnorm
    return [make(env, name, cfg, m) for m in env.args.m_list]


def main(argv=None) -> int:
    return benchlib.main([sys.modules[__name__]], argv, __doc__.split("\n\n")[0])


if __name__ == "__main__":
    sys.exit(main())
