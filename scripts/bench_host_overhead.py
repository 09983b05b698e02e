"""Host-side cost of the kernel launchers' own Python (validation, path choice, allocation),
with the Triton launch replaced by a no-op: what each call adds before Triton's own launch
overhead. CPU only, no GPU needed; numbers are for the machine it runs on.

    .venv/bin/python scripts/bench_host_overhead.py
"""
import os, sys, time, importlib
os.environ.pop("TRITON_INTERPRET", None)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels", "python"))
import torch
from xpuinject_kernels import _backend, rmsnorm, rope, attention
gemm = importlib.import_module("xpuinject_kernels.gemm")
# Pretend to be on cuda: bypass device checks and replace the launch by a no-op, so only the
# Python wrapper's own work is timed.
_backend.require_runnable = lambda t, what: "cuda"
class NoLaunch:
    def __getitem__(self, grid): return lambda *a, **k: None
    best_config = None
gemm._gemm_kernel = NoLaunch()
gemm._autotuner = lambda be, sw: NoLaunch()
rmsnorm._rms_norm_kernel = NoLaunch()
x = torch.randn(1, 2048, dtype=torch.bfloat16); w = torch.randn(2048, 3072, dtype=torch.bfloat16)
def bench(name, fn, n=20000):
    for _ in range(100): fn()
    t = time.perf_counter()
    for _ in range(n): fn()
    print(f"{name}: {(time.perf_counter()-t)/n*1e6:.1f} us/call (Python wrapper only)")
bench("gemm M=1", lambda: gemm.gemm(x, w))
attention._decode_fn = lambda be: NoLaunch()
attention._decode_reduce_kernel = NoLaunch()
attention._num_compute_units = lambda d: 132
q = torch.randn(1, 32, 1, 64, dtype=torch.bfloat16)
kc = torch.randn(1, 8, 2048, 64, dtype=torch.bfloat16)
bench("decode_attention B=1 H=32 KV=8 L=2048", lambda: attention.decode_attention(q, kc, kc, scaling=0.125), n=5000)
nw = torch.randn(2048, dtype=torch.bfloat16)
bench("rms_norm M=1", lambda: rmsnorm.rms_norm(x, nw, 1e-5))
