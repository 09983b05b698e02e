"""The helper processes that compile the latency stage's compiled paths ahead: when the eval starts
them, what a helper runs (the latency code itself, on its own side's compiled path and the
driver's points), and the driver's side of the protocol (jobs in, results or reasons out)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "testdata" / "fixtures"
sys.path.insert(0, str(ROOT / "harness" / "python"))
import compile_helpers as H  # noqa: E402
import latency as L  # noqa: E402


def args(**kw):
    base = dict(compile_ahead="on", latency="auto", device="cuda", prefill="512", decode_batches="1",
                decode_steps=100, latency_points="quick", seed=0)
    return SimpleNamespace(**{**base, **kw})


def test_helpers_start_only_for_compiled_paths_of_a_single_gpu_process(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert H.wanted(args(), 1) == ""
    assert H.wanted(args(latency="graph"), 1) == ""
    assert "off" in H.wanted(args(compile_ahead="off"), 1)
    assert "no compiled path" in H.wanted(args(latency="eager"), 1)
    assert "no compiled path" in H.wanted(args(latency="off"), 1)
    assert "pipeline" in H.wanted(args(), 2)
    assert "CPU" in H.wanted(args(device="cpu"), 1)
    assert "levit" in H.wanted(args(), 1, "levit")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert "CPU" in H.wanted(args(device="auto"), 1)


def test_a_helper_runs_its_sides_paths_in_the_drivers_order_up_to_the_compiled_one():
    graph = L.LATENCY_PATHS["graph"]  # stock_compiled, stock_graph, injected_graph, injected_compiled
    assert H.side_paths(graph, "stock") == ["stock_compiled"]
    assert H.side_paths(graph, "injected") == ["injected_graph", "injected_compiled"]
    both = L.LATENCY_PATHS["both"]
    assert H.side_paths(both, "stock") == ["stock_eager", "stock_compiled"]
    assert H.side_paths(both, "injected") == ["injected_graph", "injected_compiled"]
    assert H.side_paths(L.LATENCY_PATHS["eager"], "stock") == []


def test_a_job_shares_the_points_and_the_static_cache_size_and_times_one_call():
    a = args(prefill="512,2048", decode_batches="1,8", decode_steps=64)
    assert H.job_args(a) == {"prefill": "512,2048", "decode_batches": "1,8", "decode_steps": 64,
                             "latency_points": "quick", "seed": 0, "repeats": 1}


def test_memory_plan_keeps_the_margin_and_skips_what_does_not_fit(monkeypatch):
    import torch

    gb = 1 << 30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (40 * gb, 100 * gb))
    cuda = SimpleNamespace(type="cuda")
    # 40 GB free less a 10 GB margin: 30 GB for helpers at 1.5x their model
    fit, why = H.memory_plan(cuda, {"stock": 12 * gb, "injected": 12 * gb})
    assert fit == ["stock"] and set(why) == {"injected"}
    assert why["injected"].startswith("18.0 GiB needed, 12.0 GiB free")
    fit, why = H.memory_plan(cuda, {"stock": 8 * gb, "injected": 8 * gb})
    assert fit == ["stock", "injected"] and why == {}
    assert H.memory_plan(SimpleNamespace(type="cpu"), {"stock": 1}) == (["stock"], {})


@pytest.mark.parametrize("side", ["stock", "injected"])
def test_a_helper_runs_the_latency_code_on_its_own_compiled_path(llama_odd_run, monkeypatch, side):
    """In process, on the CPU (the kernels interpreted; dynamo's compile replaced by the function
    itself, inductor being out of reach): a helper loads its side as the driver does, generates
    under the graph runtime at the driver's prompt shape, and runs each point of its compiled path
    once through the latency stage's own code."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    compiled = []
    monkeypatch.setattr(L.Paths, "compile", staticmethod(lambda fn: compiled.append(fn) or fn))
    job = {"side": side, "model": str(FIXTURES / "llama-odd"), "package": str(llama_odd_run / "package"),
           "packed": str(llama_odd_run / "packed"), "device": "cpu", "dtype": "bfloat16",
           "paths": [H.SIDES[side]], "runtime_generation": {"prompts": 2, "length": 8, "new_tokens": 3},
           "args": {"prefill": "8", "decode_batches": "1" if side == "stock" else "", "decode_steps": 2,
                    "latency_points": "quick", "seed": 0, "repeats": 1}}
    out = H.run_job(job)
    assert out["path"] == H.SIDES[side]
    want = ["prefill 8", "decode batch 1"] if side == "stock" else ["prefill 8"]
    assert [p["point"] for p in out["points"]] == want
    assert "errors" not in out, out
    assert all(p["setup_s"] >= 0 for p in out["points"])
    assert out["runtime_generation_s"] > 0  # the graph runtime's generation ran first
    # one compiled function per point: the prefill's forward, the decode step
    assert len(compiled) == len(want)


def test_the_protocol_reports_each_helpers_result_or_why_it_had_none():
    hs = H.Helpers.start(("stock", "injected"))
    missing = str(ROOT / "no-such-model")
    job = {"side": "stock", "model": missing, "package": missing, "packed": missing, "device": "cpu",
           "dtype": "float32", "paths": ["stock_compiled"], "args": H.job_args(args())}
    hs.send({"stock": job}, {"injected": "not enough memory"})
    got = hs.wait(timeout=120)["helpers"]
    by = {h["side"]: h for h in got}
    assert by["injected"] == {"side": "injected", "skipped": "not enough memory"}
    assert "error" in by["stock"] and "no-such-model" in by["stock"]["error"], by["stock"]
    for p, _ in hs.procs.values():
        assert p.returncode == 0  # a failed job is a result, not a crash


def test_waiting_on_helpers_never_given_a_job_ends_them_at_once():
    hs = H.Helpers.start(("stock",))
    got = hs.wait(timeout=120)["helpers"]
    assert got == [{"side": "stock", "skipped": "the eval gave it no job"}]
    assert hs.procs["stock"][0].returncode == 0
