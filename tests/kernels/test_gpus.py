"""Per-GPU data: tuned launch configs replace autotuning on the GPU they were tuned on, and the
autotuner's work is counted (gpus.tuning_report, which the eval records).

The GPU itself is not here: a fake data file stands in for the device's, and the kernels run
under the Triton interpreter with the tuned config, which must give the same results.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import torch

import xpuinject_kernels as xk
from xpuinject_kernels import _backend, attention, gpus

gemm = importlib.import_module("xpuinject_kernels.gemm")  # the package exports the function under this name

PKG = Path(xk.__file__).parent


@pytest.fixture
def fake_gpu(monkeypatch):
    """Make every device "the GPU" of a data file whose tuned entries the test sets."""
    data = {"gpu": "fake", "devices": ["Fake GPU"], "file": "gpus/fake.json", "tuned": []}
    monkeypatch.setattr(gpus, "device_data", lambda device: data)
    monkeypatch.setattr(gemm, "_BEST", {})
    monkeypatch.setattr(attention, "_TUNED", {})
    monkeypatch.setattr(attention, "_HAS_TUNED", {})
    before = dict(_backend.launch_counts)
    yield data
    _backend.launch_counts.clear()
    _backend.launch_counts.update(before)


def test_shipped_files_parse_and_name_their_devices():
    files = sorted(PKG.glob("gpus/*.json"))
    assert files, "no gpus/*.json in the package"
    for p in files:
        d = json.loads(p.read_text())
        assert d["gpu"] == p.stem and d["devices"], p
        for e in d["tuned"]:
            assert e["kernel"] in ("gemm", "attention.prefill", "attention.decode") and e["config"], e
    # off a GPU (CPU, interpreter) no file applies
    assert gpus.device_data("cpu") is None


def test_tuned_config_matches_named_fields_only(fake_gpu):
    fake_gpu["tuned"] = [
        {"kernel": "gemm", "key": {"epilogue": "none", "k": 64, "n": 96},
         "config": {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 1}},
    ]
    cfg = gpus.tuned_config("gemm", {"epilogue": "none", "m_bucket": 128, "k": 64, "n": 96}, "cuda")
    assert cfg.kwargs == {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_SIZE_M": 1}
    assert cfg.num_warps == 4 and cfg.num_stages == 1
    assert gpus.tuned_config("gemm", {"epilogue": "bias", "m_bucket": 128, "k": 64, "n": 96}, "cuda") is None
    assert gpus.tuned_config("attention.decode", {"head_dim": 64}, "cuda") is None


def test_gemm_launches_the_tuned_config(fake_gpu):
    """A matching entry is launched instead of any other choice, once looked up per class."""
    fake_gpu["tuned"] = [
        {"kernel": "gemm", "key": {"epilogue": "none", "m_bucket": 32, "k": 64, "n": 96},
         "config": {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_SIZE_M": 1, "num_warps": 2, "num_stages": 1}},
    ]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(17, 64, generator=g).bfloat16()
    w = (torch.randn(64, 96, generator=g) / 8).bfloat16()
    for _ in range(2):
        out = xk.gemm(x, w)
        torch.testing.assert_close(out.float(), x.float() @ w.float(), rtol=2e-2, atol=2e-2)
    assert _backend.launch_counts["tuned.gemm"] == 1          # looked up once,
    assert _backend.launch_counts["gemm.launch_cached"] >= 1  # then launched from the cache
    (cfg,) = [c for k, c in gemm._BEST.items() if k[6:9] == (32, 96, 64)]
    assert cfg.kwargs["BLOCK_N"] == 16 and cfg.num_warps == 2
    assert gpus.tuning_report()["tuned_by_kernel"] == {"gemm": 1}


def test_attention_launches_tuned_configs(fake_gpu):
    fake_gpu["tuned"] = [
        {"kernel": "attention.prefill", "key": {"head_dim": 32, "is_causal": True},
         "config": {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 2, "num_stages": 1}},
        {"kernel": "attention.decode", "key": {"head_dim": 32},
         "config": {"BLOCK_N": 16, "num_warps": 2, "num_stages": 1}},
    ]
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 20, 32, generator=g).bfloat16()
    k = torch.randn(1, 2, 20, 32, generator=g).bfloat16()
    v = torch.randn(1, 2, 20, 32, generator=g).bfloat16()
    out = xk.flash_attention_prefill(q, k, v)
    ref = attention.attention_ref(q, k, v)
    torch.testing.assert_close(out.float(), ref.float(), rtol=3e-2, atol=3e-2)
    qd = q[:, :, -1:].contiguous()
    outd = xk.decode_attention(qd, k, v, num_splits=2)
    refd = attention.attention_ref(qd, k, v, causal=False)
    torch.testing.assert_close(outd.float(), refd.float(), rtol=3e-2, atol=3e-2)
    rep = gpus.tuning_report()
    assert rep["tuned_by_kernel"] == {"attention.decode": 1, "attention.prefill": 1}
    assert rep["autotuned"] == 0


class _FakeAutotuner:
    """The two methods of triton's Autotuner that run only for a new problem key."""

    def __init__(self, cached):
        self.cached = cached

    def _bench(self, *args, config, **kwargs):
        return [1.0]

    def check_disk_cache(self, tuning_key, configs, bench_fn):
        if self.cached:
            return True
        for c in configs:
            self._bench(config=c)
        return False


