"""Compile the latency stage's torch.compile paths ahead, in helper processes.

A cold eval spends most of its latency stage compiling: torch.compile of stock (the anchor) and of
the injected model at every point, with empty inductor and Triton caches. Nothing in the eval
before the latency stage needs those graphs, so two helper processes, one per side (stock,
injected), compile them while the driver runs its accuracy and generation stages. Each loads its
model as the driver does, runs the same latency code on the same points with the same
torch.compile settings (latency.py: its set-up and a shortened timed loop), and exits. What it
compiled lands in the inductor and Triton caches on disk (TORCHINDUCTOR_CACHE_DIR,
TRITON_CACHE_DIR, which the driver's environment hands down), so the driver's own compile of the
same graph later is a cache hit: dynamo traces it again, and inductor loads the compiled code
instead of generating it (torch/_inductor/codecache.py FxGraphCache,
torch/_functorch/_aot_autograd/autograd_cache.py).

The driver waits for both before it times anything: the helpers' work must never overlap a timed
loop. Its figures are its own (set-up and timing); eval.json latency `compile_ahead` says what each
helper compiled, in how long, and how many of the driver's compiles then hit the cache. A helper
that fails costs nothing but its time: the driver compiles that path itself, as without helpers.

Protocol: the driver starts `python compile_helpers.py` early (it imports torch and transformers
while the driver does), writes one JSON job line to its stdin once it has loaded its own models,
and reads one JSON result line from its stdout. End of input without a job: nothing to do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
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


def wanted(args, world: int, model_type: str = "") -> str:
    """"" when the eval should start helpers, else why not: they serve the compiled paths of a
    single-process GPU run of a text model (a vision eval's stages before its latency take a few
    seconds: nothing to hide a compile behind)."""
    if args.compile_ahead == "off":
        return "--compile-ahead off"
    if args.latency in ("off", "eager"):
        return f"--latency {args.latency}: no compiled path"
    if world > 1:
        return "pipeline stages are timed on the eager paths only"
    if args.device == "cpu" or os.environ.get("TRITON_INTERPRET") == "1":
        return "the CPU run times no latency"
    if model_type in VISION_TYPES:
        return f"a {model_type} eval has no long stage before its latency to compile beside"
    return ""


# Model types the eval treats as vision models (eval_driver: levit).
VISION_TYPES = ("levit",)


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
    its models, waited for before the latency stage."""

    def __init__(self, procs):
        self.procs = procs  # side -> (Popen, stderr file)
        self.jobs = {}
        self.sent_at = None
        self.skipped = {}

    @classmethod
    def start(cls, sides=tuple(SIDES)):
        procs = {}
        for side in sides:
            err = tempfile.TemporaryFile(mode="w+b")
            p = subprocess.Popen([sys.executable, str(HERE / "compile_helpers.py")], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=err, cwd=str(HERE))
            procs[side] = (p, err)
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
                    self.jobs[side] = job
                p.stdin.close()
            except OSError:
                pass  # the helper died already: wait() reports it

    def wait(self, timeout=WAIT_S) -> dict:
        """Every helper's result: {"helpers": [...]} with each side's compiled points or error."""
        if self.sent_at is None:  # never given a job: they would wait for one
            self.send({}, dict.fromkeys(self.procs, "the eval gave it no job"))
        out = []
        deadline = time.time() + timeout
        results = {}

        def read(side, p):
            results[side] = p.stdout.read()

        readers = [threading.Thread(target=read, args=(s, p), daemon=True) for s, (p, _) in self.procs.items()]
        for t in readers:
            t.start()
        for side, (p, err) in self.procs.items():
            left = max(0.0, deadline - time.time())
            try:
                p.wait(timeout=left)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for t in readers:
            t.join(timeout=5)
        for side, (p, err) in self.procs.items():
            row = {"side": side}
            if side not in self.jobs:
                row["skipped"] = self.skipped.get(side, "no job")
                out.append(row)
                err.close()
                continue
            line = (results.get(side) or b"").decode(errors="replace").strip().splitlines()
            got = None
            if line:
                try:
                    got = json.loads(line[-1])
                except ValueError:
                    got = None
            if got is None:
                err.seek(0)
                tail = err.read().decode(errors="replace").strip().splitlines()[-3:]
                why = f"exit code {p.returncode}" if p.returncode is not None else "no result"
                if p.returncode == -9 and time.time() >= deadline:
                    why = f"stopped after {timeout} s"
                row["error"] = why + (": " + " | ".join(tail) if tail else "")
            else:
                row.update(got)
            err.close()
            out.append(row)
        return {"helpers": out}


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


def memory_plan(device, sides_bytes: dict):
    """(sides that fit, {side: why not}) given each side's model bytes and the device's free memory
    now, leaving the driver MARGIN of the total."""
    import torch

    if device.type != "cuda":
        return list(sides_bytes), {}
    free, total = torch.cuda.mem_get_info(device)
    left = free - max(MARGIN_MIN_BYTES, int(MARGIN_FRACTION * total))
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


def run_job(job) -> dict:
    """Load the job's model as the driver does, run the graph runtime's generation at the driver's
    shape (when the job has one), then the latency code on the side's paths."""
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
    names = tuple(job["paths"])
    ns = types.SimpleNamespace(**job["args"])
    # the driver's models have run eagerly before its latency stage: state a model creates at its
    # first forward (a cache of derived tensors) must not be created inside a compiled graph here
    with torch.no_grad():
        model(input_ids=torch.zeros((1, 16), dtype=torch.long, device=device))
    gen = job.get("runtime_generation")
    t1 = time.time()
    if gen:
        # the driver's graph-runtime generation, on prompts of its shape (the tokens do not matter)
        g = torch.Generator().manual_seed(0)
        prompts = [torch.randint(0, cfg.vocab_size, (1, gen["length"]), generator=g).to(device)
                   for _ in range(gen["prompts"])]
        ed.runtime_greedy(rtmod, model, prompts, gen["new_tokens"])
    generated = time.time() - t1
    got = lat.latency(paths, names, cfg, device, ns)
    compiled = SIDES[job["side"]]
    points = [{"point": f"prefill {r['tokens']}", "setup_s": r["setup_s"].get(compiled)} for r in got["prefill"]]
    points += [{"point": f"decode batch {r['batch']}", "setup_s": r["setup_s"].get(compiled)} for r in got["decode"]]
    out = {"path": compiled, "paths": list(names), "points": points, "load_s": round(loaded, 3),
           "s": round(time.time() - t0, 3)}
    if gen:
        out["runtime_generation_s"] = round(generated, 3)
    if errors:
        out["errors"] = errors
    return out


def main() -> int:
    sys.path.insert(0, str(HERE))
    import eval_sharded

    eval_sharded.die_with_parent()  # a helper never outlives the eval (kill -9 included)
    # the imports the driver pays too, paid here while the driver pays its own
    import torch  # noqa: F401
    import transformers  # noqa: F401

    warm_compile_pool()

    line = sys.stdin.readline()
    if not line.strip():
        return 0
    job = json.loads(line)
    try:
        out = run_job(job)
    except Exception as e:
        import traceback

        traceback.print_exc()
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        out = {"error": f"{type(e).__name__}: {msg}"}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
