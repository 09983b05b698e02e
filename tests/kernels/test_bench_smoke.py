"""The kernel benchmarks (benchmarks/) without a GPU.

* `--smoke` end to end (CPU, TRITON_INTERPRET=1, tiny shapes, no timing), for run_all.py and each
  bench_<kernel>.py: every kind's cases are built, our kernels and the torch eager competitors
  run, and each output is checked against the bench file's fp32 reference; the run writes
  bench.json / bench.csv / bench.md and exits 0.
* `--inject-fault`: a corrupted output of ours must fail the check and make the run exit 1 (the
  check is not vacuous).
* The harness's pure helpers (rotation sizing, target rules, rate formatting, argument errors, the
  relative-error metric with NaN and shape mismatches, the timer's control flow, the tables, the
  vendor-route matching) in-process.
"""

import collections
import csv
import importlib.util
import json
import math
import os
import subprocess
import sys
import types

import pytest
import torch

from xpuinject_kernels import _backend

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "benchmarks")


def load(name):
    """A module of benchmarks/ by file; registered under its name because the bench files import
    `benchlib` by name (as they do when run from that folder)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# A benchmark's --smoke run in this process needs the interpreter on from the process start, as
# the CPU suite runs; a GPU run (TRITON_INTERPRET=0) skips those and runs the benchmarks themselves.
in_process_smoke = pytest.mark.skipif(
    not _backend.is_interpret(),
    reason="a benchmark's --smoke in this process needs TRITON_INTERPRET=1 from the process start")

bl = load("benchlib")
b_rms, b_rope, b_gemm, b_attn = (load(n) for n in ("bench_rmsnorm", "bench_rope", "bench_gemm", "bench_attention"))


def _run(script, args, tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.run([sys.executable, os.path.join(BENCH, script), "--smoke", "--out", str(out), *args],
                       capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    return p, out


def _main(mod, args, tmp_path, capsys):
    """A bench file's main in this process (torch is already imported: seconds instead of a
    subprocess's start), as a CompletedProcess-like result."""
    out = tmp_path / "out"
    rc = mod.main(["--smoke", "--out", str(out), *args])
    cap = capsys.readouterr()
    return types.SimpleNamespace(returncode=rc, stdout=cap.out, stderr=cap.err), out


def _check_smoke_run(p, out, n_cases, kinds):
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-4000:]}"
    data = json.loads((out / "bench.json").read_text())
    cases = data["cases"]
    assert len(cases) == n_cases
    assert {c["kind"] for c in cases} == set(kinds)
    for c in cases:
        assert c.get("error") is None, c
        assert c["check_ok"] is True, c
        assert 0.0 <= c["rel_err"] < bl.REL_TOL, c
        # the torch eager competitor ran and matched the same reference
        tc = c["competitors"]["torch"]
        assert tc["status"] == "checked", c
        assert tc["variants"] and all(v["check_ok"] for v in tc["variants"]), c
        assert "ours_us" not in c  # no timing under the interpreter
    # a nonzero error somewhere: the comparison really compared bf16 outputs with fp32 references
    assert max(c["rel_err"] for c in cases) > 1e-4
    # the swiglu rows also checked the cuBLAS-only reference matmul (through silu*mul)
    for c in cases:
        if c["kind"] == "swiglu":
            assert c["competitors"]["mm_only"]["status"] == "checked"
    s = data["summary"]
    assert s["checked"] == len(cases) and s["failed"] == 0 and s["skipped"] == 0
    md = (out / "bench.md").read_text()
    assert md.count("\n| ") >= len(cases) + 1  # header + one row per case
    assert "interpreter smoke" in md
    rows = list(csv.DictReader((out / "bench.csv").open()))
    assert len(rows) == len(cases) and all(r["check_ok"] == "1" for r in rows)
    assert f"{len(cases)} checked, 0 failed" in p.stdout
    return cases


@pytest.mark.slow
def test_run_all_smoke_checks_every_kind(tmp_path):
    p, out = _run("run_all.py", [], tmp_path)
    # 2 token counts x (rmsnorm, add_rmsnorm, rope, swiglu + 7 gemm rows) + 1 prefill + 1 decode
    n_gemm = sum(len(e) for _, _, _, e in b_gemm.PROJECTIONS)
    assert len(bl.M_SMOKE) == 2 and n_gemm == 7
    _check_smoke_run(p, out, 2 * (4 + n_gemm) + 1 + 1, bl.KINDS)


