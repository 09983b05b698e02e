#!/usr/bin/env python3
"""The whole decode step at each candidate launch config of one kernel, on a CUDA GPU.

    PYTHONPATH=kernels/python:harness/python python3 benchmarks/step_configs.py MODEL_DIR RUN_DIR \\
        --kernel moe.decode|gemv [--key hidden=2048,tokens=1] [--only EW=1] [--pointer-twins]
        [--gpu-data h200] [--rounds 3] [--steps 50] [--context 512]

A kernel's best config timed alone (bench_moe.py --sweep, tune.py) need not be its best inside a
step, where each launch starts behind another and programmatic dependent launch overlaps them.
MODEL_DIR is a checkpoint, RUN_DIR the --out of `xpuinject MODEL_DIR --skip-eval` (package/ and
packed/ inside), loaded as the eval loads them. For each candidate (bench_moe.SWEEP_DECODE for
moe.decode; tune.GEMV at 3 and 4 stages for gemv, and EW tiles) the package's problem classes of that kernel
whose key matches --key (every field given must be equal; none: all of them) take the candidate:
an entry put first in the GPU data's tuned list of this process, the launchers' config caches
emptied (on a GPU no data file names, --gpu-data names the file whose tuned entries stand in for
the shipped ones; default none: the heuristics). The graph runtime then captures the step again at
batch 1 and the eval's timer (latency.time_decode) times it. Rounds interleave the candidates, the shipped configs first in
each, so drift falls on all alike. Prints ms per step (median over rounds) and the ratio to the
shipped configs' step; a candidate none of whose launches took it says so instead.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "kernels" / "python"), str(ROOT / "harness" / "python"), str(Path(__file__).parent)]

KERNELS = ("moe.decode", "gemv")


def candidates(kernel: str) -> list:
    """The configs a kernel's step sweep times: dicts of launch constants with num_warps and
    num_stages, as a tuned entry holds them."""
    if kernel == "moe.decode":
        import bench_moe

        return [bench_moe.decode_config(*c) for c in bench_moe.SWEEP_DECODE]
    if kernel == "gemv":
        import tune

        dot = [dict(BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=sp, num_warps=w, num_stages=st)
               for bn, bk, sp, w, _ in tune.GEMV for st in (3, 4)]
        # one row through EW on the K-major weight: wide, shallow tiles (the fp32 accumulator is
        # the tile's shape)
        ew = [dict(BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=sp, num_warps=4, num_stages=st, EW=1)
              for bn, bk in ((128, 32), (64, 64), (256, 16)) for sp in (1, 2, 4, 8) for st in (3, 4)]
        return dot + ew
    raise ValueError(f"step_configs: --kernel {kernel!r}: want one of {', '.join(KERNELS)}")


def pointer_twins(cands: list) -> list:
    """Each candidate, then (the dot path's, not EW's) the same with PTR=1: its weight tiles through
    pointer loads where descriptors or block pointers are the device's default (gemv's flag)."""
    out = []
    for c in cands:
        out.append(c)
        if not c.get("EW"):
            out.append(dict(c, PTR=1))
    return out


def select(cands: list, only: dict) -> list:
    """The candidates whose launch constants include `only`'s (a switch left out reads 0)."""
    got = [c for c in cands if all(c.get(k, 0) == v for k, v in only.items())]
    if not got:
        raise ValueError(f"step_configs: --only {describe(only)}: no candidate has it")
    return got


def parse_key(text: str) -> dict:
    """--key "hidden=2048,tokens=1" -> {"hidden": 2048, "tokens": 1} (integers where they parse)."""
    key = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, eq, value = part.partition("=")
        if not eq or not name or not value:
            raise ValueError(f"step_configs: {part!r} is not name=value")
        key[name] = int(value) if value.lstrip("-").isdigit() else value
    return key


@contextlib.contextmanager
def forced(pkg_name: str, device, kernel: str, key: dict, config: dict):
    """Within the block, launches of `kernel` in the package `pkg_name` whose problem matches
    `key` take `config` (an entry first in the GPU data's tuned list, the launchers' cached
    configs emptied before and after). Yields a function giving how many launch configs the
    entry resolved so far."""
    gpus = importlib.import_module(f"{pkg_name}.gpus")
    backend = importlib.import_module(f"{pkg_name}._backend")
    caches = [importlib.import_module(f"{pkg_name}.gemv")._BEST, importlib.import_module(f"{pkg_name}.moe")._CONFIGS]
    data = gpus.device_data(device)
    if data is None:
        raise RuntimeError("step_configs: no GPU data for this GPU (call adopt_data first)")
    entry = {"kernel": kernel, "key": dict(key), "config": dict(config)}
    counter = f"tuned.{kernel}"
    before = backend.launch_counts[counter]
    for c in caches:
        c.clear()
    data.setdefault("tuned", []).insert(0, entry)
    try:
        yield lambda: backend.launch_counts[counter] - before
    finally:
        data["tuned"].remove(entry)
        for c in caches:
            c.clear()


