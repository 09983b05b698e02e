"""Compile a workload's Triton kernels on a thread pool before it runs.

A fresh process JIT-compiles each kernel specialization at its first launch, one after another: a
cold run of a small model spends most of its first forwards in the Triton compiler. `ahead(run)`
calls run() once as a dry run in which every launch of this package's kernels is a warm-up
(`JITFunction.run(..., warmup=True)`, what `kernel.warmup` does: compile, launch nothing), under
`triton.AsyncCompileMode` with a thread pool, so the specializations the workload reaches compile
side by side while the dry run goes on (the compiler's C++ passes and ptxas release the GIL; see
triton/runtime/_async_compile.py and JITFunction._do_compile in triton/runtime/jit.py). The real
run then finds them compiled.

The dry run computes nothing: the kernels' outputs are whatever their launchers allocated, so
only shapes flow through it and its result is dropped. A specialization it misses (a branch taken
on data) compiles at its first launch as before. ahead() does nothing under the interpreter, with
autotuning on (the tuner would time launches that never ran), or where Triton lacks asynchronous
compiles; it refuses to warm up inside a device-graph capture, which would record no kernel.
"""

from __future__ import annotations

import contextlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, Optional

import torch
import triton

from . import _backend, gpus

__all__ = ["ahead", "available"]

# Kernels of this package: their module names start with its own (a kernel-hub variant imports
# it under a model-specific name).
_ROOT = __name__.rsplit(".", 1)[0]


def _jit_class():
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return None
    return JITFunction


def available() -> tuple:
    """(True, "") when ahead() compiles ahead here, else (False, why not)."""
    if _backend.is_interpret():
        return False, "the Triton interpreter compiles nothing"
    if gpus.autotune_requested():
        return False, "autotuning is on: a dry run would time launches that never ran"
    if not hasattr(triton, "AsyncCompileMode") or _jit_class() is None:
        return False, f"triton {triton.__version__} has no asynchronous compiles"
    return True, ""


def _threads() -> int:
    return max(1, min(32, os.cpu_count() or 1))


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


@contextlib.contextmanager
def _dry(ours: Callable[[object], bool]):
    """Within: a launch of a kernel for which ours(jit_function) holds only compiles (asynchronously,
    under the active AsyncCompileMode); other kernels launch as usual."""
    jit = _jit_class()
    real = jit.run

    def run(self, *args, grid, warmup, **kwargs):
        if ours(self):
            if _capturing():
                raise RuntimeError("precompile.ahead: a dry run cannot run inside a device-graph capture "
                                   "(the graph would record no kernel)")
            warmup = True
        return real(self, *args, grid=grid, warmup=warmup, **kwargs)

    jit.run = run
    try:
        yield
    finally:
        jit.run = real


def _ours(fn) -> bool:
    module = getattr(fn, "module", None) or ""
    return module == _ROOT or module.startswith(_ROOT + ".")


def ahead(run: Callable[[], object], *, threads: Optional[int] = None,
          ours: Callable[[object], bool] = _ours) -> Dict[str, object]:
    """Compile the kernel specializations run() launches, on `threads` threads (default: the CPU
    count, at most 32), by calling run() once as a dry run (see the module docstring). Returns
    {"compiled": specializations compiled, "s": seconds, "threads": n, "dry_run_s": seconds of
    run() itself}, with "skipped" (why) when it did nothing and "error" when run() raised in the
    dry run or a compile failed (what compiled still counts; the real run compiles the rest and
    raises any error where it happens)."""
    ok, why = available()
    if not ok:
        return {"compiled": 0, "s": 0.0, "threads": 0, "skipped": why}
    if _capturing():
        raise RuntimeError("precompile.ahead: called inside a device-graph capture")
    n = threads or _threads()
    t0 = time.perf_counter()
    out: Dict[str, object] = {"threads": n}
    # _backend.launch_counts counts the dry run's launches too: its problem-class lookups (tuned,
    # heuristic) are the workload's, made once and kept
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="xpuinject-compile") as pool:
        with triton.AsyncCompileMode(pool, ignore_errors=True) as mode:
            with _dry(ours):
                try:
                    run()
                except Exception as e:  # garbage inputs may trip a check; what was reached still compiles
                    out["error"] = f"dry run: {type(e).__name__}: {e}"
                out["dry_run_s"] = round(time.perf_counter() - t0, 3)
    futures = mode.future_kernels.values()
    failed = sum(1 for f in futures if f.kernel is None)
    out["compiled"] = len(futures) - failed
    if failed:
        out.setdefault("error", f"{failed} specialization(s) failed to compile ahead; they compile at first launch")
    out["s"] = round(time.perf_counter() - t0, 3)
    return out