@in_process_smoke
@pytest.mark.parametrize("mod, n_cases", [
    (b_rms, 2),     # rmsnorm, add_rmsnorm at one M
    (b_rope, 1),
    (b_gemm, 1 + 7),   # swiglu + the 7 projection rows
    (b_attn, 2),  # one prefill, one decode
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_each_bench_file_smoke(tmp_path, capsys, mod, n_cases):
    p, out = _main(mod, ["--m", "5"], tmp_path, capsys)
    _check_smoke_run(p, out, n_cases, mod.KINDS)


@in_process_smoke
def test_smoke_detects_wrong_output(tmp_path, capsys):
    p, out = _main(b_rms, ["--only", "rmsnorm", "--m", "3", "--inject-fault", "rmsnorm"], tmp_path, capsys)
    assert p.returncode == 1, f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    data = json.loads((out / "bench.json").read_text())
    (c,) = data["cases"]
    assert c["kind"] == "rmsnorm" and c["check_ok"] is False
    # the fault scales our output by 1.05: the error is ~5e-2, far over the tolerance
    assert 0.04 < c["rel_err"] < 0.06, c["rel_err"]
    assert "FAIL" in (out / "bench.md").read_text()
    assert data["summary"]["failed"] == 1


def test_rel_err_metric():
    env = types.SimpleNamespace(torch=torch)
    ref = torch.randn(4, 8, dtype=torch.float64)
    assert bl.rel_err(env, ref.clone(), ref) == 0.0
    e = bl.rel_err(env, (ref * 1.01).to(torch.float32), ref)
    assert math.isclose(e, 0.01, rel_tol=1e-4)
    bad = ref.clone()
    bad[1, 2] = float("nan")
    assert bl.rel_err(env, bad, ref) == float("inf")
    bad[1, 2] = float("inf")
    assert bl.rel_err(env, bad, ref) == float("inf")
    # the worst of several outputs counts
    assert math.isclose(bl.rel_err(env, [ref, ref * 1.02], [ref, ref]), 0.02, rel_tol=1e-6)
    with pytest.raises(ValueError, match="shape"):
        bl.rel_err(env, ref.t(), ref)
    with pytest.raises(ValueError, match="outputs"):
        bl.rel_err(env, [ref], [ref, ref])


def test_rotation_sets():
    l2 = 60 << 20
    assert bl.rotation_sets(1 << 30, l2) == 1  # one set already 17x the L2
    assert bl.rotation_sets(60 << 20, l2) == 3
    assert bl.rotation_sets(1 << 20, l2) == 64  # capped
    assert bl.rotation_sets(1 << 20, l2, max_sets=200) == 180
    assert bl.rotation_sets(3 << 30, l2, mem_cap=1 << 30) == 1
    assert bl.rotation_sets(10 << 20, l2, mem_cap=40 << 20) == 4  # memory cap wins over 18
    with pytest.raises(ValueError):
        bl.rotation_sets(0, l2)


def test_target_rules():
    r = b_rms.target(16384)
    assert r == (">=90% copy BW", "bw_frac", 0.90)
    assert b_rms.target(2048) is None
    assert b_rope.target(16384) == r and b_rope.target(2048) is None
    assert b_gemm.target("gemm", 2048)[1:] == ("ratio_torch", 0.95)
    assert b_gemm.target("gemm", 64) is None
    assert b_gemm.target("swiglu", 16384)[1] == "ratio_mm"
    assert b_attn.target("prefill", {"seq": 2048})[1:] == ("ratio_torch", 1.0)
    assert b_attn.target("prefill", {"seq": 8192}) is None
    assert b_attn.target("decode", {"kv_len": 8192})[1:] == ("ratio_torch", 1.0)
    with pytest.raises(ValueError):
        b_gemm.target("softmax", 2048)
    with pytest.raises(ValueError):
        b_attn.target("softmax", {"seq": 2048})
    assert bl.evaluate_target(r, True, {"bw_frac": 0.91}) == "met"
    assert bl.evaluate_target(r, True, {"bw_frac": 0.89}) == "missed"
    assert bl.evaluate_target(r, False, {"bw_frac": 0.99}) == "missed (wrong result)"
    assert bl.evaluate_target(r, True, {}) == "n/a (no timing)"
    assert bl.evaluate_target(r, True, {"bw_frac": float("nan")}) == "n/a (no timing)"
    assert bl.evaluate_target(None, True, {"bw_frac": 0.5}) == "-"


def test_fmt_rate_picks_the_bounding_side():
    bw, peak = 4.0e12, 800e12
    # 4 GB in 1000 us at 4 TB/s: bandwidth side, 100%
    txt, frac_txt, frac = bl.fmt_rate(4e9, 0, 1000.0, bw, peak)
    assert txt == "4000 GB/s" and frac_txt == "100%" and math.isclose(frac, 1.0)
    # 1.6 TFLOP with few bytes in 4000 us: 400 TFLOP/s, half the peak
    txt, frac_txt, frac = bl.fmt_rate(1e6, 1.6e12, 4000.0, bw, peak)
    assert txt == "400 TFLOP/s" and frac_txt == "50%" and math.isclose(frac, 0.5)
    assert bl.fmt_rate(1e6, 0, None, bw, peak) == ("-", "-", None)


def test_parse_args():
    a = bl.parse_args(["--out", "x", "--quick", "--only", "gemm,rope"])
    assert a.kinds == ["gemm", "rope"] and a.m_list == bl.M_QUICK and a.model_names == list(bl.MODELS)
    a = bl.parse_args(["--out", "x", "--m", "1,4096", "--models", "llama-3.1-8b"])
    assert a.m_list == (1, 4096) and a.model_names == ["llama-3.1-8b"]
    a = bl.parse_args(["--out", "x", "--smoke"])
    assert a.model_names == ["tiny"] and a.m_list == bl.M_SMOKE
    for bad in (["--only", "rmsnorm,softmax"], ["--models", "gpt2"], ["--m", "1,x"], ["--m", "0"],
                ["--inject-fault", "rope:zero"], ["--timer", "wall"], ["--budget-s", "0"]):
        with pytest.raises(SystemExit) as ei:
            bl.parse_args(["--out", "x", *bad])
        assert ei.value.code == 2, bad
    with pytest.raises(SystemExit):
        bl.parse_args([])  # --out is required
    # a bench file accepts only its own kinds
    with pytest.raises(SystemExit):
        bl.parse_args(["--out", "x", "--only", "gemm"], kinds=b_rms.KINDS)


def test_parse_args_configs(tmp_path):
    """--configs adds a model per config folder (or file), its shape read as MODELS spells it;
    without --models only those run."""
    fx = os.path.join(os.path.dirname(BENCH), "testdata", "fixtures")
    a = bl.parse_args(["--out", "x", "--configs", f"{fx}/llama-odd,{fx}/phi3-tiny/config.json"])
    assert a.model_names == ["llama-odd", "phi3-tiny"]
    assert a.model_shapes["llama-odd"] == dict(hidden=160, heads=5, kv_heads=5, head_dim=32, inter=416, vocab=512,
                                               eps=1e-06, theta=10000.0)
    # no head_dim in the config: hidden / heads, as transformers derives it
    assert a.model_shapes["phi3-tiny"]["head_dim"] == 80 and a.model_shapes["phi3-tiny"]["kv_heads"] == 1
    assert "llama-odd" not in bl.MODELS  # the registry itself is left alone
    a = bl.parse_args(["--out", "x", "--models", "llama-3.1-8b", "--configs", f"{fx}/llama-odd"])
    assert a.model_names == ["llama-3.1-8b", "llama-odd"]
    (tmp_path / "bad.json").write_text("{not json")
    for bad in (f"{fx}/levit-tiny", str(tmp_path), str(tmp_path / "bad.json")):
        with pytest.raises(SystemExit) as ei:
            bl.parse_args(["--out", "x", "--configs", bad])
        assert ei.value.code == 2, bad


@in_process_smoke
def test_gemm_smoke_on_a_config(tmp_path, capsys):
    """A model from --configs runs every GEMM case at its own shape (llama-odd: K 160, N 416)."""
    fx = os.path.join(os.path.dirname(BENCH), "testdata", "fixtures", "llama-odd")
    p, out = _main(b_gemm, ["--m", "3", "--configs", fx], tmp_path, capsys)
    cases = _check_smoke_run(p, out, 1 + 7, b_gemm.KINDS)
    assert {c["model"] for c in cases} == {"llama-odd"}


def test_render_table_marks_states():
    rows = [
        dict(kind="gemm", model="m", shape="s", check_ok=True, rel_err=2e-3, ours_us=100.0, achieved="600 TFLOP/s",
             frac_text="80%", target="met", target_desc=">=0.95x cuBLAS", target_value=1.02,
             competitors={"torch": dict(status="ok", us=102.0, ratio=1.02), "liger": dict(status="not available")}),
        dict(kind="rmsnorm", model="m", shape="s2", status="skipped"),
        dict(kind="rope", model="m", shape="s3", error="boom", check_ok=False, target="error", competitors={}),
    ]
    md = bl.render_table(rows, markdown=True)
    lines = md.splitlines()
    assert len(lines) == 2 + 3
    assert "| ok 2.0e-03 | 100.0 | 600 TFLOP/s | 80% | 102.0 (1.02x) | - | not available | met (>=0.95x cuBLAS: 1.02) |" in lines[2]
    assert "skipped" in lines[3] and "ERROR" in lines[4]
    txt = bl.render_table(rows, markdown=False)
    assert len(txt.splitlines()) == 4
    # the CSV: one line per row, numbers where they exist
    got = list(csv.DictReader(bl.csv_text(rows).splitlines()))
    assert len(got) == 3
    assert got[0]["ours_us"] == "100" and got[0]["torch_ratio"] == "1.02" and got[0]["target"] == "met"
    assert got[1]["check_ok"] == "" and got[2]["check_ok"] == "0"


class _FakeCuda:
    """Just enough of torch.cuda for time_calls: a device clock that fn calls advance (or, while a
    graph is captured, add to the graph's cost), events that read it, graphs that replay the cost."""

    def __init__(self, fail_capture=False):
        self.now = 0.0  # ms
        self.capturing = None
        self.fail_capture = fail_capture
        self.calls = 0
        cuda = self

        class Event:
            def __init__(self, enable_timing=True):
                self.t = None

            def record(self):
                self.t = cuda.now

            def elapsed_time(self, other):
                return other.t - self.t

        class CUDAGraph:
            def __init__(self):
                self.cost = 0.0

            def replay(self):
                cuda.now += self.cost

        class graph:  # noqa: N801 - mirrors torch.cuda.graph
            def __init__(self, g):
                self.g = g

            def __enter__(self):
                if cuda.fail_capture:
                    raise RuntimeError("operation not permitted when stream is capturing")
                cuda.capturing = self.g

            def __exit__(self, *exc):
                cuda.capturing = None
                return False

        self.Event, self.CUDAGraph, self.graph = Event, CUDAGraph, graph

    def synchronize(self):
        pass

    def work(self, ms):
        self.calls += 1
        if self.capturing is not None:
            self.capturing.cost += ms
        else:
            self.now += ms


@pytest.mark.parametrize("timer,fail,want_timer", [("graph", False, "graph"), ("events", False, "events"),
                                                    ("graph", True, "events (graph capture failed")])
def test_time_calls_control_flow(timer, fail, want_timer):
    cuda = _FakeCuda(fail_capture=fail)
    env = types.SimpleNamespace(torch=types.SimpleNamespace(cuda=cuda), smoke=False,
                                args=types.SimpleNamespace(timer=timer, rep_ms=60.0))
    cost = {0: 0.010, 1: 0.030, 2: 0.020}  # ms per call, by input set: the median call is 20 us
    sets = [dict(i=i) for i in range(3)]
    r = bl.time_calls(env, lambda s: cuda.work(cost[s["i"]]), sets)
    assert r["timer"].startswith(want_timer), r
    assert r["sets"] == 3 and r["calls"] % 3 == 0 and r["calls"] >= 3
    # every sweep covers the sets equally, so the time per call is the mean cost: 20 us
    assert math.isclose(r["us"], 20.0, rel_tol=1e-9), r
    assert r["p20"] <= r["us"] <= r["p80"]
    # ~2 ms of work per sweep (the 20 us estimate gives 100 calls, rounded to 102 for 3 sets)
    assert r["calls"] == 102
    assert r["reps"] >= 10


def test_render_targets_compact():
    rows = [dict(kind="decode", model="llama-3.1-8b", shape="B=8 L=8192 H=32 KV=8 D=128", ours_us=41.5,
                 frac_text="91%", target="missed", target_desc=">= SDPA", target_value=0.97,
                 competitors={"torch": dict(status="ok", us=40.3, ratio=0.97)})]
    line = bl.render_targets(rows)
    assert "3.1-8b" in line and "41.5us" in line and "torch x0.97" in line and "missed (>= SDPA: 0.97)" in line
    assert len(line) < 130


@in_process_smoke
def test_run_case_timing_bookkeeping(monkeypatch, tmp_path):
    """The GPU half of run_case (rotation sets, best variant per column, ratios, bandwidth fraction,
    targets, the second timing of ours) with the interpreter for the kernel and a fake timer."""
    import xpuinject_kernels as xk

    args = bl.parse_args(["--out", str(tmp_path), "--smoke", "--no-compile", "--only", "rmsnorm", "--m", "5"],
                         kinds=b_rms.KINDS)
    env = bl.Env(args)
    env.xk = xk
    env.hf = None  # inline LlamaRMSNorm expression: no transformers import needed here
    env.smoke = False  # take the timing path
    env.bw, env.peak = 2.816e9, 800e12  # chosen so the 1408 bytes of the case in 1 us are 50% of it
    calls = []

    def fake_time(env_, fn, sets):
        calls.append((fn, len(sets)))
        us = {0: 1.0, 1: 3.0, 2: 1.05}.get(len(calls) - 1, 9.0)  # ours, torch, ours again
        return dict(us=us, p20=us, p80=us, timer="fake", calls=len(sets), sets=len(sets))

    monkeypatch.setattr(bl, "time_calls", fake_time)
    monkeypatch.setattr(bl, "sync", lambda env_: None)
    poisoned = xk.set_poison(True)
    (case,) = b_rms.cases(env, "rmsnorm", "tiny", bl.SMOKE_MODELS["tiny"])
    # the rule applies from M = 4096 (tested above); a tiny M keeps the interpreter quick
    case.target = (">=90% copy BW", "bw_frac", 0.90)
    try:
        row = bl.run_case(env, case)
        # run_case poisons the check call and restores the setting it found
        assert xk.set_poison(poisoned) is True
    finally:
        xk.set_poison(poisoned)
    assert row["check_ok"] is True and row["rel_err"] < 1e-2
    # 5 x 64 bf16 in + out + weight = 1408 bytes a set: 3 x 60 MiB of L2 wants far more, capped at 64
    assert row["sets"] == 64 and calls[0][1] == 64
    assert row["ours_us"] == 1.0 and row["ours_again_us"] == 1.05 and math.isclose(row["ours_drift"], 0.05)
    tc = row["competitors"]["torch"]
    assert tc["status"] == "ok" and tc["us"] == 3.0 and math.isclose(tc["ratio"], 3.0)
    assert row["competitors"]["liger"]["status"] == "not available"
    assert row["competitors"]["compile"]["status"] == "not run"
    # bytes 2*5*64*2 + 64*2 = 1408 in 1 us = 1.408 GB/s, half the bandwidth: the 90% target is missed
    assert math.isclose(row["metrics"]["bw_frac"], 0.5)
    assert row["frac_text"] == "50%" and row["achieved"] == "1 GB/s"
    assert row["target"] == "missed" and row["target_desc"] == ">=90% copy BW"
    line = bl.render_table([row], markdown=True).splitlines()[2]
    assert "3.00 (3.00x)" in line and "missed (>=90% copy BW: 0.50)" in line
    assert "ours 1.00us" in bl.progress_line(0, 1, 1.0, row)


def test_fallback_timer_is_marked():
    row = dict(kind="rope", model="m", shape="s", check_ok=True, rel_err=1e-3, ours_us=5.0,
               ours=dict(timer="events (graph capture failed: RuntimeError: x)"),
               competitors={"torch": dict(status="ok", us=10.0, ratio=2.0, timer="graph")})
    line = bl.render_table([row], markdown=True).splitlines()[2]
    assert "| 5.00* |" in line and "| 10.0 (2.00x) |" in line
    row["ours"]["timer"] = "graph"
    assert "| 5.00 |" in bl.render_table([row], markdown=True).splitlines()[2]


ROUTES = {"gpu": "x", "devices": ["X"], "tuned": [], "kept": [], "routes": [  # a per-GPU data file, trimmed
    {"kernel": "gemm", "op": "qkv_proj", "gemm": "qkv_proj", "k": 2048, "n": 3072, "measured": []},
    {"kernel": "gemm", "op": "down_proj", "gemm": "down_proj", "k": 8192, "n": 2048, "tokens": "decode", "measured": []},
    {"kernel": "gemm", "op": "o_proj", "gemm": "o_proj", "k": 4096, "n": 4096, "tokens": "prefill", "measured": []},
    {"kernel": "attention-decode", "op": "attention-decode", "head_dims": [64, 128], "measured": []},
    {"kernel": "gemm", "op": "o_proj", "gemm": "o_proj", "k": 2048, "n": 2048, "tokens": "short", "measured": []},
]}


def test_route_for_matches_op_shape_and_token_class(tmp_path):
    p = tmp_path / "routes.json"
    p.write_text(json.dumps(ROUTES))
    routes = bl.load_routes(str(p))
    assert len(routes) == 5

    def gemm(proj, m, k, n):
        return {"kind": "gemm", "params": {"M": m, "K": k, "N": n, "proj": proj, "epilogue": "none"}}

    assert bl.route_for(gemm("qkv", 2048, 2048, 3072), routes).startswith("qkv_proj (")
    assert bl.route_for(gemm("qkv", 1, 2048, 3072), routes).startswith("qkv_proj (")      # every token count
    assert bl.route_for(gemm("qkv", 2048, 4096, 3072), routes) == ""                      # other K
    assert bl.route_for(gemm("o", 2048, 2048, 3072), routes) == ""                        # other projection
    # the decode class ends at contract.json's decode_max_tokens (16: the split-K GEMV's rows),
    # the short class at short_max_tokens (64)
    assert bl.route_for(gemm("down", 16, 8192, 2048), routes).startswith("down_proj (")
    assert bl.route_for(gemm("down", 17, 8192, 2048), routes) == ""                       # prefill: not routed
    assert bl.route_for(gemm("o", 64, 4096, 4096), routes) == ""                          # below min_tokens
    assert bl.route_for(gemm("o", 65, 4096, 4096), routes).startswith("o_proj (")
    assert [bl.route_for(gemm("o", m, 2048, 2048), routes) != "" for m in (16, 17, 64, 65)] == [False, True, True, False]
    dec = {"kind": "decode", "params": {"batch": 1, "kv_len": 2048, "H": 32, "KV": 8, "D": 64}}
    assert bl.route_for(dec, routes).startswith("attention-decode")
    assert bl.route_for(dict(dec, params=dict(dec["params"], D=96)), routes) == ""
    assert bl.route_for({"kind": "prefill", "params": {"seq": 2048, "D": 64}}, routes) == ""  # no prefill route here
    bad = tmp_path / "bad.json"
    bad.write_text('[{"name": "gemm"}]')
    with pytest.raises(ValueError, match="per-GPU data file"):
        bl.load_routes(str(bad))
    # the shipped data file reads: its routes are the planner's (kernels/gpus_test.go checks the file)
    shipped = bl.load_routes(os.path.join(BENCH, os.pardir, "kernels", "python", "xpuinject_kernels", "gpus", "h200.json"))
    assert bl.route_for(gemm("qkv", 2048, 2048, 3072), shipped).startswith("qkv_proj (")
    assert bl.route_for(gemm("down", 64, 8192, 2048), shipped).startswith("down_proj (")    # short: cuBLAS
    assert bl.route_for(gemm("down", 2048, 8192, 2048), shipped) == ""                        # prefill: ours
    assert bl.route_for(gemm("down", 1, 8192, 2048), shipped) == ""                           # decode: the GEMV


def test_render_marks_missed_targets_routed_or_not(tmp_path):
    """--render re-draws an earlier run's tables with the routes (no GPU), and refuses bad input."""
    rows = [
        {"kind": "gemm", "model": "llama-3.2-1b", "shape": "qkv:none M=2048", "check_ok": True, "rel_err": 1e-3,
         "ours_us": 50.0, "params": {"M": 2048, "K": 2048, "N": 3072, "proj": "qkv", "epilogue": "none"},
         "competitors": {"torch": {"status": "ok", "us": 35.0, "ratio": 0.7}}, "target": "missed",
         "target_desc": ">=0.95x cuBLAS", "target_value": 0.7},
        {"kind": "gemm", "model": "llama-3.2-1b", "shape": "gate_up:none M=2048", "check_ok": True, "rel_err": 1e-3,
         "ours_us": 210.0, "params": {"M": 2048, "K": 2048, "N": 16384, "proj": "gate_up", "epilogue": "none"},
         "competitors": {"torch": {"status": "ok", "us": 200.0, "ratio": 0.93}}, "target": "missed",
         "target_desc": ">=0.95x cuBLAS", "target_value": 0.93},
    ]
    run = {"command": "python3 benchmarks/run_all.py --out x", "ceilings": None, "cases": rows,
           "env": {"device": "NVIDIA H200", "date_utc": "2026-11-29T16:02:23Z", "torch": "2.11", "triton": "3.6",
                   "liger": "liger_kernel 0.8.5", "eager_reference": "transformers 5.17.0", "timer": "graph", "smoke": False}}
    src = tmp_path / "bench.json"
    src.write_text(json.dumps(run))
    routes = tmp_path / "routes.json"
    routes.write_text(json.dumps(ROUTES))
    out = tmp_path / "out"
    script = os.path.join(BENCH, "run_all.py")
    r = subprocess.run([sys.executable, script, "--render", str(src), "--routes", str(routes), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    md = (out / "bench.md").read_text()
    assert "vendor route: qkv_proj (qkv_proj K=2048 N=3072)" in md
    assert "0.93); not routed" in md
    # the view of every missed target and the route that covers it
    assert "| gemm | llama-3.2-1b | qkv:none M=2048 | >=0.95x cuBLAS: 0.70 | qkv_proj (qkv_proj K=2048 N=3072) |" in md
    assert "| >=0.95x cuBLAS: 0.93 | not routed |" in md
    res = json.loads((out / "bench.json").read_text())
    assert res["summary"]["targets_missed"] == 2 and res["summary"]["missed_routed"] == 1
    assert [row["route"] for row in csv.DictReader((out / "bench.csv").open())] == ["qkv_proj (qkv_proj K=2048 N=3072)", ""]
    assert "missed 2 (1 routed to the vendor path)" in r.stdout
    # bad inputs: a --routes file that is not a per-GPU data file, a --render file that is not a run
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    r = subprocess.run([sys.executable, script, "--render", str(src), "--routes", str(bad), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--routes" in r.stderr
    r = subprocess.run([sys.executable, script, "--render", str(routes), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "not a bench.json" in r.stderr


@pytest.mark.slow
def test_host_bench_smoke(tmp_path):
    """bench_host.py --smoke: each launcher and the torch call beside it run once and agree."""
    r = subprocess.run([sys.executable, os.path.join(BENCH, "bench_host.py"), "--smoke", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads((tmp_path / "host.json").read_text())["rows"]
    assert len(rows) == 6 and all(row["check_ok"] and "ours_us" not in row for row in rows)
    assert r.stdout.count("checked") == 6


def test_decode_step_bench_smoke(tmp_path):
    """benchmarks/bench_decode_step.py --smoke: every kernel case of a decode step and the
    whole-model paths run on a tiny shape under the interpreter, with no variant failing."""
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONUNBUFFERED="1", TRITON_INTERPRET="1")
    p = subprocess.run([sys.executable, os.path.join(BENCH, "bench_decode_step.py"), "--smoke", "--out", str(out),
                        "--batches", "2", "--parts", "kernels,model", "--routes", "planned,all-ours"],
                       capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads((out / "decode-step.json").read_text())
    cases = {r["case"].split(" ")[0] for r in res["kernels"]}
    assert {"qkv_proj", "o_proj", "gate_up_proj", "down_proj", "attention", "rope", "rms_norm", "add_rms_norm"} <= cases
    assert not [r for r in res["kernels"] if r.get("errors")], [r["errors"] for r in res["kernels"] if r.get("errors")]
    (row,) = res["model"]
    assert not row.get("errors") and set(row["ms"]) == {
        "stock_compiled", "stock_graph", "injected_graph[planned]", "injected_graph[all-ours]", "injected_compiled[gemms-cublas]"}


def test_routes_py_reproduces_the_shipped_gpu_data(tmp_path):
    """benchmarks/routes.py on the H200 run in docs/results writes exactly the routes and kept
    entries the package ships (gpus/h200.json): the data file is the benchmark's, not hand-made."""
    repo = os.path.join(BENCH, os.pardir)
    shipped = os.path.join(repo, "kernels", "python", "xpuinject_kernels", "gpus", "h200.json")
    out = tmp_path / "h200.json"
    out.write_text(open(shipped, encoding="utf-8").read())
    r = subprocess.run([sys.executable, os.path.join(BENCH, "routes.py"),
                        os.path.join(repo, "docs", "results", "2026-11-29-h200", "bench-v2.csv"), "--gpu", "h200",
                        "--device", "NVIDIA H200", "--date", "2026-11-29", "--bench-command",
                        "the predecessor of benchmarks/run_all.py (same cases, checks and timer) with --budget-s 365",
                        "--decode-step", os.path.join(repo, "docs", "results", "2026-12-01-h200", "decode-step-kernels-gemv.json"),
                        "--tune", os.path.join(repo, "docs", "results", "2026-12-02-h200", "tune-6.json"),
                        "--tune-config", os.path.join(repo, "docs", "results", "2026-12-02-h200", "qwen3-30b-a3b-8l",
                                                      "config.json"),
                        "--tune-model", "qwen3-30b-a3b", "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # decode attention priced with the K/V copies its SDPA route implies: no decode route
    assert "12 routes, 1 kept entries from 116 rows" in r.stdout
    routes = json.loads(out.read_text())["routes"]
    assert not [x for x in routes if x["op"] == "attention-decode"]
    # the tune's classes above decode size (its decode-sized ones are not priced): Qwen3-30B-A3B's
    # qkv and o projections to cuBLAS at short and long prefills, not at decode
    tuned = sorted((x["op"], x["tokens"]) for x in routes if x["source"].endswith("tune-6.json"))
    assert tuned == [("o_proj", "prefill"), ("o_proj", "short"), ("qkv_proj", "prefill"), ("qkv_proj", "short")]
    assert out.read_text() == open(shipped, encoding="utf-8").read()
    # a csv says nothing of where it was measured: routes.py asks
    r = subprocess.run([sys.executable, os.path.join(BENCH, "routes.py"),
                        os.path.join(repo, "docs", "results", "2026-11-29-h200", "bench-v2.csv"), "--gpu", "h200",
                        "--out", str(tmp_path / "x.json")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--device, --date and --bench-command" in r.stderr


def test_moe_bench_smoke(tmp_path):
    """benchmarks/bench_moe.py --smoke --sweep: both families' tiny blocks at a decode-path and a
    prefill-path token count; ours, grouped_mm and batched_mm each checked against the block's
    own experts loop, and ours at its default and each candidate launch config, nothing timed."""
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONUNBUFFERED="1", TRITON_INTERPRET="1")
    p = subprocess.run([sys.executable, os.path.join(BENCH, "bench_moe.py"), "--smoke", "--sweep", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads((out / "moe.json").read_text())
    assert [(r["shape"], r["tokens"]) for r in res["rows"]] == [
        ("qwen3-moe-tiny", 3), ("qwen3-moe-tiny", 19), ("mixtral-tiny", 3), ("mixtral-tiny", 19)]
    for r in res["rows"]:
        assert set(r["paths"]) == {"ours", "grouped_mm", "grouped_mm_compiled", "batched_mm"}
        assert r["paths"].pop("grouped_mm_compiled")["error"].startswith("not under --smoke")
        for name, path in r["paths"].items():
            assert path["check_ok"] and path["rel_err"] < 1e-2 and "ms" not in path, (r["shape"], name, path)
        assert r["routing_match"] == 1.0
        sw = r["sweep"]
        assert sw["path"] == ("decode" if r["tokens"] <= 8 else "prefill") and sw["kernel"] == "moe." + sw["path"]
        labels = [c["label"] for c in sw["configs"]]
        assert labels[0] == "default" and labels.count("candidate") == 2, labels
        # the candidates' configs reached the launcher: each differs from the default and passed
        assert len({json.dumps(c["config"], sort_keys=True) for c in sw["configs"]}) == 3
        for c in sw["configs"]:
            assert c["check_ok"] and c["rel_err"] < 1e-2 and "ms" not in c, (r["shape"], r["tokens"], c)
        assert "best" not in sw  # nothing timed, nothing to write as tuned
    md = (out / "moe.md").read_text()
    assert "| qwen3-moe-tiny | 19 |" in md and "| qwen3-moe-tiny | 19 | prefill | ok |" in md
    bad = subprocess.run([sys.executable, os.path.join(BENCH, "bench_moe.py"), "--smoke", "--out", str(out),
                          "--shapes", "qwen3-30b-a3b"], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert bad.returncode == 2 and "unknown shape 'qwen3-30b-a3b'" in bad.stderr  # full shapes are not smoke shapes


@pytest.mark.parametrize("layout,args,says", [
    ("nmajor", [], "ours reads the experts N-major"),
    ("blocked", ["--slab", "8"], "ours reads the experts blocked, 8 columns a tile"),
])
def test_moe_bench_reads_other_expert_layouts(tmp_path, layout, args, says):
    """--experts-layout nmajor / blocked: ours on N-major or blocked copies of the packed experts
    passes the same checks at both paths and every decode candidate, and says so; never written
    as tuned."""
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONUNBUFFERED="1", TRITON_INTERPRET="1")
    p = subprocess.run([sys.executable, os.path.join(BENCH, "bench_moe.py"), "--smoke", "--sweep", "--out", str(out),
                        "--shapes", "qwen3-moe-tiny", "--tokens", "3,19", "--experts-layout", layout, *args],
                       capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    if layout == "blocked":
        assert "gate/up (6, 6, 64, 8), down (6, 8, 24, 8)" in p.stderr + p.stdout
    res = json.loads((out / "moe.json").read_text())
    assert res["experts_layout"] == layout and [r["tokens"] for r in res["rows"]] == [3, 19]
    for r in res["rows"]:
        assert r["paths"]["ours"]["check_ok"] and all(c["check_ok"] for c in r["sweep"]["configs"])
    assert says in (out / "moe.md").read_text()
    bad = subprocess.run([sys.executable, os.path.join(BENCH, "bench_moe.py"), "--out", str(out), "--sweep",
                          "--experts-layout", layout, "--write-tuned", str(tmp_path / "x.json")],
                         capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert bad.returncode == 2 and f"not with --experts-layout {layout}" in bad.stderr


def test_moe_bench_write_tuned(tmp_path):
    """--write-tuned FILE --from-json: each swept case's best config goes into the data file's
    "tuned" section under the key moe.launch_config looks up; entries of other kernels and keys
    stay, one of the same kernel and key is replaced; a sweep with nothing timed writes nothing."""
    sh = dict(family="qwen3_moe", hidden=2048, experts=128, top_k=8, inter=768)
    best = dict(BLOCK_N=64, BLOCK_K=128, SPLIT_K=2, DOWN_BLOCK_N=64, DOWN_BLOCK_K=128, DOWN_SPLIT_K=1,
                num_warps=4, num_stages=3)
    row = dict(shape="qwen3-30b-a3b", tokens=5, params=sh,
               sweep=dict(path="decode", kernel="moe.decode",
                          best=dict(config=best, ms=0.02, GBps=3800.0, default_ms=0.025, speedup_vs_default=1.25)))
    untimed = dict(row, tokens=2048, sweep=dict(path="prefill", kernel="moe.prefill", configs=[]))
    run = tmp_path / "moe.json"
    env_ = dict(device="NVIDIA H200", date_utc="2026-12-01T19:00:00Z")
    run.write_text(json.dumps(dict(command="bench_moe.py --sweep", env=env_, rows=[row, untimed])))
    key = dict(hidden=2048, inter=768, experts=128, top_k=8, tokens=8)
    gemv = dict(kernel="gemv", key=dict(epilogue="none", k=2048, n=3072), config=dict(BLOCK_N=64))
    data = tmp_path / "gpu.json"
    data.write_text(json.dumps(dict(gpu="h200", devices=["NVIDIA H200"], routes=[{"kernel": "gemm"}],
                                    tuned=[gemv, dict(kernel="moe.decode", key=key, config=dict(BLOCK_N=16))])))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.run([sys.executable, os.path.join(BENCH, "bench_moe.py"), "--out", str(tmp_path / "o"),
                        "--write-tuned", str(data), "--from-json", str(run)],
                       capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(data.read_text())
    assert got["routes"] == [{"kernel": "gemm"}] and got["tuned"][0] == gemv
    assert [(e["kernel"], e["key"], e["config"]) for e in got["tuned"][1:]] == [("moe.decode", key, best)]
    assert got["tuned"][1]["measured"]["ms"] == 0.02 and got["tuned"][1]["date"] == "2026-12-01"
    assert got["tuned"][1]["source"] == os.path.relpath(run, ROOT)
    bad = subprocess.run([sys.executable, os.path.join(BENCH, "bench_moe.py"), "--out", str(tmp_path / "o"),
                          "--write-tuned", str(data)], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert bad.returncode == 2 and "needs --sweep" in bad.stderr
    run.write_text(json.dumps(dict(env={}, rows=[untimed])))
    none = subprocess.run([sys.executable, os.path.join(BENCH, "bench_moe.py"), "--out", str(tmp_path / "o"),
                           "--write-tuned", str(data), "--from-json", str(run)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert none.returncode == 1 and "no swept case has a timed best config" in none.stdout
    assert json.loads(data.read_text()) == got


def test_moe_bench_tables_of_a_timed_run():
    """The tables a GPU run writes (nothing is timed under --smoke): ours with GB/s, share of the
    copy bandwidth and distance to the roofline, stock with its ratio and GB/s, the sweep's best
    beside the default; a failed or unrunnable config is said so."""
    bm = load("bench_moe")
    sh = bm.SHAPES["qwen3-30b-a3b"]
    active = bm.active_bytes(sh, 1, 8)
    roof = active / bm.ROOFLINE_BPS * 1e3
    ours = dict(rel_err=1e-3, check_ok=True, ms=0.03, timer="graph", GBps=active / 0.03e-3 / 1e9, bw_frac=0.5,
                x_roofline=0.03 / roof)
    stock = dict(rel_err=0.0, check_ok=True, ms=0.06, timer="graph", GBps=active / 0.06e-3 / 1e9, ratio=2.0)
    default = dict(label="default", config=dict(BLOCK_N=64), ms=0.03, GBps=ours["GBps"], check_ok=True)
    best = dict(label="candidate", config=dict(BLOCK_N=32, SPLIT_K=2), ms=0.025, GBps=active / 0.025e-3 / 1e9,
                check_ok=True)
    sweep = dict(path="decode", kernel="moe.decode", default=default["config"],
                 configs=[best, default, dict(label="candidate", config=dict(BLOCK_N=128), error="OutOfResources: x")],
                 best=dict(config=best["config"], ms=0.025, GBps=best["GBps"], default_ms=0.03, speedup_vs_default=1.2))
    row = dict(shape="qwen3-30b-a3b", tokens=1, params=sh, experts_hit=8.0, active_bytes=active, roofline_ms=roof,
               routing_match=1.0, ours_routing_ms=0.012, paths=dict(ours=ours, grouped_mm=stock, batched_mm=dict(error="too big"),
                                             grouped_mm_compiled=dict(stock, ms=0.04, ratio=4 / 3,
                                                                      GBps=active / 0.04e-3 / 1e9)),
               sweep=sweep)
    t = bm.table([row])
    assert f"| {roof:.4f} | 100 % | 0.0300 ({ours['GBps']:.0f} GB/s, 50 %, {0.03 / roof:.2f}x roofline) | 0.0120 | " \
           f"0.0600 (2.00x, {stock['GBps']:.0f} GB/s) | 0.0400 (1.33x, {active / 0.04e-3 / 1e9:.0f} GB/s) | " \
           "cannot run |" in t, t
    assert "- qwen3-30b-a3b tokens 1, batched_mm: too big" in t
    st = bm.sweep_table([row])
    assert (f"| qwen3-30b-a3b | 1 | decode | 0.0300 ({default['GBps']:.0f}) | 0.0250 ({best['GBps']:.0f}) | 1.20x | "
            "BLOCK_N=32 SPLIT_K=2 | 2 / 3 |") in st, st
    ent = bm.tuned_entries(dict(env=dict(date_utc="2026-12-02T01:00:00Z"), command="c", rows=[row]))
    assert [(e["kernel"], e["key"], e["config"]) for e in ent] == [
        ("moe.decode", dict(hidden=2048, inter=768, experts=128, top_k=8, tokens=1), best["config"])]


@in_process_smoke
def test_moe_bench_check_fails_on_wrong_output():
    """The check is not vacuous: experts weights 10% off make ours fail it, the stock paths pass."""
    bm = load("bench_moe")
    env = bl.setup(types.SimpleNamespace(smoke=True, cache_dir=None, timer="graph", rep_ms=1.0), competitors=False)
    from xpuinject_kernels import packing
    from xpuinject_kernels.contract import packed_attr

    sh = bm.SMOKE_SHAPES["qwen3-moe-tiny"]
    m, cfg = bm.block(env, sh)
    packing.pack(m, "SparseMoE")
    rw, gu, dn = (getattr(m, packed_attr("SparseMoE", r)) for r in ("router_weight", "gate_up_weight", "down_weight"))
    row = bm.run_case(env, "qwen3-moe-tiny", sh, 5, (m, cfg, rw, gu * 1.1, dn))
    assert not row["paths"]["ours"]["check_ok"], row["paths"]["ours"]
    assert row["paths"]["grouped_mm"]["check_ok"] and row["paths"]["batched_mm"]["check_ok"]
    assert cfg._experts_implementation == "eager"  # set back after each path


def test_moe_bench_active_bytes():
    bm = load("bench_moe")
    # Qwen3-30B-A3B, one token hitting 8 experts: router 2048 x 128, 8 x (gate, up, down) of
    # 2048 x 768, one row in and out, bf16
    assert bm.active_bytes(bm.SHAPES["qwen3-30b-a3b"], 1, 8) == 2 * (2048 * 128 + 8 * 3 * 2048 * 768 + 2 * 2048)
    # batched_mm at 2048 Mixtral tokens: 4096 pairs x 3 x 4096 x 14336 bf16 values, ~1.4 TB
    assert bm.batched_mm_bytes(bm.SHAPES["mixtral-8x7b"], 2048) == 4096 * 3 * 4096 * 14336 * 2


def test_l2_prefetch_bench_needs_a_gpu_and_its_kernels_compile_for_hopper():
    """benchmarks/bench_l2_prefetch.py is GPU-only: without CUDA it exits 2 and says so. Its
    kernels compile for sm_90 offline (Triton's CUDA backend, no device): the prefetch launch
    asks L2 for lines before its PDL wait, so it can start while the kernel ahead of it runs, and
    the stream kernel's loads carry the evict_first policy its rows compare."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TRITON_INTERPRET="0")
    p = subprocess.run([sys.executable, os.path.join(BENCH, "bench_l2_prefetch.py")], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 2 and "needs a CUDA GPU" in p.stderr, p.stderr
    # compiled in a process of its own: here TRITON_INTERPRET=1 makes every kernel an interpreted one
    code = """
import sys, triton
from triton.backends.compiler import GPUTarget
sys.path.insert(0, sys.argv[1])
import bench_l2_prefetch as mod
target = GPUTarget("cuda", 90, 32)
def ptx(fn, sig, consts):
    src = triton.compiler.ASTSource(fn=fn, signature={**sig, **{k: "constexpr" for k in consts}}, constexprs=consts)
    return triton.compile(src, target=target).asm["ptx"]
pre = ptx(mod._prefetch_kernel, {"ptr": "*bf16", "nbytes": "i64"}, {"PDL": True, "BLOCK": 512})
st = ptx(mod._stream_kernel, {"ptr": "*bf16", "out": "*fp32", "n": "i64"}, {"FIRST": True, "BLOCK": 2048, "PDL": True})
busy = ptx(mod._busy_kernel, {"ns": "i64"}, {"PDL": True})
print(pre.find("prefetch.global.L2::evict_last"), pre.find("griddepcontrol.wait"), "evict_first" in st,
      "%globaltimer" in busy)
"""
    p = subprocess.run([sys.executable, "-c", code, BENCH], capture_output=True, text=True, timeout=300,
                       env=dict(env, PYTHONPATH=os.path.join(ROOT, "kernels", "python")))
    assert p.returncode == 0, p.stderr[-3000:]
    first_prefetch, wait, evict_first, timer = p.stdout.split()
    assert 0 <= int(first_prefetch) < int(wait), p.stdout
    assert evict_first == "True" and timer == "True", p.stdout


@in_process_smoke
def test_launch_floor_barrier_probe_reads_both_buffers_and_advances_its_counters():
    """bench_launch_floor.py --barrier's kernel, one program (the interpreter runs programs one by
    one, so a grid of more would wait on itself): it sums a then b across its barriers, program 0's
    step between them doubles tx, each barrier's counter grows by the grid, none gives up."""
    mod = load("bench_launch_floor")
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3000, generator=g).to(torch.bfloat16)
    b = torch.randn(5000, generator=g).to(torch.bfloat16)
    tx = torch.randn(64, generator=g).to(torch.bfloat16)
    ty = torch.zeros_like(tx)
    sink = torch.zeros(4)
    cnt = torch.zeros(2, dtype=torch.int32)
    spins = torch.zeros(1, dtype=torch.int32)
    want = a.float().sum() + b.float().sum()
    for early, tiny, counts in ((0, False, [1, 0]), (2, False, [2, 0]), (1, True, [3, 1])):
        mod.barrier_read(a, b, sink, cnt, spins, tx, ty, 1, 512, False, early, tiny)
        assert torch.allclose(sink[0], want, rtol=1e-5, atol=1e-3), (early, tiny, sink[0], want)
        assert cnt.tolist() == counts and spins.item() == 0, (early, tiny, cnt, spins)
    assert torch.equal(ty, tx * 2)


def test_launch_floor_barrier_compiles_for_hopper_with_a_poll_that_reloads():
    """The barrier's poll is an acquire load inside the loop (a volatile load's poll was hoisted out of
    it and spins on a stale value) and its arrival an acq_rel atomic, compiled for sm_90 offline."""
    code = """
import sys, triton
from triton.backends.compiler import GPUTarget
sys.path.insert(0, sys.argv[1])
import bench_launch_floor as mod
sig = {"a": "*bf16", "b": "*bf16", "out": "*fp32", "na": "i32", "nb": "i32", "cnt": "*i32", "spins": "*i32",
       "tx": "*bf16", "ty": "*bf16"}
consts = {"BLOCK": 2048, "STAGES": 3, "PDL": True, "EARLY": 2, "TINY": True, "TINY_N": 2048, "SPIN_MAX": 1 << 16}
src = triton.compiler.ASTSource(fn=mod._barrier_kernel, signature={**sig, **{k: "constexpr" for k in consts}},
                                constexprs=consts)
ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
print(ptx.count("atom.global.gpu.acq_rel.add"), ptx.count("ld.global.gpu.acquire"))
"""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TRITON_INTERPRET="0", PYTHONPATH=os.path.join(ROOT, "kernels", "python"))
    p = subprocess.run([sys.executable, "-c", code, BENCH], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    arrive, poll = (int(v) for v in p.stdout.split())
    assert arrive >= 2 and poll == 2, p.stdout  # two barriers, each with its poll


def test_smoke_refuses_a_process_that_imported_triton_without_the_interpreter():
    """--smoke switches the interpreter on only before triton is imported: after, this process's
    kernels would be compiled ones and interpreted ones mixed, so setup refuses and says why."""
    code = ("import sys, types, triton; sys.path.insert(0, sys.argv[1]); import benchlib as bl; "
            "print(bl.setup(types.SimpleNamespace(smoke=True, cache_dir=None), competitors=False))")
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=os.path.join(ROOT, "kernels", "python"))
    p = subprocess.run([sys.executable, "-c", code, BENCH], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0 and p.stdout.strip() == "None", p.stderr
    assert "--smoke needs the Triton interpreter from the start" in p.stderr


def test_fused_norm_bench_needs_a_gpu():
    """benchmarks/bench_fused_norm.py is GPU-only: without CUDA it exits 2 and says so (its
    kernels are the package's own, which the kernel tests and compile checks cover)."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TRITON_INTERPRET="0")
    p = subprocess.run([sys.executable, os.path.join(BENCH, "bench_fused_norm.py")], capture_output=True, text=True,
                       timeout=120, env=dict(env, PYTHONPATH=os.path.join(ROOT, "kernels", "python")))
    assert p.returncode == 2 and "needs a CUDA GPU" in p.stderr, p.stderr


def test_step_configs_forces_one_kernels_config_and_puts_the_data_back(monkeypatch):
    """benchmarks/step_configs.py: a candidate reaches the launcher whose problem matches --key
    (moe.launch_config returns it, counted as a tuned launch), a problem the key does not match
    keeps its own config, and after the block the GPU data and the launchers' caches are as
    before. Its candidates are the launch configs the MoE and GEMV sweeps time."""
    from xpuinject_kernels import gemv, gpus, moe

    sc = load("step_configs")
    data = {"tuned": [{"kernel": "moe.decode", "key": {"hidden": 64}, "config": dict(
        BLOCK_N=16, BLOCK_K=16, SPLIT_K=1, DOWN_BLOCK_N=16, DOWN_BLOCK_K=16, DOWN_SPLIT_K=1, num_warps=4,
        num_stages=1)}]}
    # this test's fake GPU data, configs and counts stay in it: other tests launch these shapes
    # and read the process's counts
    monkeypatch.setattr(gpus, "device_data", lambda device: data)
    monkeypatch.setattr(moe, "_CONFIGS", {})
    monkeypatch.setattr(gemv, "_BEST", {})
    monkeypatch.setattr(gpus, "_heuristic_classes", [])
    monkeypatch.setattr(_backend, "launch_counts", collections.Counter())
    shipped = list(data["tuned"])
    cpu = torch.device("cpu")
    own = moe.launch_config("decode", cpu, 64, 24, 6, 2, 1)
    other = moe.launch_config("decode", cpu, 80, 24, 6, 2, 1)
    cand = sc.candidates("moe.decode")[1]
    with sc.forced("xpuinject_kernels", cpu, "moe.decode", sc.parse_key("hidden=64,tokens=1"), cand) as took:
        assert moe.launch_config("decode", cpu, 64, 24, 6, 2, 1) == cand
        assert moe.launch_config("decode", cpu, 80, 24, 6, 2, 1) == other
        assert took() == 1
    assert data["tuned"] == shipped and not moe._CONFIGS
    assert moe.launch_config("decode", cpu, 64, 24, 6, 2, 1) == own
    assert set(cand) == set(moe.DECODE_KEYS)
    # the EW candidates carry their switches, and only where on
    ew = [c for c in sc.candidates("moe.decode") if set(c) != set(moe.DECODE_KEYS)]
    assert ew and all(set(c) - set(moe.DECODE_KEYS) <= set(moe.DECODE_FLAGS) and 0 not in c.values() for c in ew)
    keys = {"BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages"}
    gv = sc.candidates("gemv")
    assert all(set(c) == keys or (set(c) == keys | {"EW"} and c["EW"] == 1) for c in gv)
    assert sum(set(c) == keys for c in gv) == 2 * len(load("tune").GEMV) and any("EW" in c for c in gv)
    assert sc.parse_key("epilogue=none,k=2048") == {"epilogue": "none", "k": 2048}
    ew_only = sc.select(sc.candidates("moe.decode"), {"EW": 1})
    assert ew_only and all(c["EW"] == 1 for c in ew_only)
    assert sc.select(gv, {"EW": 0}) == [c for c in gv if "EW" not in c]
    with pytest.raises(ValueError, match="--only EW=2: no candidate has it"):
        sc.select(gv, {"EW": 2})
    with pytest.raises(ValueError, match="'k' is not name=value"):
        sc.parse_key("k")
    with pytest.raises(ValueError, match="want one of moe.decode, gemv"):
        sc.candidates("attention")
    monkeypatch.setattr(gpus, "device_data", lambda device: None)
    with pytest.raises(RuntimeError, match="no GPU data for this GPU"):
        with sc.forced("xpuinject_kernels", cpu, "moe.decode", {}, cand):
            pass


def test_step_configs_pointer_twins_pair_each_dot_candidate_with_its_pointer_loads():
    """--pointer-twins: each gemv dot candidate followed by itself with PTR=1 (a flag the gemv
    launcher takes), EW candidates alone; --only PTR=1 keeps just the twins."""
    from xpuinject_kernels import gemv

    sc = load("step_configs")
    cands = sc.candidates("gemv")
    twins = sc.pointer_twins(cands)
    dots = [c for c in cands if not c.get("EW")]
    assert len(twins) == len(cands) + len(dots) and "PTR" in gemv.CONFIG_FLAGS
    i = twins.index(dots[0])
    assert twins[i + 1] == dict(dots[0], PTR=1)
    assert all(not c.get("PTR") for c in twins if c.get("EW"))
    assert sc.select(twins, {"PTR": 1}) == [dict(c, PTR=1) for c in dots]


def test_step_configs_adopts_gpu_data_on_a_gpu_without_a_file(monkeypatch):
    """On a GPU no data file names, step_configs' shipped step runs on another card's tuned
    entries (--gpu-data h200) or on none, registered for both spellings of the device so the
    candidates can override them; a file that does not exist is named with those that do. A GPU
    with a file keeps its own."""
    from xpuinject_kernels import gpus

    sc = load("step_configs")
    monkeypatch.setattr(gpus, "_by_device", {})
    dev = torch.device("cpu")
    h200 = json.loads((gpus._DIR / "h200.json").read_text(encoding="utf-8"))["tuned"]
    assert h200
    label = sc.adopt_data("xpuinject_kernels", dev, "h200")
    assert label == "gpus/h200.json's tuned configs (borrowed)"
    data = gpus._by_device[("cpu", None)]
    assert gpus._by_device[("cpu", 0)] is data and data["tuned"] == h200
    # a second call keeps what the first registered
    assert sc.adopt_data("xpuinject_kernels", dev, "") == label
    monkeypatch.setattr(gpus, "_by_device", {})
    assert sc.adopt_data("xpuinject_kernels", dev, "") == "no tuned configs (heuristics)"
    assert gpus._by_device[("cpu", 0)]["tuned"] == []
    monkeypatch.setattr(gpus, "_by_device", {})
    with pytest.raises(ValueError, match=r"--gpu-data a100: no a100.json in .*\(have: h100, h200\)"):
        sc.adopt_data("xpuinject_kernels", dev, "a100")
    own = {"file": "gpus/h200.json", "tuned": []}
    monkeypatch.setattr(gpus, "device_data", lambda device: own)
    assert sc.adopt_data("xpuinject_kernels", dev, "") == "gpus/h200.json"


def test_step_configs_needs_a_gpu(tmp_path):
    """benchmarks/step_configs.py without CUDA exits 2 and says so, after checking its arguments."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TRITON_INTERPRET="0",
               PYTHONPATH=os.path.join(ROOT, "kernels", "python"))
    p = subprocess.run([sys.executable, os.path.join(BENCH, "step_configs.py"), str(tmp_path), str(tmp_path),
                        "--kernel", "gemv"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 2 and "needs a CUDA GPU" in p.stderr, p.stderr
    p = subprocess.run([sys.executable, os.path.join(BENCH, "step_configs.py"), str(tmp_path), str(tmp_path),
                        "--kernel", "gemv", "--key", "k"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode != 0 and "'k' is not name=value" in p.stderr, p.stderr


def test_ab_step_times_each_variant_in_its_own_process(tmp_path, llama_odd_run):
    """benchmarks/ab_step.py: every variant's environment reaches its own profile_decode.py process
    (TRITON_INTERPRET=0 there: no Triton driver on this machine, so that variant fails, said so,
    while the other is timed), the table and the JSON hold what each round measured."""
    out = tmp_path / "ab.json"
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "kernels", "python"), os.path.join(ROOT, "harness", "python")]))
    p = subprocess.run([sys.executable, os.path.join(BENCH, "ab_step.py"), os.path.join(ROOT, "testdata", "fixtures", "llama-odd"),
                        str(llama_odd_run), "--variant", "base", "--variant", "compiled:TRITON_INTERPRET=0", "--rounds", "1",
                        "--steps", "1", "--context", "8", "--device", "cpu", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 1, p.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["variants"] == {"base": {}, "compiled": {"TRITON_INTERPRET": "0"}}
    [ms] = res["ms"]["base"]["1"]
    assert ms > 0 and res["ms"]["compiled"]["1"] == [] and list(res["errors"]) == ["compiled"]
    assert f"round 1 base: batch 1 {ms:.4f} ms" in p.stdout and "round 1 compiled: failed: exit 1" in p.stdout
    assert f"batch 1 {ms:.4f} ms (1.000x)" in p.stdout and "batch 1 -" in p.stdout


def test_ab_step_rejects_bad_variants(tmp_path, capsys):
    ab = load("ab_step")
    assert ab.parse_variant("nm:XPUINJECT_NMAJOR=1,XPUINJECT_PDL=0") == (
        "nm", {"XPUINJECT_NMAJOR": "1", "XPUINJECT_PDL": "0"})
    assert [ab.order(["a", "b", "c"], r) for r in range(4)] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"],
                                                                 ["a", "b", "c"]]
    for argv, want in (
        (["--variant", "a:nmajor=1"], "'nmajor=1' is not VAR=VALUE"),
        (["--variant", "a:XPUINJECT_PDL"], "'XPUINJECT_PDL' is not VAR=VALUE"),
        (["--variant", "a b"], "want NAME or NAME:VAR=VALUE"),
        (["--variant", "a", "--variant", "a:XPUINJECT_PDL=0"], "names repeat (a, a)"),
        (["--variant", "a", "--rounds", "0"], "want at least 1"),
    ):
        with pytest.raises(SystemExit) as e:
            ab.main([str(tmp_path), str(tmp_path)] + argv)
        assert e.value.code == 2 and want in capsys.readouterr().err, argv
    with pytest.raises(SystemExit):
        ab.main([str(tmp_path / "none"), str(tmp_path), "--variant", "a"])
    assert "MODEL_DIR " + str(tmp_path / "none") + ": not a folder" in capsys.readouterr().err


def test_profile_decode_charges_each_kernel_its_critical_path_share(monkeypatch):
    """profile_decode.critical_path: kernels in end order, each charged end - max(previous end,
    own start); a kernel that starts early (PDL) adds only past the previous end, one that starts
    after a gap its own time; the per-launch medians over equal steps."""
    monkeypatch.syspath_prepend(BENCH)
    pd = load("profile_decode")
    cuda = torch.autograd.DeviceType.CUDA

    def ev(name, start, end):
        return types.SimpleNamespace(name=name, device_type=cuda, device_time=end - start,
                                     time_range=types.SimpleNamespace(start=start, end=end))

    host = types.SimpleNamespace(name="aten::mm", device_type=torch.autograd.DeviceType.CPU, device_time=0,
                                 time_range=types.SimpleNamespace(start=0, end=99))
    # step 1: a 0-10, b launched early at 2 ends 14 (+4), c 14-20 (+6); a host gap; step 2: a
    # 100-112, b early at 101 ends 115 (+3), c 116-120 (starts after b: its own 4)
    events = [ev("a", 0, 10), ev("b", 2, 14), ev("c", 14, 20), host,
              ev("a", 100, 112), ev("b", 101, 115), ev("c", 116, 120)]
    rows, seq = pd.critical_path(types.SimpleNamespace(events=lambda: events), 2)
    got = {r["name"]: (r["us_per_step"], r["calls_per_step"]) for r in rows}
    assert got == {"a": (11.0, 1.0), "b": (3.5, 1.0), "c": (5.0, 1.0)}
    assert [r["name"] for r in rows] == ["a", "c", "b"]
    assert seq == [("a", 11.0), ("b", 3.5), ("c", 5.0)]
    # launches that do not split into equal steps: no sequence, the totals still
    rows, seq = pd.critical_path(types.SimpleNamespace(events=lambda: events[:-1]), 2)
    assert seq == [] and sum(r["us"] for r in rows) == 10 + 4 + 6 + 12 + 3
