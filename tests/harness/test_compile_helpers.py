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
    # what the driver has still to load (a vision model's fp32 oracle) is kept back too
    fit, why = H.memory_plan(cuda, {"stock": 8 * gb, "injected": 8 * gb}, reserve=7 * gb)
    assert fit == ["stock"] and why["injected"].startswith("12.0 GiB needed, 11.0 GiB free")
    assert H.memory_plan(SimpleNamespace(type="cpu"), {"stock": 1}) == (["stock"], {})


def helper_job(run, side, fixture="llama-odd", **kw):
    base = {"prefill": "8", "decode_batches": "1" if side == "stock" else "", "decode_steps": 2,
            "latency_points": "quick", "seed": 0, "repeats": 1}
    return {"side": side, "model": str(FIXTURES / fixture), "package": str(run / "package"),
            "packed": str(run / "packed"), "device": "cpu", "dtype": "bfloat16", "paths": [H.SIDES[side]],
            "runtime_generation": {"prompts": 2, "length": 8, "new_tokens": 3}, "args": {**base, **kw}}


@pytest.mark.parametrize("side", ["stock", "injected"])
def test_a_helper_sets_up_its_compiled_path_then_times_it_when_asked(llama_odd_run, monkeypatch, capsys, side):
    """In process, on the CPU (the kernels interpreted; dynamo's compile replaced by the function
    itself, inductor being out of reach): a helper loads its side as the driver does, generates
    under the graph runtime at the driver's prompt shape, and sets up each point of its compiled
    path through the latency stage's own code, holding it; asked, it times a held point by the
    same loop, says why it cannot time one it does not hold, and releases them all at the end."""
    import json

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    compiled = []
    monkeypatch.setattr(L.Paths, "compile", staticmethod(lambda fn: compiled.append(fn) or fn))
    out, paths, device = H.run_job(helper_job(llama_odd_run, side))
    assert out["path"] == H.SIDES[side]
    want = ["prefill 8", "decode batch 1"] if side == "stock" else ["prefill 8"]
    assert [p["point"] for p in out["points"]] == want
    assert out["held"] == want and list(paths.held) == want
    assert "errors" not in out, out
    assert all(p["setup_s"] >= 0 for p in out["points"])
    assert out["runtime_generation_s"] > 0  # the graph runtime's generation ran first
    # one compiled function per point: the prefill's forward, the decode step
    assert len(compiled) == len(want)
    released = []
    monkeypatch.setattr(paths, "release_compiled", lambda: released.append(1))
    import torch

    modes = []
    for label, (step, _, setup, grad) in list(paths.held.items()):
        # a forward is set up under no_grad, as the latency stage runs it (a decode step sets its own)
        assert grad is (not label.startswith("prefill"))

        def seen(step=step):
            modes.append(torch.is_grad_enabled())
            return step()

        paths.held[label] = (seen, paths.release_compiled, setup, grad)
    capsys.readouterr()
    H.serve(paths, device, iter([json.dumps({"time": label, "n": 2}) + "\n" for label in want] +
                                 [json.dumps({"time": "prefill 99", "n": 2}) + "\n"]))
    got = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [g["point"] for g in got] == want + ["prefill 99"]
    assert all(g["ms"] > 0 and g["setup_s"] == p["setup_s"] for g, p in zip(got, out["points"]))
    assert got[-1]["error"].startswith(H.SIDES[side] + " at prefill 99: KeyError")
    assert paths.held == {} and released == [1]  # one release drops every compiled graph
    # each timed in the grad mode it was set up in (a compiled forward guards on it)
    assert modes == [False] * (2 + L.WARMUP) + ([True] * (2 + L.WARMUP) if side == "stock" else [])


