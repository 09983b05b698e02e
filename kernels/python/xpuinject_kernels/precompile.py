"""Compile a workload's Triton kernels on a thread pool before it runs.

A fresh process JIT-compiles each kernel specialization at its first launch, one after another: a
cold run of a small model spends most of its first forwards in the Triton compiler. `ahead(run)`
calls run() once as a dry run in which every launch of this package's kernels is a warm-up
(`JITFunction.run(..., warmup=True)`, what `kernel.warmup` does: compile, launch nothing), under
`triton.AsyncCompileMode` with a thread pool, so the specializations the workload reaches compile
side by side while the dry run goes on (the compiler's C++ passes and ptxas release the GIL; see
triton/runtime/_async_compile.py and JITFunction._do_compile in triton/runtime/jit.py). The real
run then finds them compiled.

Triton's front end holds the GIL, so threads compile little faster than the first launches would.
With a `Pool` of worker processes, ahead() instead only records each specialization in the dry
run (Triton's jit_cache_hook, with its serialized specialization data, declining the compile)
and the workers compile them side by side (`JITFunction.preload`, as Triton reloads a kernel),
into Triton's cache on disk; the real run then loads each from there.

The dry run computes nothing: the kernels' outputs are whatever their launchers allocated, so
only shapes flow through it and its result is dropped. A specialization it misses (a branch taken
on data) compiles at its first launch as before. ahead() does nothing under the interpreter, with
autotuning on (the tuner would time launches that never ran), or where Triton lacks asynchronous
compiles; it refuses to warm up inside a device-graph capture, which would record no kernel.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Optional

import torch
import triton

from . import _backend, gpus

__all__ = ["Pool", "ahead", "available"]

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


# A compile worker: imports torch and Triton at once (while the caller goes on), then reads the
# package to load (its module name and __init__.py, so its kernels keep the names, and so the
# cache keys, they have in the caller) and one specialization per line, compiles each with
# JITFunction.preload and answers one JSON line per specialization.
_WORKER = r"""
import importlib, importlib.util, json, os, sys
import torch, triton
from triton.runtime.jit import JITFunction

def load_package(name, init):
    if name in sys.modules:
        return
    try:
        importlib.import_module(name)
        return
    except ImportError:
        pass
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[os.path.dirname(init)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)

def kernel(module, qualname):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise LookupError(f"no kernel {qualname} in {module}")
    while not isinstance(obj, JITFunction) and hasattr(obj, "fn"):
        obj = obj.fn  # an autotuner or heuristics wrapper
    if not isinstance(obj, JITFunction):
        raise LookupError(f"{module}.{qualname} is not a Triton kernel")
    return obj

head = json.loads(sys.stdin.readline() or "null")
if head is not None:
    load_package(head["name"], head["init"])
    for line in sys.stdin:
        job = json.loads(line)
        try:
            kernel(job["module"], job["qualname"]).preload(job["spec"])
            print(json.dumps({"ok": True}), flush=True)
        except Exception as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
            print(json.dumps({"ok": False, "error": f"{job['module']}.{job['qualname']}: {type(e).__name__}: {msg}"}),
                  flush=True)
