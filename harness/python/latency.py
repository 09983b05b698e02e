"""The eval's latency stage: every path a point is measured on is timed by the same function.

Decode is timed as a generation runs it: each path gives a `step()` that makes one new token for
every row (the forward on a static KV cache and the token selection, argmax, fed back as the next
input), and `time_decode` calls it N times in a loop after the same warm-up, between two device
syncs: wall milliseconds / N. Prefill and vision forwards are one call each, timed by `time_call`
(the same loop, N calls). A path's one-time set-up (torch.compile's compile and CUDA-graph
recording, or the graph runtime's capture) runs before its timed loop and is reported apart.

Paths:
  stock_eager        stock transformers, eager (the graph runtime's steps, not captured)
  stock_compiled     stock on a transformers StaticCache under
                     torch.compile(mode="reduce-overhead", fullgraph=True): the anchor
  stock_graph        stock under the package's graph runtime
  injected_graph     injected under the graph runtime: the product's default (`generate`, the card)
  injected_compiled  injected on a StaticCache under torch.compile(mode="reduce-overhead",
                     fullgraph=True) (the kernels are custom ops)
  injected_eager     injected, eager
  stock_best         mixture-of-experts models only: stock's fastest setting, the anchor there

A mixture-of-experts model's stock side is timed on every experts implementation transformers
offers (EXPERTS_IMPLEMENTATIONS), each eager and compiled as above: `stock_eager` and
`stock_compiled` read their fastest setting, `stock_best` the fastest of all, and the point's
`stock_experts` lists every setting with its figure or why it could not run. Dense models have no
such setting and are timed as they load.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time

WARMUP = 3
# The product's default decode path: what `xpuinject generate` and the package's card use.
DEFAULT_PATH = "injected_graph"

# The paths a point is measured on, by --latency mode.
LATENCY_PATHS = {
    "eager": ("stock_eager", "injected_eager"),
    "graph": ("stock_compiled", "stock_graph", "injected_graph", "injected_compiled"),
    "both": ("stock_eager", "stock_compiled", "stock_graph", "injected_graph", "injected_compiled", "injected_eager"),
}
# The points each --latency-points preset times. Every point costs each compiled path a
# torch.compile with static shapes, which dominates a cold run's wall: quick times one prefill and
# one decode point (vision: batch 32), full adds decode batch 8 (vision: batch 1). An explicit
# --prefill or --decode-batches replaces the preset's list of that kind.
LATENCY_POINTS = {
    "quick": {"prefill": (512,), "decode": (1,), "forward": (32,)},
    "full": {"prefill": (512,), "decode": (1, 8), "forward": (1, 32)},
}
# The driver's flags that replace a preset's list, by the list they replace.
POINT_FLAGS = {"prefill": "--prefill", "decode": "--decode-batches"}
# Stock's fastest experts implementation (mixture-of-experts models only): the anchor there.
BEST_PATH = "stock_best"
# What transformers 5.17 runs an MoE block's experts with without a kernel from the Hub
# (transformers/integrations/moe.py: the module's own loop over the experts hit, and the
# ExpertsInterface's batched_mm and grouped_mm; its deepgemm and sonicmoe fetch kernels from the Hub).
EXPERTS_IMPLEMENTATIONS = ("eager", "batched_mm", "grouped_mm")
# The stock paths timed on each experts implementation.
EXPERTS_PATHS = ("stock_eager", "stock_compiled")
# Ratios reported (numerator, denominator); the first present one is the headline: the default
# path against the anchor (stock_best where the model has experts, else stock_compiled).
LATENCY_RATIOS = (
    (DEFAULT_PATH, BEST_PATH),
    ("injected_compiled", BEST_PATH),
    (DEFAULT_PATH, "stock_compiled"),
    ("injected_compiled", "stock_compiled"),
    ("injected_graph", "stock_graph"),
    ("injected_eager", "stock_eager"),
)


def progress(msg: str) -> None:
    import sys

    print(f"xpuinject-eval: {msg}", file=sys.stderr, flush=True)


def device_sync(device):
    """A function that waits for every launch on device (a no-op on the CPU)."""
    import torch

    if device.type == "cuda":
        return torch.cuda.synchronize
    if device.type == "xpu":
        return torch.xpu.synchronize
    return lambda: None


# The host clock every path is timed with (a test replaces it).
clock = time.perf_counter


def time_decode(step, n: int, warmup: int, sync) -> float:
    """Milliseconds per call of step(): `warmup` calls, a sync, then n calls between two clock
    reads, the second after a sync. The one timer of every latency path."""
    if n < 1:
        raise ValueError(f"latency: n must be positive, got {n}")
    for _ in range(warmup):
        step()
    sync()
    t0 = clock()
    for _ in range(n):
        step()
    sync()
    return (clock() - t0) * 1e3 / n


# Forwards (prefill, vision) are timed by the same loop: a forward is its own "step".
time_call = time_decode


def set_up(step, sync) -> float:
    """Seconds of the first WARMUP calls: compile and CUDA-graph recording for a compiled path."""
    t0 = clock()
    for _ in range(WARMUP):
        step()
    sync()
    return clock() - t0


@contextlib.contextmanager
def no_recompile(path):
    """A compiled path must not compile again once set up: a recompile inside the timed loop
    would be timed as a step. torch raises instead, and the point records why the path failed."""
    if not path.endswith("compiled"):
        yield
        return
    import torch

    with torch.compiler.set_stance("fail_on_recompile"):
        yield


def point_ratios(ms):
    return {f"{a}/{b}": ms[a] / ms[b] for a, b in LATENCY_RATIOS
            if isinstance(ms.get(a), float) and isinstance(ms.get(b), float) and ms[b] > 0}


def latency_mode(want, device, rtmod):
    """--latency auto: graph where the device captures graphs, else eager."""
    if want != "auto":
        return want
    graphs, _ = rtmod.graph_support(device)
    return "graph" if graphs is not None else "eager"


class Paths:
    """The models of each latency path, built lazily: compiled models and runtimes exist only
    when a mode measures them."""

    def __init__(self, stock, injected, rtmod, errors):
        self.stock, self.injected, self.rt, self.errors = stock, injected, rtmod, errors
        # the stock model's experts implementation being timed (None: as loaded); compiled
        # functions are kept per setting, so no setting runs another's graphs
        self.experts = None
        self._compiled = {}
        self._decoders = {}
        # Paths whose set-up is kept rather than timed: {point label: (step, release, setup_s)}
        # of each (a compile helper times them later, when the driver hands it the device).
        self.hold = ()
        self.held = {}
        self.point = None  # the label of the point being measured
        # Paths another process times: remote(path, label, n, local) -> (ms, setup_s), where
        # local(path) measures it here instead (what a helper that failed leaves to the driver).
        self.remote = {}

    @staticmethod
    def compile(fn):
        """torch.compile as every compiled path uses it (static shapes: the fastest kernels)."""
        import torch

        # a compiled graph per prefill length and decode batch; the default limit of 8
        # recompiles would fall back to eager silently
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        return torch.compile(fn, mode="reduce-overhead", fullgraph=True, dynamic=False)

    def model(self, path):
        return self.stock if path.startswith("stock") else self.injected

    def compiled(self, path):
        """The path's model under torch.compile(mode="reduce-overhead", fullgraph=True): forwards."""
        key = (path, self.experts)
        c = self._compiled.get(key)
        if c is None:
            c = self._compiled[key] = self.compile(self.model(path))
        return c

    def release_compiled(self):
        """Drop the compiled functions and the CUDA-graph pools that mode="reduce-overhead"
        recorded for them. A pool keeps its graphs' buffers for replay, and one stock setting's
        (batched_mm experts copy each token's expert weights: tens of GB at a long prefill) would
        starve every path timed after it. Shapes are static, so each point compiles afresh anyway."""
        import gc

        import torch

        self._compiled.clear()
        self._decoders.clear()
        torch._dynamo.reset()  # its code caches hold the graphs, and it resets the CUDA-graph trees
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def decoder(self, path):
        """One compiled decode step of the path's model: forward on the cache, then argmax over
        the last logits in float32 (as the graph runtime and generate select), in one graph."""
        key = (path, self.experts)
        fn = self._decoders.get(key)
        if fn is None:
            model = self.model(path)
            kw = forward_kwargs(model)

            def decode(tok, pos, cache):
                logits = model(input_ids=tok, position_ids=pos, past_key_values=cache, use_cache=True, **kw).logits
                return logits[:, -1, :].float().argmax(-1, keepdim=True)

            fn = self._decoders[key] = self.compile(decode)
        return fn


