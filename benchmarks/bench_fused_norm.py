#!/usr/bin/env python3
"""Whether a decoder layer's RMSNorms run faster inside the launch after them than in launches of
their own, at the Qwen3-30B-A3B decode shapes (batch 1), on a CUDA GPU.

    PYTHONPATH=kernels/python python3 benchmarks/bench_fused_norm.py [--layers 48] [--tokens 1]

Two places, each sequence once per layer on that layer's own weights (48 layers: nothing is served
from L2 that a model would not get), all layers captured in one CUDA graph with programmatic
dependent launch as the package launches, timed by the same code (CUDA events around replays,
median), reported per layer:
  input norm    rms_norm, then the QKV GEMV          against gemm.rms_norm_gemm (one GEMV launch)
  post-attention add_rms_norm, then the router       against the router launch running the add +
                                                     RMSNorm (moe._router_probs with norm=)
and each GEMV or router alone, the floor a fusion could reach. XPUINJECT_PDL=0 runs every
launch without programmatic dependent launch, as a GPU without it would. The package fuses
these norms only there (_backend.fuse_norm): on the H200 with it, a norm's own launch cost about
1 us, and the whole decode step was faster with the norms apart (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kernels" / "python"))

import torch  # noqa: E402

import benchlib  # noqa: E402  (this folder is on sys.path when run as a script)
from xpuinject_kernels import moe as M  # noqa: E402
from xpuinject_kernels.gemm import gemm, rms_norm_gemm  # noqa: E402
from xpuinject_kernels.rmsnorm import add_rms_norm, rms_norm  # noqa: E402

H, QKV, E, TOP_K = 2048, 5120, 128, 8


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--replays", type=int, default=20)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_fused_norm: needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    importlib.import_module("xpuinject_kernels.gemm").FUSE_INPUT_NORM = True  # the one launch, whatever the device
    bf = torch.bfloat16
    t = a.tokens
    x = torch.randn(t, H, device=dev, dtype=bf)
    r = torch.randn(t, H, device=dev, dtype=bf) * 4
    nw = (torch.rand(H, device=dev) + 0.5).to(bf)
    wq = [torch.randn(H, QKV, device=dev, dtype=bf) * 0.02 for _ in range(a.layers)]
    wr = [torch.randn(H, E, device=dev, dtype=bf) * 0.02 for _ in range(a.layers)]
    s_out, n_out = torch.empty_like(x), torch.empty_like(x)

    def timed(seq):
        """Per-layer microseconds of seq(i) over every layer (benchlib.graph_us_per_layer)."""
        return benchlib.graph_us_per_layer(seq, a.layers, a.replays)

    rows = []
    rows.append(("input norm", "QKV GEMV alone", timed(lambda i: gemm(x, wq[i]))))
    rows.append(("input norm", "rms_norm + QKV GEMV", timed(lambda i: gemm(rms_norm(x, nw, 1e-6), wq[i]))))
    rows.append(("input norm", "rms_norm_gemm (one launch)", timed(lambda i: rms_norm_gemm(x, nw, 1e-6, wq[i]))))
    rows.append(("post-attention", "router alone", timed(lambda i: M.decode_route(x, wr[i], TOP_K))))

    def two(i):
        _, normed = add_rms_norm(x, r, nw, 1e-6)
        M.decode_route(normed, wr[i], TOP_K)

    rows.append(("post-attention", "add_rms_norm + router", timed(two)))
    rows.append(("post-attention", "router with the add + norm (one launch)",
                 timed(lambda i: M.decode_route(x, wr[i], TOP_K, norm=(r, nw, 1e-6, s_out, n_out)))))
    print(f"{torch.cuda.get_device_name(dev)}, {a.layers} layers, {t} token(s), PDL {M._backend.pdl(dev)}; "
          "us per layer (median of replays)")
    for place, name, us in rows:
        print(f"{place:15s} {name:40s} {us:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
