"""xpuinject eval driver: whole-model accuracy and latency of an injected model.

Run by the Go harness (`xpuinject eval`), which writes this file and eval_sharded.py into a work
folder and reads back the JSON this writes. It loads the checkpoint three times:

- oracle: fp32, stock transformers  (the user's reference quality), its layers read from the
  checkpoint as the forward reaches them (eval_sharded.LayeredOracle; vision models: whole)
- stock:  the plan's dtype (bf16 or fp16), stock transformers  (what the user runs today)
- injected: the same dtype + the emitted package, which injects itself with its packed weights
  (`inject(model, packed=...)` of the package, loaded as users load it)

and reports, for injected and stock side by side, their error against the oracle (cosine,
max/mean absolute, max/mean relative error with a printed denominator floor, top-1 agreement,
KL divergence, perplexity, greedy-generation agreement), the same per decoder
layer / encoder stage, and on a GPU the latency of prefill and decode (device events,
warm-up, median of many) with peak memory, on the paths --latency names: stock eager, stock
compiled (StaticCache + torch.compile "reduce-overhead"), stock and injected under the
package's graph runtime, injected eager.

Under torchrun (WORLD_SIZE > 1) every process holds one pipeline stage of the stock and
injected models (eval_sharded.Run); rank 0 also runs the oracle and writes the result.

Progress goes to stderr as `xpuinject-eval: ...` lines; the result is one JSON file.
Exit codes: 0 ok, 2 bad arguments / missing input, 3 a missing Python package or device,
4 injection failed (message names the layer), 5 evaluation failed.
"""

from __future__ import annotations

import time

# When the driver started (before torch and transformers load): the first stage's clock.
T0 = time.time()

import argparse
import functools
import json
import math
import os
import platform
import statistics
import sys
import threading
import traceback
from pathlib import Path

# eval_sharded.py is written beside this file; the folder is on sys.path when this runs as a
# script, not when a test loads this file by path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import compile_helpers  # noqa: E402
import eval_sharded as sharded  # noqa: E402
import latency as lat_stage  # noqa: E402
from latency import LATENCY_PATHS, Paths, latency, peak_memory  # noqa: E402,F401  (scripts and tests use these)

SCHEMA = 3
# The model type the eval treats as a vision model (images in, class logits out).
VISION_TYPE = "levit"
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
# Worker processes that compile the injected kernels ahead (beside the compile helpers' own).
COMPILE_PROCESSES = min(8, os.cpu_count() or 1)


class Stages:
    """Wall seconds of each stage of the eval, printed as it ends and recorded in eval.json
    `timings` (the CLI adds its own stages before it and the whole run's wall)."""

    def __init__(self, t0: float):
        self.t0 = t0
        self.rows = []
        self._mark = t0
        self.open = []  # the stages running, outermost first
        self.compiles = 0  # Triton JIT compiles so far (count_compiles)
        self._compiles_mark = 0

    def count_compiles(self, triton) -> None:
        """Count every Triton JIT compile from now on (knobs.runtime.jit_post_compile_hook, which
        Triton calls after each compile; a hook already there still runs): each stage then says
        how many of its seconds were spent making kernels."""
        knobs = getattr(getattr(triton, "knobs", None), "runtime", None)
        if knobs is None or not hasattr(knobs, "jit_post_compile_hook"):
            return
        prev = knobs.jit_post_compile_hook

        def hook(*args, **kwargs):
            self.compiles += 1
            return prev(*args, **kwargs) if prev is not None else None

        knobs.jit_post_compile_hook = hook

    def add(self, name: str, seconds: float) -> None:
        row = {"stage": name, "s": round(seconds, 3)}
        n, self._compiles_mark = self.compiles - self._compiles_mark, self.compiles
        if n:
            row["compiles"] = n
        self.rows.append(row)
        if RANK == 0:
            progress(f"{name}: {seconds:.1f} s" + (f" ({n} kernel compiles)" if n else ""))

    def lap(self, name: str) -> None:
        """A stage that ran from the end of the previous one until now."""
        now = time.time()
        self.add(name, now - self._mark)
        self._mark = now

    def __call__(self, name: str):
        return _Stage(self, name)

    def result(self) -> dict:
        return {"started_at": self.t0, "driver_s": round(time.time() - self.t0, 3), "stages": self.rows}


# A stage still running after this many seconds says so, with the frame it is in, and again
# after as many more: a long compile or capture is not silence, and a stuck one names its place.
HEARTBEAT_S = 60.0


def frame_of(thread_id: int) -> str:
    """'file:line in function' of the innermost frame of a running thread (its path from
    site-packages on, or the file's name), and the innermost of the eval's own or the package's
    code when that is another one."""
    f = sys._current_frames().get(thread_id)
    if f is None:
        return "its thread has ended"

    def where(fr):
        parts = fr.f_code.co_filename.split(os.sep)
        short = os.sep.join(parts[parts.index("site-packages") + 1:]) if "site-packages" in parts else parts[-1]
        return f"{short}:{fr.f_lineno} in {fr.f_code.co_name}"

    inner, ours = f, None
    while f is not None:
        if ours is None and "site-packages" not in f.f_code.co_filename.split(os.sep):
            ours = f
        f = f.f_back
    return where(inner) + (f", from {where(ours)}" if ours is not None and ours is not inner else "")


class _Stage:
    def __init__(self, stages: Stages, name: str):
        self.stages, self.name = stages, name

    def __enter__(self):
        self.t = time.time()
        self.stages.open.append(self)
        self._done = threading.Event()
        if RANK == 0 and HEARTBEAT_S > 0:
            threading.Thread(target=self._beat, args=(threading.get_ident(),), daemon=True).start()
        return self

    def _beat(self, thread_id: int) -> None:
        while not self._done.wait(HEARTBEAT_S):
            if self.stages.open and self.stages.open[-1] is self:  # the innermost stage speaks
                progress(f"{self.name}: still running after {time.time() - self.t:.0f} s ({frame_of(thread_id)})")

    def __exit__(self, *exc):
        self._done.set()
        if self in self.stages.open:
            self.stages.open.remove(self)
        now = time.time()
        self.stages.add(self.name, now - self.t)
        self.stages._mark = now
        return False


STAGES = Stages(T0)
RANK = int(os.environ.get("RANK", "0"))


def progress(msg: str) -> None:
    if RANK == 0:
        print(f"xpuinject-eval: {msg}", file=sys.stderr, flush=True)