def experts_modules(model):
    """The modules transformers runs through its experts interface (`@use_experts_implementation`
    sets has_gate on each): empty for a dense model."""
    return [m for m in model.modules() if hasattr(m, "has_gate") and hasattr(m, "num_experts")]


def experts_settings(model):
    """The experts implementations a model's stock side is timed on: EXPERTS_IMPLEMENTATIONS where
    transformers can switch the model's experts (PreTrainedModel.set_experts_implementation), none
    for a dense model."""
    can = getattr(type(model), "_can_set_experts_implementation", None)
    if can is None or not hasattr(model, "set_experts_implementation") or not can():
        return ()
    return EXPERTS_IMPLEMENTATIONS if experts_modules(model) else ()


@contextlib.contextmanager
def experts_implementation(model, name):
    """The model's experts run `name` inside; its setting before is restored after (transformers'
    get_experts_implementation snapshots it in the form set_experts_implementation takes)."""
    before = model.get_experts_implementation()
    model.set_experts_implementation(name)
    try:
        yield
    finally:
        model.set_experts_implementation(before)


def path_names(mode, model):
    """The paths a point is measured on in mode: LATENCY_PATHS, and for a model with experts
    settings stock eager too where stock compiled is timed (the fastest setting may be an eager
    one) and stock_best."""
    names = LATENCY_PATHS[mode]
    if not experts_settings(model):
        return names
    if "stock_compiled" in names and "stock_eager" not in names:
        names = ("stock_eager",) + names
    return names + (BEST_PATH,)


