"""Shared harness of the kernel benchmarks (bench_<kernel>.py in this folder; README.md there).

A bench file describes its cases (inputs, our call, an fp32 reference, the competitors); this
module checks and times them the same way for every kernel:

  1. our output on the device against the fp32 reference: ||out - ref|| / ||ref|| < 1e-2, NaN
     fails, outputs NaN-poisoned so an unwritten element fails too. Every competitor is checked
     the same way; one that fails is reported and not used as a comparison;
  2. device time, median over repeats, inputs rotating past 3x L2 (`time_calls`);
  3. bytes and FLOPs turned into GB/s or TFLOP/s and a fraction of the two ceilings measured at
     the start of the run (copy bandwidth, bf16 matmul rate): `measure_ceilings`.

`--smoke` (CPU, TRITON_INTERPRET=1) runs every case at tiny shapes and checks ours and the torch
eager competitors against the references; it times nothing. Runs write bench.json (everything),
bench.csv (one row per case) and bench.md (the table) to --out. Exit status: 0 when every check
of ours passed, 1 when one failed, 2 on bad arguments.

Importing this module needs only the standard library; torch and the kernels load in `main`.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

# Every kind a bench file may declare, in the order of the table.
KINDS = ("rmsnorm", "add_rmsnorm", "rope", "swiglu", "gemm", "prefill", "decode")

# Model shapes (config.json of meta-llama/Llama-3.2-1B and Llama-3.1-8B).
MODELS: Dict[str, Dict] = {
    "llama-3.2-1b": dict(hidden=2048, heads=32, kv_heads=8, head_dim=64, inter=8192, vocab=128256,
                         eps=1e-5, theta=500000.0),
    "llama-3.1-8b": dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, inter=14336, vocab=128256,
                         eps=1e-5, theta=500000.0),
}


def model_from_config(path: str) -> Tuple[str, Dict]:
    """(name, shape) of a decoder from its transformers config.json (or the folder holding it): the
    fields the GEMM and attention cases read, named as MODELS names them; the name is the folder's."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path, encoding="utf-8") as f:
        c = json.load(f)
    c = c.get("text_config") or c
    need = ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
    missing = [k for k in need if not isinstance(c.get(k), int)]
    if missing:
        raise ValueError(f"not a decoder config: no integer {', '.join(missing)}")
    heads = c["num_attention_heads"]
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    shape = dict(hidden=c["hidden_size"], heads=heads, kv_heads=c.get("num_key_value_heads") or heads,
                 head_dim=c.get("head_dim") or c["hidden_size"] // heads, inter=c["intermediate_size"],
                 vocab=c["vocab_size"], eps=float(c.get("rms_norm_eps") or 1e-6),
                 theta=float(rope.get("rope_theta") or c.get("rope_theta") or 10000.0))
    return os.path.basename(os.path.dirname(os.path.abspath(path))), shape


# --smoke: a model small enough for the Triton interpreter (head_dim 32 is a supported attention
# head size; 48 keeps the swiglu halves off a power of two).
SMOKE_MODELS = {"tiny": dict(hidden=64, heads=4, kv_heads=2, head_dim=32, inter=48, vocab=512, eps=1e-5,
                             theta=10000.0)}

M_FULL = (1, 64, 2048, 16384)
M_QUICK = (1, 2048)
M_SMOKE = (1, 17)
PREFILL_FULL = (512, 2048, 8192)
PREFILL_QUICK = (2048,)
PREFILL_SMOKE = (33,)
DECODE_FULL = ((1, 2048), (8, 2048), (1, 8192), (8, 8192))  # (batch, kv length)
DECODE_QUICK = ((1, 8192), (8, 2048))
DECODE_SMOKE = ((2, 40),)

REL_TOL = 1e-2  # bf16 operands: relative errors of 1e-3..1e-2 are rounding
COMPETITORS = ("torch", "compile", "liger")


# ---------------------------------------------------------------------------------------------
# Pure helpers (no torch)
# ---------------------------------------------------------------------------------------------