def test_autotuning_is_counted():
    before = dict(_backend.launch_counts)
    try:
        _backend.launch_counts.clear()
        fresh, disk = _FakeAutotuner(False), _FakeAutotuner(True)
        _backend._count_tuning(fresh, "gemm")
        _backend._count_tuning(disk, "attention.decode")
        fresh.check_disk_cache(("k",), ["a", "b", "c"], None)
        disk.check_disk_cache(("k",), ["a", "b"], None)
        rep = gpus.tuning_report()
        assert rep["autotuned"] == 2 and rep["autotuned_by_kernel"] == {"attention.decode": 1, "gemm": 1}
        assert rep["benchmarked"] == 1 and rep["configs_timed"] == 3 and rep["tuned"] == 0
    finally:
        _backend.launch_counts.clear()
        _backend.launch_counts.update(before)


def test_tune_writes_what_gemm_looks_up(tmp_path, monkeypatch):
    """benchmarks/tune.py --write-tuned records a GEMM best config under the key gemm() asks for
    (epilogue, M's power-of-two class, K, the weight's N), keeping the file's routes."""
    import sys

    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench))
    tune = importlib.import_module("tune")
    best = [{"kernel": "gemm", "label": "1b swiglu M=2048", "shape": {"M": 2000, "K": 2048, "N": 16384, "epilogue": "swiglu"},
             "config": {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_SIZE_M": 8, "num_warps": 8, "num_stages": 3},
             "measured": {"us": 210.0, "rel_err": 1e-3}, "best": True},
            {"kernel": "rmsnorm", "label": "rms 1b M=2048", "shape": {"M": 2048, "N": 2048}, "config": {"num_warps": 8},
             "measured": {"us": 6.0, "rel_err": 1e-3}, "best": True}]
    data_file = tmp_path / "h200.json"
    data_file.write_text((PKG / "gpus" / "h200.json").read_text())
    entries = tune.tuned_entries(best, "2026-12-01", "python3 benchmarks/tune.py --out T", "T/tune.json")
    tune.write_tuned(str(data_file), entries, "NVIDIA H200")
    data = json.loads(data_file.read_text())
    assert data["routes"] == json.loads((PKG / "gpus" / "h200.json").read_text())["routes"]
    (e,) = data["tuned"]  # the rmsnorm entry is not a tuned launcher's
    assert e["key"] == {"epilogue": "swiglu", "m_bucket": 2048, "k": 2048, "n": 16384} and e["source"] == "T/tune.json"
    monkeypatch.setattr(gpus, "device_data", lambda device: data)
    cfg = gpus.tuned_config("gemm", {"epilogue": "swiglu", "m_bucket": 2048, "k": 2048, "n": 16384}, "cuda")
    assert cfg is not None and cfg.kwargs["BLOCK_N"] == 256 and cfg.num_stages == 3
    del sys.modules["tune"]
