"""The kernels' ops under inductor. Inductor's implicit fallback for an op it has no lowering for
formats the op's IR arguments for an info log, and that text nests every producer of every
argument: for an op first met deep in a model it grows exponentially with depth (the lm_head's
GEMM after 8 MoE layers did not finish compiling in minutes). The ops register as fallbacks
before inductor lowers a graph, so inductor never formats them, and the compiled graph computes
what eager computes. Runs in a fresh process: the registration is process-wide."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys
import torch
import torch._inductor.exc as exc
from xpuinject_kernels import _interpret, _ops, rmsnorm
_interpret.apply()

formatted = []
original = exc.OperatorIssue.operator_str

def spy(target, args, kwargs):
    text = original(target, args, kwargs)
    formatted.append([str(target), len(text)])
    return text

exc.OperatorIssue.operator_str = staticmethod(spy)
dev = sys.argv[1]
w = (torch.rand(48, generator=torch.Generator().manual_seed(1)) + 0.5).to(dev)

def layers(x):
    # residual stream through 8 fused add + norms (each output feeds two later ops), then an op
    # first met at the end, as the lm_head's GEMM is
    r, h = x, x * 0.5
    for _ in range(8):
        r, h = rmsnorm.add_rms_norm(h, r, w, 1e-6)
        h = h * 0.25
    return rmsnorm.rms_norm(h + r, w, 1e-6)

x = torch.randn(5, 48, generator=torch.Generator().manual_seed(2)).to(dev)
with torch.no_grad():
    want = layers(x)
    got = torch.compile(layers, backend="inductor", fullgraph=True)(x)
import torch._inductor.lowering as lowering
print(json.dumps({
    "namespace": _ops.NAMESPACE,
    "formatted": formatted,
    "equal": bool(torch.equal(got, want)),
    "registered": sorted(str(o) for o in _ops._OPS.values() if o in lowering.lowerings),
    "ops": sorted(str(o) for o in _ops._OPS.values()),
}))
"""


def test_inductor_never_formats_the_ops_and_compiles_what_eager_computes(device, tmp_path):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    r = subprocess.run([sys.executable, "-c", SCRIPT, device], capture_output=True, text=True, timeout=600,
                       cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    import json

    got = json.loads(r.stdout.strip().splitlines()[-1])
    ours = [f for f in got["formatted"] if f[0].startswith(got["namespace"] + ".")]
    assert ours == [], ours
    assert got["equal"]
    assert got["registered"] == got["ops"] and len(got["ops"]) > 10