"""


class Pool:
    """Worker processes that compile kernel specializations for ahead(). They start at once and
    import torch and Triton while the caller goes on (seconds each), so start a pool early;
    close() ends them. `processes` defaults to the CPU count, at most 16."""

    def __init__(self, processes: Optional[int] = None):
        self.processes = max(1, processes or min(16, os.cpu_count() or 1))
        self._procs = [subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                       for _ in range(self.processes)]
        self._started = False

    def _start(self) -> None:
        if self._started:
            return
        root = sys.modules[_ROOT]
        head = json.dumps({"name": _ROOT, "init": os.path.abspath(root.__file__)}) + "\n"
        for p in self._procs:
            p.stdin.write(head)
            p.stdin.flush()
        self._started = True

    def compile(self, jobs: List[dict]) -> List[dict]:
        """Each job's result ({"ok": True} or {"ok": False, "error": why}), the jobs spread over
        the workers, each worker taking its next job when it answered the last."""
        self._start()
        results: List[Optional[dict]] = [None] * len(jobs)
        lock = threading.Lock()
        todo = iter(range(len(jobs)))

        def serve(p):
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                try:
                    p.stdin.write(json.dumps(jobs[i]) + "\n")
                    p.stdin.flush()
                    line = p.stdout.readline()
                    results[i] = json.loads(line) if line else {"ok": False, "error": "the worker exited"}
                except (OSError, ValueError) as e:
                    results[i] = {"ok": False, "error": f"the worker failed: {e}"}
                    return

        threads = [threading.Thread(target=serve, args=(p,), daemon=True) for p in self._procs if p.poll() is None]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [r if r is not None else {"ok": False, "error": "no worker took it"} for r in results]

    def close(self, wait: bool = True) -> None:
        """End the workers' input: they exit once idle. wait=False returns at once (a later
        close() reaps them)."""
        for p in self._procs:
            try:
                p.stdin.close()
            except OSError:
                pass
        if not wait:
            return
        for p in self._procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


@contextlib.contextmanager
def _recording(ours: Callable[[object], bool], jobs: List[dict]):
    """Within: a compile of one of our kernels is declined and recorded as a job (its module,
    qualified name and Triton's serialized specialization data), once per specialization."""
    knobs = triton.knobs.runtime
    prev = knobs.jit_cache_hook
    seen = set()

    def hook(*args, **kwargs):
        fn = kwargs["fn"].jit_function
        if not ours(fn):
            return prev(*args, **kwargs) if prev is not None else None
        spec = kwargs["compile"]["specialization_data"]
        if spec not in seen:
            seen.add(spec)
            jobs.append({"module": fn.fn.__module__, "qualname": fn.fn.__qualname__, "spec": spec})
        return True

    knobs.jit_cache_hook = hook
    try:
        yield
    finally:
        knobs.jit_cache_hook = prev


def _ahead_in_processes(run, pool: Pool, ours, t0) -> Dict[str, object]:
    out: Dict[str, object] = {"processes": pool.processes}
    jobs: List[dict] = []
    with _recording(ours, jobs), _dry(ours):
        try:
            run()
        except Exception as e:  # garbage inputs may trip a check; what was reached still compiles
            out["error"] = f"dry run: {type(e).__name__}: {e}"
    out["dry_run_s"] = round(time.perf_counter() - t0, 3)
    results = pool.compile(jobs)
    failed = [r["error"] for r in results if not r.get("ok")]
    out["compiled"] = len(jobs) - len(failed)
    if failed:
        out.setdefault("error", f"{len(failed)} specialization(s) failed to compile ahead ({failed[0]}); "
                                "they compile at first launch")
    out["s"] = round(time.perf_counter() - t0, 3)
    return out


def ahead(run: Callable[[], object], *, threads: Optional[int] = None,
          ours: Callable[[object], bool] = _ours, pool: Optional[Pool] = None) -> Dict[str, object]:
    """Compile the kernel specializations run() launches, on `threads` threads (default: the CPU
    count, at most 32), by calling run() once as a dry run (see the module docstring). Returns
    {"compiled": specializations compiled, "s": seconds, "threads": n, "dry_run_s": seconds of
    run() itself}, with "skipped" (why) when it did nothing and "error" when run() raised in the
    dry run or a compile failed (what compiled still counts; the real run compiles the rest and
    raises any error where it happens). With a `pool`, its worker processes compile instead of
    threads ("processes": n in place of "threads")."""
    ok, why = available()
    if not ok:
        return {"compiled": 0, "s": 0.0, "threads": 0, "skipped": why}
    if _capturing():
        raise RuntimeError("precompile.ahead: called inside a device-graph capture")
    t0 = time.perf_counter()
    if pool is not None:
        return _ahead_in_processes(run, pool, ours, t0)
    n = threads or _threads()
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
