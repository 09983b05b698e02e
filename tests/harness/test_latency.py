"""The latency stage's one timer: every decode path (stock and injected; eager, graph runtime and
torch.compile) is timed by the same loop with the same step count, warm-up and syncs. A fake clock
that advances by 1 ms per model forward makes each path's figure exactly 1.0 ms per token, so a
path that ran a step more or less inside its timed loop (or synced differently) would show."""

from __future__ import annotations

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

    paths = L.Paths(model, model, SimpleNamespace(Runtime=Runtime, cache_bucket=rt.cache_bucket), {})
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
    ms = {"stock_compiled": 2.0, "injected_graph": 1.5, "injected_compiled": 1.0, "stock_graph": None}
    r = L.point_ratios(ms)
    assert list(r) == ["injected_graph/stock_compiled", "injected_compiled/stock_compiled"]
    assert r["injected_graph/stock_compiled"] == pytest.approx(0.75)
    assert L.LATENCY_RATIOS[0] == (L.DEFAULT_PATH, "stock_compiled") and L.DEFAULT_PATH == "injected_graph"
