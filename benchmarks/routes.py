#!/usr/bin/env python3
"""Write a GPU's vendor routes from a kernel benchmark run into its per-GPU data file.

    python3 benchmarks/routes.py RUN_DIR --gpu h200 [--out FILE]
    python3 benchmarks/routes.py bench.csv --gpu h200 --device "NVIDIA H200" --date 2026-11-29 \\
        --bench-command "python3 benchmarks/run_all.py --out RUN"

RUN_DIR (or its bench.json) is a `benchmarks/run_all.py` run; a bench.csv carries no
environment, so --device, --date and --bench-command say where and how it was measured. The
file is kernels/python/xpuinject_kernels/gpus/<gpu>.json unless --out names another; its
"routes" and "kept" sections are replaced, everything else (devices, "tuned") is kept.

The rule, per operation a layer runs (`ratio` = vendor time / ours, < 1: the vendor is faster):

  GEMM       the projection of the variant a decoder runs (qkv and o without epilogue, down with
             the residual add it fuses, gate_up as the swiglu GEMM against the paths a model can
             run); per token class (decode: M <= contract.json decode_max_tokens, short: M <=
             short_max_tokens, prefill above) the class is routed to the vendor when the
             geometric mean of its ratios is < 1; a route per routed class, or one for every
             token count when every measured class is routed.
  attention  prefill and decode per head_dim, over every measured shape, by the same mean.

--decode-step FILE (the kernels part of benchmarks/bench_decode_step.py, decode-step.json) prices
decode attention as a model pays it: SDPA's route with the mask a decode step carries repeats K/V
to every query head on CUDA (xpuinject_kernels/decoder.py `_sdpa`), so the route's time is that of
SDPA on repeated K/V, copies included, against ours reading the cache up to its filled length;
its rows replace the run's decode-attention rows. Its GEMM rows (M = batch, each decoder layer's
projection as the step runs it: gemv.py at M <= gemv.MAX_M, timed at the tuned config the data
file ships when the run swept configs) replace the run's rows of the same projection at those
token counts; the run's larger M (the tiled kernel) stay.

--tune FILE --tune-config CONFIG (a benchmarks/tune.py tune.json, and the config.json of the model
whose classes it swept): its GEMM classes above decode size, each the tuned config's time against
cuBLAS on the packed weight (what a route runs: torch.matmul(x, W[K, N])), the projection named by
the model's geometry (qkv: K = hidden, N = (heads + 2 kv_heads) * head_dim; o: K = heads *
head_dim, N = hidden). Its rows replace the run's of the same projection and shape. Decode-sized
classes are not priced from it: an isolated launch is not what a decode step pays (--decode-step
measures that).

A route covers every token count only when every token class was measured and routed.

An operation that is not routed but missed its benchmark target becomes a "kept" entry: the
plan says why the layer keeps our kernel. The planner (kernels/gpus.go) reads the file;
`xpuinject plan --gpu <gpu>` uses it.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
from typing import Dict, List, Optional

import benchlib
from benchlib import token_class, token_classes

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(HERE, os.pardir, "kernels", "python", "xpuinject_kernels")

# bench_gemm's projection -> (the GEMM name the planner's registry uses, the variant a model runs)
GEMM_OPS = {"qkv": ("qkv_proj", "none"), "o": ("o_proj", "none"), "down": ("down_proj", "residual")}
SHAPE = re.compile(r"(\w+)=(\d+)(?:x(\d+))?")


def shape_params(shape: str) -> Dict[str, int]:
    """"qkv:none M=2048 K=2048 N=3072" -> {M, K, N}; "N=2x8192" -> N=16384."""
    out = {}
    for k, a, b in SHAPE.findall(shape):
        out[k] = int(a) * int(b) if b else int(a)
    return out


def load_rows(path: str) -> (List[Dict], Dict):
    """The benchmark's rows as {kind, model, shape, ratio, target, target_desc, target_value}, and
    what the run says about itself (device, date, command) when it says it."""
    if os.path.isdir(path):
        path = os.path.join(path, "bench.json")
    if path.endswith(".csv"):
        with open(path, encoding="utf-8", newline="") as f:
            raw = list(csv.DictReader(f))
        rows = []
        for r in raw:
            if r.get("check_ok") != "1" or not r.get("torch_ratio"):
                continue
            rows.append(dict(kind=r["kind"], model=r["model"], shape=r["shape"], ratio=float(r["torch_ratio"]),
                             target=r.get("target", ""), target_desc=r.get("target_desc", ""),
                             target_value=float(r["target_value"]) if r.get("target_value") else None))
        return rows, {}
    with open(path, encoding="utf-8") as f:
        run = json.load(f)
    if not isinstance(run, dict) or not isinstance(run.get("cases"), list):
        raise ValueError(f"{path}: not a bench.json (want an object with cases)")
    rows = []
    for r in run["cases"]:
        t = (r.get("competitors") or {}).get("torch") or {}
        if r.get("check_ok") is not True or t.get("status") != "ok":
            continue
        rows.append(dict(kind=r["kind"], model=r["model"], shape=r["shape"], ratio=float(t["ratio"]),
                         target=r.get("target", ""), target_desc=r.get("target_desc", ""),
                         target_value=r.get("target_value")))
    env = run.get("env") or {}
    return rows, dict(device=env.get("device"), date=(env.get("date_utc") or "")[:10], command=run.get("command"))


# bench_decode_step.py's shapes -> the model names the runs use
STEP_MODELS = {"1b": "llama-3.2-1b", "8b": "llama-3.1-8b"}
# decode attention as the SDPA route runs it in a decoder layer (with a mask, on CUDA)
STEP_VENDOR = "SDPA repeat_kv"


# bench_decode_step.py's GEMM cases -> (kind, bench_gemm's projection:variant) as classify reads them
STEP_GEMMS = {"qkv_proj": ("gemm", "qkv:none"), "o_proj": ("gemm", "o:none"), "down_proj": ("gemm", "down:residual"),
              "gate_up_proj": ("swiglu", "gate_up:swiglu")}


def shipped_gemv_label(tuned: List[Dict], epilogue: str, k: int, n: int) -> Optional[str]:
    """The bench_decode_step.py --sweep column of the gemv config the data file ships for this
    class (what a decode step launches), or None."""
    for e in tuned:
        key = e.get("key") or {}
        if e.get("kernel") == "gemv" and key.get("epilogue") == epilogue and key.get("k") == k and key.get("n") == n:
            c = e["config"]
            return f"gemv {c['BLOCK_N']}x{c['BLOCK_K']} split{c['SPLIT_K']}"
    return None


def load_decode_step(path: str, tuned: Optional[List[Dict]] = None) -> (List[Dict], Dict):
    """Decode-attention rows of a bench_decode_step.py run (kernels part), priced with the glue
    the vendor route implies, its GEMM rows (cuBLAS against ours: the shipped tuned gemv config's
    column when the run swept it, else the default launch), and the run's stamp."""
    sys.path.insert(0, HERE)
    from bench_decode_step import SHAPES

    with open(path, encoding="utf-8") as f:
        run = json.load(f)
    rows = []
    for r in run.get("kernels") or []:
        g = re.fullmatch(r"(\w+) K=(\d+) N=(\d+)", r.get("case", ""))
        us = r.get("us") or {}
        if g and g.group(1) in STEP_GEMMS and r.get("shape") in STEP_MODELS and us.get("ours") and us.get("cuBLAS"):
            kind, proj = STEP_GEMMS[g.group(1)]
            k, n = int(g.group(2)), int(g.group(3))
            label = shipped_gemv_label(tuned or [], proj.split(":")[1], k, n)
            ours = us.get(label) or us["ours"]
            dims = f"M={r['M']} K={k} N={n}"
            rows.append(dict(kind=kind, model=STEP_MODELS[r["shape"]], shape=dims if kind == "swiglu" else f"{proj} {dims}",
                             ratio=us["cuBLAS"] / ours, target="", target_desc="", target_value=None))
            continue
        m = re.fullmatch(r"attention decode L=(\d+)/(\d+)", r.get("case", ""))
        us = r.get("us") or {}
        if not m or r.get("shape") not in STEP_MODELS or not us.get("ours") or not us.get(STEP_VENDOR):
            continue
        d = SHAPES[r["shape"]]["head_dim"]
        rows.append(dict(kind="decode", model=STEP_MODELS[r["shape"]], shape=f"B={r['M']} L={m.group(1)} D={d}",
                         ratio=us[STEP_VENDOR] / us["ours"], target="", target_desc="", target_value=None))
    if not rows:
        raise ValueError("no decode-attention rows (want the kernels part of benchmarks/bench_decode_step.py)")
    return rows, dict(device=run.get("device"), command="benchmarks/bench_decode_step.py --parts kernels")


