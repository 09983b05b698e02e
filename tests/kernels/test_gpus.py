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
import triton

import xpuinject_kernels as xk
from xpuinject_kernels import _backend, attention, gpus, moe

gemm = importlib.import_module("xpuinject_kernels.gemm")  # the package exports the function under this name

PKG = Path(xk.__file__).parent


@pytest.fixture
def fake_gpu(monkeypatch):
    """Make every device "the GPU" of a data file whose tuned entries the test sets."""
    data = {"gpu": "fake", "devices": ["Fake GPU"], "file": "gpus/fake.json", "tuned": []}
    monkeypatch.setattr(gpus, "device_data", lambda device: data)
    monkeypatch.setattr(gemm, "_BEST", {})
    monkeypatch.setattr(attention, "_CONFIGS", {})
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
            assert e["kernel"] in ("gemm", "gemv", "attention.prefill", "attention.decode", "moe.decode",
                                   "moe.prefill") and e["config"], e
            if e["kernel"].startswith("moe."):  # the launch constants the MoE launcher takes
                want = moe.DECODE_KEYS if e["kernel"] == "moe.decode" else moe.PREFILL_KEYS
                assert set(e["config"]) == set(want), e
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


def test_gemm_launches_the_tuned_config(fake_gpu, device):
    """A matching entry is launched instead of any other choice, once looked up per class."""
    fake_gpu["tuned"] = [
        {"kernel": "gemm", "key": {"epilogue": "none", "m_bucket": 32, "k": 64, "n": 96},
         "config": {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_SIZE_M": 1, "num_warps": 2, "num_stages": 1}},
    ]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(17, 64, generator=g).bfloat16().to(device)
    w = (torch.randn(64, 96, generator=g) / 8).bfloat16().to(device)
    for _ in range(2):
        out = xk.gemm(x, w)
        torch.testing.assert_close(out.float(), x.float() @ w.float(), rtol=2e-2, atol=2e-2)
    assert _backend.launch_counts["tuned.gemm"] == 1          # looked up once,
    assert _backend.launch_counts["gemm.launch_cached"] >= 1  # then launched from the cache
    (cfg,) = [c for k, c in gemm._BEST.items() if k[6:9] == (32, 96, 64)]
    assert cfg.kwargs["BLOCK_N"] == 16 and cfg.num_warps == 2
    assert gpus.tuning_report()["tuned_by_kernel"] == {"gemm": 1}


def test_attention_launches_tuned_configs(fake_gpu, device):
    fake_gpu["tuned"] = [
        {"kernel": "attention.prefill", "key": {"head_dim": 32, "is_causal": True},
         "config": {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 2, "num_stages": 1}},
        {"kernel": "attention.decode", "key": {"head_dim": 32},
         "config": {"BLOCK_N": 16, "num_warps": 2, "num_stages": 1}},
    ]
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 20, 32, generator=g).bfloat16().to(device)
    k = torch.randn(1, 2, 20, 32, generator=g).bfloat16().to(device)
    v = torch.randn(1, 2, 20, 32, generator=g).bfloat16().to(device)
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
    (epilogue, M's power-of-two class, K, the weight's N), keeping the file's routes and every
    entry of another class."""
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
    key = {"epilogue": "swiglu", "m_bucket": 2048, "k": 2048, "n": 16384}
    shipped = json.loads((PKG / "gpus" / "h200.json").read_text())["tuned"]
    other = lambda t: not (t["kernel"] == "gemm" and t["key"] == key)  # noqa: E731
    assert [t for t in data["tuned"] if other(t)] == [t for t in shipped if other(t)]  # bench_moe.py's too
    assert any(t["kernel"].startswith("moe.") for t in data["tuned"])
    (e,) = [t for t in data["tuned"] if not other(t)]  # rmsnorm is not a tuned launcher: no entry
    assert e["source"] == "T/tune.json" and e["config"]["BLOCK_N"] == 256
    assert not [t for t in data["tuned"] if t["kernel"] == "rmsnorm"]
    monkeypatch.setattr(gpus, "device_data", lambda device: data)
    cfg = gpus.tuned_config("gemm", {"epilogue": "swiglu", "m_bucket": 2048, "k": 2048, "n": 16384}, "cuda")
    assert cfg is not None and cfg.kwargs["BLOCK_N"] == 256 and cfg.num_stages == 3
    del sys.modules["tune"]


def test_tune_and_bench_moe_keep_each_others_tuned_entries(tmp_path, monkeypatch):
    """tune.py --write-tuned replaces the entries of the classes it swept and keeps every other
    one (bench_moe.py's MoE entries among them); bench_moe.py replaces only entries of its own
    kernel and key."""
    import sys

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    tune, bench_moe = importlib.import_module("tune"), importlib.import_module("bench_moe")
    data_file = tmp_path / "h200.json"
    data = json.loads((PKG / "gpus" / "h200.json").read_text())
    moe_key = {"hidden": 2048, "inter": 768, "experts": 128, "top_k": 8, "tokens": 1}
    data["tuned"] = [{"kernel": "gemm", "key": {"other": 1}}, {"kernel": "moe.decode", "key": moe_key, "config": {"a": 1}},
                     {"kernel": "gemm", "key": {"fresh": 1}, "config": {"old": 1}}]
    data_file.write_text(json.dumps(data))
    tune.write_tuned(str(data_file), [{"kernel": "gemm", "key": {"fresh": 1}}], "NVIDIA H200")
    got = json.loads(data_file.read_text())
    assert got["tuned"] == [data["tuned"][0], data["tuned"][1], {"kernel": "gemm", "key": {"fresh": 1}}]
    assert got["routes"] == data["routes"]
    bench_moe.write_tuned(str(data_file), [{"kernel": "moe.decode", "key": moe_key, "config": {"a": 2}}], "")
    got = json.loads(data_file.read_text())
    assert got["tuned"] == [{"kernel": "gemm", "key": {"other": 1}}, {"kernel": "gemm", "key": {"fresh": 1}},
                            {"kernel": "moe.decode", "key": moe_key, "config": {"a": 2}}]
    del sys.modules["tune"], sys.modules["bench_moe"]


def test_a_class_without_a_tuned_config_takes_its_heuristic_at_once(monkeypatch):
    """No benchmarking before the first launch: the heuristic config, counted; autotuning only
    when asked for (XPUINJECT_AUTOTUNE=1, `xpuinject --autotune`)."""
    monkeypatch.delenv("XPUINJECT_AUTOTUNE", raising=False)
    before = dict(_backend.launch_counts)
    made = []
    h = _backend.gemm_configs("cuda")[0]
    cfg = gpus.heuristic_config("gemm", {"epilogue": "none", "m_bucket": 1, "k": 64, "n": 96}, lambda: made.append(1) or h)
    assert cfg is h and made == [1]
    assert _backend.launch_counts["heuristic.gemm"] == before.get("heuristic.gemm", 0) + 1
    assert _backend.launch_counts["autotune.configs_timed"] == before.get("autotune.configs_timed", 0)
    rep = gpus.tuning_report()
    assert rep["heuristic"] >= 1  # and the class is named, for a sweep to cover it
    assert rep["heuristic_classes"][-1] == {"kernel": "gemm", "key": {"epilogue": "none", "m_bucket": 1, "k": 64, "n": 96},
                                            "config": dict(h.kwargs, num_warps=h.num_warps, num_stages=h.num_stages)}
    monkeypatch.setenv("XPUINJECT_AUTOTUNE", "1")
    assert gpus.heuristic_config("gemm", {}, lambda: made.append(2)) is None and made == [1]


def _same(a, b) -> bool:
    return (a.kwargs, a.num_warps, a.num_stages) == (b.kwargs, b.num_warps, b.num_stages)


# The projections of the preset models (Llama-3.2-1B, Llama-3.1-8B, Qwen2.5-0.5B, Qwen3-0.6B,
# Mistral-7B) and LeViT-128S's widest: (K, N of the output, gated).
PRESET_GEMMS = [(2048, 3072, False), (2048, 2048, False), (2048, 8192, True), (8192, 2048, False),
                (4096, 6144, False), (4096, 4096, False), (4096, 14336, True), (14336, 4096, False),
                (896, 1152, False), (896, 4864, True), (4864, 896, False), (1024, 4096, False),
                (1024, 3072, True), (3072, 1024, False), (384, 768, False), (768, 384, False)]


@pytest.mark.parametrize("be", ["cuda", "xpu"])
@pytest.mark.parametrize("m", [1, 8, 64, 512, 2048, 16384])
def test_gemm_heuristic_is_a_config_the_pruner_keeps(monkeypatch, be, m):
    """The heuristic picks among the backend's own configs, and only one that fits its registers
    or shared memory (the pruner's rule), for every preset projection and token count; decode on
    CUDA takes the tiles measured best there."""
    monkeypatch.setattr(_backend, "is_interpret", lambda: False)
    for k, n, gated in PRESET_GEMMS:
        nb = 2 if gated else 1
        cfg = _backend.gemm_heuristic(be, m, n, k, nb)
        kept = _backend.gemm_prune(be, nb)(_backend.gemm_configs(be, n_b_tiles=nb), {"M": m, "N": n, "K": k})
        assert any(_same(c, cfg) for c in kept), (be, m, k, n)
        if be == "cuda" and m <= 16:
            want = (32, 512) if k >= 8192 else (64, 256)
            assert (cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"], cfg.kwargs["BLOCK_K"]) == (16, *want), (m, k, n)


@pytest.mark.parametrize("m,k,n,gated,want", [
    (512, 4096, 128256, False, (128, 256, 64, 8, 4)),  # an 8B head: 1002 tiles of the widest
    (512, 4096, 14336, True, (128, 128, 64, 8, 4)),    # SwiGLU: two accumulators, 128 x 256 spills
    (512, 4096, 4096, False, (128, 128, 64, 8, 4)),    # 128 of them, 64 of 128 x 256: short of 66
    (512, 3072, 1024, False, (64, 64, 128, 4, 4)),     # a 1024-wide down projection: 64 tiles of 64 x 128
    (128, 2048, 1024, False, (64, 32, 256, 4, 3)),     # 64 tiles even at 64 x 32: the narrowest
    (128, 384, 768, False, (64, 32, 256, 4, 3)),
])
def test_gemm_heuristic_short_prefill_fills_the_gpu(monkeypatch, m, k, n, gated, want):
    """64 < M <= 512 on CUDA: the widest tile whose grid gives the GPU's SMs half a wave each, as
    the H100 and H200 sweeps found best, where one tile for every shape was up to 1.9x slower."""
    monkeypatch.setattr(_backend, "is_interpret", lambda: False)
    c = _backend.gemm_heuristic("cuda", m, n, k, 2 if gated else 1)
    assert (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.num_warps, c.num_stages) == want


def test_gemm_heuristic_against_the_committed_sweeps(monkeypatch, capsys):
    """benchmarks/heuristic_check.py over the committed H100 and H200 sweeps: the short-prefill
    pick stays within a few percent of each class's best where the sweep timed it."""
    import importlib.util

    root = PKG.parent.parent.parent
    spec = importlib.util.spec_from_file_location("heuristic_check", root / "benchmarks" / "heuristic_check.py")
    hc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hc)
    monkeypatch.setattr(_backend, "is_interpret", lambda: False)
    files = [root / "docs/results/2026-12-06-h100/tune/tune.json", *sorted(root.glob("docs/results/2026-12-02-h200/tune*.json"))]
    assert hc.main([str(f) for f in files]) == 0
    out = capsys.readouterr().out
    assert "recorded heuristic: 59 classes, 1.218x" in out, out
    assert "current heuristic: 53 classes, 1.002x the best on average, worst 1.02x" in out, out


@pytest.mark.parametrize("be", ["cuda", "xpu"])
def test_attention_heuristics_are_configs_the_pruner_keeps(monkeypatch, be):
    monkeypatch.setattr(_backend, "is_interpret", lambda: False)
    for seq in (7, 64, 512, 2048):
        for block_d in (64, 128, 256):
            cfg = attention._prefill_heuristic(be, seq, block_d)
            kept = attention._prefill_prune(be)(attention._prefill_configs(be),
                                                {"SEQ_Q_BUCKET": attention._bucket(seq), "BLOCK_D": block_d})
            assert any(_same(c, cfg) for c in kept), (be, seq, block_d)
            if be == "cuda":  # the fp32 output tile fits the registers: no spill at head_dim 256
                assert cfg.kwargs["BLOCK_M"] * block_d <= _backend.CUDA_ACC_PER_THREAD * 32 * cfg.num_warps
                # q and the K/V stages fit shared memory (232448 bytes on the H200)
                assert attention._prefill_smem(cfg, block_d) <= _backend.CUDA_SMEM_BYTES, (seq, block_d, cfg)
                if block_d == 256 and seq > 64:
                    assert (cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"], cfg.num_warps, cfg.num_stages) == (128, 64, 8, 2)
    assert any(_same(c, attention._decode_heuristic(be)) for c in attention._decode_configs(be))
    # what the H200 asked for when it refused this config at head_dim 256 (OutOfResources)
    refused = triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3)
    assert attention._prefill_smem(refused, 256) == 262144 > _backend.CUDA_SMEM_BYTES


def test_residual_gemv_takes_the_plain_projections_tuned_config(fake_gpu, monkeypatch):
    """A decode GEMV with the residual epilogue streams its weight as the plain projection does:
    untuned itself, it launches with the plain class's tuned config; a tuned entry of its own comes
    first, and no other epilogue borrows one."""
    from xpuinject_kernels import gemv

    def cfg(epilogue):
        return gemv.launch_config("cuda", torch.device("cpu"), epilogue, 1, 2048, 4096, 2048, dt).kwargs

    dt = (torch.bfloat16,) * 4
    fake_gpu["tuned"] = []
    monkeypatch.setattr(gemv, "_BEST", {})
    swiglu = cfg("swiglu")  # the heuristic's, with nothing tuned
    monkeypatch.setattr(gemv, "_BEST", {})
    plain = {"epilogue": "none", "m_bucket": 1, "k": 4096, "n": 2048}
    fake_gpu["tuned"] = [{"kernel": "gemv", "key": plain,
                          "config": {"BLOCK_N": 64, "BLOCK_K": 256, "SPLIT_K": 4, "num_warps": 4, "num_stages": 3}}]
    assert cfg("residual") == {"BLOCK_N": 64, "BLOCK_K": 256, "SPLIT_K": 4}
    fake_gpu["tuned"].append({"kernel": "gemv", "key": dict(plain, epilogue="residual"),
                              "config": {"BLOCK_N": 32, "BLOCK_K": 128, "SPLIT_K": 8, "num_warps": 4,
                                         "num_stages": 3}})
    monkeypatch.setattr(gemv, "_BEST", {})
    assert cfg("residual")["BLOCK_N"] == 32
    assert cfg("swiglu") == swiglu  # another epilogue's class borrows nothing