def rotation_sets(set_bytes: int, l2_bytes: int, max_sets: int = 64, mem_cap: int = 4 << 30) -> int:
    """How many input sets to rotate over so that the sets together exceed 3x the L2 (each call then
    reads inputs that were evicted since their last use), bounded by max_sets and mem_cap bytes."""
    if set_bytes <= 0:
        raise ValueError(f"bench: set_bytes must be positive, got {set_bytes}")
    want = math.ceil(3 * max(l2_bytes, 1) / set_bytes)
    cap = max(1, mem_cap // set_bytes)
    return int(max(1, min(want, max_sets, cap)))


def evaluate_target(rule: Optional[Tuple[str, str, float]], check_ok: Optional[bool], metrics: Dict) -> str:
    """'met', 'missed', 'missed (wrong result)', 'n/a (no timing)' or '-' (no target).

    rule: (description, metric, threshold); metric "bw_frac" (achieved bytes/s over the measured
    copy bandwidth), "ratio_torch" (best torch time over ours) or "ratio_mm" (cuBLAS matmul-alone
    time over ours)."""
    if rule is None:
        return "-"
    if check_ok is False:
        return "missed (wrong result)"
    _, metric, thr = rule
    v = metrics.get(metric)
    if v is None or not math.isfinite(v):
        return "n/a (no timing)"
    return "met" if v >= thr else "missed"


def fmt_us(t: Optional[float]) -> str:
    if t is None:
        return "-"
    return f"{t:.1f}" if t >= 10 else f"{t:.2f}"


def fmt_rate(bytes_: float, flops: float, t_us: Optional[float], bw: Optional[float], peak: Optional[float]) -> Tuple[str, str, Optional[float]]:
    """(achieved, fraction-of-ceiling text, fraction) for one timing, on the roofline side that
    bounds the case: GB/s when bytes/bw >= flops/peak, else TFLOP/s."""
    if t_us is None or t_us <= 0:
        return "-", "-", None
    s = t_us * 1e-6
    t_bw = bytes_ / bw if bw else 0.0
    t_fl = flops / peak if (peak and flops) else 0.0
    if flops and t_fl > t_bw:
        rate = flops / s
        frac = rate / peak if peak else None
        txt = f"{rate / 1e12:.0f} TFLOP/s"
    else:
        rate = bytes_ / s
        frac = rate / bw if bw else None
        txt = f"{rate / 1e9:.0f} GB/s"
    return txt, (f"{100 * frac:.0f}%" if frac is not None else "-"), frac


def _fallback_mark(timer: Optional[str]) -> str:
    """'*' on a time that was taken with eager events because its graph capture failed (it then
    includes host launch overhead; the JSON says why)."""
    return "*" if timer and "capture failed" in timer else ""


def check_cell(r: Dict) -> str:
    if r.get("status") == "skipped":
        return "skipped"
    if r.get("error"):
        return "ERROR"
    if r.get("check_ok") is None:
        return "-"
    return ("ok " if r["check_ok"] else "FAIL ") + f"{r.get('rel_err', float('nan')):.1e}"


def comp_cell(r: Dict, name: str) -> str:
    c = r.get("competitors", {}).get(name)
    if not c:
        return "-"
    if c.get("status") != "ok":
        return c.get("status", "-")
    ratio = c.get("ratio")
    us = fmt_us(c.get("us")) + _fallback_mark(c.get("timer"))
    return f"{us} ({ratio:.2f}x)" if ratio is not None else us


def target_cell(r: Dict) -> str:
    t = r.get("target", "-")
    if not r.get("target_desc"):
        return t
    v = r.get("target_value")
    cell = f"{t} ({r['target_desc']}: {v:.2f})" if v is not None else f"{t} ({r['target_desc']})"
    if str(t).startswith("missed") and "route" in r:
        cell += f"; vendor route: {r['route']}" if r["route"] else "; not routed"
    return cell


TABLE_HEAD = ["kernel", "model", "shape", "check", "ours us", "achieved", "%ceil", "torch us (x)",
              "compile us (x)", "liger us (x)", "target"]


def render_table(rows: List[Dict], markdown: bool) -> str:
    cells_all = []
    for r in rows:
        ours_us = fmt_us(r.get("ours_us")) + (_fallback_mark(r["ours"].get("timer")) if r.get("ours") else "")
        cells_all.append([r["kind"], r["model"], r["shape"], check_cell(r), ours_us, r.get("achieved", "-"),
                          r.get("frac_text", "-"), comp_cell(r, "torch"), comp_cell(r, "compile"),
                          comp_cell(r, "liger"), target_cell(r)])
    head = TABLE_HEAD
    lines = []
    if markdown:
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join("---" for _ in head) + "|")
        for c in cells_all:
            lines.append("| " + " | ".join(str(x) for x in c) + " |")
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *cells_all)] if cells_all else [len(h) for h in head]
    fmt = "  ".join("{:<%d}" % w for w in widths)
    lines.append(fmt.format(*head))
    for c in cells_all:
        lines.append(fmt.format(*[str(x) for x in c]))
    return "\n".join(lines)


def render_targets(rows: List[Dict]) -> str:
    """Compact text table of the rows that carry a target (printed last, after the full table)."""
    lines = []
    for r in rows:
        short = r["model"].replace("llama-", "")
        tc = r.get("competitors", {}).get("torch", {})
        vs = f"torch x{tc['ratio']:.2f}" if tc.get("status") == "ok" else "torch -"
        lines.append(f"{r['kind']:<11} {short:<6} {r['shape']:<34} ours {fmt_us(r.get('ours_us')):>8}us "
                     f"{r.get('frac_text', '-'):>4} {vs:<11} {target_cell(r)}")
    return "\n".join(lines)


def render_routes(rows: List[Dict]) -> str:
    """Markdown: every missed target and the vendor route that covers it, or "not routed"."""
    missed = [r for r in rows if str(r.get("target", "")).startswith("missed") and "route" in r]
    if not missed:
        return ""
    out = ["| kernel | model | shape | measured | vendor route |", "|---|---|---|---|---|"]
    for r in missed:
        v = r.get("target_value")
        meas = f"{r['target_desc']}: {v:.2f}" if v is not None else r.get("target_desc", "")
        out.append(f"| {r['kind']} | {r['model']} | {r['shape']} | {meas} | {r['route'] or 'not routed'} |")
    return "\n".join(out)


CSV_FIELDS = ["kind", "model", "shape", "check_ok", "rel_err", "ours_us", "ours_again_us", "achieved", "frac",
              "torch_us", "torch_ratio", "torch_variant", "compile_us", "compile_ratio", "liger_us", "liger_ratio",
              "liger_variant", "mm_only_us", "mm_only_ratio", "target", "target_desc", "target_value", "route"]


def csv_text(rows: List[Dict]) -> str:
    """One line per case: times in us, ratios = competitor time / ours (> 1: ours faster)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()

    def num(v, nd=5):
        return "" if v is None else (f"{v:.{nd}g}" if isinstance(v, float) else v)

    for r in rows:
        out = dict(kind=r["kind"], model=r["model"], shape=r["shape"],
                   check_ok="" if r.get("check_ok") is None else int(bool(r["check_ok"])),
                   rel_err=num(r.get("rel_err"), 3), ours_us=num(r.get("ours_us")),
                   ours_again_us=num(r.get("ours_again_us")), achieved=r.get("achieved", ""),
                   frac=num(r.get("frac"), 3), target=r.get("target", ""), target_desc=r.get("target_desc", ""),
                   target_value=num(r.get("target_value")), route=r.get("route", ""))
        comps = dict(r.get("competitors", {}))
        if r.get("cublas_mm_only"):
            comps["mm_only"] = r["cublas_mm_only"]
        for col in ("torch", "compile", "liger", "mm_only"):
            c = comps.get(col) or {}
            if c.get("status") == "ok":
                out[f"{col}_us"] = num(c.get("us"))
                out[f"{col}_ratio"] = num(c.get("ratio"))
                if f"{col}_variant" in CSV_FIELDS:
                    out[f"{col}_variant"] = c.get("best_variant", "")
        w.writerow(out)
    return buf.getvalue()


def token_classes() -> Dict[str, Tuple[int, int]]:
    """A GEMM route's token classes, name -> (min, max) tokens, 0 leaving a side open (the
    planner's, kernels/gpus.go): decode up to contract.json's decode_max_tokens, short up to
    short_max_tokens, prefill above."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, os.pardir, "kernels", "python", "xpuinject_kernels", "contract.json"), encoding="utf-8") as f:
        c = json.load(f)
    d, s = int(c["decode_max_tokens"]), int(c["short_max_tokens"])
    return {"decode": (0, d), "short": (d + 1, s), "prefill": (s + 1, 0)}