def forward_kwargs(model):
    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}


# The eval's stage clock (eval_driver.Stages): each path's set-up and timing is one stage.
STAGE = None


def stage(label):
    """The eval's stage clock around one step (nothing outside the eval)."""
    return STAGE(label) if STAGE is not None else contextlib.nullcontext()


def attempt(path, label, fn):
    """Run fn(path) -> (ms, setup_s, None), or (None, None, why) when it raised."""
    try:
        with stage(f"latency: {label} {path}"):
            return (*fn(path), None)
    except Exception as e:  # a compile or capture failure must not cost the other paths
        msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        where = raised_at(e)
        if where:
            msg += f" (raised at {where})"
        progress(f"latency {label} {path}: failed: {msg}")
        return None, None, msg


def raised_at(e: BaseException) -> str:
    """file:line in function of the innermost frame outside torch that led to e: the model or
    package code that made the failing call (a capture error names no frame of its own)."""
    import traceback

    frames = [f for f in traceback.extract_tb(e.__traceback__) if f"{os.sep}torch{os.sep}" not in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    parts = f.filename.split(os.sep)
    short = os.sep.join(parts[parts.index("site-packages") + 1:]) if "site-packages" in parts else os.path.basename(f.filename)
    return f"{short}:{f.lineno} in {f.name}"


def measure(paths, path, label, fn):
    """Run fn(path) -> (ms, setup_s); a path that fails is recorded once and reads null."""
    ms, setup, why = attempt(path, label, fn)
    if why is not None:
        paths.errors.setdefault(path, f"{label}: {why}")
    return ms, setup


def measure_experts(paths, path, label, fn, row):
    """Time the stock path on each experts implementation: every setting's figure, or why it could
    not run, goes to row["stock_experts"]; the path reads its fastest (null, with each setting's
    reason in paths.errors, when none ran)."""
    model = paths.model(path)
    tried = row.setdefault("stock_experts", [])
    got = []
    for name in experts_settings(model):
        def on_setting(p, name=name):
            with experts_implementation(model, name):
                return fn(p)

        paths.experts = name
        try:
            ms, setup, why = attempt(path, f"{label} ({name} experts)", on_setting)
        finally:
            paths.experts = None
        e = {"path": path, "experts_implementation": name, "ms": ms}
        if setup is not None:
            e["setup_s"] = setup
        if why is not None:
            e["error"] = why
        tried.append(e)
        got.append(e)
    ok = [e for e in got if e["ms"] is not None]
    if not ok:
        paths.errors.setdefault(path, f"{label}: no experts implementation ran: " +
                                "; ".join(f"{e['experts_implementation']}: {e['error']}" for e in got))
        return None, None
    best = min(ok, key=lambda e: e["ms"])
    row.setdefault("experts_implementation", {})[path] = best["experts_implementation"]
    return best["ms"], best.get("setup_s")


def measure_point(paths, names, label, fn, row, n):
    """Every path in names at one point into row: ms, setup_s, and for a model with experts
    settings each stock setting, the fastest as stock_best and the `anchor` that names it.
    fn(path) measures a path here with n timed calls; a path in paths.remote is timed by the
    process that set it up."""
    sweep = bool(experts_settings(paths.stock))
    for name in names:
        if name == BEST_PATH:
            continue
        paths.point = label
        if sweep and name in EXPERTS_PATHS:
            ms, setup = measure_experts(paths, name, label, fn, row)
        elif name in paths.remote:
            ms, setup = measure(paths, name, label, lambda p: paths.remote[p](p, label, n, fn))
        else:
            ms, setup = measure(paths, name, label, fn)
        row["ms"][name] = ms
        if setup is not None:
            row["setup_s"][name] = setup
    if BEST_PATH in names:
        ok = [e for e in row.get("stock_experts", []) if e["ms"] is not None]
        row["ms"][BEST_PATH] = None
        if ok:
            best = min(ok, key=lambda e: e["ms"])
            row["ms"][BEST_PATH] = best["ms"]
            row["anchor"] = {"path": best["path"], "experts_implementation": best["experts_implementation"]}
        else:
            paths.errors.setdefault(BEST_PATH, f"{label}: no stock setting ran")
    row["ratios"] = point_ratios(row["ms"])


def forward_case(paths, path, call, device):
    """(step, release, setup_s) of one forward call(model) on path (prefill, vision), set up:
    compiled and CUDA-graph recorded, or captured by the graph runtime."""
    if path.endswith("eager"):
        m = paths.model(path)
        return (lambda: call(m)), (lambda: None), None
    if path.endswith("compiled"):
        try:
            c = paths.compiled(path)
            setup = set_up(lambda: call(c), device_sync(device))
        except BaseException:
            paths.release_compiled()  # a failed compile's partial graphs
            raise
        return (lambda: call(c)), paths.release_compiled, setup
    gf = paths.rt.GraphedForward(paths.model(path), graphs=True)
    try:
        call(gf)
    except BaseException:
        gf.release()
        raise
    return (lambda: call(gf)), gf.release, gf.stats["capture_s"]


def time_case(paths, path, case, n, device):
    """ms per call of a set-up case over n calls, and its set-up seconds; the case is released
    after. A path in paths.hold is kept instead, untimed (ms None), for time_held."""
    step, release, setup = case
    if path in paths.hold:
        import torch

        # with the grad mode it was set up in: a compiled forward guards on it
        paths.held[paths.point] = (step, release, setup, torch.is_grad_enabled())
        return None, setup
    try:
        return timed(path, step, n, device), setup
    finally:
        release()


def timed(path, step, n, device) -> float:
    """ms per call of a set-up step: the one timed loop of every case, held or not."""
    with no_recompile(path):
        return time_decode(step, n, WARMUP, device_sync(device))


def time_held(paths, path, label, n, device):
    """Time a held case (set up earlier by this process) as time_case would have then."""
    import torch

    step, _, setup, grad = paths.held[label]
    with torch.set_grad_enabled(grad):
        return timed(path, step, n, device), setup


def release_held(paths):
    """Release every held case (a compiled one drops every compiled graph: once is enough)."""
    done = set()
    for _, release, _, _ in paths.held.values():
        key = getattr(release, "__func__", release)
        if key not in done:
            done.add(key)
            release()
    paths.held.clear()


def forward_point(paths, path, call, device, n):
    """ms of one forward `call(model)` on path (prefill, vision), and its set-up seconds."""
    return time_case(paths, path, forward_case(paths, path, call, device), n, device)


def decode_stepper(paths, path, ids, cfg, cache_len, steps):
    """(step, release, setup_s) for path after a prefill of ids: step() makes the next token of
    every row. Compiled paths set up here (compile, CUDA-graph recording); runtime paths capture
    in start(). `steps` is how many steps the caller may take."""
    import torch

    B, ctx = ids.shape
    model = paths.model(path)
    if path.endswith("compiled"):
        fn = paths.decoder(path)
        # the runtime's cache: sliding-window layers full-length (the mask applies the window), so
        # the static-shape compile does not guard on a host-side token counter and recompile per step
        cache = paths.rt.static_cache(cfg, cache_len)
        with torch.no_grad():
            # the prefill runs eagerly, as transformers' generate runs it with a compiled forward
            out = model(input_ids=ids, past_key_values=cache, use_cache=True, **forward_kwargs(model))
            tok = out.logits[:, -1:, :].float().argmax(-1)
            del out
        pos = torch.full((B, 1), ctx, dtype=torch.long, device=ids.device)

        def step():
            # the cache writes at its own counter, which each call advances
            with torch.no_grad():
                tok.copy_(fn(tok, pos, cache))
            pos.add_(1)

        setup = set_up(step, device_sync(ids.device))
        return step, paths.release_compiled, setup
    r = paths.rt.Runtime(model, graphs=path.endswith("graph"))
    t0 = time.perf_counter()
    # no EOS: every step runs
    gen = r.start(ids, max_new_tokens=steps + WARMUP + 1, eos_token_id=[], max_cache_len=cache_len)
    setup = (time.perf_counter() - t0) if r.graphs else None
    set_up(gen.step, device_sync(ids.device))  # the same first calls the compiled paths spend on set-up
    return gen.step, r.release, setup


def decode_point(paths, path, ids, cfg, cache_len, n):
    """ms per token of path at batch ids.shape[0] after a prefill of ids, and its set-up."""
    try:
        case = decode_stepper(paths, path, ids, cfg, cache_len, n + WARMUP)
    except BaseException:
        if path.endswith("compiled"):
            paths.release_compiled()  # a failed compile's partial graphs
        raise
    return time_case(paths, path, case, n, ids.device)


def latency(paths, names, cfg, device, args):
    """Prefill at each length (batch 1) and per-token decode (each batch) on every path in names."""
    import torch

    vocab = cfg.vocab_size
    g = torch.Generator().manual_seed(args.seed + 1)
    rows = {"prefill": [], "decode": [], "peak_memory_bytes": {}}
    lengths = [int(x) for x in args.prefill.split(",") if x]
    batches = [int(x) for x in args.decode_batches.split(",") if x]
    kw = forward_kwargs(paths.stock)
    for L in lengths:
        ids = torch.randint(0, vocab, (1, L), generator=g).to(device)
        row = {"tokens": L, "batch": 1, "ms": {}, "setup_s": {}}
        with torch.no_grad():
            measure_point(paths, names, f"prefill {L}", lambda p: forward_point(
                paths, p, lambda m: m(input_ids=ids, use_cache=False, **kw), device, args.repeats), row, args.repeats)
        rows["prefill"].append(row)
        progress(f"latency prefill {L}: " + describe_point(row))
    ctx = 512
    n = args.decode_steps
    cache_len = paths.rt.cache_bucket(ctx + 2 * WARMUP + n + 1)
    for B in batches:
        ids = torch.randint(0, vocab, (B, ctx), generator=g).to(device)
        row = {"batch": B, "context": ctx, "cache_len": cache_len, "steps": n, "ms": {}, "setup_s": {}}
        measure_point(paths, names, f"decode batch {B}", lambda p: decode_point(paths, p, ids, cfg, cache_len, n), row, n)
        rows["decode"].append(row)
        progress(f"latency decode batch {B}: " + describe_point(row))
    return rows


def resolve_points(args) -> None:
    """Fills args.prefill and args.decode_batches (comma-separated, as the flags take them) from
    the --latency-points preset where the flag was not given, and records in args.points_flags
    the flags that were."""
    preset = LATENCY_POINTS[args.latency_points]
    args.points_flags = []
    for kind, attr in (("prefill", "prefill"), ("decode", "decode_batches")):
        if getattr(args, attr) is None:
            setattr(args, attr, ",".join(str(n) for n in preset[kind]))
        else:
            args.points_flags.append(POINT_FLAGS[kind])


def points_record(args, vision: bool) -> dict:
    """eval.json latency `points` (the preset), `points_flags` (the flags that replaced its
    lists) and `full_adds`: the points --latency-points full would add, by kind, after quick."""
    flags = [] if vision else list(args.points_flags)  # a vision model has no prefill or decode list
    rec = {"points": args.latency_points}
    if flags:
        rec["points_flags"] = flags
    if args.latency_points == "quick":
        kinds = ("forward",) if vision else [k for k, f in POINT_FLAGS.items() if f not in flags]
        adds = {k: [n for n in LATENCY_POINTS["full"][k] if n not in LATENCY_POINTS["quick"][k]] for k in kinds}
        if any(adds.values()):
            rec["full_adds"] = {k: v for k, v in adds.items() if v}
    return rec


def method(args, vision: bool) -> str:
    loop = (f"wall time of {{n}} calls in a loop after {WARMUP} warm-ups, between two device syncs, / {{n}}; "
            f"every path timed by the same function")
    if vision:
        return (loop.format(n=args.repeats) + "; compiled = torch.compile(mode=\"reduce-overhead\", fullgraph=True); "
                "graph = captured once per batch size, replayed")
    return ("decode: ms per token as a generation runs it, " + loop.format(n=args.decode_steps) +
            ", each step a forward on a static KV cache after a 512-token prompt plus the argmax fed back as the next "
            "input; prefill: one forward (logits of the last token), " + loop.format(n=args.repeats) +
            "; compiled = a StaticCache under torch.compile(mode=\"reduce-overhead\", fullgraph=True), "
            "the prefill eager; graph = the xpuinject graph runtime, captured once, replayed")


def describe_point(row):
    parts = [f"{k} {v:.3f} ms" for k, v in row["ms"].items() if v is not None]
    parts += [f"{k} {v:.2f}x" for k, v in row["ratios"].items()][:1]
    return ", ".join(parts)


def vision_latency(paths, names, cfg, device, args, make_images):
    """Forward latency at the --latency-points preset's batches on every path in names."""
    import torch

    size = getattr(cfg, "image_size", 224)
    rows = []
    for B in LATENCY_POINTS[args.latency_points]["forward"]:
        px = make_images(B, size, args.seed + B).to(device).to(next(paths.stock.parameters()).dtype)
        row = {"batch": B, "ms": {}, "setup_s": {}}
        with torch.no_grad():
            measure_point(paths, names, f"batch {B}", lambda p: forward_point(
                paths, p, lambda m: m(pixel_values=px), device, args.repeats), row, args.repeats)
        rows.append(row)
        progress(f"latency batch {B}: " + describe_point(row))
    return {"forward": rows}


def peak_memory(device, fn):
    import torch

    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()


def peak_memories(device, sides, forward, run, errors):
    """{side: peak bytes} of forward(model) for each (side, model) in sides (a pipeline's: its
    fullest device's). A side that runs out of memory is left out, and errors says why: the timed
    figures stand without it. Under pipeline stages the error propagates, since the other stages
    wait inside that forward."""
    import torch

    out = {}
    for name, m in sides:
        with stage(f"latency: peak memory {name}"):
            try:
                with torch.no_grad():
                    peak = peak_memory(device, lambda m=m: forward(m))
                out[name] = run.max_over_ranks(peak)
            except torch.cuda.OutOfMemoryError as e:
                if run.pipeline:
                    raise
                errors[f"peak memory {name}"] = f"OutOfMemoryError: {str(e).strip().splitlines()[0]}"
                progress(f"latency: peak memory {name}: failed: {errors[f'peak memory {name}']}")
    return out


# The HBM bandwidth the batch-1 decode roofline divides by: the H200's device copy measured
# 4.28 TB/s in the kernel benchmarks (BENCHMARKS.md), rounded down.
HBM_BYTES_PER_S = 4.2e12
# The parts of a model a batch-1 decode step reads, in report order.
ROOFLINE_PARTS = ("attention", "norms", "router", "experts_active", "shared_expert", "dense_mlp", "embedding_row",
                  "lm_head", "other")


def active_bytes(model, top_k: int, itemsize: int):
    """The weight bytes one decode step at batch 1 reads, by part: every parameter once, except
    the embedding (one row) and each MoE layer's experts (top_k of them). Parameters are counted
    at itemsize bytes (the plan's dtype); the KV cache is not counted."""
    experts = {}
    for name, m in model.named_modules():
        if hasattr(m, "has_gate") and hasattr(m, "num_experts"):
            experts[name] = int(m.num_experts)
    blocks = {name.rpartition(".")[0] for name in experts}
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    head = head.weight if head is not None else None
    norms = {name for name, m in model.named_modules() if type(m).__name__.endswith("Norm")}
    parts = dict.fromkeys(ROOFLINE_PARTS, 0)
    all_experts = 0

    def under(name, prefixes):
        return next((p for p in prefixes if name.startswith(p + ".")), None)

    for name, t in model.named_parameters():
        n = t.numel() * itemsize
        owner = name.rpartition(".")[0]
        if t is emb:
            parts["embedding_row"] += emb.shape[1] * itemsize
            if head is emb:  # tied: the head reads the whole matrix
                parts["lm_head"] += n
        elif t is head:
            parts["lm_head"] += n
        elif (e := under(name, experts)) is not None:
            all_experts += n
            # every expert is the same size: top_k of num_experts are read
            parts["experts_active"] += n * top_k // experts[e]
        elif under(name, blocks) is not None:  # a shared expert (Qwen2-MoE) runs for every token
            parts["shared_expert" if ".shared_expert." in f".{name}" else "router"] += n
        elif owner in norms:
            parts["norms"] += n
        elif ".self_attn." in f".{name}":
            parts["attention"] += n
        elif ".mlp." in f".{name}":
            parts["dense_mlp"] += n
        else:
            parts["other"] += n
    return parts, all_experts


def roofline(model, top_k: int, itemsize: int, dtype_name: str):
    """eval.json `roofline`: a mixture-of-experts model's active-bytes roofline at batch 1 (None
    for a dense model)."""
    if not experts_modules(model):
        return None
    parts, all_experts = active_bytes(model, top_k, itemsize)
    total = sum(parts.values())
    return {"batch": 1, "dtype": dtype_name, "top_k": top_k, "bandwidth_Bps": HBM_BYTES_PER_S,
            "bytes": parts, "total_bytes": total, "experts_bytes": all_experts,
            "ms": total / HBM_BYTES_PER_S * 1e3,
            "method": "weights one decode step reads at batch 1 (attention, norms, router, lm_head and the "
                      "embedding row in full, the top-k experts of every MoE layer, its shared expert and dense MLP "
                      "layers in full; "
                      "the KV cache not counted) / the bandwidth"}
