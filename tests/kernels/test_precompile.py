"""precompile.ahead: a dry run of a workload compiles its kernel specializations on a thread pool
and launches nothing; the real run then finds them compiled. On the GPU the real thing; under the
interpreter, that it stays out of the way and the launch rewrite it relies on."""

import pytest
import torch
import triton
import triton.language as tl

from xpuinject_kernels import _backend, precompile


@triton.jit
def _scale_kernel(x, y, n, F: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=m) * F, mask=m)


def _scale(x, f, block=128):
    y = torch.full_like(x, -1.0)
    _scale_kernel[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), F=f, BLOCK=block)
    return y


def _is_scale(fn):
    return fn is _scale_kernel


def test_ahead_compiles_in_a_dry_run_then_the_real_run_compiles_nothing(device):
    x = torch.arange(1000, dtype=torch.float32, device=device)
    if device == "cpu":
        # the interpreter compiles nothing: ahead() says so and does not call the workload
        calls = []
        out = precompile.ahead(lambda: calls.append(1))
        assert out["compiled"] == 0 and "interpreter" in out["skipped"] and calls == []
        torch.testing.assert_close(_scale(x, 3.0), x * 3.0)
        return
    seen = []
    outs = []
    # four constexpr values and two blocks: eight specializations, none compiled yet in this process
    work = lambda: [outs.append(_scale(x, float(f) + 0.5, block=b)) for f in range(4) for b in (64, 128)]  # noqa: E731
    stats = precompile.ahead(work, threads=4, ours=_is_scale)
    assert stats["compiled"] == 8 and stats["threads"] == 4 and "error" not in stats, stats
    # the dry run launched nothing: every output still holds its fill
    torch.cuda.synchronize()
    assert len(outs) == 8 and all(bool((o == -1.0).all()) for o in outs)
    # the real run compiles nothing more (Triton calls jit_cache_hook only before a compile)
    hook = triton.knobs.runtime.jit_cache_hook
    triton.knobs.runtime.jit_cache_hook = lambda **kw: seen.append(kw["repr"]) and None
    try:
        for f in range(4):
            for b in (64, 128):
                torch.testing.assert_close(_scale(x, float(f) + 0.5, block=b), x * (f + 0.5))
    finally:
        triton.knobs.runtime.jit_cache_hook = hook
    assert seen == []
    # a kernel not covered by `ours` launches as usual inside a dry run (its new specialization
    # compiles on the pool too, and the launch waits for it)
    done = precompile.ahead(lambda: outs.append(_scale(x, 9.5)), ours=lambda fn: False)
    torch.cuda.synchronize()
    assert done["compiled"] == 1 and bool((outs[-1] == x * 9.5).all())


def test_ahead_stands_aside_while_autotuning(monkeypatch):
    monkeypatch.setenv("XPUINJECT_AUTOTUNE", "1")
    monkeypatch.setattr(_backend, "is_interpret", lambda: False)
    ok, why = precompile.available()
    assert not ok and "autotuning" in why
    assert precompile.ahead(lambda: pytest.fail("the workload must not run"))["compiled"] == 0


def test_dry_launches_are_warmups_of_our_kernels_only(monkeypatch):
    """The rewrite ahead() applies to JITFunction.run: a launch of one of ours becomes a warm-up
    (compile, no launch), any other kernel's is untouched, a capture refuses it, and the real
    method is back afterwards."""
    jit = precompile._jit_class()
    calls = []

    def fake_run(self, *args, grid, warmup, **kwargs):
        calls.append((self, warmup))
        return "ran"

    monkeypatch.setattr(jit, "run", fake_run)
    ours, theirs = object(), object()
    with precompile._dry(lambda fn: fn is ours):
        assert jit.run(ours, 1, grid=(1,), warmup=False) == "ran"
        assert jit.run(theirs, 1, grid=(1,), warmup=False) == "ran"
        monkeypatch.setattr(precompile, "_capturing", lambda: True)
        with pytest.raises(RuntimeError, match="device-graph capture"):
            jit.run(ours, 1, grid=(1,), warmup=False)
        jit.run(theirs, 1, grid=(1,), warmup=False)  # not ours: a capture records it as usual
    assert calls == [(ours, True), (theirs, False), (theirs, False)]
    assert jit.run is fake_run


def _noop(x):
    pass


def test_package_kernels_count_as_ours():
    """A kernel is the package's by its module's name, under whatever name the package was
    imported (a kernel-hub variant's is model-specific)."""
    jit = precompile._jit_class()
    for module, want in ((precompile._ROOT + ".rmsnorm", True), (precompile._ROOT, True),
                         (precompile._ROOT + "_other.rmsnorm", False), ("triton.language", False)):
        _noop.__module__ = module
        assert precompile._ours(jit(_noop)) is want, module
    assert not precompile._ours(object())


