#!/usr/bin/env python3
"""Benchmark helpers for `xpuinject pack` (driven by benchmarks/bench-pack.sh).

  bench_pack.py gen DIR            synthetic Llama-shaped fp32 checkpoint (random weights)
  bench_pack.py pack SRC PLAN OUT  the same packing in Python: safetensors + torch
  bench_pack.py compare A B        are two packed folders the same checkpoint?

`pack` is the Python equivalent of `xpuinject pack --plan PLAN`: it reads the plan.yaml,
computes every output tensor with torch (torch.cat, .to(torch.bfloat16), .t().contiguous())
from tensors read with safetensors' safe_open, assigns shards the same way
(huggingface_hub's rule over name-sorted tensors), writes each shard with
safetensors.torch.save_file and the same __metadata__, then the index and plan.yaml. It
implements the transforms a Llama plan uses (concat, cast, K-major); BatchNorm folds raise.

`compare` checks that both folders hold the same files, and for each shard the same header
(parsed: safetensors' writer orders __metadata__ keys by a HashMap, so that JSON object's
key order is not reproducible) and byte-identical tensor data.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path


def gen(args: argparse.Namespace) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    h, inter, layers, vocab, heads, kv = args.hidden, args.intermediate, args.layers, args.vocab, 16, 4
    hd = h // heads
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
        "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv, "head_dim": hd, "vocab_size": vocab, "rms_norm_eps": 1e-5,
        "max_position_embeddings": 4096, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "hidden_act": "silu", "torch_dtype": "float32", "attention_bias": False, "mlp_bias": False,
    }
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    shapes = {"model.embed_tokens.weight": (vocab, h), "lm_head.weight": (vocab, h), "model.norm.weight": (h,)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (heads * hd, h), p + "self_attn.k_proj.weight": (kv * hd, h),
            p + "self_attn.v_proj.weight": (kv * hd, h), p + "self_attn.o_proj.weight": (h, heads * hd),
            p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
        })
    rng = np.random.default_rng(0)
    names = sorted(shapes)
    nshards = 2
    per = (len(names) + nshards - 1) // nshards
    weight_map, total = {}, 0
    for s in range(nshards):
        fname = f"model-{s + 1:05d}-of-{nshards:05d}.safetensors"
        tensors = {}
        for n in names[s * per:(s + 1) * per]:
            tensors[n] = (rng.standard_normal(shapes[n], dtype=np.float32) * 0.02).astype(np.float32)
            weight_map[n] = fname
            total += tensors[n].nbytes
        save_file(tensors, str(out / fname), metadata={"format": "pt"})
        del tensors
    idx = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(idx, indent=2, sort_keys=True) + "\n")
    print(f"{out}: {total / 1e9:.2f} GB of fp32 tensors")


def pack(args: argparse.Namespace) -> None:
    import torch
    import yaml
    from safetensors import safe_open
    from safetensors.torch import save_file

    src, out = Path(args.src), Path(args.out)
    plan_bytes = Path(args.plan).read_bytes()
    plan = yaml.safe_load(plan_bytes)
    idx = src / "model.safetensors.index.json"
    if idx.exists():
        where = json.loads(idx.read_text())["weight_map"]
    else:
        where = {}
        for f in sorted(src.glob("*.safetensors")):
            with safe_open(str(f), framework="pt") as h:
                where.update({k: f.name for k in h.keys()})
    files = sorted(set(where.values()))
    handles = {f: safe_open(str(src / f), framework="pt") for f in files}

    def load(name):
        return handles[where[name]].get_tensor(name)

    outputs = sorted((o for layer in plan["layers"] for o in (layer.get("outputs") or [])), key=lambda o: o["name"])
    size = {"BF16": 2, "F16": 2, "F32": 4}

    def nbytes(o):
        n = size[o["dtype"]]
        for d in o["shape"]:
            n *= d
        return n

    # huggingface_hub split_state_dict_into_shards_factory, over name-sorted tensors
    shards, cur, cur_size = [], [], 0
    for o in outputs:
        n = nbytes(o)
        if n > args.max_shard_size:
            shards.append([o])
            continue
        if cur and cur_size + n > args.max_shard_size:
            shards.append(cur)
            cur, cur_size = [], 0
        cur.append(o)
        cur_size += n
    if cur:
        shards.append(cur)
    shards.sort(key=lambda s: s[0]["name"])

    sums = {}
    for f in files:
        h = hashlib.sha256()
        with open(src / f, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        sums[f] = h.hexdigest()
    source = plan["source"].get("path") or str(src)
    if plan["source"].get("repo"):
        source = "hf://" + plan["source"]["repo"] + ("@" + plan["source"]["revision"] if plan["source"].get("revision") else "")
    meta = {
        "format": "pt",
        "xpuinject_tool": args.tool,
        "xpuinject_source": source,
        "xpuinject_source_sha256": json.dumps(sums, sort_keys=True, separators=(",", ":")),
        "xpuinject_transforms": ",".join(sorted({t for o in outputs for t in (o.get("transforms") or [])})),
        "xpuinject_plan_sha256": hashlib.sha256(plan_bytes).hexdigest(),
        "xpuinject_schema_version": str(plan["schema"]),
    }

    def compute(o):
        ts = list(o.get("transforms") or [])
        if ts and ts[0] in ("concat-qkv", "concat-gate-up"):
            t = torch.cat([load(n) for n in o["sources"]], dim=0)
            ts.pop(0)
        elif ts and ts[0].startswith("fold-"):
            raise SystemExit(f"bench_pack.py: {o['name']}: {ts[0]} is not implemented here (Llama plans only)")
        else:
            t = load(o["sources"][0])
        if ts and ts[0] == "cast-bf16":
            t = t.to(torch.bfloat16)
            ts.pop(0)
        if ts and ts[0] == "prepack-kmajor":
            t = t.t().contiguous()
            ts.pop(0)
        assert not ts, (o["name"], ts)
        return t

    out.mkdir(parents=True, exist_ok=True)
    weight_map, total = {}, 0
    written = []
    for i, shard in enumerate(shards):
        name = "model.safetensors" if len(shards) == 1 else f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {o["name"]: compute(o) for o in shard}
        for n, t in tensors.items():
            weight_map[n] = name
            total += t.numel() * t.element_size()
        save_file(tensors, str(out / name), metadata=meta)
        del tensors
        written.append(name)
    if len(shards) > 1:
        idx = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(json.dumps(idx, indent=2, sort_keys=True) + "\n")
    (out / "plan.yaml").write_bytes(plan_bytes)


def read_shard(path: Path) -> tuple[dict, bytes]:
    b = path.read_bytes()
    n = int.from_bytes(b[:8], "little")
    return json.loads(b[8:8 + n]), b[8 + n:]


def compare(args: argparse.Namespace) -> None:
    a, b = Path(args.a), Path(args.b)
    fa = sorted(p.name for p in a.iterdir() if not p.name.startswith("."))
    fb = sorted(p.name for p in b.iterdir() if not p.name.startswith("."))
    if fa != fb:
        raise SystemExit(f"different files: {fa} vs {fb}")
    for f in fa:
        if f.endswith(".safetensors"):
            ha, da = read_shard(a / f)
            hb, db = read_shard(b / f)
            if ha != hb:
                raise SystemExit(f"{f}: headers differ")
            if da != db:
                raise SystemExit(f"{f}: tensor data differs")
        elif (a / f).read_bytes() != (b / f).read_bytes():
            raise SystemExit(f"{f}: bytes differ")
    print(f"identical: {len(fa)} files (shard headers equal as JSON, tensor data byte-identical)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("dir")
    g.add_argument("--hidden", type=int, default=2048)
    g.add_argument("--intermediate", type=int, default=8192)
    g.add_argument("--layers", type=int, default=8)
    g.add_argument("--vocab", type=int, default=32000)
    p = sub.add_parser("pack")
    p.add_argument("src")
    p.add_argument("plan")
    p.add_argument("out")
    p.add_argument("--max-shard-size", type=int, default=5_000_000_000)
    p.add_argument("--tool", default="xpuinject 0.1.0")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = ap.parse_args()
    {"gen": gen, "pack": pack, "compare": compare}[args.cmd](args)


if __name__ == "__main__":
    main()
