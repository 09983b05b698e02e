#!/usr/bin/env python3
"""Where a decode step's time goes, stock vs injected, at several batch sizes: device time per
kernel and host time per op under torch.profiler, beside an event-timed median step.

    PYTHONPATH=kernels/python:harness/python \
      python3 benchmarks/profile_decode.py MODEL_DIR RUN_DIR [--device cuda] [--batches 1,8] [--steps 10]

MODEL_DIR is a checkpoint, RUN_DIR the --out of `xpuinject MODEL_DIR --skip-eval` (package/ and
packed/ inside); the shim and the eval driver's timer come from harness/python. For each model
and batch: decode steps on a 512-token DynamicCache (cropped back after every step, like the eval
driver), timed by the eval's latency timer, then the same steps under torch.profiler: the top device
kernels by total time and the top host-side ops by CPU time. Prints text tables; run it on a GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("run")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    import torch
    import transformers
    from torch.profiler import ProfilerActivity, profile

    from eval_driver import load_package
    from latency import WARMUP, device_sync, time_decode

    dev = torch.device(args.device)
    run = Path(args.run)
    pkg, loaded_by = load_package(run / "package", dev)
    cfg = transformers.AutoConfig.from_pretrained(args.model)
    models = {}
    for name in ("stock", "injected"):
        m = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).to(dev).eval()
        if name == "injected":
            s = pkg.inject(m, packed=run / "packed")
            print(f"injected ({loaded_by}): {s['replaced']}", flush=True)
        models[name] = m
    g = torch.Generator().manual_seed(3)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    for b in (int(x) for x in args.batches.split(",")):
        ids = torch.randint(0, cfg.vocab_size, (b, args.context), generator=g).to(dev)
        nxt = torch.randint(0, cfg.vocab_size, (b, 1), generator=g).to(dev)
        for name, m in models.items():
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
