"""Compile the latency stage's torch.compile paths ahead, in helper processes, and time them there.

A cold eval spends most of its latency stage compiling: torch.compile of stock (the anchor) and of
the injected model at every point, with empty inductor and Triton caches. Nothing in the eval
before the latency stage needs those graphs, so two helper processes, one per side (stock,
injected), compile them while the driver runs its accuracy and generation stages. Each loads its
model as the driver does and runs the same latency code on the same points with the same
torch.compile settings (latency.py), up to the timed loop of its compiled path: that path's
set-up (compile, CUDA-graph recording) is kept, one per point.

In its latency stage the driver then hands each helper the device in turn, point by point, in
its own order of paths: the helper runs the timed loop of the case it set up (latency.time_held,
the same loop as every other path's) while the driver and the other helper wait, so nothing else
runs on the device during any timed loop. A compiled path is thus compiled once, not again in the
driver, and its set-up seconds are the helper's. A helper that fails costs nothing but its time:
the driver compiles and times that path itself, as without helpers; what the helpers compiled
also lands in the inductor and Triton caches on disk (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR,
which the driver's environment hands down), so such a compile is a cache hit
(torch/_inductor/codecache.py FxGraphCache, torch/_functorch/_aot_autograd/autograd_cache.py).
eval.json latency `compile_ahead` says what each helper compiled and timed, in how long.

Protocol, one JSON object per line: the driver starts `python compile_helpers.py` early (it
imports torch and transformers while the driver does) and writes a job once it has loaded its own
models; the helper answers with what it set up. Then each {"time": label, "n": calls} is answered
with {"point": label, "ms": ...} or {"point": label, "error": ...}; end of input: the helper
releases what it holds and exits (end of input without a job: nothing to do).
"""

from __future__ import annotations

import time

# When this process started (a helper's clock is sent back as wall times: the driver sets them
# against its own start)
STARTED = time.time()

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The sides, each in its own process, and the compiled path each compiles.
SIDES = {"stock": "stock_compiled", "injected": "injected_compiled"}
# Free device memory a helper leaves the driver, besides its own model: the driver's forwards'
# activations (a 2048-token prefill's fp32 logits alone are 1.2 GB for a 150K vocabulary).
MARGIN_FRACTION = 0.1
MARGIN_MIN_BYTES = 4 << 30
# What a helper holds on the device, per byte of its model: the model, plus its compiled graphs'
# memory pools and the static caches of the decode points.
HELPER_PER_MODEL_BYTE = 1.5
# How long the driver waits for its helpers before it stops them and compiles itself.
WAIT_S = 900
# How long one timed loop in a helper may take before the driver times that path itself.
TIME_S = 300


class Unavailable(Exception):
    """A helper cannot time a point (it failed, exited, or did not set the point up): the driver
    measures it itself."""


def wanted(args, world: int) -> str:
    """"" when the eval should start helpers, else why not: they serve the compiled paths of a
    single-process GPU run."""
    if args.compile_ahead == "off":
        return "--compile-ahead off"
    if args.latency in ("off", "eager"):
        return f"--latency {args.latency}: no compiled path"
    if world > 1:
        return "pipeline stages are timed on the eager paths only"
    if args.device == "cpu" or os.environ.get("TRITON_INTERPRET") == "1":
        return "the CPU run times no latency"
    return ""


def side_paths(names, side: str) -> list:
    """The paths of one side the driver times at each point, in its order, up to and including the
    side's compiled path: a helper runs them all, so the compiled path sees the model as the
    driver's will (what earlier paths created lazily, e.g. on a first forward, already exists)."""
    own = [n for n in names if n.startswith(side + "_")]
    compiled = SIDES[side]
    return own[: own.index(compiled) + 1] if compiled in own else []


def job_args(args) -> dict:
    """The latency flags a helper's run must share with the driver's (the points, and the decode
    steps that size the static cache), with a single timed call per point."""
    return {"prefill": args.prefill, "decode_batches": args.decode_batches, "decode_steps": args.decode_steps,
            "latency_points": args.latency_points, "seed": args.seed, "repeats": 1}


