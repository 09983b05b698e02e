#!/usr/bin/env python3
"""Host time per call of our launchers (Python wrapper + Triton's launch) beside the torch calls
they replace, at decode shapes of Llama-3.2-1B where each call's GPU work is a few microseconds.

    python3 benchmarks/bench_host.py [--calls 2000] [--out DIR]
    python3 benchmarks/bench_host.py --smoke      # CPU, TRITON_INTERPRET=1: each call once, checked

After a warm-up (compile, autotune), `--calls` calls are issued back to back without a
synchronize and timed with the host clock; at these shapes the GPU drains its queue faster than
the host fills it, so wall time / calls is what one call costs the host, which is what an eager
decode step pays per launch. Median of 5 batches. Every output is first checked against the torch
call beside it (rel. error < 1e-2). Writes DIR/host.json and DIR/host.csv when --out is given.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import types

import benchlib


def cases(env, smoke: bool):
    """(name, ours(), torch(), compare ours' output to torch's as lists)."""
    torch, xk, F = env.torch, env.xk, env.torch.nn.functional
    hidden, heads, kv, hd, inter, kv_len = (64, 4, 2, 32, 48, 40) if smoke else (2048, 32, 8, 64, 8192, 2048)
    g = env.gen()
    x = env.randn((1, hidden), g)
    r = env.randn((1, hidden), g)
    nw = env.randn((hidden,), g, 0.1).float().add_(1.0).to(env.dtype)
    qkv = benchlib.gemm_inputs(env, g, 1, hidden, (heads + 2 * kv) * hd)
    mlp = benchlib.gemm_inputs(env, g, 1, hidden, 2 * inter)
    q = env.randn((1, 1, heads, hd), g).transpose(1, 2)
    k = env.randn((1, 1, kv, hd), g).transpose(1, 2)
    ang = torch.rand((1, 1, hd), generator=g, device=env.dev) * 6.28
    cos, sin = ang.cos().to(env.dtype), ang.sin().to(env.dtype)
    qd = env.randn((1, heads, 1, hd), g)
    kc, vc = env.randn((1, kv, kv_len, hd), g), env.randn((1, kv, kv_len, hd), g)
    eps = 1e-5

    def rms(t):  # LlamaRMSNorm.forward
        h = t.to(torch.float32)
        return nw * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(t.dtype)

    def rot(t):
        h = t.shape[-1] // 2
        return torch.cat((-t[..., h:], t[..., :h]), dim=-1)

    def rope_torch():
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * c + rot(q) * s, k * c + rot(k) * s

    i = inter
    return [
        ("gemm qkv M=1", lambda: xk.gemm(x, qkv["w"]), lambda: F.linear(x, qkv["w_nk"])),
        ("gemm swiglu M=1", lambda: xk.gemm(x, mlp["w"], epilogue="swiglu"),
         lambda: F.silu(F.linear(x, mlp["w_nk"][:i])) * F.linear(x, mlp["w_nk"][i:])),
        ("rms_norm M=1", lambda: xk.rms_norm(x, nw, eps), lambda: rms(x)),
        ("add_rms_norm M=1", lambda: xk.add_rms_norm(x, r, nw, eps), lambda: (x + r, rms(x + r))),
        ("apply_rope M=1", lambda: xk.apply_rope(q, k, cos, sin), rope_torch),
        (f"decode_attention L={kv_len}", lambda: xk.decode_attention(qd, kc, vc),
         lambda: F.scaled_dot_product_attention(qd, kc, vc, enable_gqa=True).transpose(1, 2)),
    ]


def host_us(env, fn, calls: int) -> float:
    for _ in range(20):
        fn()
    benchlib.sync(env)
    batches = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        batches.append((time.perf_counter() - t) / calls * 1e6)
        benchlib.sync(env)
    return statistics.median(batches)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--out", default="")
    p.add_argument("--smoke", action="store_true")
    a = p.parse_args(argv)
    env = benchlib.setup(types.SimpleNamespace(smoke=a.smoke, cache_dir="", timer="graph", rep_ms=60.0), competitors=False)
    if env is None:
        return 2
    rows, failed = [], 0
    with env.torch.inference_mode():
        for name, ours, theirs in cases(env, a.smoke):
            err = benchlib.rel_err(env, [o.float() for o in benchlib.as_list(ours())],
                                   [t.float() for t in benchlib.as_list(theirs())])
            ok = err < benchlib.REL_TOL
            failed += not ok
            row = dict(call=name, rel_err=err, check_ok=ok)
            if not a.smoke and ok:
                row.update(ours_us=host_us(env, ours, a.calls), torch_us=host_us(env, theirs, a.calls))
            rows.append(row)
            timing = (f"ours {row['ours_us']:7.1f} us  torch {row['torch_us']:7.1f} us" if "ours_us" in row
                      else "checked" if ok else "FAILED")
            benchlib.log(f"{name:28s} err {err:.1e}  {timing}")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        info = dict(device="cpu (Triton interpreter)" if a.smoke else env.torch.cuda.get_device_properties(0).name,
                    date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), calls=a.calls, rows=rows)
        benchlib.write_atomic(os.path.join(a.out, "host.json"), json.dumps(info, indent=1) + "\n")
        def us(v):
            return "" if v is None else f"{v:.1f}"

        lines = ["call,rel_err,ours_us,torch_us"] + [
            f"{r['call']},{r['rel_err']:.2g},{us(r.get('ours_us'))},{us(r.get('torch_us'))}" for r in rows]
        benchlib.write_atomic(os.path.join(a.out, "host.csv"), "\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