# the vendor column of a tune.json class that a route runs: cuBLAS on the packed K-major weight
TUNE_VENDOR = "cuBLAS x @ W[K,N] (packed)"


def load_tune(path: str, config_path: str, model: str, classes) -> List[Dict]:
    """GEMM rows of a tune.json (module docstring: --tune), each stamped with the tune's own
    date, command and file."""
    with open(path, encoding="utf-8") as f:
        run = json.load(f)
    with open(config_path, encoding="utf-8") as f:
        cfg = json.load(f)
    if not isinstance(run, dict) or not isinstance(run.get("entries"), list):
        raise ValueError("not a tune.json (want an object with entries: benchmarks/tune.py --out)")
    try:
        hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{config_path}: want a decoder config.json with hidden_size and num_attention_heads")
    kv = int(cfg.get("num_key_value_heads") or heads)
    d = int(cfg.get("head_dim") or hidden // heads)
    projections = {(hidden, (heads + 2 * kv) * d, "none"): "qkv", (heads * d, hidden, "none"): "o"}
    ours: Dict[tuple, float] = {}
    vendor: Dict[tuple, float] = {}
    for e in run["entries"]:
        sh, us = e.get("shape") or {}, (e.get("measured") or {}).get("us")
        if e.get("kernel") not in ("gemm", "gemv") or not us or "M" not in sh:
            continue
        key = (sh.get("K"), sh.get("N"), sh.get("epilogue", "none"), sh["M"])
        if e.get("best"):
            ours[key] = us
        elif e.get("vendor") == TUNE_VENDOR:
            vendor[key] = us
    decode_max = classes["decode"][1]
    stamp = dict(date=(run.get("date") or "")[:10], command=run.get("command") or "", source=path)
    rows = []
    for key in sorted(set(ours) & set(vendor), key=lambda k: (k[0], k[1], k[3])):
        k, n, epi, m = key
        proj = projections.get((k, n, epi))
        if proj is None or m <= decode_max:
            continue
        rows.append(dict(kind="gemm", model=model, shape=f"{proj}:{epi} M={m} K={k} N={n}", ratio=vendor[key] / ours[key],
                         target="", target_desc="", target_value=None, stamp=stamp))
    if not rows:
        raise ValueError(f"no GEMM class of {config_path}'s qkv or o projection above decode size with a "
                         f"{TUNE_VENDOR!r} row (want a tune.py --only gemm run)")
    return rows


def _gemm_key(row: Dict):
    p = shape_params(row["shape"])
    first = row["shape"].split(" ", 1)[0]
    return row["kind"], row["model"], first if ":" in first else "", p.get("K"), p.get("N"), p.get("M")


def replaced(row: Dict, step_rows: List[Dict]) -> bool:
    """Whether a run row is a GEMM the decode-step rows measured again: the same projection and
    shape at a token count up to the largest they measured (gemv.py's rows, M <= gemv.MAX_M)."""
    if row["kind"] not in ("gemm", "swiglu"):
        return False
    top: Dict[tuple, int] = {}
    for s in step_rows:
        if s["kind"] in ("gemm", "swiglu"):
            key = _gemm_key(s)
            top[key[:5]] = max(top.get(key[:5], 0), key[5])
    key = _gemm_key(row)
    return key[:5] in top and key[5] <= top[key[:5]]


def classify(row: Dict, classes) -> Optional[Dict]:
    """The operation a benchmark row measures, as the planner names it, or None."""
    p = shape_params(row["shape"])
    kind = row["kind"]
    if kind == "gemm":
        proj, epi = row["shape"].split(" ", 1)[0].split(":")
        if proj not in GEMM_OPS or GEMM_OPS[proj][1] != epi:
            return None  # gate_up alone, or a variant no decoder runs
        name = GEMM_OPS[proj][0]
        return dict(kernel="gemm", op=name, gemm=name, k=p["K"], n=p["N"], vendor="cuBLAS",
                    cls=token_class(p["M"], classes), shape=f"M={p['M']}")
    if kind == "swiglu":
        return dict(kernel="gemm", op="gate_up_proj", gemm="gate_up_proj", k=p["K"], n=p["N"], epilogue="swiglu",
                    vendor="the stock MLP or cuBLAS + silu*mul",
                    cls=token_class(p["M"], classes), shape=f"M={p['M']}")
    if kind == "prefill":
        return dict(kernel="attention-prefill", op="attention-prefill", head_dims=[p["D"]], vendor="SDPA",
                    cls="all", shape=f"S={p['S']}")
    if kind == "decode":
        return dict(kernel="attention-decode", op="attention-decode", head_dims=[p["D"]], vendor="SDPA",
                    cls="all", shape=f"B={p['B']} L={p['L']}")
    return None


def geomean(v: List[float]) -> float:
    return math.exp(sum(math.log(x) for x in v) / len(v))


def derive(rows: List[Dict], classes, stamp: Dict) -> (List[Dict], List[Dict]):
    """routes and kept entries from the rows (module docstring: the rule)."""
    groups: Dict[tuple, Dict] = {}
    for r in rows:
        c = classify(r, classes)
        if c is None:
            continue
        key = (c["kernel"], c["op"], c.get("k"), c.get("n"), tuple(c.get("head_dims", ())))
        g = groups.setdefault(key, dict(info=c, model=r["model"], rows=[]))
        g["rows"].append(dict(r, cls=c["cls"], mshape=c["shape"]))
    routes, kept = [], []
    all_classes = list(classes)
    for key in sorted(groups, key=lambda k: (k[0] != "gemm", k[0], k[1], k[2] or 0, k[3] or 0, k[4])):
        g = groups[key]
        info, rs = g["info"], g["rows"]
        classes = sorted({r["cls"] for r in rs})
        routed = [c for c in classes if geomean([r["ratio"] for r in rs if r["cls"] == c]) < 1]
        base = {k: info[k] for k in ("kernel", "op", "gemm", "k", "n", "head_dims", "epilogue") if k in info}
        # by token count (M=1 before M=64), then as measured
        order = sorted(range(len(rs)), key=lambda i: (shape_params(rs[i]["mshape"]).get("M", 0), i))
        measured = [dict(shape=rs[i]["mshape"], ratio=round(rs[i]["ratio"], 3)) for i in order]
        every = "all" in routed or set(routed) >= set(all_classes)  # attention's rows: one class, "all"
        st = rs[0].get("stamp") or stamp
        if routed:
            for cls in [None] if every else routed:
                e = dict(base)
                if info.get("epilogue"):
                    e.pop("epilogue")
                if cls is not None:
                    e["tokens"] = cls
                e.update(vendor=info["vendor"], model=g["model"], measured=measured, **st)
                routes.append(e)
            continue
        missed = [r for r in rs if str(r.get("target", "")).startswith("missed")]
        if missed:
            e = dict(base, vendor=info["vendor"], model=g["model"], measured=measured,
                     target=missed[0]["target_desc"],
                     missed=[dict(shape=r["mshape"], ratio=round(r["target_value"], 3)) for r in missed], **st)
            kept.append(e)
    return routes, kept


def write_tuned(path: str, entries, device: str, keep) -> None:
    """Put entries into a per-GPU data file's "tuned" section after the existing entries keep(e)
    keeps; the rest of the file (routes, kept) stays, and device joins its "devices"."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data["tuned"] = [e for e in data.get("tuned", []) if keep(e)] + list(entries)
    if device and device not in data.get("devices", []):
        data.setdefault("devices", []).append(device)
    benchlib.write_atomic(path, dumps(data) + "\n")


def dumps(v, ind: str = "") -> str:
    """JSON with one line per object that holds no other object (a measurement, a config), so the
    data file reads one entry per few lines and diffs line by line."""
    flat = lambda x: not isinstance(x, (dict, list)) or (  # noqa: E731
        isinstance(x, list) and all(not isinstance(y, (dict, list)) for y in x))
    if isinstance(v, dict) and not all(flat(x) for x in v.values()):
        items = [f'{ind} {json.dumps(k)}: {dumps(x, ind + " ")}' for k, x in v.items()]
        return "{\n" + ",\n".join(items) + "\n" + ind + "}"
    if isinstance(v, list) and not flat(v):
        return "[\n" + ",\n".join(f"{ind} {dumps(x, ind + ' ')}" for x in v) + "\n" + ind + "]"
    return json.dumps(v)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a run_all.py run folder, its bench.json, or a bench.csv")
    ap.add_argument("--gpu", required=True, help="the data file's name: lowercase letters, digits, dashes (h200)")
    ap.add_argument("--device", default="", help="torch's name of the GPU (torch.cuda.get_device_name), for a csv")
    ap.add_argument("--date", default="", help="when the run was measured (YYYY-MM-DD), for a csv")
    ap.add_argument("--bench-command", default="", help="the benchmark command that measured it, for a csv")
    ap.add_argument("--out", default="", help="the data file (default: the kernel package's gpus/<gpu>.json)")
    ap.add_argument("--decode-step", default="", help="a bench_decode_step.py decode-step.json: its decode-attention "
                    "rows, priced with the glue the vendor route implies, replace the run's")
    ap.add_argument("--tune", default="", help="a benchmarks/tune.py tune.json: its GEMM classes above decode size, "
                    "priced against cuBLAS, replace the run's rows of the same projection and shape")
    ap.add_argument("--tune-config", default="", help="with --tune: the config.json of the model whose classes it swept")
    ap.add_argument("--tune-model", default="", help="with --tune: the model's name in the routes (default: the "
                    "config's folder name)")
    a = ap.parse_args(argv)
    if bool(a.tune) != bool(a.tune_config):
        ap.error("--tune and --tune-config go together")
    if not re.fullmatch(r"[a-z0-9][-a-z0-9]*", a.gpu):
        ap.error(f"--gpu {a.gpu!r}: want lowercase letters, digits and dashes")
    try:
        rows, run = load_rows(a.run)
    except (OSError, ValueError) as e:
        print(f"routes: {a.run}: {e}", file=sys.stderr)
        return 2
    rel = lambda f: os.path.relpath(os.path.abspath(f), os.path.join(HERE, os.pardir)).replace(os.sep, "/")  # noqa: E731
    out = os.path.normpath(a.out or os.path.join(PKG, "gpus", a.gpu + ".json"))
    data = {}
    if os.path.exists(out):
        with open(out, encoding="utf-8") as f:
            data = json.load(f)
    if a.decode_step:
        try:
            step_rows, step_run = load_decode_step(a.decode_step, data.get("tuned"))
        except (OSError, ValueError) as e:
            print(f"routes: {a.decode_step}: {e}", file=sys.stderr)
            return 2
        if step_run.get("device") and a.device and step_run["device"] != a.device:
            print(f"routes: {a.decode_step} ran on {step_run['device']}, not {a.device}", file=sys.stderr)
            return 2
        rows = [r for r in rows if r["kind"] != "decode" and not replaced(r, step_rows)] + step_rows
    if a.tune:
        model = a.tune_model or os.path.basename(os.path.dirname(os.path.abspath(a.tune_config)))
        try:
            tune_rows = load_tune(a.tune, a.tune_config, model, token_classes())
        except (OSError, ValueError) as e:
            print(f"routes: {a.tune}: {e}", file=sys.stderr)
            return 2
        for r in tune_rows:
            r["stamp"] = dict(r["stamp"], source=rel(a.tune))
        measured = {_gemm_key(r) for r in tune_rows}
        rows = [r for r in rows if _gemm_key(r) not in measured] + tune_rows
    device = a.device or run.get("device") or ""
    date = a.date or run.get("date") or ""
    command = a.bench_command or run.get("command") or ""
    if not (device and date and command):
        ap.error("the run does not say its device, date and command: give --device, --date and --bench-command")
    source = rel(a.run)
    if a.decode_step:
        command += f"; decode rows: {step_run['command']} ({rel(a.decode_step)})"
    routes, kept = derive(rows, token_classes(), dict(date=date, command=command, source=source))
    devices = data.get("devices") or []
    if device not in devices:
        devices.append(device)
    data = dict(gpu=a.gpu, devices=devices,
                about=data.get("about") or "Measured vendor routes and tuned launch configs of one GPU model. "
                "benchmarks/routes.py writes routes and kept, benchmarks/tune.py --write-tuned writes tuned; "
                "the planner (kernels/gpus.go) and the layers (xpuinject_kernels/gpus.py) read it.",
                routes=routes, kept=kept, tuned=data.get("tuned") or [])
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = f"{out}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(dumps(data) + "\n")
    os.replace(tmp, out)
    print(f"routes: {len(routes)} routes, {len(kept)} kept entries from {len(rows)} rows -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