def token_class(m: int, classes: Dict[str, Tuple[int, int]]) -> str:
    return next(name for name, (lo, hi) in classes.items() if m >= lo and (not hi or m <= hi))


def load_routes(path: str) -> List[Dict]:
    """The vendor routes of a per-GPU data file (kernels/python/xpuinject_kernels/gpus/<gpu>.json,
    which benchmarks/routes.py writes): a list of {kernel, op, gemm?, k?, n?, head_dims?,
    min_tokens, max_tokens, when}, the token bounds those of its class (token_classes)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or not isinstance(data.get("routes"), list):
        raise ValueError(f"{path}: want a per-GPU data file (an object with routes: gpus/<gpu>.json)")
    classes = token_classes()
    out = []
    for rt in data["routes"]:
        if rt.get("keep_layer"):
            continue
        tokens = rt.get("tokens", "")
        lo, hi = classes.get(tokens, (0, 0))
        if rt.get("gemm"):
            when = f"{rt['gemm']} K={rt['k']} N={rt['n']}" + (f" at {tokens}" if tokens else "")
        else:
            when = f"head_dim {', '.join(str(d) for d in rt.get('head_dims') or [])}"
        out.append(dict(rt, min_tokens=lo, max_tokens=hi, when=when))
    return out


def _tokens_match(rt: Dict, m: int) -> bool:
    """A GEMM route's token bound: min_tokens / max_tokens (absent: open on that side)."""
    return m >= (rt.get("min_tokens") or 0) and (not rt.get("max_tokens") or m <= rt["max_tokens"])


def route_for(row: Dict, routes: List[Dict]) -> str:
    """The per-GPU route that sends this benchmark row's operation to the vendor path, as
    "op (when)", or "" when none does. gemm rows name their projection (qkv -> qkv_proj), the
    swiglu rows are the gate_up_proj GEMM, and a route's min_tokens / max_tokens (absent: open)
    bound the row's M; attention rows match by op and head_dim."""
    p = row.get("params", {})
    kind = row.get("kind")
    for rt in routes:
        if kind in ("gemm", "swiglu") and rt.get("gemm"):
            name = "gate_up_proj" if kind == "swiglu" else f"{p.get('proj')}_proj"
            if (rt["gemm"] == name and rt.get("k") == p.get("K") and rt.get("n") == p.get("N")
                    and _tokens_match(rt, p.get("M", 0))):
                return f"{rt['op']} ({rt['when']})"
        if kind in ("prefill", "decode") and rt.get("op") == f"attention-{kind}" and p.get("D") in (rt.get("head_dims") or []):
            return f"{rt['op']} ({rt['when']})"
    return ""


