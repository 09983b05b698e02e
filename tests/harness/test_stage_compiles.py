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
