#!/usr/bin/env python3
"""Where a decode step's time goes, stock vs injected, at several batch sizes: device time per
kernel and host time per op under torch.profiler, beside an event-timed median step.

    PYTHONPATH=kernels/python:harness/python \
      python3 benchmarks/profile_decode.py MODEL_DIR RUN_DIR [--device cuda] [--batches 1,8] [--steps 10] \
        [--paths eager,graph] [--json OUT.json] [--prefill 2048]

MODEL_DIR is a checkpoint, RUN_DIR the --out of `xpuinject MODEL_DIR --skip-eval` (package/ and
packed/ inside); the shim and the eval driver's timer come from harness/python. For each model
and batch: decode steps on a 512-token DynamicCache (cropped back after every step, like the eval
driver), timed by the eval's latency timer, then the same steps under torch.profiler: the top device
kernels by total time and the top host-side ops by CPU time. `--paths graph` profiles the injected
model under the graph runtime instead (captured once, each step a replay, as the eval's
injected_graph path runs it): every kernel of the step with its device time per step, and the
step's time beside the kernels' sum, whose difference is what the replay spends between kernels.
On the graph path each kernel is also charged its share of the step's critical path: kernels in
the order they end, each charged its end less the later of the previous kernel's end and its own
start. With programmatic dependent launch a kernel starts before the one ahead ends and waits, so
its device time includes that wait and only this share adds up to the step; `--sequence` prints
it launch by launch (the median over the steps). `--prefill N` adds one forward of N tokens (batch 1, the logits of the last token, as the eval
times a prefill) on each model loaded, kernel by kernel, where the time of a prefill goes; with
`--paths graph` also the injected model's forward under the graph runtime (captured once, each
forward a replay: the eval's injected_graph prefill).
KNOCK_OUT=name[,name...] in the environment knocks those launches out of the injected model first
(knockout.py: the step's numbers are then wrong; its time bounds what fusing them away can save).
Prints text tables (and --json, per kernel); run it on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import knockout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("run")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--paths", default="eager", help="eager (stock and injected, DynamicCache) and/or graph "
                    "(injected under the graph runtime)")
    ap.add_argument("--json", default=None, help="write the graph path's (and --prefill's) kernels here")
    ap.add_argument("--prefill", type=int, default=0, help="also profile one forward of this many tokens")
    ap.add_argument("--sequence", action="store_true",
                    help="the graph path's critical-path share of every launch of the step, in order")
    ap.add_argument("--no-profile", action="store_true",
                    help="the graph path's step time only, no torch.profiler pass (benchmarks/ab_step.py)")
    args = ap.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    bad = sorted(set(paths) - {"eager", "graph"})
    if bad:
        ap.error(f"--paths: unknown {', '.join(bad)} (want eager and/or graph)")
    try:
        knocked = knockout.parse(os.environ.get("KNOCK_OUT", ""))
    except ValueError as e:
        ap.error(str(e))
    import torch
    import transformers
    from torch.profiler import ProfilerActivity, profile

    from eval_driver import load_package
    from latency import WARMUP, device_sync, time_decode

    dev = torch.device(args.device)
    run = Path(args.run)
    pkg, loaded_by = load_package(run / "package", dev)
    if knocked:
        print(f"knocked out (the step's numbers are wrong by design): {knockout.describe(knockout.apply(pkg, knocked))}",
              flush=True)
    cfg = transformers.AutoConfig.from_pretrained(args.model)
    models = {}
    for name in ("stock", "injected") if "eager" in paths else ("injected",):
        m = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).to(dev).eval()
        if name == "injected":
            s = pkg.inject(m, packed=run / "packed")
            print(f"injected ({loaded_by}): {s['replaced']}", flush=True)
        models[name] = m
    g = torch.Generator().manual_seed(3)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    report = {"model": args.model, "steps": args.steps, "context": args.context, "graph": [], "prefill": []}
    if args.prefill:
        ids = torch.randint(0, cfg.vocab_size, (1, args.prefill), generator=g).to(dev)
        for name, m in models.items():
            report["prefill"].append(profile_prefill(name, m, ids, args, dev, acts))
        if "graph" in paths:
            report["prefill"].append(profile_prefill("injected", models["injected"], ids, args, dev, acts, graph=True))
    for b in (int(x) for x in args.batches.split(",")):
        ids = torch.randint(0, cfg.vocab_size, (b, args.context), generator=g).to(dev)
        nxt = torch.randint(0, cfg.vocab_size, (b, 1), generator=g).to(dev)
        if "graph" in paths:
            report["graph"].append(profile_graph(models["injected"], ids, args, dev, acts))
        for name, m in models.items() if "eager" in paths else ():
            with torch.no_grad():
                cache = transformers.DynamicCache(config=cfg)
                m(input_ids=ids, past_key_values=cache, use_cache=True)

                def step():
                    m(input_ids=nxt, past_key_values=cache, use_cache=True)
                    cache.crop(-1)

                ms = time_decode(step, args.steps, WARMUP, device_sync(dev))  # the eval's one timer
                print(f"\n=== batch {b} {name}: decode step {ms:.3f} ms ({args.steps} steps in a loop)", flush=True)
                with profile(activities=acts) as prof:
                    for _ in range(args.steps):
                        step()
                    if dev.type == "cuda":
                        torch.cuda.synchronize()
            ka = prof.key_averages()
            if dev.type == "cuda":
                print(f"--- batch {b} {name}: device time by kernel (top {args.top}, totals over {args.steps} steps)")
                print(ka.table(sort_by="device_time_total", row_limit=args.top, max_name_column_width=60))
            print(f"--- batch {b} {name}: host (self CPU) time by op (top {args.top})")
            print(ka.table(sort_by="self_cpu_time_total", row_limit=args.top, max_name_column_width=60), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


def kernel_rows(prof, n: int):
    """Device kernels of a profile: (rows sorted by time, each with calls and us per step; the
    sum of their us per step)."""
    import torch

    kernels = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA and ev.device_time > 0:
            k = kernels.setdefault(ev.name, {"name": ev.name, "calls": 0, "us": 0.0})
            k["calls"] += 1
            k["us"] += ev.device_time
    rows = sorted(kernels.values(), key=lambda k: -k["us"])
    for k in rows:
        k["calls_per_step"] = k["calls"] / n
        k["us_per_step"] = k["us"] / n
    return rows, sum(k["us_per_step"] for k in rows)


def print_rows(rows, limit=None):
    print(f"{'us/step':>9} {'calls':>6}  kernel")
    for k in rows[:limit]:
        print(f"{k['us_per_step']:9.2f} {k['calls_per_step']:6.1f}  {k['name'][:110]}")


def profile_prefill(name, model, ids, args, dev, acts, graph=False) -> dict:
    """One forward of ids (logits of the last token) on model, eager or (graph) a replay under
    the graph runtime as the eval's prefill runs it: the eval's timer, then the same forwards
    under torch.profiler, kernel by kernel."""
    import torch
    from torch.profiler import profile

    import xpuinject_kernels.runtime as rt
    from latency import WARMUP, device_sync, forward_kwargs, time_decode

    n = max(1, args.steps // 10)
    kw = forward_kwargs(model)
    gf = rt.GraphedForward(model, graphs=True) if graph else None
    call = gf or model

    def fwd():
        with torch.no_grad():
            call(input_ids=ids, use_cache=False, **kw)

    try:
        ms = time_decode(fwd, n, WARMUP, device_sync(dev))
        with profile(activities=acts) as prof:
            for _ in range(n):
                fwd()
            device_sync(dev)()
    finally:
        if gf is not None:
            gf.release()
    check = ""
    if gf is not None:
        # the replay against an eager forward of the same ids: the same kernels, the same logits
        with torch.no_grad():
            want = model(input_ids=ids, use_cache=False, **kw).logits
            gf = rt.GraphedForward(model, graphs=True)
            got = gf(input_ids=ids, use_cache=False, **kw).logits
            gf.release()
        check = f"; logits against eager: max abs difference {float((got.float() - want.float()).abs().max()):.3g}"
    rows, busy = kernel_rows(prof, n)
    how = "graph" if graph else "eager"
    print(f"\n=== prefill {ids.shape[1]} {name} {how}: {ms:.3f} ms per forward ({n} in a loop); kernels "
          f"{busy / 1000:.3f} ms{check}", flush=True)
    print_rows(rows, args.top * 2)
    return {"model": name, "path": how, "tokens": ids.shape[1], "ms": ms, "kernels_ms": busy / 1000, "kernels": rows}


def profile_graph(model, ids, args, dev, acts) -> dict:
    """The injected model's decode step under the graph runtime at ids' batch: the eval's timer
    over replays, then the same replays under torch.profiler, kernel by kernel."""
    from torch.profiler import profile

    import xpuinject_kernels.runtime as rt
    from latency import WARMUP, device_sync, time_decode

    b = ids.shape[0]
    n = args.steps
    # graphs required where the device has them; elsewhere (a CPU dry run) the runtime's eager loop
    r = rt.Runtime(model, graphs=True if dev.type in ("cuda", "xpu") else "auto")
    gen = r.start(ids, max_new_tokens=3 * (n + WARMUP) + 2, eos_token_id=[],
                  max_cache_len=rt.cache_bucket(ids.shape[1] + 3 * (n + WARMUP) + 2))
    try:
        ms = time_decode(gen.step, n, WARMUP, device_sync(dev))
        if args.no_profile:
            print(f"\n=== batch {b} injected graph: decode step {ms:.4f} ms ({n} replays in a loop)", flush=True)
            return {"batch": b, "step_ms": ms, "kernels_ms": None, "kernels": []}
        with profile(activities=acts) as prof:
            for _ in range(n):
                gen.step()
            device_sync(dev)()
    finally:
        r.release()
    rows, busy = kernel_rows(prof, n)
    crit, seq = critical_path(prof, n)
    print(f"\n=== batch {b} injected graph: decode step {ms:.4f} ms ({n} replays in a loop); kernels "
          f"{busy / 1000:.4f} ms per step, {sum(k['calls_per_step'] for k in rows):.0f} launches; between "
          f"and around them {ms - busy / 1000:.4f} ms", flush=True)
    print_rows(rows)
    print(f"--- critical path: each kernel's share, {sum(k['us_per_step'] for k in crit) / 1000:.4f} ms per step "
          f"under the profiler (its end less the later of the previous end and its own start)")
    print_rows(crit)
    if args.sequence and seq:
        print("--- critical path launch by launch (median over the steps)")
        print(f"{'pos':>4} {'us':>7}  kernel")
        for i, (name, us) in enumerate(seq):
            print(f"{i:4d} {us:7.2f}  {name[:100]}")
    return {"batch": b, "step_ms": ms, "kernels_ms": busy / 1000, "kernels": rows, "critical_path": crit,
            "sequence": [{"kernel": k, "us": us} for k, us in seq]}


def critical_path(prof, n: int):
    """Each device kernel's share of the critical path, charged in the order kernels end: its
    end less the later of the previous kernel's end and its own start (a kernel that starts after
    the previous one ended is charged its own time; one that starts early under PDL, only what it
    adds past that end). Returns (rows as kernel_rows gives them, by share; the step's launches in
    order, each (name, median share over the n steps), or [] when the launches do not split into n
    equal steps)."""
    import statistics

    import torch

    evs = sorted(((ev.time_range.end, ev.time_range.start, ev.name) for ev in prof.events()
                  if ev.device_type == torch.autograd.DeviceType.CUDA and ev.device_time > 0))
    shares, prev = [], None
    for end, start, name in evs:
        shares.append((name, end - (start if prev is None else max(prev, start))))
        prev = end
    kernels = {}
    for name, us in shares:
        k = kernels.setdefault(name, {"name": name, "calls": 0, "us": 0.0})
        k["calls"] += 1
        k["us"] += us
    rows = sorted(kernels.values(), key=lambda k: -k["us"])
    for k in rows:
        k["calls_per_step"] = k["calls"] / n
        k["us_per_step"] = k["us"] / n
    seq = []
    if n and len(shares) % n == 0:
        per = len(shares) // n
        steps = [shares[i * per:(i + 1) * per] for i in range(n)]
        if all([s[0] for s in st] == [s[0] for s in steps[0]] for st in steps):
            seq = [(steps[0][i][0], statistics.median(st[i][1] for st in steps)) for i in range(per)]
    return rows, seq


if __name__ == "__main__":
    sys.exit(main())
