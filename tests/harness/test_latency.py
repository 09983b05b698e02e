"""The latency stage's one timer: every decode path (stock and injected; eager, graph runtime and
torch.compile) is timed by the same loop with the same step count, warm-up and syncs. A fake clock
that advances by 1 ms per model forward makes each path's figure exactly 1.0 ms per token, so a
path that ran a step more or less inside its timed loop (or synced differently) would show."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import transformers

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness" / "python"))
import latency as L  # noqa: E402
from xpuinject_kernels import runtime as rt  # noqa: E402


def test_time_decode_runs_warmup_then_n_steps_between_syncs(monkeypatch):
    events, now = [], [0.0]

    def step():
        events.append("step")
        now[0] += 0.002

    def clock():
        events.append("clock")
        return now[0]

    monkeypatch.setattr(L, "clock", clock)
    ms = L.time_decode(step, 5, 2, lambda: events.append("sync"))
    assert events == ["step"] * 2 + ["sync", "clock"] + ["step"] * 5 + ["sync", "clock"]
    assert ms == pytest.approx(2.0)
    with pytest.raises(ValueError, match="n must be positive"):
        L.time_decode(step, 0, 1, lambda: None)


def test_every_decode_path_is_timed_by_the_same_loop(monkeypatch):
    model = transformers.AutoModelForCausalLM.from_pretrained(ROOT / "testdata" / "fixtures" / "llama-tiny").eval()
    now, syncs = [0.0], {}
    model.register_forward_pre_hook(lambda *_: now.__setitem__(0, now[0] + 1e-3))
    monkeypatch.setattr(L, "clock", lambda: now[0])
    current = []
    monkeypatch.setattr(L, "device_sync", lambda device: lambda: syncs.__setitem__(current[0], syncs.get(current[0], 0) + 1))

    class Runtime(rt.Runtime):  # no device graphs on the CPU: the runtime's eager steps
        def __init__(self, m, graphs="auto"):
            super().__init__(m, graphs=False)

    paths = L.Paths(model, model, SimpleNamespace(Runtime=Runtime, cache_bucket=rt.cache_bucket, static_cache=rt.static_cache), {})
    paths.compile = lambda fn: fn  # inductor is out of reach on the CPU; the compiled path's step code still runs
    ids = torch.randint(3, 500, (2, 8), generator=torch.Generator().manual_seed(0))
    n = 4
    cache_len = rt.cache_bucket(ids.shape[1] + 2 * L.WARMUP + n + 1)
    got = {}
    for path in L.LATENCY_PATHS["both"]:
        current[:] = [path]
        got[path] = L.decode_point(paths, path, ids, model.config, cache_len, n)
    assert set(got) == {"stock_eager", "stock_compiled", "stock_graph", "injected_graph", "injected_compiled",
                        "injected_eager"}
    for path, (ms, _) in got.items():
        assert ms == pytest.approx(1.0), f"{path}: {ms} ms: not one forward per timed step"
    assert set(syncs.values()) == {3}, syncs  # set-up, then before and after the timed loop, for every path
    assert paths.errors == {}


def test_ratios_put_the_default_path_against_the_anchor_first():
    # a dense model: stock compiled is the anchor
    ms = {"stock_compiled": 2.0, "injected_graph": 1.5, "injected_compiled": 1.0, "stock_graph": None}
    r = L.point_ratios(ms)
    assert list(r) == ["injected_graph/stock_compiled", "injected_compiled/stock_compiled"]
    assert r["injected_graph/stock_compiled"] == pytest.approx(0.75)
    assert L.DEFAULT_PATH == "injected_graph"
    # a mixture-of-experts model: stock's fastest setting is
    r = L.point_ratios(dict(ms, stock_best=1.2))
    assert list(r)[:2] == ["injected_graph/stock_best", "injected_compiled/stock_best"]
    assert r["injected_graph/stock_best"] == pytest.approx(1.25)


FIXTURES = ROOT / "testdata" / "fixtures"


def test_a_compiled_decode_step_on_a_sliding_window_model_compiles_once(monkeypatch):
    """mistral-tiny (32-token window) under a static-shape compile, as the compiled paths compile
    (dynamo's eager backend: inductor is out of reach on the CPU): its decode point times steps
    that compiled once. On transformers' own StaticCache every token recompiles (its sliding
    layers' host counter is guarded); inside the timed loop that now fails the path instead of
    being timed as a step."""
    from transformers import StaticCache

    model = transformers.AutoModelForCausalLM.from_pretrained(FIXTURES / "mistral-tiny").eval()
    paths = L.Paths(model, model, runtime_ns(), {})
    compiles = []

    def compile_(fn):
        torch._dynamo.reset()
        return torch.compile(fn, backend=lambda gm, _: compiles.append(gm) or gm.forward, fullgraph=True, dynamic=False)

    paths.compile = compile_
    ids = torch.randint(3, 500, (1, 30), generator=torch.Generator().manual_seed(0))
    cache_len = rt.cache_bucket(30 + 2 * L.WARMUP + 6 + 1)
    ms, _ = L.decode_point(paths, "stock_compiled", ids, model.config, cache_len, 6)
    assert ms > 0 and len(compiles) == 1
    paths = L.Paths(model, model, SimpleNamespace(**{**vars(runtime_ns()), "static_cache": lambda cfg, n: StaticCache(
        config=cfg, max_cache_len=n)}), {})
    paths.compile = compile_
    with pytest.raises(Exception, match="recompile"):
        L.decode_point(paths, "stock_compiled", ids, model.config, cache_len, 6)


def moe_model():
    return transformers.AutoModelForCausalLM.from_pretrained(FIXTURES / "qwen3-moe-tiny").eval()


def runtime_ns():
    class Runtime(rt.Runtime):  # no device graphs on the CPU: the runtime's eager steps
        def __init__(self, m, graphs="auto"):
            super().__init__(m, graphs=False)

    return SimpleNamespace(Runtime=Runtime, cache_bucket=rt.cache_bucket, static_cache=rt.static_cache)


def decode_row(paths, names, model, n=3):
    ids = torch.randint(3, 500, (1, 8), generator=torch.Generator().manual_seed(0))
    cache_len = rt.cache_bucket(ids.shape[1] + 2 * L.WARMUP + n + 1)
    row = {"ms": {}, "setup_s": {}}
    L.measure_point(paths, names, "decode batch 1",
                    lambda p: L.decode_point(paths, p, ids, model.config, cache_len, n), row, n)
    return row


def test_moe_stock_is_timed_on_every_experts_implementation(monkeypatch):
    """Each stock path runs once per experts implementation, by the same timer; each path reads
    its fastest setting, stock_best the fastest of all, and the anchor names it. A fake clock: a
    forward costs 1 ms (0.5 ms compiled) plus what the experts implementation costs."""
    model = moe_model()
    loaded = model.get_experts_implementation()
    assert L.experts_settings(model) == ("eager", "batched_mm", "grouped_mm")
    cost = {"eager": 3e-3, "batched_mm": 1e-3, "grouped_mm": 2e-3}
    now, compiled = [0.0], [False]
    model.register_forward_pre_hook(lambda *_: now.__setitem__(0, now[0] + (0.5e-3 if compiled[0] else 1e-3)))
    for m in L.experts_modules(model):
        m.register_forward_pre_hook(
            lambda mod, *_: now.__setitem__(0, now[0] + cost[mod.config._experts_implementation]))
    monkeypatch.setattr(L, "clock", lambda: now[0])
    seen = []

    def fake_compile(fn):
        setting = model.config._experts_implementation
        seen.append(setting)

        def run(*a, **k):
            if setting == "eager":  # what dynamo says of the experts loop under fullgraph
                raise RuntimeError("Could not extract specialized integer from data-dependent expression u0")
            compiled[0] = True
            try:
                return fn(*a, **k)
            finally:
                compiled[0] = False
        return run

    paths = L.Paths(model, model, runtime_ns(), {})
    paths.compile = fake_compile
    names = L.path_names("graph", model)
    assert names == ("stock_eager", "stock_compiled", "stock_graph", "injected_graph", "injected_compiled",
                     "stock_best")
    row = decode_row(paths, ("stock_eager", "stock_compiled", "stock_best"), model)
    got = {(e["path"], e["experts_implementation"]): e for e in row["stock_experts"]}
    assert list(got) == [(p, s) for p in ("stock_eager", "stock_compiled")
                         for s in ("eager", "batched_mm", "grouped_mm")]
    for s, c in cost.items():
        assert got["stock_eager", s]["ms"] == pytest.approx(1.0 + c * 1e3)
    assert got["stock_compiled", "eager"]["ms"] is None
    assert "data-dependent" in got["stock_compiled", "eager"]["error"]
    assert got["stock_compiled", "batched_mm"]["ms"] == pytest.approx(1.5)
    assert got["stock_compiled", "grouped_mm"]["ms"] == pytest.approx(2.5)
    assert seen == ["eager", "batched_mm", "grouped_mm"]  # one compiled step per setting
    assert row["ms"]["stock_eager"] == pytest.approx(2.0) and row["ms"]["stock_compiled"] == pytest.approx(1.5)
    assert row["experts_implementation"] == {"stock_eager": "batched_mm", "stock_compiled": "batched_mm"}
    assert row["ms"]["stock_best"] == pytest.approx(1.5)
    assert row["anchor"] == {"path": "stock_compiled", "experts_implementation": "batched_mm"}
    assert paths.errors == {}  # a setting that failed is the setting's, not the path's
    assert model.get_experts_implementation() == loaded  # set back after each setting


def test_moe_every_setting_failing_names_each_reason():
    model = moe_model()
    paths = L.Paths(model, model, runtime_ns(), {})

    def fail(path):
        raise RuntimeError(f"no {model.config._experts_implementation}")

    row = {"ms": {}, "setup_s": {}}
    L.measure_point(paths, ("stock_eager", "stock_best"), "prefill 16", fail, row, 1)
    assert row["ms"] == {"stock_eager": None, "stock_best": None}
    assert "anchor" not in row
    # each reason names where it was raised: here, this test's fail()
    at = " (raised at test_latency.py:"
    assert all(at in e["error"] and e["error"].endswith(" in fail)") for e in row["stock_experts"]), row
    strip = lambda t: re.sub(r" \(raised at [^)]*\)", "", t)  # noqa: E731
    assert [strip(e["error"]) for e in row["stock_experts"]] == [
        "RuntimeError: no eager", "RuntimeError: no batched_mm", "RuntimeError: no grouped_mm"]
    assert strip(paths.errors["stock_eager"]) == (
        "prefill 16: no experts implementation ran: eager: RuntimeError: no eager; "
        "batched_mm: RuntimeError: no batched_mm; grouped_mm: RuntimeError: no grouped_mm")
    assert paths.errors["stock_best"] == "prefill 16: no stock setting ran"


def test_moe_experts_loop_does_not_compile_whole():
    """torch.compile(fullgraph=True) itself (inductor swapped for dynamo's eager backend, out of
    reach on the CPU): the stock experts loop's data-dependent shapes stop the eager setting, with
    dynamo's reason; batched_mm and grouped_mm compile and run."""
    model = moe_model()
    paths = L.Paths(model, model, runtime_ns(), {})
    paths.compile = lambda fn: torch.compile(fn, backend="eager", fullgraph=True, dynamic=False)
    row = decode_row(paths, ("stock_compiled", "stock_best"), model, n=2)
    got = {e["experts_implementation"]: e for e in row["stock_experts"]}
    assert got["eager"]["ms"] is None and "data-dependent" in got["eager"]["error"], got["eager"]
    assert got["batched_mm"]["ms"] > 0 and got["grouped_mm"]["ms"] > 0
    best = min(("batched_mm", "grouped_mm"), key=lambda s: got[s]["ms"])
    assert row["anchor"] == {"path": "stock_compiled", "experts_implementation": best}
    assert row["ms"]["stock_compiled"] == row["ms"]["stock_best"] == got[best]["ms"]
    assert paths.errors == {}


def test_compiled_paths_release_their_graphs_after_each_point(monkeypatch):
    """A compiled path's functions and CUDA-graph pools go once its point is timed, whether it
    ran or failed: one stock setting's pool must not starve every path timed after it."""
    model = moe_model()
    paths = L.Paths(model, model, runtime_ns(), {})
    paths.compile = lambda fn: torch.compile(fn, backend="eager", fullgraph=True, dynamic=False)
    resets = []
    real_reset = torch._dynamo.reset
    monkeypatch.setattr(torch._dynamo, "reset", lambda: resets.append(1) or real_reset())
    ids = torch.randint(3, 500, (1, 8), generator=torch.Generator().manual_seed(0))
    cache_len = rt.cache_bucket(8 + 2 * L.WARMUP + 3)
    ms, _ = L.decode_point(paths, "injected_compiled", ids, model.config, cache_len, 2)
    assert ms > 0 and len(resets) == 1 and paths._decoders == {}
    with torch.no_grad():
        ms, _ = L.forward_point(paths, "stock_compiled", lambda m: m(input_ids=ids), ids.device, 2)
    assert ms > 0 and len(resets) == 2 and paths._compiled == {}

    def broken(fn):
        def call(*a, **k):
            raise RuntimeError("compile failed")
        return call

    paths.compile = broken
    with pytest.raises(RuntimeError, match="compile failed"):
        L.decode_point(paths, "stock_compiled", ids, model.config, cache_len, 2)
    with pytest.raises(RuntimeError, match="compile failed"):
        L.forward_point(paths, "stock_compiled", lambda m: m(input_ids=ids), ids.device, 2)
    assert len(resets) == 4 and paths._compiled == {} and paths._decoders == {}
    ms, _ = L.decode_point(paths, "stock_eager", ids, model.config, cache_len, 2)
    assert ms > 0 and len(resets) == 4  # eager and graph paths hold no compiled state


def test_dense_model_keeps_its_paths(monkeypatch):
    model = transformers.AutoModelForCausalLM.from_pretrained(FIXTURES / "llama-tiny").eval()
    assert L.experts_settings(model) == () and L.experts_modules(model) == []
    for mode in ("eager", "graph", "both"):
        assert L.path_names(mode, model) == L.LATENCY_PATHS[mode]
    now = [0.0]
    model.register_forward_pre_hook(lambda *_: now.__setitem__(0, now[0] + 1e-3))
    monkeypatch.setattr(L, "clock", lambda: now[0])
    row = decode_row(L.Paths(model, model, runtime_ns(), {}), ("stock_eager", "injected_eager"), model)
    assert list(row) == ["ms", "setup_s", "ratios"]
    assert row["ms"] == {"stock_eager": pytest.approx(1.0), "injected_eager": pytest.approx(1.0)}
    assert row["ratios"] == {"injected_eager/stock_eager": pytest.approx(1.0)}


def test_active_bytes_of_the_qwen3_moe_fixture():
    """By hand, from testdata/fixtures/qwen3-moe-tiny/config.json (hidden 64, 2 heads and 1 KV head
    of 32, 6 experts of width 24, top-2, layer 1 dense of width 48, vocab 512, tied), bf16:
      attention  per layer q 64x64 + k 32x64 + v 32x64 + o 64x64 = 12288, 2 layers: 24576 -> 49152 B
      norms      per layer q_norm 32 + k_norm 32 + 2 x 64 = 192, 2 layers + final 64: 448 -> 896 B
      router     6 x 64 = 384 -> 768 B
      experts    gate_up 6x48x64 + down 6x64x24 = 27648 -> 55296 B, top 2 of 6: 18432 B
      dense MLP  (48x64) x 2 + 64x48 = 9216 -> 18432 B
      embedding  one row of 64 -> 128 B; lm_head (tied to it) 512 x 64 -> 65536 B"""
    model = moe_model()
    parts, all_experts = L.active_bytes(model, 2, 2)
    assert parts == {"attention": 49152, "norms": 896, "router": 768, "experts_active": 18432, "shared_expert": 0,
                     "dense_mlp": 18432, "embedding_row": 128, "lm_head": 65536, "other": 0}
    assert all_experts == 55296
    rf = L.roofline(model, 2, 2, "bf16")
    assert rf["total_bytes"] == 153344 and rf["bandwidth_Bps"] == L.HBM_BYTES_PER_S == 4.2e12
    assert rf["ms"] == pytest.approx(153344 / 4.2e12 * 1e3)
    dense = transformers.AutoModelForCausalLM.from_pretrained(FIXTURES / "llama-tiny")
    assert L.roofline(dense, 2, 2, "bf16") is None


def test_active_bytes_count_a_shared_expert_in_full():
    """By hand, from testdata/fixtures/qwen2-moe-tiny/config.json (hidden 64, 2 heads and 1 KV head
    of 32 with q/k/v biases, 5 experts of width 24, top-3, a shared expert of width 40 in both
    layers, vocab 512, tied), bf16:
      attention  per layer 12288 weights + 128 biases, 2 layers: 24832 -> 49664 B
      norms      per layer 2 x 64, 2 layers + final 64: 320 -> 640 B
      router     per layer gate 5 x 64 + shared_expert_gate 64 = 384, 2 layers: 768 -> 1536 B
      shared     per layer gate, up 40x64 + down 64x40 = 7680, 2 layers: 15360 -> 30720 B (every token)
      experts    per layer 5x48x64 + 5x64x24 = 23040, 2 layers: 46080 -> 92160 B, top 3 of 5: 55296 B"""
    model = transformers.AutoModelForCausalLM.from_pretrained(FIXTURES / "qwen2-moe-tiny", dtype=torch.bfloat16)
    parts, all_experts = L.active_bytes(model, 3, 2)
    assert parts == {"attention": 49664, "norms": 640, "router": 1536, "experts_active": 55296, "shared_expert": 30720,
                     "dense_mlp": 0, "embedding_row": 128, "lm_head": 65536, "other": 0}
    assert all_experts == 92160


def test_peak_memory_out_of_memory_leaves_the_side_out(monkeypatch):
    """A side whose peak-memory forward runs out of memory is left out and named in errors; the
    other side is still measured. Under pipeline stages the error propagates (the other stages
    wait inside that forward)."""
    def peak(device, fn):
        if fn() == "stock":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.16 GiB.\nmore")
        return 123

    monkeypatch.setattr(L, "peak_memory", peak)
    run = SimpleNamespace(pipeline=False, max_over_ranks=lambda v: v)
    errors = {}
    got = L.peak_memories(torch.device("cpu"), (("stock", "stock"), ("injected", "injected")), lambda m: m, run, errors)
    assert got == {"injected": 123}
    assert errors == {"peak memory stock": "OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB."}
    with pytest.raises(torch.cuda.OutOfMemoryError):
        L.peak_memories(torch.device("cpu"), (("stock", "stock"),), lambda m: m, SimpleNamespace(
            pipeline=True, max_over_ranks=lambda v: v), {})
