"""The eval's stage clock counts Triton's JIT compiles per stage (through knobs.runtime's
post-compile hook), keeps a hook that was already there, and leaves rows without compiles as
they were."""

import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness" / "python"))
import eval_driver as D  # noqa: E402


def test_stages_count_each_stages_compiles():
    seen = []
    runtime = SimpleNamespace(jit_post_compile_hook=lambda **kw: seen.append(kw["key"]))
    triton = SimpleNamespace(knobs=SimpleNamespace(runtime=runtime))
    st = D.Stages(0.0)
    st.count_compiles(triton)
    with st("load"):
        pass
    with st("compile ahead"):
        for k in range(3):
            runtime.jit_post_compile_hook(key=k)
    st.lap("generation")
    runtime.jit_post_compile_hook(key=9)
    st.lap("latency")
    assert [r.get("compiles") for r in st.rows] == [None, 3, None, 1]
    assert "compiles" not in st.rows[0] and seen == [0, 1, 2, 9]  # the earlier hook still ran


def test_stages_without_knobs_count_nothing():
    st = D.Stages(0.0)
    st.count_compiles(SimpleNamespace())  # a triton without knobs.runtime
    st.lap("load")
    assert st.rows == [{"stage": "load", "s": st.rows[0]["s"]}]


def test_a_long_stage_says_it_is_still_running_and_where(monkeypatch, capsys):
    """A stage past HEARTBEAT_S prints that it is still running, with its thread's frame (here
    this test's sleep); only the innermost of nested stages speaks, and nothing once it ended."""
    import time

    monkeypatch.setattr(D, "HEARTBEAT_S", 0.1)
    st = D.Stages(time.time())

    def wait_in_here():
        time.sleep(0.35)

    with st("latency"):
        with st("latency: prefill 2048 injected_compiled"):
            wait_in_here()
    time.sleep(0.25)
    err = capsys.readouterr().err.splitlines()
    beats = [line for line in err if "still running" in line]
    assert beats and all(line.startswith("xpuinject-eval: latency: prefill 2048 injected_compiled: still running after")
                         for line in beats), err
    assert all("test_stage_compiles.py" in line and "in wait_in_here" in line for line in beats), beats
    assert err[-1].startswith("xpuinject-eval: latency: ") and "still running" not in err[-1], err  # the outer stage's end
    assert st.open == [] and [r["stage"] for r in st.rows] == ["latency: prefill 2048 injected_compiled", "latency"]


def test_frame_of_names_the_innermost_frame_and_the_evals_own(tmp_path):
    """A thread inside a library (a site-packages file) is named there, and from the innermost
    frame of code outside site-packages that called it."""
    import importlib.util
    import threading

    lib = tmp_path / "site-packages" / "slowlib.py"
    lib.parent.mkdir()
    lib.write_text("import time\n\n\ndef compile_for_a_while(s):\n    time.sleep(s)\n")
    spec = importlib.util.spec_from_file_location("slowlib", lib)
    slowlib = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(slowlib)

    def caller():
        slowlib.compile_for_a_while(0.5)

    t = threading.Thread(target=caller)
    t.start()
    import time

    time.sleep(0.1)
    where = D.frame_of(t.ident)
    t.join()
    assert where.startswith("slowlib.py:5 in compile_for_a_while, from test_stage_compiles.py:"), where
    assert where.endswith(" in caller"), where
    assert D.frame_of(t.ident) == "its thread has ended"