class Helpers:
    """The driver's helper processes: started early, given their jobs once the driver has loaded
    its models, waited for before the latency stage, then asked to time what they set up."""

    def __init__(self, procs):
        self.procs = procs  # side -> (Popen, stderr file)
        self.jobs = {}
        self.sent_at = None
        self.skipped = {}
        self.held = {}  # side -> the point labels its compiled path holds set up
        self.timed = {}  # side -> the point labels it timed
        self.gone = {}  # side -> why it can time nothing more
        self.lines = {}
        for side, (p, _) in procs.items():
            q = self.lines[side] = queue.Queue()
            threading.Thread(target=self._read, args=(p, q), daemon=True).start()

    @staticmethod
    def _read(p, q):
        """The helper's JSON lines, in order (anything else on its stdout is not protocol), then None."""
        for raw in p.stdout:
            try:
                got = json.loads(raw)
            except ValueError:
                continue
            if isinstance(got, dict):
                q.put(got)
        q.put(None)

    @classmethod
    def start(cls, sides=tuple(SIDES), argv=None, prepare=None, log_dir=None):
        """One helper process per side (argv: the command that runs one, by default this file).
        prepare: {"model", "package", "device"}, what each helper readies before its job
        (`prepare`), told at once; log_dir: a folder to keep each helper's stderr in."""
        procs = {}
        env = dict(os.environ)
        # The helpers compile at the same time: each with inductor's default (a worker per core)
        # would put twice the cores' workers on the CPU, each importing torch as it starts.
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(max(1, cpu_count() // max(1, len(sides)))))
        for side in sides:
            # log_dir keeps each helper's stderr (compile-helper-<side>.log): what a slow or stuck
            # compile printed is there after the run
            err = (open(Path(log_dir) / f"compile-helper-{side}.log", "w+b") if log_dir is not None
                   else tempfile.TemporaryFile(mode="w+b"))
            p = subprocess.Popen(argv or [sys.executable, str(HERE / "compile_helpers.py")], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=err, cwd=str(HERE), env=env)
            procs[side] = (p, err)
            if prepare:
                try:
                    p.stdin.write((json.dumps({"prepare": prepare}) + "\n").encode())
                    p.stdin.flush()
                except OSError:
                    pass  # it died at once: wait() reports it
        return cls(procs)

    def send(self, jobs: dict, skipped=None) -> None:
        """Give each helper its job (side -> job dict); a side without one is told to exit."""
        self.sent_at = time.time()
        self.skipped = dict(skipped or {})
        for side, (p, _) in self.procs.items():
            job = jobs.get(side)
            try:
                if job is not None:
                    p.stdin.write((json.dumps(job) + "\n").encode())
                    p.stdin.flush()
                    self.jobs[side] = job
                else:
                    p.stdin.close()
            except OSError:
                pass  # the helper died already: wait() reports it

    def _why_dead(self, side, limit_s=None) -> str:
        p, err = self.procs[side]
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        err.seek(0)
        tail = err.read().decode(errors="replace").strip().splitlines()[-3:]
        why = f"stopped after {limit_s} s" if limit_s is not None else f"exit code {p.returncode}"
        return why + (": " + " | ".join(tail) if tail else "")

    def _line(self, side, limit_s):
        """The side's next protocol line within limit_s, or Unavailable (it exited, or was too
        slow: then it is stopped)."""
        try:
            got = self.lines[side].get(timeout=max(0.0, limit_s))
        except queue.Empty:
            self.procs[side][0].kill()
            self.gone[side] = self._why_dead(side, round(limit_s))
            raise Unavailable(self.gone[side])
        if got is None:
            self.gone[side] = self._why_dead(side)
            raise Unavailable(self.gone[side])
        return got

    def wait(self, timeout=WAIT_S) -> dict:
        """Every helper's set-up: {"helpers": [...]} with each side's compiled points or error."""
        if self.sent_at is None:  # never given a job: they would wait for one
            self.send({}, dict.fromkeys(self.procs, "the eval gave it no job"))
        out = []
        deadline = time.time() + timeout
        for side in self.procs:
            row = {"side": side}
            if side not in self.jobs:
                row["skipped"] = self.skipped.get(side, "no job")
                self.close(side)
                out.append(row)
                continue
            try:
                got = self._line(side, deadline - time.time())
            except Unavailable as e:
                row["error"] = str(e)
                out.append(row)
                continue
            row.update(got)
            self.held[side] = list(got.get("held", ()))
            if "error" in got or not self.held[side]:
                self.close(side)
            out.append(row)
        return {"helpers": out}

    def time(self, side, label, n, timeout=TIME_S):
        """(ms, setup_s) of the side's held case at point `label` over n calls, timed in the
        helper; Unavailable when it cannot be."""
        if side in self.gone:
            raise Unavailable(self.gone[side])
        if label not in self.held.get(side, ()):
            raise Unavailable(f"the {side} helper did not set up {label}")
        p = self.procs[side][0]
        try:
            p.stdin.write((json.dumps({"time": label, "n": n}) + "\n").encode())
            p.stdin.flush()
        except OSError:
            self.gone[side] = self._why_dead(side)
            raise Unavailable(self.gone[side])
        got = self._line(side, timeout)
        if "error" in got:
            raise Unavailable(got["error"])
        self.timed.setdefault(side, []).append(label)
        return got["ms"], got.get("setup_s")

    def close(self, side=None, timeout=60, wait=True) -> None:
        """End the side's input (every side's, by default) and wait up to timeout seconds in all
        for it to exit, then stop it (wait=False: it releases what it holds and exits by itself;
        a later close() reaps it)."""
        for s in ([side] if side else list(self.procs)):
            p, _ = self.procs[s]
            try:
                p.stdin.close()
            except OSError:
                pass
        if not wait:
            return
        deadline = time.time() + timeout
        for s in ([side] if side else list(self.procs)):
            p, _ = self.procs[s]
            try:
                p.wait(timeout=max(0.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def cpu_count() -> int:
    """The cores this process may run on (inductor counts them the same way)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cache_counters() -> dict:
    """The process's inductor and AOTAutograd cache hits and misses so far."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return {}
    return {"fxgraph_hit": int(counters["inductor"].get("fxgraph_cache_hit", 0)),
            "fxgraph_miss": int(counters["inductor"].get("fxgraph_cache_miss", 0)),
            "autograd_hit": int(counters["aot_autograd"].get("autograd_cache_hit", 0)),
            "autograd_miss": int(counters["aot_autograd"].get("autograd_cache_miss", 0))}


def warm_compile_pool() -> None:
    """Start inductor's compile worker processes now (they import torch, seconds each) rather
    than at the first compile (torch/_inductor/async_compile.py maybe_warm_pool)."""
    try:
        from torch._inductor.async_compile import maybe_warm_pool
    except ImportError:
        return
    maybe_warm_pool()


def compile_phases() -> dict:
    """Seconds this process's torch.compile calls spent in each of dynamo's timed phases so far
    (torch/_dynamo/utils.py compile_times: tracing, AOTAutograd, inductor's lowering and code
    generation, ...), the longest first."""
    try:
        from torch._dynamo.utils import compile_times
        names, values = compile_times(repr="csv", aggregate=True)
    except Exception:  # an internal API: its absence costs only this breakdown
        return {}
    got = {}
    for name, v in zip(names, values):
        try:
            got[str(name)] = round(float(v), 3)
        except (TypeError, ValueError):
            continue
    return dict(sorted(got.items(), key=lambda kv: -kv[1]))


def memory_plan(device, sides_bytes: dict, reserve: int = 0):
    """(sides that fit, {side: why not}) given each side's model bytes and the device's free memory
    now, leaving the driver MARGIN of the total and `reserve` bytes it has still to load."""
    import torch

    if device.type != "cuda":
        return list(sides_bytes), {}
    free, total = torch.cuda.mem_get_info(device)
    left = free - max(MARGIN_MIN_BYTES, int(MARGIN_FRACTION * total)) - int(reserve)
    fit, why = [], {}
    for side, n in sides_bytes.items():
        need = int(HELPER_PER_MODEL_BYTE * n)
        if need <= left:
            fit.append(side)
            left -= need
        else:
            why[side] = (f"{need / 2**30:.1f} GiB needed, {max(left, 0) / 2**30:.1f} GiB free beside the eval's "
                         f"own models and margin")
    return fit, why


def prepare(spec, clock=None) -> None:
    """Ready what a job needs that does not depend on it, while the driver loads its own models:
    the device's context and math libraries, the model's config and class (its modeling module),
    the package, and torch.compile's own modules (else imported at its first call). The job's
    device memory waits for the job, which the driver sends once it knows what fits. clock gets
    the wall time each step ended."""
    import torch

    import eval_driver as ed
    import latency  # noqa: F401

    clock = {} if clock is None else clock
    device = ed.pick_device(spec["device"])
    if device.type in ("cuda", "xpu"):
        a = torch.ones((16, 16), dtype=torch.bfloat16, device=device)
        (a @ a).sum().item()  # the context, and the BLAS handle every forward's matmuls use
    clock["prepared_device"] = time.time()
    cfg = __import__("transformers").AutoConfig.from_pretrained(spec["model"])
    ed.model_class(cfg)
    clock["prepared_model_class"] = time.time()
    ed.load_package(spec["package"], device)
    clock["prepared_package"] = time.time()
    import torch._dynamo  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401


def run_job(job):
    """Load the job's model as the driver does, run the graph runtime's generation at the driver's
    shape (when the job has one), then the latency code on the side's paths, holding the compiled
    path's set-up at every point. (result line, latency.Paths holding the cases, device)."""
    import torch

    import eval_driver as ed
    import latency as lat

    t0 = time.time()
    device = torch.device(job["device"])
    dtype = getattr(torch, job["dtype"])
    cfg = __import__("transformers").AutoConfig.from_pretrained(job["model"])
    cls = ed.model_class(cfg)
    model = ed.load(cls, job["model"], dtype, device)
    # the driver has the package loaded (and its stock model beside an injected one) when it
    # compiles either side: so do both helpers
    pkg, _ = ed.load_package(job["package"], device)
    if job["side"] == "injected":
        pkg.inject(model, packed=job["packed"])
    rtmod = ed.runtime_module(job["package"], device)
    loaded = time.time() - t0
    errors = {}
    paths = lat.Paths(model, model, rtmod, errors)
    compiled = SIDES[job["side"]]
    paths.hold = (compiled,)
    names = tuple(job["paths"])
    ns = types.SimpleNamespace(**job["args"])
    vision = cfg.model_type == ed.VISION_TYPE
    # the driver's models have run eagerly before its latency stage: state a model creates at its
    # first forward (a cache of derived tensors) must not be created inside a compiled graph here.
    # A path the side runs before its compiled one at each point creates it (an eager path, or
    # the graph runtime's eager warm-ups before its capture), at the shapes the compiled path then
    # launches; else one eager forward does, whose kernels no point may use.
    if compiled not in names or names.index(compiled) == 0:
        with torch.no_grad():
            if vision:
                model(pixel_values=ed.make_images(1, getattr(cfg, "image_size", 224), 0).to(device).to(dtype))
            else:
                model(input_ids=torch.zeros((1, 16), dtype=torch.long, device=device))
    eager = time.time() - t0 - loaded
    gen = job.get("runtime_generation")
    t1 = time.time()
    if gen:
        # the driver's graph-runtime generation, on prompts of its shape (the tokens do not matter)
        g = torch.Generator().manual_seed(0)
        prompts = [torch.randint(0, cfg.vocab_size, (1, gen["length"]), generator=g).to(device)
                   for _ in range(gen["prompts"])]
        ed.runtime_greedy(rtmod, model, prompts, gen["new_tokens"])
    generated = time.time() - t1
    if vision:
        got = lat.vision_latency(paths, names, cfg, device, ns, ed.make_images)
        rows = [(f"batch {r['batch']}", r) for r in got["forward"]]
    else:
        got = lat.latency(paths, names, cfg, device, ns)
        rows = [(f"prefill {r['tokens']}", r) for r in got["prefill"]]
        rows += [(f"decode batch {r['batch']}", r) for r in got["decode"]]
    points = [{"point": label, "setup_s": r["setup_s"].get(compiled)} for label, r in rows]
    out = {"path": compiled, "paths": list(names), "points": points, "held": list(paths.held),
           "load_s": round(loaded, 3), "eager_s": round(eager, 3), "s": round(time.time() - t0, 3),
           "compile_phases": compile_phases()}
    if gen:
        out["runtime_generation_s"] = round(generated, 3)
    if errors:
        out["errors"] = errors
    return out, paths, device


def serve(paths, device, lines) -> None:
    """Answer the driver's timing requests on the held cases until its input ends, then release them."""
    import latency as lat

    path = paths.hold[0]
    try:
        for line in lines:
            if not line.strip():
                continue
            req = json.loads(line)
            label = req["time"]
            try:
                ms, setup = lat.time_held(paths, path, label, int(req["n"]), device)
                out = {"point": label, "ms": ms, "setup_s": setup}
            except Exception as e:
                out = {"point": label, "error": f"{path} at {label}: {type(e).__name__}: {first_line(e)}"}
            print(json.dumps(out), flush=True)
    finally:
        lat.release_held(paths)


def first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else ""


def main() -> int:
    sys.path.insert(0, str(HERE))
    import eval_sharded

    eval_sharded.die_with_parent()  # a helper never outlives the eval (kill -9 included)
    # the imports the driver pays too, paid here while the driver pays its own
    import torch  # noqa: F401
    import transformers  # noqa: F401

    clock = {"started": STARTED, "imported": time.time()}
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    job = json.loads(line)
    prepare_error, readied = None, "prepare" in job
    if readied:
        clock["prepare"] = time.time()
        try:
            prepare(job["prepare"], clock)
        except BaseException as e:  # the job then meets the same failure, and says it
            prepare_error = f"{type(e).__name__}: {first_line(e)}"
        clock["prepared"] = time.time()
    # after readying: inductor's modules are imported by then, and the workers start importing
    # torch beside the wait for the job rather than beside the readying
    warm_compile_pool()
    clock["pool_started"] = time.time()
    if readied:
        line = sys.stdin.readline()
        if not line.strip():
            return 0
        job = json.loads(line)
    clock["job"] = time.time()
    try:
        out, paths, device = run_job(job)
    except Exception as e:
        import traceback

        traceback.print_exc()
        print(json.dumps({"error": f"{type(e).__name__}: {first_line(e)}"}), flush=True)
        return 0
    clock["ready"] = time.time()
    out["clock"] = clock
    if prepare_error:
        out["prepare_error"] = prepare_error
    print(json.dumps(out), flush=True)
    serve(paths, device, iter(sys.stdin.readline, ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