def test_a_vision_helper_sets_up_its_compiled_path_on_the_eval_images(levit_tiny_run, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(L.Paths, "compile", staticmethod(lambda fn: fn))
    monkeypatch.setitem(L.LATENCY_POINTS, "quick", {**L.LATENCY_POINTS["quick"], "forward": (2,)})
    job = helper_job(levit_tiny_run, "injected", "levit-tiny")
    job["runtime_generation"] = None
    out, paths, _ = H.run_job(job)
    assert out["held"] == ["batch 2"] and "errors" not in out, out
    assert [p["point"] for p in out["points"]] == ["batch 2"]
    L.release_held(paths)


def test_a_helper_whose_side_runs_a_path_first_skips_its_own_eager_forward(levit_tiny_run, monkeypatch):
    """A path the side runs before its compiled one at every point (on a GPU the graph path,
    whose eager warm-ups create what a first forward creates; here an eager path, the CPU having
    no device graphs) makes the helper leave out its own first forward (kernels at a shape no
    point launches); the compiled path is still set up."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(L.Paths, "compile", staticmethod(lambda fn: fn))
    monkeypatch.setitem(L.LATENCY_POINTS, "quick", {**L.LATENCY_POINTS["quick"], "forward": (2,)})
    job = helper_job(levit_tiny_run, "injected", "levit-tiny")
    job["runtime_generation"] = None
    job["paths"] = ["injected_eager", "injected_compiled"]
    batches = []
    import transformers

    real = transformers.LevitForImageClassificationWithTeacher.forward

    def seen(self, pixel_values=None, **kw):
        batches.append(int(pixel_values.shape[0]))
        return real(self, pixel_values=pixel_values, **kw)

    monkeypatch.setattr(transformers.LevitForImageClassificationWithTeacher, "forward", seen)
    out, paths, _ = H.run_job(job)
    assert out["held"] == ["batch 2"] and "errors" not in out, out
    assert batches and set(batches) == {2}, batches  # no forward at batch 1
    L.release_held(paths)
    # with the compiled path alone, the helper runs one eager forward first
    job["paths"] = ["injected_compiled"]
    batches.clear()
    out, paths, _ = H.run_job(job)
    assert batches[0] == 1 and set(batches[1:]) == {2}, batches
    L.release_held(paths)


def test_the_protocol_reports_each_helpers_result_or_why_it_had_none(tmp_path):
    """Each side's result or the reason it has none; with log_dir, each helper's stderr is kept
    there (compile-helper-<side>.log) after it ends."""
    missing = str(ROOT / "no-such-model")
    hs = H.Helpers.start(("stock", "injected"), prepare={"model": missing, "package": missing, "device": "cpu"},
                         log_dir=tmp_path)
    job = {"side": "stock", "model": missing, "package": missing, "packed": missing, "device": "cpu",
           "dtype": "float32", "paths": ["stock_compiled"], "args": H.job_args(args())}
    hs.send({"stock": job}, {"injected": "not enough memory"})
    got = hs.wait(timeout=120)["helpers"]
    by = {h["side"]: h for h in got}
    assert by["injected"] == {"side": "injected", "skipped": "not enough memory"}
    assert "error" in by["stock"] and "no-such-model" in by["stock"]["error"], by["stock"]
    for p, _ in hs.procs.values():
        assert p.returncode == 0  # a failed job is a result, not a crash
    assert sorted(f.name for f in tmp_path.iterdir()) == ["compile-helper-injected.log", "compile-helper-stock.log"]


def test_waiting_on_helpers_never_given_a_job_ends_them_at_once():
    hs = H.Helpers.start(("stock",))
    got = hs.wait(timeout=120)["helpers"]
    assert got == [{"side": "stock", "skipped": "the eval gave it no job"}]
    assert hs.procs["stock"][0].returncode == 0


def test_the_protocol_times_held_points_and_says_why_it_cannot(llama_odd_run, monkeypatch):
    """The real helper process on the CPU (torch.compile replaced by the function itself in that
    process): its set-up, a held point timed on request, a point it never set up, and a helper
    that died, each answered or named."""
    shim = ("import sys; sys.path.insert(0, sys.argv[1]); import latency, compile_helpers; "
            "latency.Paths.compile = staticmethod(lambda fn: fn); sys.exit(compile_helpers.main())")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the helper's kernels: interpreted
    job = helper_job(llama_odd_run, "stock")
    # readied at start from what the driver knows then; the job comes later
    hs = H.Helpers.start(("stock",), argv=[sys.executable, "-c", shim, str(H.HERE)],
                         prepare={k: job[k] for k in ("model", "package", "device")})
    hs.send({"stock": job})
    got = hs.wait(timeout=600)["helpers"]
    assert got[0]["held"] == ["prefill 8", "decode batch 1"], got
    assert "prepare_error" not in got[0], got[0]["prepare_error"]
    # its wall clock, each step after the one before: the driver sets it against its own start
    clock = got[0]["clock"]
    steps = ["started", "imported", "prepare", "prepared_device", "prepared_model_class", "prepared_package",
             "prepared", "pool_started", "job", "ready"]
    assert list(clock) == steps and all(a <= b for a, b in zip([clock[k] for k in steps], [clock[k] for k in steps[1:]]))
    assert got[0]["eager_s"] >= 0 and isinstance(got[0]["compile_phases"], dict)
    ms, setup = hs.time("stock", "decode batch 1", 2)
    assert ms > 0 and setup == got[0]["points"][1]["setup_s"]
    with pytest.raises(H.Unavailable, match="did not set up prefill 99"):
        hs.time("stock", "prefill 99", 2)
    assert hs.timed == {"stock": ["decode batch 1"]}
    hs.procs["stock"][0].kill()
    with pytest.raises(H.Unavailable, match="exit code -9"):
        hs.time("stock", "prefill 8", 2)
    hs.close()


def test_the_driver_times_a_point_itself_when_its_helper_cannot(monkeypatch):
    import eval_driver as ed

    def cannot(side, label, n):
        raise H.Unavailable("exit code -9")

    monkeypatch.setattr(ed, "HELPERS", SimpleNamespace(held={"stock": ["prefill 8"], "injected": []}, time=cannot))
    stats = {}
    timers = ed.helper_timers(stats)
    assert list(timers) == ["stock_compiled"]
    assert timers["stock_compiled"]("stock_compiled", "prefill 8", 3, lambda p: (1.5, 2.0)) == (1.5, 2.0)
    assert stats["fallbacks"] == [{"path": "stock_compiled", "point": "prefill 8", "why": "exit code -9"}]


def test_closing_stops_a_helper_that_does_not_exit_in_time():
    """At the eval's end the helpers' results are in: one still tearing down is stopped, within
    the time given in all."""
    import time

    hs = H.Helpers.start(("stock", "injected"), argv=[sys.executable, "-c", "import time; time.sleep(60)"])
    t0 = time.time()
    hs.close(timeout=0.5)
    assert time.time() - t0 < 5
    assert [p.returncode for p, _ in hs.procs.values()] == [-9, -9]


def test_the_helpers_leave_free_what_the_oracle_will_keep(monkeypatch):
    """A text eval hands the helpers their jobs before the layer-by-layer oracle's first pass: the
    bytes that pass will load and keep are reserved in the helpers' memory plan, so the helpers
    and the oracle never both count on them (an 80 GB card, the 8B shape: a helper admitted beside
    a 26 GB oracle budget ran out of memory)."""
    import eval_driver as ed

    sent = {}

    class Sent(Exception):
        pass

    def send(args, device, stock, injected, generation=None, reserve=0):
        sent.update(reserve=reserve, generation=generation)
        raise Sent

    monkeypatch.setattr(ed, "send_helpers", send)
    a = SimpleNamespace(model=str(FIXTURES / "llama-odd"), tokens=0, text=None, gen_tokens=0, prompts=4,
                        runtime_generation=True)
    with pytest.raises(Sent):
        ed.evaluate_text(a, None, "cpu", None, None, None, {}, False, None, oracle_keep=123456)
    assert sent["reserve"] == 123456
    assert sent["generation"]["prompts"] == 4
