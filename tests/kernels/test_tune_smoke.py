"""benchmarks/tune.py --smoke: the launch-constant sweep's plumbing on the CPU (TRITON_INTERPRET=1,
tiny shapes, a few candidates per kernel, checks only), and the `config=` argument it passes to
the kernels' public functions. A sweep that fails on the GPU after minutes of compiling (an import
error, outputs compared in the wrong order) fails here first."""

import csv
import json
import os
import subprocess
import sys

import pytest
import torch

import xpuinject_kernels as xk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "tune.py")


@pytest.mark.slow
def test_tune_smoke_checks_every_part(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1")
    r = subprocess.run([sys.executable, SCRIPT, "--smoke", "--out", str(tmp_path)], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "tune.json").read_text())
    assert res["smoke"] is True and res["copy_GBps"] is None
    assert res["gpu"] and res["date"] and "tune.py" in res["command"]
    entries = res["entries"]
    assert {e["kernel"] for e in entries} == {"rmsnorm", "add-rmsnorm", "rope", "gemm"}
    for e in entries:
        assert e["measured"]["rel_err"] < 1e-2, e
        assert e["measured"]["us"] is None  # no timing on the CPU
        assert isinstance(e["shape"], dict) and e["shape"]["M"] >= 1
        # ours carry the config the kernel's `config=` takes; vendor rows name the call instead
        assert (e["config"] is None) == bool(e.get("vendor")), e
    # every GEMM shape ran our candidates beside the two cuBLAS references
    gemm = [e for e in entries if e["kernel"] == "gemm"]
    assert {e["label"] for e in gemm} == {"tiny qkv M=17", "tiny swiglu M=17", "tiny down M=1"}
    assert sum(1 for e in gemm if e.get("vendor", "").startswith("cuBLAS")) == 6
    assert {tuple(sorted(e["config"])) for e in gemm if e["config"]} == {tuple(sorted(
        ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_SIZE_M", "num_warps", "num_stages")))}
    # rope ran out of place and in place
    assert {e["shape"]["inplace"] for e in entries if e["kernel"] == "rope"} == {False, True}
    rows = list(csv.DictReader((tmp_path / "tune.csv").open()))
    assert len(rows) == len(entries)


def test_tune_sweeps_the_classes_an_eval_left_to_heuristics(tmp_path):
    """--classes eval.json: the GEMM classes the run launched with heuristic configs, each swept at
    its token bucket with its own epilogue (checked against the reference), once per class."""
    key = lambda epi, m, k, n: {"kernel": "gemm", "key": {"epilogue": epi, "m_bucket": m, "k": k, "n": n}}  # noqa: E731
    classes = [key("residual", 16, 48, 64), key("geglu", 1, 64, 96), key("residual", 16, 48, 64),
               {"kernel": "attention.decode", "key": {"head_dim": 64}}]
    ev = tmp_path / "eval.json"
    ev.write_text(json.dumps({"autotune": {"heuristic_classes": classes}}))
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1")
    r = subprocess.run([sys.executable, SCRIPT, "--smoke", "--only", "gemm", "--classes", str(ev), "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    gemm = json.loads((tmp_path / "tune.json").read_text())["entries"]
    assert {e["label"] for e in gemm} == {"residual M=16 K=48 N=64", "geglu M=1 K=64 N=96"}
    for e in gemm:
        assert e["measured"]["rel_err"] < 1e-2, e
    bad = tmp_path / "old.json"
    bad.write_text("{}")
    r = subprocess.run([sys.executable, SCRIPT, "--smoke", "--classes", str(bad), "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and "no autotune.heuristic_classes" in r.stderr


def test_tune_without_gpu_says_so(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="0", CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, SCRIPT, "--out", str(tmp_path)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 2 and "no CUDA device" in r.stderr


def test_config_argument_is_validated():
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    w = torch.ones(64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="unknown config key"):
        xk.rms_norm(x, w, 1e-5, config={"warps": 4})
    with pytest.raises(ValueError, match="positive integer"):
        xk.add_rms_norm(x, x, w, 1e-5, config={"num_warps": 0})
    q = torch.randn(1, 4, 3, 32, dtype=torch.bfloat16)
    cs = torch.randn(1, 3, 32, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="dict of launch constants"):
        xk.apply_rope(q, q, cs, cs, config=[4])
    wk = torch.randn(64, 32, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="config lacks GROUP_SIZE_M, num_warps, num_stages"):
        xk.gemm(x, wk, config={"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32})
    with pytest.raises(ValueError, match="positive integer"):
        xk.gemm(x, wk, config={"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_SIZE_M": 1, "num_warps": True,
                               "num_stages": 1})


def test_config_argument_is_used():
    """A given config launches and computes what the default launch computes (bf16 rounding apart)."""
    torch.manual_seed(0)
    x = torch.randn(17, 64, dtype=torch.bfloat16)
    wk = torch.randn(64, 48, dtype=torch.bfloat16) / 8
    cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 64, "GROUP_SIZE_M": 1, "num_warps": 2, "num_stages": 1}
    torch.testing.assert_close(xk.gemm(x, wk, config=cfg), xk.gemm(x, wk))
    w = torch.randn(64, dtype=torch.bfloat16)
    torch.testing.assert_close(xk.rms_norm(x, w, 1e-5, config={"num_warps": 1}), xk.rms_norm(x, w, 1e-5), rtol=0, atol=0)
    q = torch.randn(1, 4, 5, 32, dtype=torch.bfloat16)
    cs = torch.randn(1, 5, 32, dtype=torch.bfloat16)
    a = xk.apply_rope(q, q[:, :2], cs, cs, config={"tile_elems": 16, "num_warps": 1})
    b = xk.apply_rope(q, q[:, :2], cs, cs)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
