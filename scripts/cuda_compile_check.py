"""Compile xpuinject Triton kernels for an NVIDIA Hopper target (sm_90), offline: Triton source ->
PTX -> cubin through the CUDA backend and its bundled ptxas, no GPU needed.

    PYTHONPATH=kernels/python .venv/bin/python scripts/cuda_compile_check.py --only moe

The cases and mocked arguments are scripts/xpu_compile_check.py's (grf_mode, an XPU option, is
dropped); a kernel with a PDL parameter is compiled with it on, as CUDA launches it. A stand-in
driver reports the target, so JITFunction.warmup compiles without a device. For each case it
prints the registers and spill stores `ptxas -v` reports: a spill is a slow config, not a failure.
A half-precision FMA in the PTX fails the case: the compiler made it by contracting a product the
source rounds to bf16/fp16 with the add after it, which skips that rounding (a kernel that rounds
where torch rounds launches with Triton's enable_fp_fusion off: its module's LAUNCH_OPTIONS).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

import xpu_compile_check as X  # noqa: E402


HALF_FMA = re.compile(r"\bfma\.rn(?:\.ftz)?\.(?:bf16|f16)(?:x2)?\b")


def ptxas_report(ptx: str, arch: int) -> str:
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    try:
        r = subprocess.run([str(ptxas), f"-arch=sm_{arch}a", "-v", f.name, "-o", os.devnull],
                           capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    regs = re.findall(r"Used (\d+) registers", r.stderr)
    spill = re.findall(r"(\d+) bytes spill stores", r.stderr)
    return f"{regs[0] if regs else '?'} registers, {spill[0] if spill else '?'} bytes spill stores"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 90 (H100/H200)")
    ap.add_argument("--only", default="", metavar="PREFIX",
                    help="compile only the cases whose name starts with PREFIX (e.g. 'moe'; several: 'a|b')")
    a = ap.parse_args()
    triton.runtime.driver.set_active(X.TargetDriver(GPUTarget("cuda", a.arch, 32)))
    print(f"triton {triton.__version__}, target cuda sm_{a.arch}")
    ok = failed = 0
    for name, fn, cfgs, act, consts in X.cases(cuda=True):
        if not any(name.startswith(o) for o in a.only.split("|")):
            continue
        if any(p.name == "PDL" for p in fn.params):
            consts = dict(consts, PDL=True)
        for kw, warps, stages in cfgs:
            kw = {k: v for k, v in kw.items() if k != "grf_mode"}
            label = f"{name} {kw} warps={warps} stages={stages}"
            try:
                k = fn.warmup(*X.mock_args(fn, act, {**consts, **kw}), grid=(1,), num_warps=warps, num_stages=stages,
                              **X.launch_options(fn))
                fused = sorted(set(HALF_FMA.findall(k.asm["ptx"])))
                if fused:
                    failed += 1
                    print(f"FAIL  {label}: {', '.join(fused)} in the PTX: a rounded product contracted into an add")
                    continue
                print(f"ok    {label}: {k.metadata.shared} bytes shared, {ptxas_report(k.asm['ptx'], a.arch)}")
                ok += 1
            except Exception as e:  # report every failure, keep going
                failed += 1
                msg = "".join(traceback.format_exception_only(type(e), e)).strip().splitlines()
                print(f"FAIL  {label}: {msg[-1] if msg else type(e).__name__}")
    print(f"{ok} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
