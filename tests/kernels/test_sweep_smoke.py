"""scripts/sweep_kernels.py --smoke: the sweep's plumbing on the CPU (TRITON_INTERPRET=1, tiny
shapes, a few candidates per kernel, checks only). Its first GPU run lost the GEMM part to an
import error and compared add+RMSNorm's outputs in the wrong order; both would have failed here."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "sweep_kernels.py")


def test_sweep_smoke_checks_every_part(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1")
    r = subprocess.run([sys.executable, SCRIPT, "--smoke", "--out", str(tmp_path)], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "sweep.json").read_text())
    assert res["smoke"] is True and res["copy_GBps"] is None
    rows = res["rows"]
    parts = {row["part"] for row in rows}
    assert parts == {"rmsnorm", "rope", "gemm"}
    for row in rows:
        assert row["rel_err"] < 1e-2, row
        assert row["us"] is None  # no timing on the CPU
    # every GEMM shape ran our candidates beside the two cuBLAS references, add+RMSNorm too
    assert {row["shape"] for row in rows if row["part"] == "gemm"} == {"tiny qkv M=17", "tiny swiglu M=17", "tiny down M=1"}
    assert any(row["shape"].startswith("add_rms") for row in rows)
    assert sum(1 for row in rows if row["part"] == "gemm" and row["cand"].startswith("cuBLAS")) == 6


def test_sweep_without_gpu_says_so(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="0", CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, SCRIPT, "--out", str(tmp_path)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 2 and "no CUDA device" in r.stderr
