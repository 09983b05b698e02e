"""`xpuinject pack` on every fixture, checked tensor by tensor against torch.

For each output tensor of the plan.yaml pack writes, the same tensor is recomputed from the
source checkpoint with torch and compared:

* casts, concatenations and K-major transposes: the arithmetic is identical (torch's casts to
  bf16 and fp16 round to nearest-even too, fp16 with subnormals and overflow to inf), so the
  bytes must be identical;
* BatchNorm folds: pack folds in float64 and rounds once to bf16. torch's helpers
  (`fuse_linear_bn_eval`, `fuse_conv_bn_eval`) fold in float32 and then round to bf16, so
  those two may differ by one bf16 ulp (two roundings vs one) and are compared within 1 ulp.
  The same fold in float64 with a single correct rounding (numpy, round-to-odd to float32
  then nearest-even to bf16, a route unlike the Go code's) must match bit for bit where the
  float64 operations are the same elementwise ones (scales, biases); the fold-bn-input bias
  has a dot product whose float64 summation order differs (torch's matmul blocks it), so it
  is compared within 1 ulp.

Also checked: the packed files hold exactly the plan's outputs with the plan's dtype, shape
and layout; every shard's __metadata__ (source path and file sha256s, tool, transforms, plan
sha256); and the index of a sharded pack.

Run: .venv/bin/python -m pytest inject/tests -q   (needs `go` on PATH to build xpuinject)
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "testdata" / "fixtures"
FIXTURE_DIRS = sorted(p for p in FIXTURES.iterdir() if (p / "config.json").is_file()) if FIXTURES.is_dir() else []


@pytest.fixture(scope="session")
def xpuinject(tmp_path_factory) -> Path:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    out = tmp_path_factory.mktemp("bin") / "xpuinject"
    subprocess.run([go, "build", "-o", str(out), "./cmd/xpuinject"], cwd=REPO, check=True)
    return out


def run_pack(xpuinject: Path, model: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    p = subprocess.run([str(xpuinject), "pack", str(model), "--out", str(out), *extra],
                       capture_output=True, text=True)
    assert p.returncode == 0, f"xpuinject pack {model} failed:\n{p.stderr}"
    return p


# ---- reading checkpoints ----

class Sources(dict):
    """A checkpoint's tensors by name, and the plan's views of stacked ones (GraniteMoE's experts:
    "...input_linear.weight[3][0:40]" is expert 3's rows 0 to 40) indexed by torch."""

    def __missing__(self, name: str) -> torch.Tensor:
        m = re.fullmatch(r"(.+?)((?:\[\d+(?::\d+)?\])+)", name)
        if m is None or m[1] not in self:
            raise KeyError(name)
        t = self[m[1]]
        for a, b in re.findall(r"\[(\d+)(?::(\d+))?\]", m[2]):
            t = t[int(a):int(b)] if b else t[int(a)]
        return t


def source_tensors(model: Path) -> dict[str, torch.Tensor]:
    idx = model / "model.safetensors.index.json"
    files = sorted(set(json.loads(idx.read_text())["weight_map"].values())) if idx.exists() \
        else sorted(p.name for p in model.glob("*.safetensors"))
    out = Sources()
    for f in files:
        out.update(load_file(str(model / f)))
    return out


def packed_files(out: Path) -> list[str]:
    idx = out / "model.safetensors.index.json"
    if idx.exists():
        return sorted(set(json.loads(idx.read_text())["weight_map"].values()))
    return ["model.safetensors"]


def packed_tensors(out: Path) -> dict[str, torch.Tensor]:
    got = {}
    for f in packed_files(out):
        got.update(load_file(str(out / f)))
    return got


# ---- bf16 helpers ----

def bf16_bits(t: torch.Tensor) -> np.ndarray:
    """The bits of a bf16 or fp16 tensor (the helpers below work for either 16-bit format)."""
    assert t.dtype in (torch.bfloat16, torch.float16)
    return t.contiguous().view(torch.int16).numpy().astype(np.int32) & 0xFFFF


def f32_round_to_odd(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 bits rounded to odd (sticky bit kept in the last place): then one
    nearest-even rounding to a 16-bit format equals a single rounding from float64."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        f = x.astype(np.float32)
    bits = f.view(np.uint32).astype(np.int64)
    inexact = (f.astype(np.float64) != x) & np.isfinite(x)
    even = (bits & 1) == 0
    away = np.abs(f.astype(np.float64)) > np.abs(x)
    bits = np.where(inexact & even & away, bits - 1, bits)
    return np.where(inexact & even & ~away, bits + 1, bits)


def bf16_from_f64_once(x: np.ndarray) -> np.ndarray:
    """float64 -> bf16 bits with ONE round-to-nearest-even (round-to-odd, then nearest-even)."""
    bits = f32_round_to_odd(x)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def f16_from_f64_once(x: np.ndarray) -> np.ndarray:
    """float64 -> fp16 bits with ONE round-to-nearest-even: round-to-odd, then numpy's
    float32 -> float16 (nearest-even, subnormals, overflow to inf)."""
    f = f32_round_to_odd(x).astype(np.uint32).view(np.float32)
    with np.errstate(over="ignore"):
        return f.astype(np.float16).view(np.uint16).astype(np.int64)


def ordered(bits: np.ndarray) -> np.ndarray:
    """bf16 bits -> integers whose difference counts ulps across zero."""
    bits = bits.astype(np.int64)
    return np.where(bits & 0x8000, -(bits & 0x7FFF), bits)


def assert_bits_equal(got: torch.Tensor, want_bits: np.ndarray, what: str) -> None:
    g = bf16_bits(got).reshape(-1)
    w = np.asarray(want_bits).reshape(-1)
    bad = np.nonzero(g != w)[0]
    assert bad.size == 0, f"{what}: {bad.size} of {g.size} elements differ, first at {bad[0]}: {g[bad[0]]:#06x} != {w[bad[0]]:#06x}"


def assert_within_ulp(got: torch.Tensor, want: torch.Tensor, what: str, ulps: int = 1) -> None:
    d = np.abs(ordered(bf16_bits(got)) - ordered(bf16_bits(want.to(got.dtype))))
    assert d.max(initial=0) <= ulps, f"{what}: {int((d > ulps).sum())} elements more than {ulps} bf16 ulp apart (max {d.max()})"


# ---- the references ----

def bn_params(src, sources):
    g, b, m, v = (src[n].to(torch.float64) for n in sources)
    return g, b, m, v


def deinterleaved(t: torch.Tensor, dims: dict) -> torch.Tensor:
    """rope-deinterleave as the package makes it on the device (packing.deinterleave_rows, torch
    views) on the q and k rows of a q|k|v concatenation, v as it is: the Go packer's bytes must
    be the device packer's."""
    from xpuinject_kernels.packing import deinterleave_rows

    h, kv, d = dims["heads"], dims["kv_heads"], dims["head_dim"]
    r = dims.get("rotary_dim", d)
    return torch.cat([deinterleave_rows(t[: (h + kv) * d], h + kv, d, r), t[(h + kv) * d:]], dim=0)


def reference(o: dict, layer: dict, src: dict[str, torch.Tensor]):
    """Returns (kind, value): kind "exact" with a tensor, or "fold" with
    (torch_fp32_helper_result, float64_result, f64_exact) before cast/transpose."""
    ts = o.get("transforms") or []
    main = ts[0] if ts and ts[0] not in ("cast-bf16", "cast-fp16", "prepack-kmajor") else None
    srcs = o["sources"]
    eps = float(layer.get("eps", 0.0))  # pyyaml reads "1e-05" (no dot) as a string
    if main is None:
        return "exact", src[srcs[0]]
    if main == "stack-experts":
        # one group of sources per expert, each transformed by the rest (finish leaves it be)
        e = int(o["shape"][0])
        per = len(srcs) // e
        sub = dict(o, transforms=ts[1:], shape=o["shape"][1:])
        return "exact", torch.stack([finish(reference(dict(sub, sources=srcs[i * per:(i + 1) * per]), layer, src)[1], sub)
                                     for i in range(e)])
    if main in ("concat-qkv", "concat-gate-up"):
        t = torch.cat([src[n] for n in srcs], dim=0)
        if "rope-deinterleave" in ts:
            t = deinterleaved(t, layer["dims"])
        return "exact", t
    if main in ("fold-bn", "fold-conv-bn"):
        g, beta, mean, var = bn_params(src, srcs[-4:])
        bn = torch.nn.BatchNorm1d(len(g), eps=eps) if main == "fold-bn" else torch.nn.BatchNorm2d(len(g), eps=eps)
        bn.eval()
        with torch.no_grad():
            bn.weight.copy_(g), bn.bias.copy_(beta), bn.running_mean.copy_(mean), bn.running_var.copy_(var)
        a = g / torch.sqrt(var + eps)
        if o["role"] == "weight":
            w = src[srcs[0]].to(torch.float32)
            if main == "fold-bn":
                lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False).eval()
                with torch.no_grad():
                    lin.weight.copy_(w)
                fused = torch.nn.utils.fuse_linear_bn_eval(lin, bn).weight.detach()
            else:
                conv = torch.nn.Conv2d(w.shape[1], w.shape[0], tuple(w.shape[2:]), bias=False).eval()
                with torch.no_grad():
                    conv.weight.copy_(w)
                fused = torch.nn.utils.fuse_conv_bn_eval(conv, bn).weight.detach()
            shape = [-1] + [1] * (w.dim() - 1)
            f64 = src[srcs[0]].to(torch.float64) * a.reshape(shape)
            return "fold", (fused, f64, True)
        b = src[srcs[0]].to(torch.float64) if len(srcs) == 5 else torch.zeros_like(g)
        n = len(g)
        if main == "fold-bn":
            lin = torch.nn.Linear(1, n, bias=True).eval()
            with torch.no_grad():
                lin.bias.copy_(b)
            fused = torch.nn.utils.fuse_linear_bn_eval(lin, bn).bias.detach()
        else:
            conv = torch.nn.Conv2d(1, n, 1, bias=True).eval()
            with torch.no_grad():
                conv.bias.copy_(b)
            fused = torch.nn.utils.fuse_conv_bn_eval(conv, bn).bias.detach()
        return "fold", (fused, a * (b - mean) + beta, True)
    if main == "fold-bn-input":
        # no torch helper for BN-then-Linear: written out in torch, fp32 (like the helpers) and fp64
        w = src[srcs[0]]
        g, beta, mean, var = bn_params(src, srcs[-4:])
        has_b = len(srcs) == 6
        outs = []
        for dt in (torch.float32, torch.float64):
            s = (g / torch.sqrt(var + eps)).to(dt) if dt == torch.float64 else \
                g.to(dt) / torch.sqrt(var.to(dt) + eps)
            wd = w.to(dt)
            if o["role"] == "weight":
                outs.append(wd * s[None, :])
            else:
                bias = src[srcs[1]].to(dt) if has_b else torch.zeros(w.shape[0], dtype=dt)
                outs.append(bias + wd @ (beta.to(dt) - s * mean.to(dt)))
        return "fold", (outs[0], outs[1], o["role"] == "weight")
    if main == "add-one":
        # Gemma's (1 + w) norm weight: the sum in fp64, rounded once to the F32 the plan writes
        return "exact", (1.0 + src[srcs[0]].to(torch.float64)).to(torch.float32)
    raise AssertionError(f"unknown transform {main}")


def finish(t: torch.Tensor, o: dict) -> torch.Tensor:
    ts = o.get("transforms") or []
    if "stack-experts" in ts:  # reference() finished each expert's slice
        return t
    if "cast-bf16" in ts:
        t = t.to(torch.bfloat16)
    if "cast-fp16" in ts:
        t = t.to(torch.float16)
    if "prepack-kmajor" in ts:
        t = t.t().contiguous()
    return t


# ---- the tests ----

def bn_input_plan(model: Path, tmp: Path, xpuinject: Path) -> Path:
    """LeViT's classifier heads are BN-then-Linear, but the tiny fixture's heads (N=10) are
    too small for the gemm kernel, so the planner keeps them and no fixture plan uses
    fold-bn-input. This edits the fixture's plan the way a user can (`pack --plan`): the
    heads get fold-bn-input outputs per PLAN.md (weight [W, γ, β, μ, σ²]; bias [W, b, γ, β,
    μ, σ²]), one of them as if it had no Linear bias."""
    base = tmp / "base"
    run_pack(xpuinject, model, base)
    plan = yaml.safe_load((base / "plan.yaml").read_text())
    edited = 0
    for layer in plan["layers"]:
        if "eps" in layer:
            layer["eps"] = float(layer["eps"])
        if layer["kind"] != "bn-linear":
            continue
        t = layer["tensors"]
        bn = [t["bn.weight"], t["bn.bias"], t["bn.running_mean"], t["bn.running_var"]]
        w = t["linear.weight"]
        out_n, in_n = (int(x) for x in load_file(str(model / "model.safetensors"))[w].shape)
        bias_src = [w, t["linear.bias"]] if edited == 0 else [w]
        layer["transforms"] = ["fold-bn-input", "cast-bf16", "prepack-kmajor"]
        layer["outputs"] = [
            {"name": layer["module"] + ".folded.weight", "role": "weight", "sources": [w] + bn,
             "transforms": ["fold-bn-input", "cast-bf16", "prepack-kmajor"], "shape": [in_n, out_n],
             "dtype": "BF16", "layout": "k-major"},
            {"name": layer["module"] + ".folded.bias", "role": "bias", "sources": bias_src + bn,
             "transforms": ["fold-bn-input", "cast-bf16"], "shape": [out_n], "dtype": "BF16", "layout": "row-major"},
        ]
        edited += 1
    assert edited == 2, "levit-tiny should have two bn-linear heads"
    path = tmp / "plan-bn-input.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


# (fixture, fold-bn-input edit, --dtype): every fixture in bf16; in fp16 an F32 decoder, the
# folds of LeViT and the F16 fixture (auto keeps its fp16)
CASES = [(p, False, "bf16") for p in FIXTURE_DIRS] + [(FIXTURES / "levit-tiny", True, "bf16")] + [
    (FIXTURES / n, False, d) for n, d in (("llama-tiny", "fp16"), ("levit-tiny", "fp16"), ("llama-odd", "auto"))]
CASE_IDS = [p.name for p in FIXTURE_DIRS] + ["levit-tiny+fold-bn-input", "llama-tiny-fp16", "levit-tiny-fp16",
                                               "llama-odd-auto"]


def pack_case(xpuinject: Path, tmp_path: Path, model: Path, edited: bool, dtype: str = "bf16") -> Path:
    out = tmp_path / "packed"
    if edited:
        run_pack(xpuinject, model, out, "--plan", str(bn_input_plan(model, tmp_path, xpuinject)))
    else:
        run_pack(xpuinject, model, out, "--dtype", dtype)
    return out


@pytest.mark.parametrize("model,edited,dtype", CASES, ids=CASE_IDS)
def test_pack_matches_torch(xpuinject, tmp_path, model, edited, dtype):
    out = pack_case(xpuinject, tmp_path, model, edited, dtype)
    plan_bytes = (out / "plan.yaml").read_bytes()
    plan = yaml.safe_load(plan_bytes)
    src = source_tensors(model)
    got = packed_tensors(out)

    outputs = [(o, l) for l in plan["layers"] for o in (l.get("outputs") or [])]
    assert outputs, "the plan has no outputs"
    assert sorted(got) == sorted(o["name"] for o, _ in outputs), "packed tensors != the plan's outputs"
    if edited:
        assert any("fold-bn-input" in (o.get("transforms") or []) for o, _ in outputs)
    want_dtype = {"bf16": "bf16", "fp16": "fp16", "auto": "fp16"}[dtype]  # llama-odd is F16
    assert plan["dtype"] == want_dtype

    for o, layer in outputs:
        name = o["name"]
        t = got[name]
        assert list(t.shape) == o["shape"], f"{name}: shape {list(t.shape)}, plan {o['shape']}"
        assert str(t.dtype) == {"BF16": "torch.bfloat16", "F32": "torch.float32", "F16": "torch.float16"}[o["dtype"]]
        kind, ref = reference(o, layer, src)
        if kind == "exact":
            want = finish(ref, o)
            # same arithmetic (copy, cat, RNE cast, transpose): bit-exact
            assert want.dtype == t.dtype and want.shape == t.shape
            sixteen = (torch.bfloat16, torch.float16)
            assert torch.equal(want.view(torch.int16) if want.dtype in sixteen else want,
                               t.view(torch.int16) if t.dtype in sixteen else t), f"{name}: not bit-exact"
            continue
        fused32, f64, f64_exact = ref
        assert o["dtype"] == {"bf16": "BF16", "fp16": "F16"}[plan["dtype"]], f"{name}: fold outputs are in the plan's dtype"
        once = bf16_from_f64_once if o["dtype"] == "BF16" else f16_from_f64_once
        kmajor = "prepack-kmajor" in (o.get("transforms") or [])
        # torch's fp32 helper then a second rounding to bf16: within 1 ulp of our single rounding
        assert_within_ulp(t, finish(fused32.to(torch.float32), o), f"{name} vs torch fp32 fold (fold order/rounding differs)")
        if f64_exact:
            # the same float64 operations, one rounding: bit-exact
            want = once(f64.numpy())
            if kmajor:
                want = want.T
            assert_bits_equal(t, np.ascontiguousarray(want), f"{name} vs float64 fold with one rounding")
        else:
            # float64 dot products summed in another order: within 1 ulp
            w = torch.from_numpy(once(f64.numpy()).astype(np.int16)).view(t.dtype)
            assert_within_ulp(t, w.T.contiguous() if kmajor else w, f"{name} vs float64 fold (summation order differs)")

    # __metadata__ of every shard
    sums = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in model.glob("*.safetensors")}
    for f in packed_files(out):
        with safe_open(str(out / f), framework="pt") as h:
            meta = h.metadata()
        assert meta["format"] == "pt"
        assert meta["xpuinject_tool"].startswith("xpuinject ")
        assert meta["xpuinject_source"] == str(model.resolve())
        assert json.loads(meta["xpuinject_source_sha256"]) == sums
        assert meta["xpuinject_plan_sha256"] == hashlib.sha256(plan_bytes).hexdigest()
        want_ts = sorted({t for o, _ in outputs for t in (o.get("transforms") or [])})
        assert meta["xpuinject_transforms"] == ",".join(want_ts)


