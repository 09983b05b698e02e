"""benchmarks/tune.py --smoke: the launch-constant sweep's plumbing on the CPU (TRITON_INTERPRET=1,
tiny shapes, a few candidates per kernel, checks only), and the `config=` argument it passes to
the kernels' public functions. A sweep that fails on the GPU after minutes of compiling (an import
error, outputs compared in the wrong order) fails here first."""

import csv
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

import xpuinject_kernels as xk
from xpuinject_kernels import _backend, attention, gpus

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
    assert {e["kernel"] for e in entries} == {"rmsnorm", "add-rmsnorm", "rope", "gemm", "gemv", "attention.prefill",
                                              "attention.decode"}
    assert res["timer"] == "interpreter wall clock, one call"
    for e in entries:
        assert e["measured"]["rel_err"] < 1e-2, e
        assert e["measured"]["us"] > 0  # the interpreter's wall clock
        assert isinstance(e["shape"], dict) and e["shape"]["M"] >= 1
        # ours carry the config the kernel's `config=` takes; vendor rows name the call instead
        assert (e["config"] is None) == bool(e.get("vendor")), e
    # every GEMM shape ran our candidates beside the two cuBLAS references; a decode-sized one
    # (M <= 16) is swept on the split-K GEMV, the kernel such a call launches
    gemm = [e for e in entries if e["kernel"] == "gemm"]
    assert {e["label"] for e in gemm} == {"tiny qkv M=17", "tiny swiglu M=17", "tiny down M=1"}
    assert sum(1 for e in gemm if e.get("vendor", "").startswith("cuBLAS")) == 6
    assert {tuple(sorted(e["config"])) for e in gemm if e["config"]} == {tuple(sorted(
        ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_SIZE_M", "num_warps", "num_stages")))}
    assert {e["label"] for e in gemm if e["config"]} == {"tiny qkv M=17", "tiny swiglu M=17"}
    gemv = [e for e in entries if e["kernel"] == "gemv"]
    # the shape heuristic's config first, then both smoke candidates
    assert {e["label"] for e in gemv} == {"tiny down M=1"} and len(gemv) == 3
    assert gemv[0]["config"]["BLOCK_N"] == 64 and gemv[0]["config"]["SPLIT_K"] == 1
    assert {e["config"]["SPLIT_K"] for e in gemv} == {1, 2}
    assert {c["kernel"] for c in res["classes"]} >= {"gemv"}
    # rope ran out of place and in place
    assert {e["shape"]["inplace"] for e in entries if e["kernel"] == "rope"} == {False, True}
    rows = list(csv.DictReader((tmp_path / "tune.csv").open()))
    assert len(rows) == len(entries)


def test_tune_sweeps_the_classes_an_eval_left_to_heuristics(tmp_path):
    """--classes a.json,b.json: the GEMM classes the runs launched with heuristic configs, each swept
    at its token bucket with its own epilogue (checked against the reference), once per class even
    when both runs launched it, on the kernel that launched it: a decode-sized GEMM class is the
    LM head's weight read in place, which the GEMV cannot read."""
    key = lambda kernel, epi, m, k, n: {"kernel": kernel, "key": {"epilogue": epi, "m_bucket": m, "k": k, "n": n}}  # noqa: E731
    classes = [key("gemm", "none", 4, 48, 64), key("gemv", "geglu", 1, 64, 96), key("gemm", "none", 4, 48, 64),
               {"kernel": "attention.decode", "key": {"head_dim": 64}}]
    ev, ev2 = tmp_path / "eval.json", tmp_path / "eval2.json"
    ev.write_text(json.dumps({"autotune": {"heuristic_classes": classes[:2]}}))
    ev2.write_text(json.dumps({"autotune": {"heuristic_classes": classes[2:]}}))
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1")
    r = subprocess.run([sys.executable, SCRIPT, "--smoke", "--only", "gemm", "--classes", f"{ev},{ev2}", "--out",
                        str(tmp_path)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    gemm = json.loads((tmp_path / "tune.json").read_text())["entries"]
    assert {e["label"] for e in gemm} == {"none M=4 K=48 N=64", "geglu M=1 K=64 N=96"}
    swept = [(e["label"], json.dumps(e["config"], sort_keys=True)) for e in gemm if e["config"]]
    assert len(swept) == len(set(swept))  # each class swept once
    # each on the kernel its run launched, keyed as that kernel looks it up
    assert {e["label"]: e["kernel"] for e in gemm if e["config"]} == {"none M=4 K=48 N=64": "gemm",
                                                                       "geglu M=1 K=64 N=96": "gemv"}
    for e in gemm:
        assert e["measured"]["rel_err"] < 1e-2, e
    bad = tmp_path / "old.json"
    bad.write_text("{}")
    r = subprocess.run([sys.executable, SCRIPT, "--smoke", "--classes", str(bad), "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and f"{bad}: no autotune.heuristic_classes" in r.stderr


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


def test_config_argument_is_used(device):
    """A given config launches and computes what the default launch computes (bf16 rounding apart)."""
    torch.manual_seed(0)
    x = torch.randn(17, 64, dtype=torch.bfloat16).to(device)
    wk = (torch.randn(64, 48, dtype=torch.bfloat16) / 8).to(device)
    cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 64, "GROUP_SIZE_M": 1, "num_warps": 2, "num_stages": 1}
    torch.testing.assert_close(xk.gemm(x, wk, config=cfg), xk.gemm(x, wk))
    w = torch.randn(64, dtype=torch.bfloat16).to(device)
    torch.testing.assert_close(xk.rms_norm(x, w, 1e-5, config={"num_warps": 1}), xk.rms_norm(x, w, 1e-5), rtol=0, atol=0)
    q = torch.randn(1, 4, 5, 32, dtype=torch.bfloat16).to(device)
    cs = torch.randn(1, 5, 32, dtype=torch.bfloat16).to(device)
    a = xk.apply_rope(q, q[:, :2], cs, cs, config={"tile_elems": 16, "num_warps": 1})
    b = xk.apply_rope(q, q[:, :2], cs, cs)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


# One class of each kernel the sweep writes for, with the keys their launchers compute for the
# problems launched below: prefill of 20 tokens (buckets of 32), decode over 64 keys in 2 splits
# with a padding mask (split bucket 32), and a SwiGLU GEMM of 17 rows (m_bucket 32, more rows than
# a decode step has).
PREFILL_KEY = {"seq_q_bucket": 32, "seq_k_bucket": 32, "head_dim": 32, "is_causal": True, "mask_kind": 0}
DECODE_KEY = {"split_bucket": 32, "head_dim": 32, "block_g": 16, "mask_kind": 1, "single": False}
SWIGLU_KEY = {"epilogue": "swiglu", "m_bucket": 32, "k": 64, "n": 96}


class _Recorder:
    """Stands in for a @triton.jit kernel: records each launch's keyword arguments (the launch
    constants among them), then launches the kernel."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append(kwargs)
            return self.kernel[grid](*args, **kwargs)

        return launch


def test_tune_sweeps_the_rope_and_nmajor_gemv_classes(tmp_path, monkeypatch):
    """A decode QKV projection with the RoPE + cache-write epilogue ("none+rope", keyed with its
    head_dim) and a GEMV on an N-major weight ("+nmajor") are swept as they launch, checked on
    the rotated queries and the output; the rope class's best lands under the key the launcher
    looks up, and a launch of that class then takes it. A rope class recorded without its head_dim
    is named and left out, not swept under a guessed layout."""
    rope = {"epilogue": "none+rope", "m_bucket": 1, "k": 48, "n": 64, "head_dim": 16}
    nmajor = {"epilogue": "bias+nmajor", "m_bucket": 2, "k": 48, "n": 32}
    old = {"epilogue": "none+rope", "m_bucket": 1, "k": 48, "n": 96}
    ev = tmp_path / "eval.json"
    ev.write_text(json.dumps({"autotune": {"heuristic_classes": [
        {"kernel": "gemv", "key": k, "config": {}} for k in (rope, nmajor, old)]}}))
    data_file = tmp_path / "h200.json"
    shutil.copy(os.path.join(os.path.dirname(xk.__file__), "gpus", "h200.json"), data_file)
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1")
    r = subprocess.run([sys.executable, SCRIPT, "--smoke", "--only", "gemm", "--classes", str(ev), "--out",
                        str(tmp_path), "--write-tuned", str(data_file)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "gemv none+rope M=1 K=48 N=96: a rope class needs its head_dim in the key" in r.stdout + r.stderr
    res = json.loads((tmp_path / "tune.json").read_text())
    assert {e["label"] for e in res["entries"]} == {"none+rope M=1 K=48 N=64 D=16", "bias+nmajor M=2 K=48 N=32"}
    for e in res["entries"]:
        assert e["kernel"] == "gemv" and e["measured"]["rel_err"] < 1e-2, e
    # a dot tile of the rope class is one head: every candidate's BLOCK_N is head_dim's power of two
    assert {e["config"]["BLOCK_N"] for e in res["entries"] if e["label"].startswith("none+rope")} == {16}
    assert [c["key"] for c in res["classes"]] == [rope, nmajor]

    tuned = {json.dumps(e["key"], sort_keys=True): e for e in json.loads(data_file.read_text())["tuned"]}
    got = tuned[json.dumps(rope, sort_keys=True)]
    assert got["config"] == res["classes"][0]["tuned"]["config"]
    from xpuinject_kernels import gemv
    monkeypatch.setattr(gpus, "device_data", lambda device: {"file": "gpus/h200.json", "tuned": [got]})
    monkeypatch.setattr(gemv, "_BEST", {})
    before = dict(_backend.launch_counts)
    try:
        cfg = gemv.launch_config("cuda", "cpu", "none+rope", 1, 64, 48, 64, (torch.bfloat16,) * 3 + (None,), 16)
    finally:  # the lookup's count is this test's, not the next test's
        _backend.launch_counts.clear()
        _backend.launch_counts.update(before)
    assert dict(cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages) == got["config"]


def _launched(rec, keys):
    (kw,) = rec.launches
    return {k: kw[k] for k in keys}


def test_tune_writes_attention_and_swiglu_classes_that_launch_tuned(tmp_path, monkeypatch, device):
    """--classes with a prefill, a decode and a SwiGLU class --write-tuned: each class's best config
    lands in the data file under the key its launcher looks up, beside the heuristic's and the
    autotuner's times; on that GPU each class then launches its tuned config, with no heuristic
    and no autotuning, counted as tuned; a class the file lacks takes its heuristic at once."""
    classes = [{"kernel": "attention.prefill", "key": PREFILL_KEY,
                "config": {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}},
               {"kernel": "attention.decode", "key": DECODE_KEY,
                "config": {"BLOCK_N": 16, "num_warps": 4, "num_stages": 1}},
               {"kernel": "gemm", "key": SWIGLU_KEY, "config": {}}]
    ev = tmp_path / "eval.json"
    ev.write_text(json.dumps({"autotune": {"heuristic_classes": classes}}))
    data_file = tmp_path / "h200.json"
    shutil.copy(os.path.join(os.path.dirname(xk.__file__), "gpus", "h200.json"), data_file)
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1")
    r = subprocess.run([sys.executable, SCRIPT, "--smoke", "--only", "gemm,attention", "--classes", str(ev),
                        "--out", str(tmp_path), "--write-tuned", str(data_file)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "per class, the best beside the heuristic config and the autotuner's pick" in r.stdout

    res = json.loads((tmp_path / "tune.json").read_text())
    summary = {c["kernel"]: c for c in res["classes"]}
    assert set(summary) == {"attention.prefill", "attention.decode", "gemm"}
    for kernel, c in summary.items():
        assert c["tuned"]["us"] <= c["heuristic"]["us"], c
        if kernel != "gemm":  # the interpreter runs no GEMM autotuner
            assert c["autotune"]["config"] and c["tuned"]["us"] <= c["autotune"]["us"], c
    # an eval's class is timed with the config that run launched it with
    assert summary["attention.decode"]["heuristic"]["config"] == classes[1]["config"]

    data = json.loads(data_file.read_text())
    shipped = json.loads(open(os.path.join(os.path.dirname(xk.__file__), "gpus", "h200.json")).read())
    # the three swept classes' entries are the sweep's; every other shipped entry (other classes,
    # the MoE launchers' from benchmarks/bench_moe.py) stays as it was
    swept = [(c["kernel"], c["key"]) for c in classes]
    assert [e for e in data["tuned"] if (e["kernel"], e["key"]) not in swept] == \
        [e for e in shipped["tuned"] if (e["kernel"], e["key"]) not in swept]
    assert any(e["kernel"].startswith("moe.") for e in data["tuned"])
    tuned = {e["kernel"]: e for e in data["tuned"] if (e["kernel"], e["key"]) in swept}
    assert set(tuned) == {"attention.prefill", "attention.decode", "gemm"}
    assert len(data["tuned"]) == len([e for e in shipped["tuned"] if (e["kernel"], e["key"]) not in swept]) + 3
    assert tuned["attention.prefill"]["key"] == PREFILL_KEY and tuned["attention.decode"]["key"] == DECODE_KEY
    assert tuned["gemm"]["key"] == SWIGLU_KEY
    for kernel, e in tuned.items():
        assert e["config"] == summary[kernel]["tuned"]["config"]
        assert e["measured"]["us"] == summary[kernel]["tuned"]["us"]
        assert e["measured"]["heuristic_us"] == summary[kernel]["heuristic"]["us"]
    assert "autotune_us" in tuned["attention.decode"]["measured"]

    # On the GPU the file names: each class launches its tuned config.
    gemm_mod = importlib.import_module("xpuinject_kernels.gemm")
    monkeypatch.setattr(gpus, "device_data", lambda device: data)
    monkeypatch.setattr(attention, "_CONFIGS", {})
    monkeypatch.setattr(gemm_mod, "_BEST", {})
    monkeypatch.delenv("XPUINJECT_AUTOTUNE", raising=False)
    recs = {name: _Recorder(getattr(mod, name)) for mod, name in
            ((attention, "_prefill_kernel"), (attention, "_decode_split_kernel"), (gemm_mod, "_gemm_kernel"))}
    for mod, name in ((attention, "_prefill_kernel"), (attention, "_decode_split_kernel"), (gemm_mod, "_gemm_kernel")):
        monkeypatch.setattr(mod, name, recs[name])
    before = dict(_backend.launch_counts)
    tuned_before = gpus.tuning_report()["tuned_by_kernel"]  # the process's counts: earlier tests add to them
    try:
        g = torch.Generator().manual_seed(3)
        q = torch.randn(1, 4, 20, 32, generator=g).bfloat16().to(device)
        k = torch.randn(1, 2, 20, 32, generator=g).bfloat16().to(device)
        v = torch.randn(1, 2, 20, 32, generator=g).bfloat16().to(device)
        out = xk.flash_attention_prefill(q, k, v)
        torch.testing.assert_close(out.float(), attention.attention_ref(q, k, v).float(), rtol=3e-2, atol=3e-2)

        qd = torch.randn(1, 4, 1, 32, generator=g).bfloat16().to(device)
        kd = torch.randn(1, 2, 64, 32, generator=g).bfloat16().to(device)
        vd = torch.randn(1, 2, 64, 32, generator=g).bfloat16().to(device)
        km = torch.ones(1, 64, dtype=torch.bool, device=device)
        km[:, :5] = False
        outd = xk.decode_attention(qd, kd, vd, key_mask=km, num_splits=2)
        refd = attention.attention_ref(qd, kd, vd, causal=False, key_mask=km)
        torch.testing.assert_close(outd.float(), refd.float(), rtol=3e-2, atol=3e-2)

        x = torch.randn(17, 64, generator=g).bfloat16().to(device)
        w = (torch.randn(64, 96, generator=g) / 8).bfloat16().to(device)
        y = xk.gemm(x, w, epilogue="swiglu")
        h = x.float() @ w.float()
        torch.testing.assert_close(y.float(), torch.nn.functional.silu(h[:, :48]) * h[:, 48:], rtol=3e-2, atol=3e-2)

        assert _launched(recs["_prefill_kernel"], ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")) == \
            tuned["attention.prefill"]["config"]
        assert _launched(recs["_decode_split_kernel"], ("BLOCK_N", "num_warps", "num_stages")) == \
            tuned["attention.decode"]["config"]
        assert _launched(recs["_gemm_kernel"], ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_SIZE_M", "num_warps",
                                                "num_stages")) == tuned["gemm"]["config"]
        counts = {n: _backend.launch_counts[n] - before.get(n, 0) for n in _backend.launch_counts}
        assert {n: c for n, c in counts.items() if n.startswith("tuned.") and c} == \
            {"tuned.attention.prefill": 1, "tuned.attention.decode": 1, "tuned.gemm": 1}
        assert not any(c for n, c in counts.items() if n.startswith(("heuristic.", "autotune.")))
        tuned_after = gpus.tuning_report()["tuned_by_kernel"]
        assert {k: v - tuned_before.get(k, 0) for k, v in tuned_after.items() if v - tuned_before.get(k, 0)} == \
            {"attention.decode": 1, "attention.prefill": 1, "gemm": 1}

        # A class the file lacks (a prompt of 70 tokens, a decode of head_dim 64, a wider SwiGLU)
        # takes its heuristic config at once on the GPU: counted, nothing timed. The lookup runs
        # as on a GPU: the interpreter itself autotunes its one config instead.
        dev = torch.device("cuda", 0)
        with monkeypatch.context() as m:
            m.setattr(_backend, "is_interpret", lambda: False)
            want_pre, want_dec = attention._prefill_heuristic("cuda", 70, 32), attention._decode_heuristic("cuda")
            pre = attention._launch_config("attention.prefill", dev, lambda: want_pre,
                                           **dict(PREFILL_KEY, seq_q_bucket=128, seq_k_bucket=128))
            dec = attention._launch_config("attention.decode", dev, lambda: want_dec,
                                           **dict(DECODE_KEY, head_dim=64))
        assert (pre.kwargs, pre.num_warps, pre.num_stages) == (want_pre.kwargs, want_pre.num_warps, want_pre.num_stages)
        assert (dec.kwargs, dec.num_warps, dec.num_stages) == (want_dec.kwargs, want_dec.num_warps, want_dec.num_stages)
        assert pre.kwargs["BLOCK_M"] == 128  # a GPU's tile, not the interpreter's
        assert gpus.tuned_config("gemm", dict(SWIGLU_KEY, n=192), dev) is None
        assert gpus.tuned_config("gemm", SWIGLU_KEY, dev) is not None
        counts = {n: _backend.launch_counts[n] - before.get(n, 0) for n in _backend.launch_counts}
        assert counts["heuristic.attention.prefill"] == 1 and counts["heuristic.attention.decode"] == 1
        assert counts["tuned.attention.prefill"] == 1 and counts["tuned.attention.decode"] == 1
        assert not any(c for n, c in counts.items() if n.startswith("autotune."))
    finally:
        _backend.launch_counts.clear()
        _backend.launch_counts.update(before)


def test_tune_says_when_it_cannot_rebuild_a_class(tmp_path):
    """A recorded attention class whose key the sweep's problem does not launch (a field it does
    not know) is reported, not tuned under another class's key; a data file to write must exist."""
    ev = tmp_path / "eval.json"
    ev.write_text(json.dumps({"autotune": {"heuristic_classes": [
        {"kernel": "attention.decode", "key": dict(DECODE_KEY, fused=True), "config": {}}]}}))
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1")
    r = subprocess.run([sys.executable, SCRIPT, "--smoke", "--only", "attention", "--classes", str(ev),
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    (e,) = json.loads((tmp_path / "tune.json").read_text())["entries"]
    assert e["measured"]["error"] == "launches another class: fused None (recorded True)"
    r = subprocess.run([sys.executable, SCRIPT, "--smoke", "--out", str(tmp_path), "--write-tuned",
                        str(tmp_path / "none.json")], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and "none.json: No such file or directory" in r.stderr


def test_forced_config_is_checked_and_restored(device):
    """attention._forced_config, the sweep's way to launch a candidate: every launch constant
    required, unknown kernels and keys refused, and the launcher's own choice back after the block."""
    with pytest.raises(ValueError, match="config lacks num_stages"):
        with attention._forced_config("attention.decode", {"BLOCK_N": 16, "num_warps": 4}):
            pass
    with pytest.raises(ValueError, match="unknown config key"):
        cfg = {"BLOCK_N": 16, "BLOCK_M": 16, "num_warps": 4, "num_stages": 1}
        with attention._forced_config("attention.decode", cfg):
            pass
    with pytest.raises(ValueError, match="unknown kernel 'attention.verify'"):
        with attention._forced_config("attention.verify", {}):
            pass
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 4, 1, 32, generator=g).bfloat16().to(device)
    k = torch.randn(1, 2, 40, 32, generator=g).bfloat16().to(device)
    with attention._forced_config("attention.decode", {"BLOCK_N": 32, "num_warps": 2, "num_stages": 1}) as seen:
        a = xk.decode_attention(q, k, k)
    assert seen == {"split_bucket": 64, "head_dim": 32, "block_g": 16, "mask_kind": 0, "single": True}
    assert attention._FORCED == {}
    # another key block, another order of the online softmax: equal up to bf16 rounding on a GPU
    torch.testing.assert_close(a, xk.decode_attention(q, k, k), atol=1e-3, rtol=1.6e-2)


def _tune_module():
    """benchmarks/tune.py as a module (its folder on sys.path while it imports benchlib)."""
    spec = importlib.util.spec_from_file_location("tune_mod", SCRIPT)
    tune = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        spec.loader.exec_module(tune)
    finally:
        sys.path.remove(os.path.dirname(SCRIPT))
    return tune


def test_m_buckets_keeps_only_the_classes_of_those_token_counts(tmp_path):
    """--m-buckets: a GEMM class by its m_bucket, a prefill attention by its seq_q_bucket, a
    decode attention as 1; the others are left out."""
    tune = _tune_module()
    prefill = {"seq_q_bucket": 512, "seq_k_bucket": 512, "head_dim": 64, "is_causal": True, "mask_kind": 0}
    ev = tmp_path / "eval.json"
    ev.write_text(json.dumps({"autotune": {"heuristic_classes": [
        {"kernel": "gemm", "key": {"epilogue": "none", "m_bucket": 1024, "k": 64, "n": 96}},
        {"kernel": "gemm", "key": {"epilogue": "swiglu", "m_bucket": 512, "k": 64, "n": 192}},
        {"kernel": "gemv", "key": {"epilogue": "residual", "m_bucket": 1, "k": 96, "n": 64}},
        {"kernel": "attention.prefill", "key": prefill},
        {"kernel": "attention.prefill", "key": dict(prefill, seq_q_bucket=1024, seq_k_bucket=1024)},
        {"kernel": "attention.decode", "key": DECODE_KEY},
        # a MoE model's: kept apart by their tokens, tuned by bench_moe.py, not here
        {"kernel": "moe.prefill", "key": {"hidden": 64, "inter": 40, "experts": 6, "top_k": 2, "tokens": 512}},
        {"kernel": "moe.decode", "key": {"hidden": 64, "inter": 40, "experts": 6, "top_k": 2, "tokens": 1}}]}}))
    assert tune.class_bucket("moe.prefill", {"tokens": 512}) == 512
    assert [c[0] for c in tune.classes_from_eval(str(ev), buckets={512})] == ["swiglu M=512 K=64 N=192"]
    assert [c[0] for c in tune.classes_from_eval(str(ev), buckets={1, 512})] == [
        "swiglu M=512 K=64 N=192", "residual M=1 K=96 N=64"]
    assert [c[3] for c in tune.attention_classes_from_eval(str(ev), True, buckets={512})] == [prefill]
    assert [c[0] for c in tune.attention_classes_from_eval(str(ev), True, buckets={1})] == ["attention.decode"]
    a = tune.parse_args(["--out", str(tmp_path), "--only", "gemm,attention", "--classes", str(ev),
                         "--m-buckets", "512"])
    assert len(a.gemm_classes) == 1 and len(a.attention_classes) == 1
    for bad in (["--m-buckets", "512"], ["--classes", str(ev), "--m-buckets", "x"]):
        with pytest.raises(SystemExit):
            tune.parse_args(["--out", str(tmp_path)] + bad)


def test_skip_tuned_leaves_out_the_classes_the_data_file_has(tmp_path):
    """--skip-tuned: a class whose kernel and key already have a tuned entry is not swept again
    (a sweep resumed after its budget ran out); the others are."""
    tune = _tune_module()
    have = {"epilogue": "none", "m_bucket": 1024, "k": 64, "n": 96}
    new = {"epilogue": "swiglu", "m_bucket": 1024, "k": 64, "n": 192}
    ev = tmp_path / "eval.json"
    ev.write_text(json.dumps({"autotune": {"heuristic_classes": [
        {"kernel": "gemm", "key": have}, {"kernel": "gemm", "key": new},
        {"kernel": "attention.decode", "key": DECODE_KEY}]}}))
    data = tmp_path / "gpu.json"
    data.write_text(json.dumps({"tuned": [{"kernel": "gemm", "key": have, "config": {}},
                                          {"kernel": "attention.decode", "key": DECODE_KEY, "config": {}}]}))
    skip = tune.tuned_keys(str(data))
    assert [c[0] for c in tune.classes_from_eval(str(ev), skip)] == ["swiglu M=1024 K=64 N=192"]
    assert tune.attention_classes_from_eval(str(ev), True, skip) == []
    assert len(tune.classes_from_eval(str(ev))) == 2 and len(tune.attention_classes_from_eval(str(ev), True)) == 1
    with pytest.raises(SystemExit):
        tune.parse_args(["--out", str(tmp_path), "--skip-tuned", "--classes", str(ev)])