def adopt_data(pkg_name: str, device, base: str) -> str:
    """The GPU data the shipped step runs on, named for the report. On a GPU no data file names,
    the candidates override an in-memory one: `base`'s tuned entries (a data file's stem, such as
    h200, so another card times that card's shipped configs against the candidates), or none
    (every class on its heuristic config) when base is empty."""
    import torch

    gpus = importlib.import_module(f"{pkg_name}.gpus")
    device = torch.device(device)
    data = gpus.device_data(device)
    if data is not None:
        return data["file"]
    tuned = []
    if base:
        path = gpus._DIR / f"{base}.json"
        if not path.is_file():
            have = ", ".join(sorted(q.stem for q in gpus._DIR.glob("*.json"))) or "none"
            raise ValueError(f"step_configs: --gpu-data {base}: no {path.name} in {gpus._DIR} (have: {have})")
        tuned = json.loads(path.read_text(encoding="utf-8")).get("tuned", [])
    name = gpus._device_name(device)
    label = f"gpus/{base}.json's tuned configs (borrowed)" if base else "no tuned configs (heuristics)"
    data = {"file": label, "devices": [name], "tuned": tuned}
    # launchers look a tensor's device up by its index, this script by the bare device
    index = device.index if device.index is not None else (
        torch.cuda.current_device() if device.type == "cuda" else 0)
    for i in {device.index, index}:
        gpus._by_device[(device.type, i)] = data
    return label


def describe(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("run")
    ap.add_argument("--kernel", required=True, choices=KERNELS)
    ap.add_argument("--key", default="", help="problem fields the override must match, e.g. k=2048,n=5120")
    ap.add_argument("--only", default="", help="only the candidates with these launch constants, e.g. EW=1 "
                    "(a switch a candidate leaves out is 0)")
    ap.add_argument("--gpu-data", default="", help="on a GPU no data file names, the file (its stem, e.g. h200) "
                    "whose tuned configs the shipped step runs on; default: none, the heuristics")
    ap.add_argument("--pointer-twins", action="store_true", help="gemv: each dot candidate also with PTR=1 "
                    "(its weight tiles through pointer loads, not descriptors), each pair side by side")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--context", type=int, default=512)
    a = ap.parse_args()
    try:
        key = parse_key(a.key)
        if a.pointer_twins and a.kernel != "gemv":
            raise ValueError("step_configs: --pointer-twins is gemv's (its PTR flag)")
        cands = candidates(a.kernel)
        cands = select(pointer_twins(cands) if a.pointer_twins else cands, parse_key(a.only))
    except ValueError as e:
        ap.error(str(e))
    import torch
    import transformers

    if not torch.cuda.is_available():
        print("step_configs: needs a CUDA GPU", file=sys.stderr)
        return 2
    import xpuinject_kernels.runtime as rt
    from eval_driver import load_package
    from latency import WARMUP, device_sync, time_decode

    dev = torch.device("cuda")
    run = Path(a.run)
    pkg, loaded_by = load_package(run / "package", dev)
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).to(dev).eval()
    print(f"injected ({loaded_by}): {pkg.inject(model, packed=run / 'packed')['replaced']}", flush=True)
    try:
        shipped = adopt_data(pkg.__name__, dev, a.gpu_data)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"shipped configs: {shipped}", flush=True)
    vocab = transformers.AutoConfig.from_pretrained(a.model).vocab_size
    ids = torch.randint(0, vocab, (1, a.context), generator=torch.Generator().manual_seed(3)).to(dev)
    sync = device_sync(dev)
    tokens = 3 * (a.steps + WARMUP) + 2

    def step_ms() -> float:
        r = rt.Runtime(model, graphs=True)
        gen = r.start(ids, max_new_tokens=tokens, eos_token_id=[], max_cache_len=rt.cache_bucket(a.context + tokens))
        try:
            return time_decode(gen.step, a.steps, WARMUP, sync)
        finally:
            r.release()

    times = {i: [] for i in range(-1, len(cands))}
    took = {}
    for rnd in range(a.rounds):
        times[-1].append(step_ms())
        for i, c in enumerate(cands):
            with forced(pkg.__name__, dev, a.kernel, key, c) as resolved:
                ms = step_ms()
                took[i] = resolved()
            times[i].append(ms)
            print(f"round {rnd + 1}/{a.rounds}: {ms:.4f} ms {describe(c)}" + ("" if took[i] else " (not taken)"),
                  flush=True)
        print(f"round {rnd + 1}/{a.rounds}: shipped {times[-1][-1]:.4f} ms", flush=True)
    base = statistics.median(times[-1])
    print(f"{torch.cuda.get_device_name(dev)}; {a.kernel} where {key or 'any problem'}; decode step at batch 1, "
          f"{a.context}-token context, ms (median of {a.rounds} rounds of {a.steps} steps)")
    print(f"{'ms':>8} {'ratio':>6}  config")
    print(f"{base:8.4f} {1.0:6.3f}  shipped ({shipped})")
    rows = sorted(range(len(cands)), key=lambda i: statistics.median(times[i]))
    for i in rows:
        if not took[i]:
            print(f"{'':>8} {'':>6}  {describe(cands[i])}: no launch took it (does --key match?)")
            continue
        ms = statistics.median(times[i])
        print(f"{ms:8.4f} {ms / base:6.3f}  {describe(cands[i])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