def test_cases_cover_every_transform(xpuinject, tmp_path):
    """The cases above together exercise every transform (else test_pack_matches_torch
    would silently check less)."""
    seen = set()
    for i, (model, edited, dtype) in enumerate(CASES):
        out = pack_case(xpuinject, tmp_path / str(i), model, edited, dtype)
        plan = yaml.safe_load((out / "plan.yaml").read_text())
        seen |= {t for l in plan["layers"] for o in (l.get("outputs") or []) for t in (o.get("transforms") or [])}
    assert {"cast-bf16", "cast-fp16", "prepack-kmajor", "concat-qkv", "concat-gate-up", "fold-bn", "fold-bn-input",
            "fold-conv-bn", "rope-deinterleave"} <= seen, seen


def test_sharded_pack_index(xpuinject, tmp_path):
    model = FIXTURES / "llama-tiny"
    one, many = tmp_path / "one", tmp_path / "many"
    run_pack(xpuinject, model, one)
    p = run_pack(xpuinject, model, many, "--max-shard-size", "100KB")
    idx = json.loads((many / "model.safetensors.index.json").read_text())
    shards = packed_files(many)
    assert len(shards) > 1 and shards == [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
    got = packed_tensors(many)
    assert idx["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in got.values())
    assert set(idx["weight_map"]) == set(got)
    for f in shards:
        names = load_file(str(many / f)).keys()
        assert all(idx["weight_map"][n] == f for n in names)
        tensor_bytes = sum(got[n].numel() * got[n].element_size() for n in names)
        assert tensor_bytes <= 100_000 or len(names) == 1
    # same tensors as the single-file pack, bit for bit
    single = load_file(str(one / "model.safetensors"))
    assert set(single) == set(got)
    for n, t in single.items():
        assert torch.equal(t.view(torch.int16) if t.dtype == torch.bfloat16 else t,
                           got[n].view(torch.int16) if got[n].dtype == torch.bfloat16 else got[n]), n
    assert str(many) in p.stdout and "model.safetensors.index.json" in p.stdout


def test_repack_is_byte_identical(xpuinject, tmp_path):
    model = FIXTURES / "levit-tiny"
    a, b = tmp_path / "a", tmp_path / "b"
    run_pack(xpuinject, model, a)
    run_pack(xpuinject, model, b)
    for f in ("model.safetensors", "plan.yaml"):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


def f32_classes(n: int) -> torch.Tensor:
    """n float32 values over every class a cast to fp16 meets: normals at every exponent from
    fp16 underflow to overflow, exact fp16 ties (normal and subnormal), the largest finite
    value and the overflow midpoint around it, +-0, +-inf and NaN."""
    g = torch.Generator().manual_seed(7)
    exps = torch.randint(-30, 18, (n,), generator=g).float()
    v = (1 + torch.rand(n, generator=g)) * torch.pow(2.0, exps)
    v = torch.where(torch.rand(n, generator=g) < 0.5, -v, v)
    k = torch.arange(1, 1025, dtype=torch.float64)
    ties = torch.cat([(k + 0.5) * 2.0 ** -24,                     # halfway between fp16 subnormals
                      (1 + (2 * k + 1) / 2048) * 2.0 ** 3,          # halfway between normals near 8
                      torch.tensor([65504.0, 65519.99, 65520.0, 65536.0, -65520.0, 2.0 ** -25, 2.0 ** -25 * 1.0001,
                                    0.0, -0.0, float("inf"), float("-inf"), float("nan")], dtype=torch.float64)])
    v[:ties.numel()] = ties.float()
    return v


def rewrite_checkpoint(src: Path, dst: Path, replace: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file
    shutil.copytree(src, dst)
    ts = load_file(str(src / "model.safetensors"))
    for name, t in replace.items():
        assert ts[name].numel() == t.numel(), name
        ts[name] = t.reshape(ts[name].shape).contiguous()
    save_file(ts, str(dst / "model.safetensors"), metadata={"format": "pt"})


@pytest.mark.parametrize("half", [0, 1], ids=["even-bf16-bits", "odd-bf16-bits"])
def test_fp16_cast_classes_match_torch(xpuinject, tmp_path, half):
    """cast-fp16 from F32 (every class) and from BF16 (every bit pattern, half of them per run)
    is torch's .to(float16), bit for bit (NaN as NaN)."""
    base = FIXTURES / "llama-tiny"
    src = load_file(str(base / "model.safetensors"))
    n = src["model.embed_tokens.weight"].numel()
    assert src["lm_head.weight"].numel() == n == 32768
    allbits = torch.arange(half, 65536, 2, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    model = tmp_path / "model"
    rewrite_checkpoint(base, model, {"model.embed_tokens.weight": f32_classes(n), "lm_head.weight": allbits.clone()})
    out = tmp_path / "packed"
    run_pack(xpuinject, model, out, "--dtype", "fp16")
    got = packed_tensors(out)
    after = load_file(str(model / "model.safetensors"))
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        want = after[name].to(torch.float16)
        t = got[name]
        assert t.dtype == torch.float16
        nan = torch.isnan(want)
        assert torch.equal(torch.isnan(t), nan), name
        assert torch.equal(t[~nan].view(torch.int16), want[~nan].view(torch.int16)), f"{name}: not torch's fp16 cast"
    assert torch.isinf(got["model.embed_tokens.weight"]).sum() >= 4  # overflow -> inf happened