def test_recording_declines_our_compiles_and_keeps_each_specialization_once():
    """With a pool, the dry run only records: Triton's jit_cache_hook gets each compile before it
    happens, and ours are declined (True) and kept once per specialization; another kernel's goes
    on to the hook that was there before."""
    from types import SimpleNamespace

    def fake(module, qualname):
        fn = SimpleNamespace(__module__=module, __qualname__=qualname)
        return SimpleNamespace(module=module, fn=fn)

    ours, theirs = fake(precompile._ROOT + ".rmsnorm", "_rms_norm_kernel"), fake("other.mod", "_k")
    before = []
    prev = triton.knobs.runtime.jit_cache_hook
    triton.knobs.runtime.jit_cache_hook = lambda **kw: before.append(kw["fn"].jit_function) and None
    try:
        jobs = []
        with precompile._recording(precompile._ours, jobs):
            hook = triton.knobs.runtime.jit_cache_hook
            call = lambda fn, spec: hook(fn=SimpleNamespace(jit_function=fn),  # noqa: E731
                                         compile={"specialization_data": spec})
            assert call(ours, "a") is True and call(ours, "a") is True and call(ours, "b") is True
            assert call(theirs, "c") is None
        assert triton.knobs.runtime.jit_cache_hook is not hook  # restored
    finally:
        triton.knobs.runtime.jit_cache_hook = prev
    assert jobs == [{"module": ours.module, "qualname": "_rms_norm_kernel", "spec": "a"},
                    {"module": ours.module, "qualname": "_rms_norm_kernel", "spec": "b"}]
    assert before == [theirs]


def test_pool_workers_load_the_package_and_name_what_failed(monkeypatch):
    """The pool's workers load the package under its own name and find each job's kernel by module
    and qualified name; on this machine the compile itself fails without a GPU driver, and every
    job still gets its answer: the kernel it could not compile, or the name it could not find."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the workers' triton.jit: real kernels
    root = precompile._ROOT
    jobs = [{"module": root + ".rmsnorm", "qualname": "_rms_norm_kernel", "spec": "{}"},
            {"module": root + ".rmsnorm", "qualname": "no_such_kernel", "spec": "{}"},
            {"module": root + ".rmsnorm", "qualname": "torch", "spec": "{}"}]
    with precompile.Pool(2) as pool:
        got = pool.compile(jobs)
    assert len(got) == 3 and not any(r["ok"] for r in got), got
    if torch.cuda.is_available():
        return  # the first job compiles for real here: the GPU test covers it
    assert got[0]["error"].startswith(root + ".rmsnorm._rms_norm_kernel: "), got[0]
    assert "LookupError: no kernel no_such_kernel in " + root + ".rmsnorm" in got[1]["error"]
    assert "is not a Triton kernel" in got[2]["error"]


def test_ahead_on_a_pool_compiles_in_processes_then_the_real_run_loads_them(device, tmp_path, monkeypatch):
    """On the GPU a dry run of a package kernel records its specializations, the pool's processes
    compile them into Triton's cache, and the real run compiles no kernel: the cache gains no
    binary (only the launcher module Triton builds at a kernel's first launch), and the kernels
    compute the right thing."""
    if device == "cpu":
        # the interpreter compiles nothing: ahead() says so before it touches the pool or the work
        out = precompile.ahead(lambda: pytest.fail("the workload must not run"), pool=object())
        assert out["compiled"] == 0 and "interpreter" in out["skipped"]
        return
    from xpuinject_kernels import rmsnorm

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # the workers' and this process's
    x = torch.randn(37, 96, dtype=torch.bfloat16, device=device)
    w = torch.randn(96, dtype=torch.bfloat16, device=device)
    # 16 warps on a 96-wide row: a launch no other test makes, so this process's in-memory kernel
    # cache (which Triton consults before the hook) cannot already hold it
    work = lambda: [rmsnorm.rms_norm(x[:n], w, 1e-6, config={"num_warps": 16}) for n in (1, 16, 37)]  # noqa: E731
    with precompile.Pool(2) as pool:
        stats = precompile.ahead(work, pool=pool)
    assert stats["processes"] == 2 and stats["compiled"] >= 1 and "error" not in stats, stats
    binaries = lambda: sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")  # noqa: E731
                              if p.suffix in (".cubin", ".hsaco", ".spv", ".zebin"))
    compiled = binaries()
    assert len(compiled) >= stats["compiled"], compiled
    for n, y in zip((1, 16, 37), work()):
        torch.testing.assert_close(y, rmsnorm.rms_norm_ref(x[:n], w, 1e-6).to(y.dtype), atol=2e-2, rtol=2e-2)
    assert binaries() == compiled
