"""Host-side helpers of _backend: the ones that replace Triton's constexpr functions in launchers,
and programmatic dependent launch."""

import ast

import torch
import triton

from xpuinject_kernels import _backend


def test_cdiv_and_next_pow2_match_triton():
    assert [_backend.next_pow2(i) for i in range(0, 4097)] == [triton.next_power_of_2(i) for i in range(0, 4097)]
    assert _backend.next_pow2(2**40 + 1) == 2**41
    for a in range(0, 300):
        for b in range(1, 40):
            assert _backend.cdiv(a, b) == triton.cdiv(a, b), (a, b)


def test_pdl_is_off_where_it_cannot_run():
    """Programmatic dependent launch is a CUDA (sm_90+) launch option: never asked for on the
    CPU interpreter, and the launch option is only passed when on (no other backend takes it)."""
    assert _backend.pdl(torch.device("cpu")) is False
    assert _backend.pdl_kw(False) == {}
    assert _backend.pdl_kw(True) == {"launch_pdl": True}
    was = _backend.PDL_ENABLED
    try:
        _backend.PDL_ENABLED = False  # XPUINJECT_PDL=0: off without asking the device
        assert _backend.pdl(torch.device("cuda", 0)) is False
    finally:
        _backend.PDL_ENABLED = was


def _pdl_kernels():
    import inspect

    from xpuinject_kernels import attention, gemv, greedy, rmsnorm, rope_cache

    for mod in (attention, gemv, greedy, rmsnorm, rope_cache):
        for node in ast.walk(ast.parse(inspect.getsource(mod))):
            if isinstance(node, ast.FunctionDef) and any(a.arg == "PDL" for a in node.args.args + node.args.kwonlyargs):
                yield mod.__name__, node


def test_every_pdl_kernel_waits_before_it_reads():
    """A kernel launched with programmatic dependent launch may start before the launch ahead of
    it has finished: its first statement must be the wait (pdl_wait), before any load or store."""
    found = list(_pdl_kernels())
    names = sorted(n.name for _, n in found)
    assert names == sorted(["_decode_split_kernel", "_decode_reduce_kernel", "_gemv_kernel", "_greedy_kernel",
                            "_rms_norm_kernel", "_rope_cache_kernel"]), names
    for mod, fn in found:
        body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        first = ast.unparse(body[0])
        assert first == "_backend.pdl_wait(PDL)", f"{mod}.{fn.name} starts with {first!r}"


def test_env_switch_reads_on_and_off_and_refuses_the_rest(monkeypatch):
    """The package's switches (XPUINJECT_PDL, XPUINJECT_NMAJOR, ...): on and off in the usual
    spellings, unset or empty as the default, and a value meaning neither is an error naming the
    variable rather than a default the user did not ask for."""
    import pytest

    name = "XPUINJECT_TEST_SWITCH"
    monkeypatch.delenv(name, raising=False)
    assert _backend.env_switch(name) is None
    for value, want in (("1", True), ("on", True), (" TRUE ", True), ("yes", True), ("0", False), ("off", False),
                        ("False", False), ("no", False), ("", None)):
        monkeypatch.setenv(name, value)
        assert _backend.env_switch(name) is want, value
    monkeypatch.setenv(name, "2")
    with pytest.raises(ValueError, match=r"environment variable XPUINJECT_TEST_SWITCH='2': want 1 or 0 \(on or off\)"):
        _backend.env_switch(name)
    from xpuinject_kernels import gpus

    monkeypatch.setenv("XPUINJECT_AUTOTUNE", "maybe")
    with pytest.raises(ValueError, match="XPUINJECT_AUTOTUNE='maybe'"):
        gpus.autotune_requested()
    monkeypatch.setenv("XPUINJECT_AUTOTUNE", "on")
    assert gpus.autotune_requested() is True