def fail(code: int, msg: str):
    if WORLD > 1:
        # torchrun exits 1 whatever its worker's code was: the harness reads it from this line
        print(f"xpuinject-eval: exit-code: {code}", file=sys.stderr, flush=True)
        msg = f"rank {RANK} of {WORLD}: {msg}"
    print(f"xpuinject-eval: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def positive(name):
    def parse(v):
        try:
            n = int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} wants a whole number, got {v!r}")
        if n < 1:
            raise argparse.ArgumentTypeError(f"{name} must be at least 1, got {n}")
        return n
    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="source checkpoint folder (config.json + safetensors)")
    p.add_argument("--package", required=True, help="kernel package folder (xpuinject package)")
    p.add_argument("--packed", required=True, help="packed checkpoint folder (xpuinject pack)")
    p.add_argument("--out", required=True, help="eval.json to write")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "xpu", "cpu"])
    p.add_argument("--text", help="plain-text file for accuracy and perplexity")
    p.add_argument("--tokens", type=int, default=0, help="tokens of text to evaluate (0: 2048 on a GPU, 96 on cpu)")
    p.add_argument("--gen-tokens", type=int, default=0, help="greedy tokens to generate (0: 128 on a GPU, 8 on cpu)")
    p.add_argument("--prompts", type=positive("--prompts"), default=4, help="prompts (windows of the text) to generate from")
    p.add_argument("--runtime-generation", action=argparse.BooleanOptionalAction, default=True,
                   help="also decode greedily under the package's graph runtime and compare with the eager tokens")
    p.add_argument("--images", type=int, default=8, help="generated images for vision models")
    p.add_argument("--latency", choices=["auto", "eager", "graph", "both", "off"], default="auto",
                   help="latency paths: eager (stock, injected), graph (stock compiled, stock and injected under "
                        "the graph runtime), both; auto: graph where the device captures graphs, else eager")
    # each point costs each compiled path a compile (static shapes): quick times the fewest
    p.add_argument("--latency-points", choices=sorted(lat_stage.LATENCY_POINTS), default="quick",
                   help="points timed: quick (prefill 512, decode batch 1; vision: batch 32) or full (adds "
                        "decode batch 8; vision: batch 1); --prefill and --decode-batches replace its lists")
    p.add_argument("--prefill", help="prefill lengths for latency, comma-separated (default: --latency-points)")
    p.add_argument("--decode-batches",
                   help="batch sizes for per-token decode latency, comma-separated (default: --latency-points)")
    p.add_argument("--repeats", type=positive("--repeats"), default=30, help="timed calls per prefill / forward point")
    p.add_argument("--decode-steps", type=positive("--decode-steps"), default=100,
                   help="decode steps timed in a loop per decode point (ms per token = wall time / steps)")
    p.add_argument("--floor", type=float, default=0.0, help="relative-error denominator floor (0: 1e-3 * max|ref|)")
    p.add_argument("--oracle-memory", type=int, default=-1,
                   help="bytes of the fp32 oracle's layers kept on the device between forwards (-1: what is free "
                        "after the bf16 models, less a forward's activations); the rest is read from the checkpoint per pass")
    p.add_argument("--oracle-host-memory", type=int, default=-1,
                   help="bytes of host memory that hold the checkpoint tensors of the oracle's layers not kept on the "
                        "device, so each pass copies them instead of reading the checkpoint (-1: half the available "
                        "RAM less 2 GiB on a GPU, none on the CPU)")
    p.add_argument("--compile-ahead", choices=["on", "off"], default="on",
                   help="compile the latency stage's torch.compile paths in helper processes while the "
                        "accuracy stages run (the driver's own compiles then hit the inductor cache)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    lat_stage.resolve_points(args)
    return args


# ---------------------------------------------------------------------------- metrics


# Where the accuracy metrics are computed: the eval's GPU when it has one (main() sets it), else
# the CPU. In float64 either way, chunk by chunk, so a 2048-token logits tensor of a 150K-word
# vocabulary (2.5 GB in float64) never sits whole on the device, nor takes the CPU seconds.
METRICS_DEVICE = None
METRICS_CHUNK = 1 << 24  # elements per chunk: 128 MB of float64


def _metrics_device():
    import torch

    return METRICS_DEVICE if METRICS_DEVICE is not None else torch.device("cpu")


def _flat_chunks(x, ref):
    """(x, ref) flattened, in float64 on the metrics device, METRICS_CHUNK elements at a time."""
    dev = _metrics_device()
    a, e = x.detach().reshape(-1), ref.detach().reshape(-1)
    for i in range(0, a.numel(), METRICS_CHUNK):
        yield a[i:i + METRICS_CHUNK].to(dev).double(), e[i:i + METRICS_CHUNK].to(dev).double()


def _row_chunks(*ts):
    """Each of ts as [rows, last dim], in float64 on the metrics device, a chunk of rows at a time."""
    dev = _metrics_device()
    ts = [t.detach().reshape(-1, t.shape[-1]) for t in ts]
    step = max(1, METRICS_CHUNK // ts[0].shape[-1])
    for i in range(0, ts[0].shape[0], step):
        yield [t[i:i + step].to(dev).double() for t in ts]


def error_metrics(x, ref, floor=0.0):
    """The accuracy metrics of x against ref, in float64 (over the elements finite in both)."""
    import math

    import torch

    nonfinite = count = 0
    emax = 0.0
    for a, e in _flat_chunks(x, ref):
        ok = torch.isfinite(a) & torch.isfinite(e)
        n = int(ok.sum())
        nonfinite += ok.numel() - n
        count += n
        if n:
            emax = max(emax, float(e[ok].abs().max()))
    if floor <= 0:
        floor = max(1e-6, 1e-3 * emax) if count else 1e-6
    dmax = rmax = dsum = rsum = dot = aa = ee = 0.0
    for a, e in _flat_chunks(x, ref):
        ok = torch.isfinite(a) & torch.isfinite(e)
        a, e = a[ok], e[ok]
        if not a.numel():
            continue
        d = (a - e).abs()
        rel = d / e.abs().clamp_min(floor)
        dmax, rmax = max(dmax, float(d.max())), max(rmax, float(rel.max()))
        dsum, rsum = dsum + float(d.sum()), rsum + float(rel.sum())
        dot, aa, ee = dot + float(a @ e), aa + float(a @ a), ee + float(e @ e)
    na, ne = math.sqrt(aa), math.sqrt(ee)
    return {
        "cosine": dot / (na * ne) if na > 0 and ne > 0 else float(na == ne),
        "max_abs": dmax,
        "mean_abs": dsum / count if count else 0.0,
        "max_rel": rmax,
        "mean_rel": rsum / count if count else 0.0,
        "rel_floor": floor,
        "nonfinite": nonfinite,
    }


def logits_metrics(logits, ref_logits, labels=None, floor=0.0):
    """Error metrics plus top-1 agreement, KL(ref || x) and perplexity (when labels are given)."""
    import torch

    m = error_metrics(logits, ref_logits, floor)
    rows = agree = 0
    kl = 0.0
    for lx, lr in _row_chunks(logits, ref_logits):
        # argmax of float64 copies of float32 logits: the float32 argmax, ties included
        agree += int((lx.argmax(-1) == lr.argmax(-1)).sum())
        lpx, lpr = torch.log_softmax(lx, -1), torch.log_softmax(lr, -1)
        kl += float((lpr.exp() * (lpr - lpx)).sum())
        rows += lx.shape[0]
    m["top1_agreement"] = agree / rows if rows else 0.0
    m["kl"] = kl / rows if rows else 0.0
    if labels is not None:
        m["perplexity"] = perplexity(logits, labels)
    return m


def perplexity(logits, labels):
    import math

    import torch

    lg = logits.detach()[..., :-1, :].reshape(-1, logits.shape[-1])
    lb = labels.detach()[..., 1:].reshape(-1)
    nll, row = 0.0, 0
    for (x,) in _row_chunks(lg):
        y = lb[row:row + x.shape[0]].to(x.device)
        row += x.shape[0]
        nll += float(torch.nn.functional.cross_entropy(x, y, reduction="sum"))
    return math.exp(nll / lb.numel())


def ratio(a, b):
    if b == 0:
        return None if a == 0 else float("inf")
    return a / b


def side_by_side(inj, stock):
    """For each error metric: injected, stock and injected/stock."""
    keys = [k for k in inj if isinstance(inj[k], (int, float)) and k in stock]
    return {k: {"injected": inj[k], "stock": stock[k], "ratio": ratio(inj[k], stock[k])} for k in keys}


# ---------------------------------------------------------------------------- models


def load_package(package_dir, device):
    """The emitted package's variant for the device, and how it was loaded: through
    kernels.get_local_kernel when the kernels package is installed (as users load it), else
    imported from its variant folder (XPUINJECT_NO_KERNELS=1 forces that)."""
    import importlib.util

    import torch

    # The CPU has no variant of its own: the CUDA variant's Triton source runs under the
    # interpreter (TRITON_INTERPRET=1).
    variant = "cuda" if device.type == "cpu" else device.type
    if os.environ.get("XPUINJECT_NO_KERNELS") != "1":
        try:
            from kernels import get_local_kernel
        except ImportError:
            get_local_kernel = None
        if get_local_kernel is not None:
            # get_local_kernel takes "cpu" or the backend torch was built for; a CPU run of a
            # CUDA build wants the CUDA variant (interpreted).
            backend = device.type if device.type != "cpu" else ("cuda" if torch.version.cuda else None)
            return get_local_kernel(Path(package_dir).resolve(), backend=backend), "kernels"
    folder = Path(package_dir) / "build" / f"torch-{variant}"
    meta = json.loads((folder / "metadata.json").read_text())
    name = meta.get("id") or "_" + meta["name"].replace("-", "_")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, folder / "__init__.py", submodule_search_locations=[str(folder)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception:
            sys.modules.pop(name, None)
            raise
    return sys.modules[name], "direct"


def pick_device(want):
    import torch

    if want == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if hasattr(torch, "xpu") and torch.xpu.is_available():
            return torch.device("xpu")
        return torch.device("cpu")
    if want == "cuda" and not torch.cuda.is_available():
        fail(3, "--device cuda: torch sees no CUDA GPU (torch.cuda.is_available() is False)")
    if want == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        fail(3, "--device xpu: torch sees no XPU (install torch with XPU support and Intel's GPU driver)")
    return torch.device(want)


def model_class(config):
    import transformers

    for name in config.architectures or []:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    if config.model_type == VISION_TYPE:
        return transformers.AutoModelForImageClassification
    return transformers.AutoModelForCausalLM


PLAN_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


@functools.lru_cache(maxsize=None)
def read_plan(package_dir) -> dict:
    """The package's plan.yaml as a dict (exit 4 naming the file when it does not read), parsed
    once per process: a large model's plan takes a while to load, and the eval asks it thrice."""
    import yaml

    plan_file = Path(package_dir) / "plan.yaml"
    try:
        plan = yaml.safe_load(plan_file.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        fail(4, f"{plan_file}: {e}")
    if not isinstance(plan, dict):
        fail(4, f"{plan_file}: not a mapping")
    return plan


def plan_dtype(package_dir):
    """The dtype the package's plan packs in (plan.yaml `dtype`, bf16 when absent): the stock
    and injected models load in it; the oracle stays fp32."""
    import torch

    plan_file = Path(package_dir) / "plan.yaml"
    name = read_plan(package_dir).get("dtype", "bf16")
    if name not in PLAN_DTYPES:
        fail(4, f"{plan_file}: dtype {name!r}: the eval loads bf16 or fp16 models (want one of {', '.join(PLAN_DTYPES)})")
    return name, getattr(torch, PLAN_DTYPES[name])


def load(cls, path, dtype, device, run=None):
    """A model on the device; under torchrun, this rank's pipeline stage of it (run.load_kwargs)."""
    kw = dict(run.load_kwargs() if run else {})
    kw.update(sharded.attn_kwargs(path))
    m = cls.from_pretrained(path, dtype=dtype, **kw)
    m.eval()
    m = m.to(device)
    return run.adopt(m) if run else m


def sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()
    elif device.type == "xpu":
        torch.xpu.synchronize()


# ---------------------------------------------------------------------------- text models


def text_inputs(args, model_dir, device, n_tokens):
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    text_path = args.text or str(Path(__file__).with_name("prose.txt"))
    try:
        text = Path(text_path).read_text(encoding="utf-8")
    except OSError as e:
        fail(2, f"--text {text_path}: {e}")
    ids = tok(text, return_tensors="pt").input_ids[:, :n_tokens]
    if ids.shape[1] < 8:
        fail(2, f"{text_path}: only {ids.shape[1]} tokens; need at least 8")
    # The shipped text is named, not located: its copy sits in a scratch folder.
    return ids.to(device), args.text or "prose.txt (shipped with xpuinject)"


def first_divergence(a, b):
    """Index of the first position where a and b differ, or None."""
    return next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), None)


def agreement(a, b):
    """Fraction of positions equal up to the first divergence, and overall."""
    n = min(len(a), len(b))
    first = first_divergence(a, b)
    first = n if first is None else first
    same = sum(1 for i in range(n) if a[i] == b[i])
    return {"prefix": first / n if n else 1.0, "positions": same / n if n else 1.0, "tokens": n}


def prompt_windows(ids, count, length):
    """count prompts of length tokens, evenly spaced over the text (disjoint when it is long enough)."""
    total = ids.shape[1]
    length = min(length, total)
    step = (total - length) // (count - 1) if count > 1 else 0
    return [ids[:, i * step : i * step + length] for i in range(count)]


def margin_bound(stock_logits, oracle_logits):
    """How far stock bf16 moves the oracle's top-1 minus top-2 logit margin, at most, over the
    teacher-forced text. A greedy divergence whose two tokens the oracle rates closer than this is
    within the error bf16 inference has already shown on this model: a tie, not a defect."""
    bound = 0.0
    for o, s in _row_chunks(oracle_logits, stock_logits):
        top = o.topk(2, dim=-1).indices
        om, sm = o.gather(-1, top), s.gather(-1, top)
        bound = max(bound, float(((sm[:, 0] - sm[:, 1]) - (om[:, 0] - om[:, 1])).abs().max()))
    return bound


def last_logits(model, prompt, tokens):
    import torch

    seq = torch.cat([prompt, torch.tensor([tokens], dtype=prompt.dtype, device=prompt.device)], dim=1)
    with torch.no_grad():
        return model(input_ids=seq, use_cache=False).logits[0, -1].double().cpu()


def divergence(models, x, y, prompt, a, b, at, bound):
    """The first divergence of x's greedy run a and y's run b, which share prompt + a[:at]: the
    oracle's margins there, and each model's own margin between the two tokens (0 means its
    logits tied and argmax took the lower token id). On a pipeline's ranks other than 0, which
    hold no oracle, only the bf16 models' forwards run (every rank takes part in those)."""
    own = {}
    for name in (x, y):
        if name != "oracle":
            zm = last_logits(models[name], prompt, a[:at])
            own[name] = float(zm[a[at]] - zm[b[at]])
    if models["oracle"] is None:
        return {"position": at, "tokens": [a[at], b[at]], "model_margins": own, "tie": False}
    z = last_logits(models["oracle"], prompt, a[:at])
    top2 = z.topk(2).values
    pick = abs(float(z[a[at]] - z[b[at]]))
    return {
        "position": at,
        "tokens": [a[at], b[at]],
        "oracle_top2_margin": float(top2[0] - top2[1]),
        "oracle_pick_margin": pick,
        "model_margins": own,
        "tie": pick < bound,
    }


def divergence_inputs(xs, ys, prompts):
    """(prompt, tokens) at each first divergence of the greedy runs xs against ys: the input of
    the forward pair_report runs there on the first runs' model."""
    out = []
    for k, (a, b) in enumerate(zip(xs, ys)):
        at = first_divergence(a, b)
        if at is not None:
            out.append((prompts[k], a[:at]))
    return out


def pair_report(models, xs, ys, x, y, prompts, bound):
    """Agreement of greedy runs xs (of model x) with ys (of model y) over the prompts, with every
    first divergence explained by the oracle's margins and both models' own."""
    per = [agreement(a, b) for a, b in zip(xs, ys)]
    divs = []
    for k, (a, b) in enumerate(zip(xs, ys)):
        at = first_divergence(a, b)
        if at is not None:
            divs.append({"prompt": k, **divergence(models, x, y, prompts[k], a, b, at, bound)})
    ties = sum(1 for d in divs if d["tie"])
    return {
        "prefix": statistics.fmean(p["prefix"] for p in per),
        "positions": statistics.fmean(p["positions"] for p in per),
        "tokens": sum(p["tokens"] for p in per),
        "divergences": divs,
        "ties": ties,
        "non_ties": len(divs) - ties,
    }


def generation_report(models, runs, prompts, n_gen, bound):
    """Agreement of each compared pair over the prompts, with every first divergence explained.

    models and runs map "oracle", "stock", "injected" to the model and to its greedy token lists
    (one per prompt)."""
    out = {"prompts": len(prompts), "prompt_tokens": int(prompts[0].shape[1]), "new_tokens": n_gen, "tie_bound": bound}
    for name, (x, y) in {"injected": ("injected", "oracle"), "stock": ("stock", "oracle"),
                         "injected_vs_stock": ("injected", "stock")}.items():
        out[name] = pair_report(models, runs[x], runs[y], x, y, prompts, bound)
    return out


def runtime_greedy(rtmod, model, prompts, n):
    """Greedy tokens of the package's graph runtime after each prompt, all in one batch as the
    eager runs decode them: exactly n of them (no EOS stop), on a static cache of the length
    model.generate's static cache would have."""
    import torch

    ids = torch.cat(prompts, 0)
    out = rtmod.generate(model, ids, max_new_tokens=n, eos_token_id=[], pad_token_id=0,
                         max_cache_len=ids.shape[1] + n - 1)
    return [row[ids.shape[1]:].tolist() for row in out]


def runtime_report(rtmod, device, models, runs, prompts, n_gen, bound):
    """The same greedy decoding under the package's graph runtime, for stock and injected: each
    against the same model's eager greedy run and against the oracle's."""
    graphs, why = rtmod.graph_support(device)
    out = {"graphs": graphs is not None}
    if graphs is None:
        out["reason"] = why
    for name in ("stock", "injected"):
        rr = runtime_greedy(rtmod, models[name], prompts, n_gen)
        out[name] = {"vs_eager": pair_report(models, rr, runs[name], name, name, prompts, bound),
                     "vs_oracle": pair_report(models, rr, runs["oracle"], name, "oracle", prompts, bound)}
    return out


# ---------------------------------------------------------------------------- vision models


def make_images(n, size, seed):
    """Deterministic, structured images (gradients, stripes, checkerboards, blobs, noise):
    never only random or uniform, which hide layout bugs."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size), indexing="ij")
    imgs = []
    for i in range(n):
        k = i % 4
        if k == 0:
            c = torch.stack([xs, ys, xs * ys])
        elif k == 1:
            c = torch.stack([torch.sin(6.0 * xs + i), torch.cos(5.0 * ys - i), torch.sin(4.0 * (xs + ys))])
        elif k == 2:
            c = torch.stack([((xs * (4 + i)).floor() + (ys * (4 + i)).floor()) % 2 * 2 - 1] * 3)
            c[1] = c[1] * 0.5
        else:
            c = torch.randn(3, size, size, generator=g) * 0.5 + torch.stack([xs, -ys, xs * 0])
        imgs.append(c)
    return torch.stack(imgs).float()


def forward_vision(model, pixels):
    import torch

    with torch.no_grad():
        out = model(pixel_values=pixels, output_hidden_states=True)
    return out.logits.float(), [h.float() for h in (out.hidden_states or [])]


# ---------------------------------------------------------------------------- main


def jsonable(o):
    """NaN and infinities become null (JSON has neither; the Go side reads null as NaN)."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [jsonable(v) for v in o]
    return o


def main(argv=None):
    if WORLD > 1:
        sharded.die_with_parent()
    args = parse_args(argv)
    for p in (args.model, args.package, args.packed):
        if not Path(p).is_dir():
            fail(2, f"{p}: no such folder")
    if args.device == "cpu" or (args.device == "auto" and os.environ.get("TRITON_INTERPRET") == "1"):
        os.environ.setdefault("TRITON_INTERPRET", "1")
    global HELPERS
    why_not = compile_helpers.wanted(args, WORLD)
    # started before this process's own imports, which they pay beside it
    HELPERS = None
    if not why_not:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)  # eval.json's folder: the helpers' logs go beside it
        HELPERS = compile_helpers.Helpers.start(prepare={
            "model": str(Path(args.model).resolve()), "package": str(Path(args.package).resolve()),
            "device": args.device}, log_dir=Path(args.out).parent)
    try:
        import torch
        import transformers
    except ImportError as e:
        fail(3, f"python package missing: {e.name} (run scripts/setup-venv.sh, or pip install torch transformers)")
    try:
        import safetensors  # noqa: F401
    except ImportError:
        fail(3, "python package missing: safetensors (pip install safetensors)")
    torch.manual_seed(args.seed)
    cfg = transformers.AutoConfig.from_pretrained(args.model)
    cls = model_class(cfg)
    vision = cfg.model_type == VISION_TYPE
    if WORLD > 1 and vision:
        fail(2, f"{args.model}: pipeline stages split a decoder's layers; a {cfg.model_type} model runs on one device (--gpus 1)")
    run = sharded.Run.from_env(args.device, fail)
    device = run.device or pick_device(args.device)
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        fail(3, "no GPU: the kernels can run on the CPU only under TRITON_INTERPRET=1 (use --device cpu)")
    on_gpu = device.type in ("cuda", "xpu")
    global METRICS_DEVICE
    METRICS_DEVICE = device if on_gpu else None
    result = {
        "schema": SCHEMA,
        "model": {"path": str(Path(args.model).resolve()), "arch": cfg.model_type, "class": cls.__name__,
                  # the report judges the oracle's perplexity against it (chance is vocab_size)
                  "vocab_size": getattr(cfg, "vocab_size", None)},
        "device": {
            "type": device.type,
            "name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or device.type,
            "interpret": os.environ.get("TRITON_INTERPRET") == "1",
            "count": run.world,
        },
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    try:
        import triton

        result["versions"]["triton"] = triton.__version__
    except ImportError:
        fail(3, "python package missing: triton (pip install triton)")
    STAGES.count_compiles(triton)
    STAGES.lap("python start-up and imports")

    dtype_name, dtype = plan_dtype(args.package)
    result["model"]["dtype"] = dtype_name
    where = f"{run.world} pipeline stages ({run.backend})" if run.pipeline else str(device)
    progress(f"loading {cls.__name__} from {args.model}: stock {dtype_name} and injected {dtype_name} on {where}")
    with STAGES("load the stock and injected models"):
        stock = load(cls, args.model, dtype, device, run)
        injected = load(cls, args.model, dtype, device, run)
    with STAGES("load the package and inject it"):
        try:
            pkg, loaded_by = load_package(args.package, device)
        except Exception as e:
            traceback.print_exc()
            fail(4, f"loading the package {args.package}: {type(e).__name__}: {e}")
        InjectError = pkg.InjectError
        try:
            summary = pkg.inject(injected, packed=args.packed)
        except InjectError as e:
            fail(4, str(e))
    summary["path"] = loaded_by
    # whose measured vendor routes the plan took: the report says when they are another GPU's
    summary["plan_gpu"] = str(read_plan(args.package).get("gpu") or "")
    summary = run.merge_injection(summary)
    result["injection"] = summary
    if run.main:
        progress(f"injected via {summary['path']}: " + ", ".join(f"{k}×{v}" for k, v in summary["replaced"].items()))
    placement = {"stock": run.placement(stock), "injected": run.placement(injected)}
    if not vision and run.main:
        rf = moe_roofline(cls, args.model, cfg, dtype, dtype_name)
        if rf is not None:
            result["roofline"] = rf
            progress(f"active-bytes roofline at batch 1: {rf['total_bytes'] / 1e9:.3f} GB / "
                     f"{rf['bandwidth_Bps'] / 1e12:.1f} TB/s = {rf['ms']:.3f} ms per token")
    # which attention each model ran: eager where the model computes what SDPA ignores; the
    # injected one's as inject left it (the package's own name where it took the model off eager)
    result["model"]["attn_implementation"] = {
        "stock": stock.config._attn_implementation, "injected": injected.config._attn_implementation}

    oracle = None
    if vision:
        # the helpers' jobs before the oracle loads, its fp32 copy of the model reserved in their plan
        send_helpers(args, device, stock, injected, reserve=sharded.model_bytes(stock) * 4 // dtype.itemsize)
        progress(f"loading the fp32 oracle on {device}")
        with STAGES("load the fp32 oracle"):
            oracle = load(cls, args.model, torch.float32, device)
        placement["oracle"] = {"mode": "whole", "rank": 0, "device": str(device), "bytes": sharded.model_bytes(oracle)}
    elif run.main:
        with STAGES("build the fp32 oracle"):
            try:
                oracle = sharded.LayeredOracle(cls, args.model, device, budget=args.oracle_memory,
                                               tokens=text_tokens(args, on_gpu), host_budget=args.oracle_host_memory)
            except Exception as e:
                traceback.print_exc()
                fail(5, f"building the fp32 oracle from {args.model}: {type(e).__name__}: {e}")
        progress(f"fp32 oracle on {device}, layer by layer from the checkpoint: {oracle.budget_line()}")

    # compiling the injected kernels ahead runs a dry forward: one process, or the ranks would
    # have to agree on it
    ahead, pool = None, None
    pre = getattr(pkg, "precompile", None) if on_gpu and not run.pipeline else None
    if pre is not None and hasattr(pre, "ahead"):
        ahead = pre.ahead
        if hasattr(pre, "Pool") and pre.available()[0]:
            # worker processes compile side by side (Triton's front end holds the GIL): started
            # here, they import torch and Triton while the oracle stage runs
            try:
                with STAGES("start the kernel compile workers"):
                    pool = pre.Pool(COMPILE_PROCESSES)
                ahead = functools.partial(pre.ahead, pool=pool)
            except OSError as e:  # no processes to be had: threads, as a package without Pool
                progress(f"compiling ahead on threads: no worker processes ({e})")
    try:
        if vision:
            evaluate_vision(args, cfg, device, oracle, stock, injected, result, ahead)
        else:
            # the helpers must leave free what the oracle's first pass will load and keep
            keep = oracle.bytes_to_keep() if isinstance(oracle, sharded.LayeredOracle) else 0
            evaluate_text(args, cfg, device, oracle.model if oracle is not None else None, stock, injected, result, on_gpu,
                          run, ahead, oracle_keep=keep)
    except InjectError as e:
        fail(4, str(e))
    except Exception as e:  # name the failing layer when we can
        traceback.print_exc()
        fail(5, f"evaluation failed: {type(e).__name__}: {e}")
    finally:
        if pool is not None:
            pool.close(wait=False)  # reaped at the end: the workers exit while the eval goes on

    if args.latency == "off":
        result["latency"] = {"measured": False, "reason": "disabled (--latency off)"}
    elif not on_gpu:
        result["latency"] = {"measured": False, "reason": "the kernels ran on the CPU under the Triton interpreter, whose timings say nothing about a GPU"}
    if isinstance(oracle, sharded.LayeredOracle):
        placement["oracle"] = oracle.placement(run.rank)
    if oracle is not None:
        om = oracle.model if isinstance(oracle, sharded.LayeredOracle) else oracle
        result["model"]["attn_implementation"]["oracle"] = om.config._attn_implementation
    if args.latency != "off" and on_gpu:
        del oracle  # the fp32 model is not timed: free its memory first
        try:
            result["latency"] = measure_latency(args, cfg, device, stock, injected, vision, run)
        except Exception as e:
            traceback.print_exc()
            fail(5, f"latency failed: {type(e).__name__}: {e}")
    # problem classes launched from the GPU's tuned configs, and those the autotuner had to tune
    if run.main and hasattr(pkg, "tuning_report"):
        result["autotune"] = at = pkg.tuning_report()
        progress(f"launch configs: {at['tuned']} problem classes tuned ({', '.join(at['gpu_data']) or 'none for this device'}), "
                 f"{at.get('heuristic', 0)} heuristic, {at['autotuned']} autotuned ({at['benchmarked']} benchmarked)")
    if pool is not None:
        pool.close()
    if HELPERS is not None:
        # their results are in: one still tearing down (its compile workers, its device context)
        # is not waited for; it ends with this process (eval_sharded.die_with_parent)
        HELPERS.close(wait=False)
    STAGES.lap("the rest of the eval")
    result["timings"] = STAGES.result()

    run.close()
    if not run.main:
        return
    result["device"]["placement"] = placement
    out = Path(args.out)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(jsonable(result), indent=2, allow_nan=False))
    os.replace(tmp, out)
    progress(f"wrote {out.name}")  # the CLI moves the folder into place and names it


# Why a pipeline is timed on the eager paths only.
PIPELINE_EAGER = ("a pipeline forward sends tensors between processes, which device graphs and torch.compile do "
                  "not capture: eager paths only")


def measure_latency(args, cfg, device, stock, injected, vision, run):
    """The latency section of eval.json on every path the mode measures. Under a pipeline every
    rank runs each timed call; rank 0's clock, which waits for the last stage's logits, is reported."""
    import torch

    if device.type == "cuda":
        torch.cuda.empty_cache()
    rtmod = runtime_module(args.package, device)
    errors = {}
    if run.pipeline:
        if args.latency == "graph":
            return {"measured": False, "reason": f"--latency graph on {run.world} pipeline stages: {PIPELINE_EAGER}"}
        if args.latency == "both":
            errors = {p: f"{run.world} pipeline stages: {PIPELINE_EAGER}" for p in LATENCY_PATHS["graph"]}
        mode = "eager"
    else:
        mode = lat_stage.latency_mode(args.latency, device, rtmod)
    graphs, why = rtmod.graph_support(device)
    if graphs is None and mode != "eager":
        return {"measured": False, "reason": f"--latency {args.latency}: no device graphs here ({why}); use --latency eager"}
    ahead_stats = wait_helpers()
    paths = Paths(stock, injected, rtmod, errors)
    if ahead_stats is not None:
        paths.remote = helper_timers(ahead_stats)
    lat_stage.STAGE = STAGES
    names = lat_stage.path_names(mode, stock)
    progress(f"latency ({mode}): " + ", ".join(names))
    if lat_stage.experts_settings(stock):
        progress("stock timed on each experts implementation: " + ", ".join(lat_stage.experts_settings(stock)))
    if vision:
        lat = lat_stage.vision_latency(paths, names, cfg, device, args, make_images)
    else:
        lat = latency(paths, names, cfg, device, args)
    if ahead_stats is not None:
        close_helpers(ahead_stats)
        if HELPERS.timed:
            lat_stage.progress("compiled paths timed in their helper processes: " +
                               ", ".join(compile_helpers.SIDES[s] for s in HELPERS.timed))
    lat.setdefault("peak_memory_bytes", {})
    if not vision:
        ids = torch.randint(0, cfg.vocab_size, (1, max(int(x) for x in args.prefill.split(","))), device=device)
        lat["peak_memory_bytes"].update(lat_stage.peak_memories(
            device, (("stock", stock), ("injected", injected)), lambda m: m(input_ids=ids, use_cache=False), run,
            errors))
    method = lat_stage.method(args, vision)
    if lat_stage.experts_settings(stock):
        method += ("; stock eager and stock compiled each timed on every experts_implementation (" +
                   ", ".join(lat_stage.experts_settings(stock)) + "), each reading its fastest; stock_best: the "
                   "fastest of all, the anchor")
    if ahead_stats is not None and HELPERS.timed:
        method += ("; " + " and ".join(compile_helpers.SIDES[s] for s in HELPERS.timed) + " compiled and timed "
                   "by the same code in helper processes (one per side) set up beside the earlier stages, each "
                   "timed loop run while the eval and the other helper waited")
    if run.pipeline:
        method += f"; {run.world} pipeline stages, one device each, timed on rank 0 (the first stage, which waits for the last one's logits)"
    lat.update({"measured": True, "mode": mode, "paths": list(names), "method": method,
                "default": lat_stage.DEFAULT_PATH, **lat_stage.points_record(args, vision)})
    if errors:
        lat["errors"] = errors
    if ahead_stats is not None:
        before = ahead_stats.pop("cache_before")
        now = compile_helpers.cache_counters()
        ahead_stats["driver_cache"] = {k: now[k] - before.get(k, 0) for k in now}
        lat["compile_ahead"] = ahead_stats
    return lat


def moe_roofline(cls, path, cfg, dtype, dtype_name):
    """eval.json `roofline` of a mixture-of-experts model, counted on the whole model built on the
    meta device (a pipeline stage holds only its layers); None for a dense model."""
    can = getattr(cls, "_can_set_experts_implementation", None)
    if can is None or not can():
        return None
    with sharded.parameters_on_meta():
        model = cls._from_config(cfg, dtype=dtype, **sharded.attn_kwargs(path))
    return lat_stage.roofline(model, int(cfg.num_experts_per_tok), dtype.itemsize, dtype_name)


def runtime_module(package_dir, device):
    """The package's graph runtime (its `runtime` module)."""
    pkg, _ = load_package(package_dir, device)
    rt = getattr(pkg, "runtime", None)
    if rt is None:
        fail(2, f"{package_dir}: the package has no graph runtime (written by an older xpuinject): write it again with 'xpuinject package'")
    return rt


def text_tokens(args, on_gpu):
    return args.tokens or (2048 if on_gpu else 96)


# The helper processes compiling the latency stage's compiled paths ahead (compile_helpers.py), or
# None where the eval starts none.
HELPERS = None


def send_helpers(args, device, stock, injected, generation=None, reserve=0):
    """Give the helpers their jobs: the compiled paths the latency stage will time, on its points,
    for each side the device has memory for beside this process's models; the injected one first
    runs the graph runtime's greedy generation of prompts of generation's shape (its kernels
    compile there, into the Triton cache this process then loads them from). Called once the
    eval's own models (and the oracle's resident layers) are on the device, or with `reserve`
    bytes kept for what is still to load."""
    if HELPERS is None:
        return
    with STAGES("hand the compile helpers their jobs"):
        _send_helpers(args, device, stock, injected, generation, reserve)


def _send_helpers(args, device, stock, injected, generation, reserve):
    rtmod = runtime_module(args.package, device)
    mode = lat_stage.latency_mode(args.latency, device, rtmod)
    names = lat_stage.path_names(mode, stock)
    order = {side: compile_helpers.side_paths(names, side) for side in compile_helpers.SIDES}
    if lat_stage.experts_settings(stock):
        # its stock paths run every experts implementation, one of which copies tens of GB of
        # expert weights at a long prefill: more than a helper may take beside the eval
        why = "a mixture-of-experts stock's experts settings need unbounded memory"
        HELPERS.send({}, dict.fromkeys(compile_helpers.SIDES, why))
        return
    sides = {side: model for side, model in (("stock", stock), ("injected", injected)) if order[side]}
    fit, skipped = compile_helpers.memory_plan(device, {s: sharded.model_bytes(m) for s, m in sides.items()},
                                               reserve)
    for side in compile_helpers.SIDES:
        if side not in sides:
            skipped.setdefault(side, f"--latency {args.latency} times no {compile_helpers.SIDES[side]}")
    dtype_name, _ = plan_dtype(args.package)
    base = {"model": str(Path(args.model).resolve()), "package": str(Path(args.package).resolve()),
            "packed": str(Path(args.packed).resolve()), "device": str(device), "dtype": PLAN_DTYPES[dtype_name],
            "args": compile_helpers.job_args(args)}
    # stock's graph-runtime generation launches no kernel of the package: nothing to compile ahead
    gen = {"injected": generation}
    HELPERS.send({side: {**base, "side": side, "paths": order[side], "runtime_generation": gen.get(side)}
                  for side in fit}, skipped)
    progress("compiling ahead in helper processes: " + (", ".join(compile_helpers.SIDES[s] for s in fit) or "none")
             + "".join(f"; {compile_helpers.SIDES[s]} not ({why})" for s, why in skipped.items() if s in sides))


def wait_helpers():
    """Wait for the helpers' set-ups before anything is timed: eval.json latency `compile_ahead`,
    with the cache counters this process starts its own compiles from."""
    if HELPERS is None:
        return None
    with STAGES("latency: waiting for the compiles ahead"):
        got = HELPERS.wait()
    if HELPERS.sent_at is not None:
        got["sent_after_s"] = round(HELPERS.sent_at - T0, 3)
    for h in got["helpers"]:
        # the helper's wall clock (started, imports done, job received, set up) from this driver's start
        clock = h.pop("clock", None)
        if isinstance(clock, dict):
            h["after_s"] = {k: round(v - T0, 3) for k, v in clock.items() if isinstance(v, (int, float))}
        if "error" in h:
            progress(f"compiling ahead ({h['side']}): failed: {h['error']}; the eval compiles that path itself")
    got["cache_before"] = compile_helpers.cache_counters()
    return got


def helper_timers(stats):
    """latency.Paths.remote for each side whose helper holds its compiled path set up: the helper
    times it; a point it cannot time is measured here (and listed in stats["fallbacks"])."""
    def timer(side):
        def remote(path, label, n, local):
            try:
                return HELPERS.time(side, label, n)
            except compile_helpers.Unavailable as e:
                progress(f"{path} at {label}: the {side} helper could not time it ({e}); timing it here")
                stats.setdefault("fallbacks", []).append({"path": path, "point": label, "why": str(e)})
                return local(path)
        return remote

    return {compile_helpers.SIDES[side]: timer(side) for side, held in HELPERS.held.items() if held}


def close_helpers(stats):
    """End the helpers' input (they release what they hold and exit beside the rest of the eval)
    and note what each timed."""
    HELPERS.close(wait=False)
    for h in stats["helpers"]:
        h.pop("held", None)
        if HELPERS.timed.get(h["side"]):
            h["timed"] = HELPERS.timed[h["side"]]


def compile_ahead(ahead, result, work, what=None):
    """Compile the injected kernels that work() launches before it runs for real (the package's
    precompile.ahead, when the eval has one); eval.json `precompile` says what it did, and its
    `later` what a later call for `what` did."""
    if ahead is None:
        return
    with STAGES("compile the injected kernels ahead" + (f": {what}" if what else "")):
        stats = ahead(work)
    if what is None:
        result["precompile"] = stats
    else:
        result.setdefault("precompile", {}).setdefault("later", []).append({"for": what, **stats})
    if stats.get("skipped"):
        progress(f"compiling ahead: not run ({stats['skipped']})")
    else:
        on = f"{stats['processes']} processes" if "processes" in stats else f"{stats['threads']} threads"
        progress(f"compiled ahead: {stats['compiled']} kernel specializations on {on}"
                 + (f" ({stats['error']})" if stats.get("error") else ""))


def text_accuracy(args, ids, text_path, oracle, stock, injected):
    """eval.json's accuracy and layers of a text model, from each model's (logits, hidden states)."""
    (lo, ho), (ls, hs), (li, hi) = oracle, stock, injected
    inj = logits_metrics(li, lo, ids, args.floor)
    stk = logits_metrics(ls, lo, ids, args.floor)
    accuracy = {
        "input": {"kind": "text", "source": text_path, "tokens": int(ids.shape[1])},
        "oracle_perplexity": perplexity(lo, ids),
        "injected": inj,
        "stock": stk,
        "compare": side_by_side(inj, stk),
    }
    layers = []
    for i in range(1, len(ho)):
        # hidden_states: embeddings, each layer's output, and the last layer's output
        # after the final norm
        name = f"model.layers.{i - 1}" if i < len(ho) - 1 else f"model.layers.{i - 1} + norm"
        layers.append({"name": name, "injected": error_metrics(hi[i], ho[i]), "stock": error_metrics(hs[i], ho[i])})
    return accuracy, layers


def evaluate_text(args, cfg, device, oracle, stock, injected, result, on_gpu, run, ahead=None, oracle_keep=0):
    """Accuracy, per-layer error and greedy generation of a causal LM. Under a pipeline every rank
    runs this: the bf16 models' forwards and generations are collective; the oracle (None on the
    other ranks) and the metrics are rank 0's. oracle_keep: device bytes the oracle's first pass
    will load and keep (LayeredOracle.bytes_to_keep), which the compile helpers must leave free."""
    n_tokens = text_tokens(args, on_gpu)
    with STAGES("the text: tokenizer and tokens"):
        ids, text_path = text_inputs(args, args.model, device, n_tokens)
    progress(f"accuracy on {ids.shape[1]} tokens of {text_path}")
    n_gen = args.gen_tokens or (128 if on_gpu else 8)
    prompts = prompt_windows(ids, args.prompts, min(32, ids.shape[1] // args.prompts))
    runs = {}
    send_helpers(args, device, stock, injected, {"prompts": len(prompts), "length": int(prompts[0].shape[1]),
                                                 "new_tokens": n_gen} if args.runtime_generation else None,
                 reserve=oracle_keep)
    with STAGES("oracle: fp32 forward and greedy generation"):
        if oracle is not None:
            lo, ho = sharded.forward_text(oracle, ids)
            progress(f"oracle: greedy generation of {n_gen} tokens after each of {len(prompts)} prompts, in one batch")
            runs["oracle"] = sharded.greedy_batch(oracle, prompts, n_gen)
        runs["oracle"] = run.broadcast(runs.get("oracle"))
    compile_ahead(ahead, result, lambda: (run.forward_text(injected, ids), sharded.greedy_batch(injected, prompts, n_gen)))
    with STAGES("accuracy: stock and injected forwards"):
        ls, hs = run.forward_text(stock, ids)
        li, hi = run.forward_text(injected, ids)
    if run.main:
        with STAGES("accuracy: metrics against the oracle"):
            result["accuracy"], result["layers"] = text_accuracy(args, ids, text_path, (lo, ho), (ls, hs), (li, hi))
    progress(f"greedy generation of {n_gen} tokens after each of {len(prompts)} prompts, in one batch")
    models = {"oracle": oracle, "stock": stock, "injected": injected}
    for name in ("stock", "injected"):
        with STAGES(f"greedy generation: {name}"):
            runs[name] = sharded.greedy_batch(models[name], prompts, n_gen)
    # each first divergence is judged on a forward of its own length: new specializations
    seqs = [d for x, y in (("injected", "oracle"), ("injected", "stock")) for d in divergence_inputs(runs[x], runs[y], prompts)]
    if seqs:
        compile_ahead(ahead, result, lambda: [last_logits(injected, p, t) for p, t in seqs], "the divergence checks")
    with STAGES("greedy generation: divergences judged"):
        report = generation_report(models, runs, prompts, n_gen, margin_bound(ls, lo) if run.main else None)
    if run.main:
        result["generation"] = report
    if args.runtime_generation and run.pipeline:
        if run.main:
            result["generation"]["runtime"] = {"graphs": False, "reason": f"{run.world} pipeline stages: {PIPELINE_EAGER}"}
    elif args.runtime_generation:
        progress("greedy generation under the graph runtime (stock, injected)")
        with STAGES("greedy generation under the graph runtime"):
            rtmod = runtime_module(args.package, device)
            result["generation"]["runtime"] = runtime_report(rtmod, device, models, runs, prompts, n_gen, report["tie_bound"])


def evaluate_vision(args, cfg, device, oracle, stock, injected, result, ahead=None):
    size = getattr(cfg, "image_size", 224)
    pixels = make_images(args.images, size, args.seed).to(device)
    half = next(stock.parameters()).dtype
    compile_ahead(ahead, result, lambda: forward_vision(injected, pixels.to(half)))
    progress(f"accuracy on {args.images} generated {size}x{size} images")
    with STAGES("accuracy: oracle, stock and injected forwards"):
        lo, ho = forward_vision(oracle, pixels)
        ls, hs = forward_vision(stock, pixels.to(half))
        li, hi = forward_vision(injected, pixels.to(half))
    with STAGES("accuracy: metrics against the oracle"):
        inj = logits_metrics(li, lo, None, args.floor)
        stk = logits_metrics(ls, lo, None, args.floor)
        result["accuracy"] = {
            "input": {"kind": "images", "count": args.images, "size": size},
            "injected": inj,
            "stock": stk,
            "compare": side_by_side(inj, stk),
        }
        result["layers"] = [
            {"name": f"stage {i}", "injected": error_metrics(hi[i], ho[i]), "stock": error_metrics(hs[i], ho[i])}
            for i in range(1, min(len(ho), len(hi), len(hs)))
        ]


def exit_now():
    """End the process without the interpreter's teardown: the device context, inductor's and
    Triton's exit hooks (seconds on a GPU), and the pipeline's gloo group, which the model's stage
    still references after destroy_process_group, so it would be torn down at finalization, where
    a two-rank run has aborted after its last measurement. The helpers and the compile workers end
    with this process."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
    # eval.json is written and the helpers' results are in
    exit_now()