def write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def parse_args(argv: Optional[Sequence[str]] = None, kinds: Sequence[str] = KINDS,
               description: str = "") -> argparse.Namespace:
    """The command line every bench file shares; kinds are the ones that file (or run_all) runs."""
    p = argparse.ArgumentParser(description=description or __doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder for bench.json, bench.csv, bench.md (created)")
    p.add_argument("--quick", action="store_true", help=f"M in {M_QUICK}, prefill {PREFILL_QUICK}, decode {DECODE_QUICK}")
    p.add_argument("--only", default="", help=f"comma list of kinds: {','.join(kinds)}")
    p.add_argument("--models", default="", help=f"comma list of models: {','.join(MODELS)}")
    p.add_argument("--configs", default="",
                   help="comma list of model folders (or their config.json): their shapes join --models, each named "
                        "by its folder")
    p.add_argument("--m", default="", help="comma list of token counts M (overrides the defaults)")
    p.add_argument("--timer", default="graph", choices=("graph", "events", "do_bench"))
    p.add_argument("--rep-ms", type=float, default=60.0, help="timed milliseconds per candidate (default 60)")
    p.add_argument("--budget-s", type=float, default=450.0,
                   help="skip the remaining cases once this many seconds have passed (default 450)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    p.add_argument("--compile-gemm", action="store_true",
                   help="also torch.compile the plain/bias/residual GEMMs (off: default-mode inductor calls "
                        "the same cuBLAS kernel and the compiles cost minutes)")
    p.add_argument("--cache-dir", default="", help="TRITON_CACHE_DIR / TORCHINDUCTOR_CACHE_DIR (kept between runs)")
    p.add_argument("--routes", default="",
                   help="a per-GPU data file (kernels/python/xpuinject_kernels/gpus/<gpu>.json): missed targets say "
                        "whether the planner routes them to the vendor path")
    p.add_argument("--render", default="",
                   help="re-render DIR/bench.json (or a bench.json) of an earlier run into --out, with --routes; no GPU")
    p.add_argument("--smoke", action="store_true",
                   help="CPU, TRITON_INTERPRET=1, tiny shapes, correctness only (no timing)")
    p.add_argument("--inject-fault", default="",
                   help="test only: KIND or KIND:nan — corrupt our output of that kind to prove the check fails")
    a = p.parse_args(argv)
    a.kinds = [k for k in (s.strip() for s in a.only.split(",")) if k] or list(kinds)
    bad = [k for k in a.kinds if k not in kinds]
    if bad:
        p.error(f"--only: unknown kind(s) {', '.join(bad)} (want {', '.join(kinds)})")
    pool = dict(SMOKE_MODELS if a.smoke else MODELS)
    a.model_names = [m for m in (s.strip() for s in a.models.split(",")) if m]
    bad = [m for m in a.model_names if m not in pool]
    if bad:
        p.error(f"--models: unknown model(s) {', '.join(bad)} (want {', '.join(pool)})")
    for path in (s.strip() for s in a.configs.split(",")):
        if not path:
            continue
        try:
            name, shape = model_from_config(path)
        except (OSError, ValueError) as e:
            p.error(f"--configs: {path}: {e}")
        pool[name] = shape
        a.model_names.append(name)
    a.model_names = a.model_names or list(SMOKE_MODELS if a.smoke else MODELS)
    a.model_shapes = pool
    if a.m:
        try:
            a.m_list = tuple(int(s) for s in a.m.split(",") if s.strip())
        except ValueError:
            p.error(f"--m: want comma-separated integers, got {a.m!r}")
        if not a.m_list or any(m < 1 for m in a.m_list):
            p.error(f"--m: token counts must be >= 1, got {a.m!r}")
    else:
        a.m_list = M_SMOKE if a.smoke else (M_QUICK if a.quick else M_FULL)
    a.prefill = PREFILL_SMOKE if a.smoke else (PREFILL_QUICK if a.quick else PREFILL_FULL)
    a.decode = DECODE_SMOKE if a.smoke else (DECODE_QUICK if a.quick else DECODE_FULL)
    if a.inject_fault:
        kind = a.inject_fault.split(":")[0]
        if kind not in kinds or a.inject_fault.split(":")[1:] not in ([], ["nan"]):
            p.error(f"--inject-fault: want KIND or KIND:nan, got {a.inject_fault!r}")
    if a.rep_ms <= 0 or a.budget_s <= 0:
        p.error("--rep-ms and --budget-s must be positive")
    return a


def log(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------------------------------------
# Runtime context (imports torch)
# ---------------------------------------------------------------------------------------------


class Env:
    """Runtime context: device, kernels module, competitors, timer, ceilings."""

    def __init__(self, args):
        import torch

        self.args = args
        self.torch = torch
        self.smoke = args.smoke
        self.dev = torch.device("cpu" if self.smoke else "cuda")
        self.dtype = torch.bfloat16
        self.l2 = 60 << 20
        if not self.smoke:
            props = torch.cuda.get_device_properties(0)
            self.l2 = int(getattr(props, "L2_cache_size", 0) or self.l2)
        self.bw = None  # bytes/s
        self.peak = None  # FLOP/s
        self.xk = None
        self.liger = None
        self.liger_note = "not available"
        self.hf = None
        self.hf_note = ""
        self.seed = 1234

    def gen(self):
        self.seed += 1
        g = self.torch.Generator(device=self.dev)
        g.manual_seed(self.seed)
        return g

    def randn(self, shape, g, scale=1.0, dtype=None):
        t = self.torch.randn(tuple(shape), generator=g, device=self.dev, dtype=self.torch.float32)
        if scale != 1.0:
            t.mul_(scale)
        return t.to(dtype or self.dtype)


def load_liger(env) -> None:
    """Liger-Kernel's autograd Functions, when `liger_kernel` is importable (pip install
    liger-kernel, or its unpacked wheel on PYTHONPATH: scripts/fetch_liger.sh)."""
    if env.smoke:
        env.liger_note = "not used by --smoke"
        return
    try:
        # Names read in liger_kernel 0.8.5 (ops/rms_norm.py, ops/fused_add_rms_norm.py, ops/rope.py,
        # ops/swiglu.py). Submodule imports: always the default Triton implementation.
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        from liger_kernel.ops.rope import LigerRopeFunction
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction

        try:
            from liger_kernel.ops.swiglu import LigerFusedGateUpSiLUMulFunction
        except ImportError:
            LigerFusedGateUpSiLUMulFunction = None
    except Exception as e:  # noqa: BLE001 - any import failure means "not available", said in the table
        env.liger = None
        env.liger_note = f"not available ({type(e).__name__}: {e})"
        return
    ver = "?"
    try:
        import importlib.metadata as md

        ver = md.version("liger-kernel")
    except Exception:  # noqa: BLE001 - the version is informational only
        pass
    env.liger = dict(rms=LigerRMSNormFunction, add_rms=LigerFusedAddRMSNormFunction, rope=LigerRopeFunction,
                     silu_mul=LigerSiLUMulFunction, gate_up=LigerFusedGateUpSiLUMulFunction)
    env.liger_note = f"liger_kernel {ver}"


def load_hf(env) -> None:
    """transformers' LlamaRMSNorm and apply_rotary_pos_emb: what a stock model runs in eager."""
    try:
        import transformers
        from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

        env.hf = dict(rmsnorm=LlamaRMSNorm, rope=apply_rotary_pos_emb)
        env.hf_note = f"transformers {transformers.__version__}"
    except Exception as e:  # noqa: BLE001
        env.hf = None
        env.hf_note = f"inline formulas (transformers import failed: {type(e).__name__})"


# ---------------------------------------------------------------------------------------------
# Checks and timing
# ---------------------------------------------------------------------------------------------


def as_list(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


def rel_err(env, outs, refs) -> float:
    """max over outputs of ||out - ref|| / ||ref|| in float64; NaN/inf anywhere gives inf."""
    torch = env.torch
    outs, refs = as_list(outs), as_list(refs)
    if len(outs) != len(refs):
        raise ValueError(f"bench: {len(outs)} outputs vs {len(refs)} references")
    worst = 0.0
    for o, r in zip(outs, refs):
        if tuple(o.shape) != tuple(r.shape):
            raise ValueError(f"bench: output shape {tuple(o.shape)} != reference shape {tuple(r.shape)}")
        od = o.detach().double()
        if not bool(torch.isfinite(od).all()):
            return float("inf")
        rd = r.detach().double()
        e = float((od - rd).norm() / rd.norm().clamp_min(1e-30))
        worst = max(worst, e)
    return worst


def _clone_set(env, inp):
    """A copy of an input set with every tensor cloned (strides kept: preserve_format)."""
    return {k: (v.clone() if isinstance(v, env.torch.Tensor) else v) for k, v in inp.items() if not k.startswith("_")}


def sync(env):
    if not env.smoke:
        env.torch.cuda.synchronize()


def graph_us_per_layer(seq: Callable[[int], None], layers: int, replays: int = 20) -> float:
    """Microseconds per layer of seq(0) ... seq(layers - 1): run once (compiles, autotunes,
    allocates outside the capture) and once more on a side stream, as torch's CUDA graph notes
    advise, then all of them captured in one CUDA graph; the median of `replays` replays timed by
    CUDA events around each, / layers. A decode step's kernels run back to back this way, as the
    graph runtime runs them."""
    import statistics

    import torch

    for i in range(layers):
        seq(i)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        seq(0)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(layers):
            seq(i)
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(replays):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1000 / layers)
    return statistics.median(ts)


def out_bytes(x) -> int:
    return sum(t.numel() * t.element_size() for t in as_list(x) if hasattr(t, "numel"))


def time_calls(env, fn, sets) -> Dict:
    """Median device time per call of fn(set), rotating over sets.

    --timer graph (default): the calls, rotating over the sets and keeping every output alive so
    outputs rotate too, are captured once into a CUDA graph; each replay is timed with CUDA
    events; the median over replays divided by the calls per replay is the time per call. Host
    launch overhead is excluded for every competitor alike (what a decode step under CUDA graphs
    sees). A capture that fails falls back to eager sweeps between two events, and says so.
    --timer events: those eager sweeps. --timer do_bench: triton.testing.do_bench's median; it
    zeroes a 256 MB buffer before every call to flush L2, and the dirty lines that leaves are
    written back while the timed kernel runs, which under-reports the bandwidth of 0.1-1 GB
    kernels: a cross-check only.
    """
    torch = env.torch
    args = env.args
    n = len(sets)
    # warm (compiles/autotunes already happened in the check; this warms every set's buffers)
    probe = None
    for s in sets:
        probe = fn(s)
    sync(env)
    per_out = max(1, out_bytes(probe))
    del probe
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    keep = []
    e0.record()
    for s in sets:
        keep.append(fn(s))
    e1.record()
    sync(env)
    del keep
    est_ms = max(e0.elapsed_time(e1) / n, 1e-3)

    if args.timer == "do_bench":
        import triton.testing

        it = [0]

        def step():
            i = it[0]
            it[0] = i + 1
            fn(sets[i % n])

        q = triton.testing.do_bench(step, warmup=25, rep=args.rep_ms, quantiles=[0.5, 0.2, 0.8])
        return dict(us=q[0] * 1e3, p20=q[1] * 1e3, p80=q[2] * 1e3, timer="do_bench", calls=1, sets=n)

    # calls per sweep: at least one pass over the sets, ~2 ms of work, outputs kept alive <= 4 GB
    calls = max(n, min(1000, math.ceil(2.0 / est_ms)))
    calls = max(n, min(calls, (4 << 30) // per_out))
    calls = int(math.ceil(calls / n) * n)
    n_rep = int(min(200, max(10, args.rep_ms / (est_ms * calls))))

    def sweep(keep):
        for j in range(calls):
            keep.append(fn(sets[j % n]))

    timer = args.timer
    if timer == "graph":
        try:
            g = torch.cuda.CUDAGraph()
            keep = []
            with torch.cuda.graph(g):
                sweep(keep)
            g.replay()
            g.replay()
            sync(env)
            times = []
            for _ in range(n_rep):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                g.replay()
                b.record()
                times.append((a, b))
            sync(env)
            ms = sorted(a.elapsed_time(b) / calls for a, b in times)
            del g, keep
            return _stats(ms, "graph", calls, n)
        except Exception as e:  # noqa: BLE001 - capture can fail for a competitor; fall back, say so
            sync(env)
            timer = f"events (graph capture failed: {type(e).__name__}: {str(e)[:120]})"
    times = []
    for _ in range(max(2, n_rep // 2) + 1):
        keep = []
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        sweep(keep)
        b.record()
        times.append((a, b))
        sync(env)
        del keep
    ms = sorted(a.elapsed_time(b) / calls for a, b in times[1:])
    return _stats(ms, timer, calls, n)


def _stats(ms: List[float], timer: str, calls: int, n: int) -> Dict:
    def q(p):
        return ms[min(len(ms) - 1, int(p * (len(ms) - 1) + 0.5))] * 1e3

    return dict(us=q(0.5), p20=q(0.2), p80=q(0.8), timer=timer, calls=calls, sets=n, reps=len(ms))


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------


class Case:
    """One benchmark row, built by a bench file.

    make(g) -> one input set (dict); ours(inp) -> outputs; ref(inp) -> fp32 references (list,
    comparable with cmp_ours(outputs)); competitors: {column: [(variant, fn, cmp)]}, where the
    column "mm_only" is the cuBLAS-alone floor of a fused GEMM; compile_fns: [(variant, eager fn,
    argument selector)] compiled lazily; target: (description, metric, threshold) or None;
    mutates: competitor columns that write into their inputs (checked on clones)."""

    def __init__(self, kind, model, shape, params, make, ours, ref, bytes_, flops, set_bytes,
                 cmp_ours=None, competitors=None, compile_fns=None, notes="", mutates=(), target=None):
        self.kind, self.model, self.shape, self.params = kind, model, shape, params
        self.make, self.ours, self.ref = make, ours, ref
        self.bytes, self.flops, self.set_bytes = float(bytes_), float(flops), int(set_bytes)
        self.cmp_ours = cmp_ours or (lambda o: o)
        self.competitors = competitors or {}
        self.compile_fns = compile_fns or []
        self.notes = notes
        self.mutates = tuple(mutates)
        self.target = target


def _fault(env, kind, outs):
    spec = env.args.inject_fault
    if not spec or spec.split(":")[0] != kind:
        return outs
    outs = [o.clone() for o in as_list(outs)]
    if spec.endswith(":nan"):
        outs[0].view(-1)[outs[0].numel() // 2] = float("nan")
    else:
        outs[0].mul_(1.05)  # 5% off: far above the 1e-2 relative tolerance
    return outs


def run_case(env, case: Case) -> Dict:
    """Check, then (unless --smoke) time one case; returns its row."""
    torch = env.torch
    xk = env.xk
    args = env.args
    row = dict(kind=case.kind, model=case.model, shape=case.shape, params=case.params, bytes=case.bytes,
               flops=case.flops, notes=case.notes, competitors={})
    rule = case.target if not env.smoke else None
    row["target_desc"] = rule[0] if rule else ""

    # 1. correctness on a fresh set, outputs poisoned with NaN
    inp0 = case.make(env.gen())
    refs = case.ref(inp0)
    poisoned = xk.set_poison(True)
    try:
        t = time.time()
        outs = case.ours(inp0)
        sync(env)
        row["first_call_s"] = round(time.time() - t, 3)  # includes Triton compile + autotune
    finally:
        xk.set_poison(poisoned)
    outs = _fault(env, case.kind, case.cmp_ours(outs))
    row["rel_err"] = rel_err(env, outs, refs)
    row["check_ok"] = bool(row["rel_err"] < REL_TOL)
    del outs

    # competitors: build (compile) and check each variant on the same set
    columns: Dict[str, List] = {k: list(v) for k, v in case.competitors.items()}
    if case.compile_fns and not args.no_compile and not env.smoke:
        import torch._dynamo

        cvs = []
        for variant, plain, argsel in case.compile_fns:
            torch._dynamo.reset()  # a clean, static-shape compile for this case (mode "default")
            cf = torch.compile(plain)
            cvs.append((f"torch.compile({variant})", (lambda cf_, sel: (lambda inp: cf_(*sel(inp))))(cf, argsel), None))
        columns["compile"] = cvs
    elif case.compile_fns or case.kind not in ("prefill", "decode", "gemm"):
        row["competitors"]["compile"] = dict(status="not run" if not env.smoke else "-")
    if case.kind in ("rmsnorm", "add_rmsnorm", "rope", "swiglu") and env.liger is None:
        row["competitors"]["liger"] = dict(status="not available")

    live: Dict[str, List] = {}
    for col, variants in columns.items():
        entries = []
        for variant, fn, cmp in variants:
            ent = dict(variant=variant)
            try:
                arg = _clone_set(env, inp0) if col in case.mutates else inp0
                t = time.time()
                o = fn(arg)
                sync(env)
                ent["first_call_s"] = round(time.time() - t, 3)
                o = cmp(o) if cmp else o
                ent["rel_err"] = rel_err(env, o, refs)
                ent["check_ok"] = bool(ent["rel_err"] < REL_TOL)
                del o
                if ent["check_ok"]:
                    entries.append((ent, fn))
            except Exception as e:  # noqa: BLE001 - a broken competitor is reported, not fatal
                ent["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                ent["check_ok"] = False
            row["competitors"].setdefault(col, {"variants": []})["variants"].append(ent)
        live[col] = entries
    del refs

    if env.smoke:
        for col, c in row["competitors"].items():
            if "variants" in c:
                bad = [v for v in c["variants"] if not v.get("check_ok")]
                errs = sorted({v["error"].split(":")[0] for v in bad if v.get("error")})
                c["status"] = "checked" if not bad else ("error: " + ",".join(errs) if errs else "wrong result")
        row["target"] = "-"
        return row

    # 2. timing over rotated sets
    n_sets = rotation_sets(case.set_bytes, env.l2)
    sets = [inp0] + [case.make(env.gen()) for _ in range(n_sets - 1)]
    row["sets"] = n_sets
    tm = time_calls(env, case.ours, sets)
    row["ours"] = tm
    ours_us = tm["us"]
    row["ours_us"] = ours_us
    for col, entries in live.items():
        c = row["competitors"][col]
        best = None
        for ent, fn in entries:
            try:
                ent.update(time_calls(env, fn, sets))
                if best is None or ent["us"] < best["us"]:
                    best = ent
            except Exception as e:  # noqa: BLE001
                ent["error"] = f"timing: {type(e).__name__}: {str(e)[:300]}"
        if best is None:
            c["status"] = "wrong result" if any(v.get("check_ok") is False and "error" not in v for v in c["variants"]) \
                else "error"
            continue
        c.update(status="ok", us=best["us"], best_variant=best["variant"], ratio=best["us"] / ours_us,
                 timer=best.get("timer"))
    # ours once more, after the competitors: the spread between the two is this row's noise floor
    # (a ratio closer to 1 than the drift is noise)
    again = time_calls(env, case.ours, sets)
    row["ours_again_us"] = again["us"]
    row["ours_drift"] = again["us"] / ours_us - 1.0
    del sets, inp0
    if not env.smoke:
        torch.cuda.empty_cache()

    ach, frac_txt, frac = fmt_rate(case.bytes, case.flops, ours_us, env.bw, env.peak)
    row.update(achieved=ach, frac_text=frac_txt, frac=frac)
    metrics = {}
    if env.bw:
        metrics["bw_frac"] = case.bytes / (ours_us * 1e-6) / env.bw
    tc = row["competitors"].get("torch", {})
    if tc.get("status") == "ok":
        metrics["ratio_torch"] = tc["ratio"]
    mm = row["competitors"].pop("mm_only", None)
    if mm is not None:
        row["cublas_mm_only"] = mm
        if mm.get("status") == "ok":
            metrics["ratio_mm"] = mm["ratio"]
    row["metrics"] = metrics
    row["target"] = evaluate_target(rule, row["check_ok"], metrics)
    if rule is not None and metrics.get(rule[1]) is not None:
        row["target_value"] = metrics[rule[1]]
    return row


# ---------------------------------------------------------------------------------------------
# Ceilings, environment, the run
# ---------------------------------------------------------------------------------------------


def copy_bandwidth(env) -> Dict:
    """Device copy bandwidth, bytes read + written per second: 2^30 bf16 elements copied by
    cudaMemcpy (`dst.copy_`) and by an SM kernel (`torch.neg(out=)`), the faster of the two. In a
    CUDA graph the memcpy is a node the driver may give to a copy engine: ~2.7 TB/s on the H200,
    against ~4.3 TB/s through the SMs."""
    torch = env.torch
    n = 1 << 30
    src = env.randn((n,), env.gen())
    dst = torch.empty_like(src)

    def copy(s):
        dst.copy_(s["src"])

    def sm_copy(s):
        torch.neg(s["src"], out=dst)

    tc = time_calls(env, copy, [dict(src=src)])
    ts = time_calls(env, sm_copy, [dict(src=src)])
    bw_memcpy = 2 * n * 2 / (tc["us"] * 1e-6)
    bw_sm = 2 * n * 2 / (ts["us"] * 1e-6)
    del src, dst
    torch.cuda.empty_cache()
    return dict(copy_GBps=max(bw_memcpy, bw_sm) / 1e9, copy=tc, copy_memcpy_GBps=bw_memcpy / 1e9,
                copy_sm_GBps=bw_sm / 1e9, copy_sm=ts, copy_bytes=4 * n)


def measure_ceilings(env) -> Dict:
    """The copy bandwidth and the torch.matmul bf16 rate at 8192^3 on random data."""
    torch = env.torch
    c = copy_bandwidth(env)
    s = 8192
    g = env.gen()
    sets = [dict(a=env.randn((s, s), g), b=env.randn((s, s), g)) for _ in range(2)]
    tm = time_calls(env, lambda d: torch.matmul(d["a"], d["b"]), sets)
    peak = 2 * s ** 3 / (tm["us"] * 1e-6)
    del sets
    torch.cuda.empty_cache()
    env.bw, env.peak = c["copy_GBps"] * 1e9, peak
    return dict(c, matmul_TFLOPs=peak / 1e12, matmul=tm, matmul_shape=[s, s, s])


def environment(env) -> Dict:
    torch = env.torch
    import triton

    info = dict(torch=torch.__version__, triton=triton.__version__, python=sys.version.split()[0],
                date_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), smoke=env.smoke,
                liger=env.liger_note, eager_reference=env.hf_note, timer=env.args.timer)
    if not env.smoke:
        p = torch.cuda.get_device_properties(0)
        info.update(device=p.name, sms=p.multi_processor_count, l2_bytes=env.l2, mem_bytes=p.total_memory)
        info["nvidia_smi"] = nvidia_smi()
    return info


def nvidia_smi() -> str:
    """Clocks, power and temperature of the card at the start: part of the record."""
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,"
                            "power.draw,power.limit,temperature.gpu", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=10)
        return q.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unavailable"


def setup(args, competitors: bool = True) -> Optional[Env]:
    """Environment variables, torch, the kernel package and (competitors) Liger and transformers;
    None, after saying why on stderr, when there is no device to run on."""
    if args.smoke:
        if "triton" in sys.modules and not sys.modules["triton"].knobs.runtime.interpret:
            # Triton picks compiled or interpreted kernels when it decorates them: switching
            # the interpreter on now would leave this process's kernels of both kinds.
            print(f"{os.path.basename(sys.argv[0])}: --smoke needs the Triton interpreter from the start "
                  "(TRITON_INTERPRET=1 before triton is imported); this process imported triton without it",
                  file=sys.stderr)
            return None
        os.environ["TRITON_INTERPRET"] = "1"
    if args.cache_dir:
        cd = os.path.abspath(args.cache_dir)
        os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(cd, "triton"))
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(cd, "inductor"))
    import torch

    if not args.smoke and not torch.cuda.is_available():
        print(f"{os.path.basename(sys.argv[0])}: no CUDA device (use --smoke for the CPU check)", file=sys.stderr)
        return None
    import xpuinject_kernels as xk

    if args.smoke:
        xk.apply_interpreter_fixes()
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 references in true fp32
    torch.backends.cudnn.allow_tf32 = False
    env = Env(args)
    env.xk = xk
    if competitors:
        load_liger(env)
        load_hf(env)
    return env


def main(modules: Sequence, argv: Optional[Sequence[str]] = None, description: str = "") -> int:
    """Run the cases of `modules` (bench files: KINDS and cases(env, kind, model, cfg)) into one
    table. Returns the exit status."""
    by_kind = {k: m for m in modules for k in m.KINDS}
    kinds = [k for k in KINDS if k in by_kind]
    args = parse_args(argv, kinds, description)
    if args.routes:
        try:
            load_routes(args.routes)
        except (OSError, ValueError) as e:
            print(f"bench: --routes {args.routes}: {e}", file=sys.stderr)
            return 2
    if args.render:
        return render(args)
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()
    env = setup(args)
    if env is None:
        return 2
    torch = env.torch
    result = dict(command=" ".join([os.path.basename(sys.executable)] + sys.argv), env=environment(env),
                  ceilings=None, cases=[])
    out_json = os.path.join(args.out, "bench.json")
    log(f"[bench] {result['env']}")

    def flush_json():
        write_atomic(out_json, json.dumps(result, indent=1, default=str) + "\n")

    with torch.inference_mode():
        if not env.smoke:
            try:
                c = measure_ceilings(env)
                log(f"[bench] ceilings: copy {c['copy_GBps']:.0f} GB/s (read+write, 4 GiB per copy; memcpy "
                    f"{c['copy_memcpy_GBps']:.0f}, SM kernel {c['copy_sm_GBps']:.0f}), "
                    f"torch.matmul bf16 8192^3 {c['matmul_TFLOPs']:.0f} TFLOP/s (random data)")
            except Exception as e:  # noqa: BLE001 - rows are still checked and timed, without fractions
                c = dict(error=f"{type(e).__name__}: {str(e)[:500]}")
                log(f"[bench] ceilings: FAILED {c['error']}")
            result["ceilings"] = c
            flush_json()
        models = args.model_shapes
        cases: List[Case] = []
        for kind in args.kinds:
            for name in args.model_names:
                cases.extend(by_kind[kind].cases(env, kind, name, models[name]))
        # Cases that carry a target run first, so a run cut by the budget loses only rows without
        # one; the table keeps the canonical order.
        order = {id(c): i for i, c in enumerate(cases)}
        cases.sort(key=lambda c: (0 if (env.smoke or c.target) else 1, order[id(c)]))
        log(f"[bench] {len(cases)} cases, budget {args.budget_s:.0f} s")
        for i, case in enumerate(cases):
            el = time.time() - t_start
            if not env.smoke and el > args.budget_s:
                result["cases"].append(dict(kind=case.kind, model=case.model, shape=case.shape, params=case.params,
                                            status="skipped", reason=f"time budget {args.budget_s:.0f} s spent",
                                            _order=order[id(case)]))
                log(f"[bench {i + 1}/{len(cases)} +{el:.0f}s] {case.kind} {case.model} {case.shape}: skipped (budget)")
                continue
            try:
                row = run_case(env, case)
            except Exception as e:  # noqa: BLE001 - one broken case must not lose the others
                row = dict(kind=case.kind, model=case.model, shape=case.shape, params=case.params,
                           error=f"{type(e).__name__}: {str(e)[:500]}", check_ok=False, target="error")
            row["_order"] = order[id(case)]
            result["cases"].append(row)
            flush_json()
            log(progress_line(i, len(cases), time.time() - t_start, row))

    result["cases"].sort(key=lambda r: r.pop("_order", 0))
    return finish(result, args, smoke=env.smoke, wall_s=round(time.time() - t_start, 1))


def finish(result: Dict, args, smoke: bool, wall_s: Optional[float]) -> int:
    """Routes, summary, bench.json, bench.csv, bench.md and the printed tables of a run (or a
    re-render)."""
    out_json = os.path.join(args.out, "bench.json")
    rows = result["cases"]
    if args.routes:
        routes = load_routes(args.routes)
        result["routes_from"] = args.routes
        for r in rows:
            if str(r.get("target", "")).startswith("missed"):
                r["route"] = route_for(r, routes)
    failed = [r for r in rows if r.get("check_ok") is False]
    checked = [r for r in rows if r.get("check_ok") is not None]
    missed = [r for r in rows if str(r.get("target", "")).startswith("missed")]
    result["summary"] = dict(cases=len(rows), checked=len(checked), failed=len(failed),
                             skipped=sum(1 for r in rows if r.get("status") == "skipped"),
                             targets_met=sum(1 for r in rows if r.get("target") == "met"),
                             targets_missed=len(missed),
                             missed_routed=sum(1 for r in missed if r.get("route")) if args.routes else None,
                             wall_s=wall_s if wall_s is not None else result.get("summary", {}).get("wall_s"))
    write_atomic(out_json, json.dumps(result, indent=1, default=str) + "\n")
    write_atomic(os.path.join(args.out, "bench.csv"), csv_text(rows))
    e = result["env"]
    header = [f"# Kernel benchmark ({'interpreter smoke, no timing' if smoke else e.get('device', '?')})", "",
              f"command: `{result['command']}`  ", f"date: {e['date_utc']}  ",
              f"torch {e['torch']}, triton {e['triton']}; liger: {e.get('liger')}; "
              f"eager: {e.get('eager_reference')}; timer: {e.get('timer')}  "]
    if args.routes:
        header.append(f"vendor routes: `{os.path.basename(args.routes)}` (the planner's per-GPU data); a missed target "
                      "names the route that sends that operation to cuBLAS/SDPA in a plan, or says it is not routed  ")
    if result.get("ceilings") and "copy_GBps" in result["ceilings"]:
        c = result["ceilings"]
        header.append(f"ceilings (this run): copy {c['copy_GBps']:.0f} GB/s, torch.matmul bf16 {c['matmul_TFLOPs']:.0f} TFLOP/s  ")
        header.append("times: median us per call; ratio = competitor time / ours (>1: ours faster); "
                      "* = CUDA-graph capture failed, timed eagerly (host overhead included)")
    md = "\n".join(header) + "\n\n" + render_table(rows, markdown=True) + "\n"
    tgt = [r for r in rows if r.get("target_desc")]
    if tgt:
        md += "\n## Targets\n\n```\n" + render_targets(tgt) + "\n```\n"
    routes_md = render_routes(rows) if args.routes else ""
    if routes_md:
        md += "\n## Missed targets and the vendor route that covers each\n\n" + routes_md + "\n"
    write_atomic(os.path.join(args.out, "bench.md"), md)
    log("")
    log("\n".join(header))
    log(render_table(rows, markdown=False))
    if tgt:
        log("")
        log("targets:")
        log(render_targets(tgt))
    s = result["summary"]
    routed = f" ({s['missed_routed']} routed to the vendor path)" if s["missed_routed"] is not None else ""
    log(f"[bench] {s['checked']} checked, {s['failed']} failed, {s['skipped']} skipped; targets met {s['targets_met']}, "
        f"missed {s['targets_missed']}{routed}; {s['wall_s']} s; wrote bench.json, bench.csv, bench.md to {args.out}")
    return 1 if failed else 0


def render(args) -> int:
    """--render: the tables of an earlier run's bench.json, with --routes applied; no GPU."""
    src = os.path.join(args.render, "bench.json") if os.path.isdir(args.render) else args.render
    try:
        with open(src, encoding="utf-8") as f:
            result = json.load(f)
        if not isinstance(result, dict) or not isinstance(result.get("cases"), list) or "env" not in result:
            raise ValueError("not a bench.json (want an object with env and cases)")
    except (OSError, ValueError) as e:
        print(f"bench: --render {src}: {e}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    return finish(result, args, smoke=bool(result["env"].get("smoke")), wall_s=None)


def progress_line(i, total, el, row) -> str:
    head = f"[bench {i + 1}/{total} +{el:.0f}s] {row['kind']} {row['model']} {row['shape']}:"
    if row.get("error"):
        return f"{head} ERROR {row['error']}"
    parts = [f"check {'ok' if row['check_ok'] else 'FAIL'} {row['rel_err']:.1e}", f"first call {row.get('first_call_s')}s"]
    if row.get("ours_us") is not None:
        parts.append(f"ours {fmt_us(row['ours_us'])}us (again {fmt_us(row.get('ours_again_us'))}us) "
                     f"{row.get('achieved', '')} ({row.get('frac_text', '-')})")
    for col in COMPETITORS:
        c = row["competitors"].get(col)
        if c and c.get("status") == "ok":
            parts.append(f"{col} {fmt_us(c['us'])}us x{c['ratio']:.2f}")
        elif c:
            parts.append(f"{col} {c.get('status', '?')}")
    mm = row.get("cublas_mm_only")
    if mm and mm.get("status") == "ok":
        parts.append(f"mm-only {fmt_us(mm['us'])}us")
    if row.get("target", "-") != "-":
        parts.append(f"target {row['target']}")
    return head + " " + "; ".join(parts)


# ---------------------------------------------------------------------------------------------
# Shared pieces of the cases
# ---------------------------------------------------------------------------------------------


def gemm_inputs(env, g, m, k, n, bias=False, residual=False):
    """x [M, K]; the weight both packed K-major [K, N] (ours) and in the nn.Linear layout [N, K]
    (stock torch), scaled by K^-1/2; optional bias [N] and residual [M, N]."""
    x = env.randn((m, k), g)
    w_kn = env.randn((k, n), g, 1.0 / math.sqrt(k))
    inp = dict(x=x, w=w_kn, w_nk=w_kn.t().contiguous())
    if bias:
        inp["b"] = env.randn((n,), g, 0.1)
    if residual:
        inp["r"] = env.randn((m, n), g)
    return inp


