"""fp16 models. Every kernel a float16 model reaches, in fp16, against the fp64/fp32 reference
on the unrounded inputs and an oracle that mirrors the kernel's formats (fp16 operands, fp32
accumulation, one rounding): GEMM on fp16 weights with each epilogue, the lm_head's fp32 logits
from an fp16 weight, attention prefill with a padding mask and decode over a cache. Then an F16
checkpoint (llama-odd) run in fp16 end to end, kernelized, injected without packed weights and
injected with fp16 packed weights, within the pipeline's accuracy thresholds of stock fp16 against
the fp32 model; packed weights of the other half dtype are refused by name."""

from __future__ import annotations

import shutil
import types
from pathlib import Path

import pytest
import torch
import transformers

import metrics
import yaml
from xpuinject_kernels import attention as A
from xpuinject_kernels import layers
from xpuinject_kernels.gemm import gemm, gemm_ref

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "testdata" / "fixtures" / "llama-odd"
U = 2.0**-10  # fp16 unit roundoff relative to 1 (10 mantissa bits)
F16 = torch.float16


def randn(shape, seed, scale=1.0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale


@pytest.mark.parametrize("epilogue", ["none", "bias", "swiglu", "residual"])
def test_gemm_fp16_weights(device, epilogue):
    k, n = 72, 80  # 72: 144-byte fp16 rows; tails in every tile dimension
    n_w = 2 * n if epilogue == "swiglu" else n
    x32, w32, b32, r32 = randn((3, 5, k), 1), randn((k, n_w), 2, 0.15), randn((n_w,), 3, 0.3), randn((3, 5, n), 4)
    x, w = x32.to(F16).to(device), w32.to(F16).to(device)
    b = b32.to(F16).to(device) if epilogue in ("bias", "swiglu") else None
    r = r32.to(F16).to(device) if epilogue == "residual" else None
    y = gemm(x, w, bias=b, residual=r, epilogue=epilogue)
    assert y.dtype == F16 and y.shape == (3, 5, n)
    oracle = gemm_ref(x.cpu().float(), w.cpu().float(), None if b is None else b.cpu().float(),
                        None if r is None else r.cpu().float(), epilogue)
    scale = float(oracle.abs().max())
    metrics.assert_close(f"gemm fp16 {epilogue} vs oracle", y.cpu(), oracle.to(F16), atol=U * scale, rtol=2 * U)
    ref = gemm_ref(x32, w32, b32 if b is not None else None, r32 if r is not None else None, epilogue)
    metrics.assert_close(f"gemm fp16 {epilogue} vs fp32 ref", y.cpu(), ref, atol=16 * U * scale, rtol=16 * U, min_cosine=0.9995)


def test_lm_head_fp16_weight_gives_fp32_logits(device):
    head = torch.nn.Linear(96, 200, bias=False).to(F16).to(device).eval().requires_grad_(False)
    with torch.no_grad():
        head.weight.copy_(randn((200, 96), 5, 0.2))
    head.forward = types.MethodType(layers.LMHead.forward, head)
    x = randn((2, 7, 96), 6).to(F16).to(device)
    with torch.no_grad():
        out = head(x)
    assert out.dtype == torch.float32
    want = x.cpu().float() @ head.weight.cpu().float().t()  # exact fp16 products, fp32 sums
    metrics.assert_close("lm_head fp16 -> fp32 logits", out.cpu(), want, atol=1e-5 * float(want.abs().max()), rtol=1e-5)


def test_attention_prefill_fp16_with_padding_mask(device):
    b, h, hk, s, d = 2, 4, 2, 21, 64
    q32, k32, v32 = randn((b, h, s, d), 7), randn((b, hk, s, d), 8), randn((b, hk, s, d), 9)
    q, k, v = (t.to(F16).to(device) for t in (q32, k32, v32))
    # transformers' additive sdpa mask for a left-padded row: finfo(fp16).min = no weight
    keep = torch.ones(b, s, dtype=torch.bool)
    keep[1, :6] = False
    causal = torch.tril(torch.ones(s, s, dtype=torch.bool))
    allowed = causal[None, None] & keep[:, None, None, :]
    mask = torch.where(allowed, 0.0, torch.finfo(F16).min).to(F16)
    out = A.flash_attention_prefill(q, k, v, causal=False, attn_mask=mask.to(device))
    assert out.dtype == F16
    oracle = A.attention_ref(q.cpu().double(), k.cpu().double(), v.cpu().double(), causal=False, attn_mask=mask,
                             dtype=torch.float64, round_p_to=F16)
    rows = keep[:, None, :, None].expand(b, h, s, 1).transpose(1, 2)  # fully padded query rows are 0 in both
    scale = float(v32.abs().max())
    metrics.assert_close("prefill fp16 masked vs oracle", out.cpu() * rows, (oracle * rows).to(F16), atol=U * scale, rtol=2 * U)
    ref = A.attention_ref(q32.double(), k32.double(), v32.double(), causal=False, attn_mask=mask, dtype=torch.float64)
    metrics.assert_close("prefill fp16 masked vs fp64 ref", out.cpu() * rows, ref * rows, atol=8 * U * scale, rtol=8 * U, min_cosine=0.999)


@pytest.mark.parametrize("splits", [1, 3])
def test_attention_decode_fp16(device, splits):
    b, h, hk, length, d = 2, 8, 2, 300, 128
    q32, k32, v32 = randn((b, h, 1, d), 10), randn((b, hk, length, d), 11), randn((b, hk, length, d), 12)
    q, k, v = (t.to(F16).to(device) for t in (q32, k32, v32))
    lens = torch.tensor([300, 211], device=device)
    out = A.decode_attention(q, k, v, kv_lens=lens, num_splits=splits)
    assert out.dtype == F16 and out.shape == (b, 1, h, d)
    oracle = A.attention_ref(q.cpu().double(), k.cpu().double(), v.cpu().double(), causal=False, kv_lens=lens.cpu(),
                             dtype=torch.float64, round_p_to=F16)
    scale = float(v32.abs().max())
    metrics.assert_close(f"decode fp16 splits={splits} vs oracle", out.cpu(), oracle.to(F16), atol=U * scale, rtol=2 * U)
    ref = A.attention_ref(q32.double(), k32.double(), v32.double(), causal=False, kv_lens=lens.cpu(), dtype=torch.float64)
    metrics.assert_close(f"decode fp16 splits={splits} vs fp64 ref", out.cpu(), ref, atol=8 * U * scale, rtol=8 * U, min_cosine=0.999)


# ---------------------------------------------------------------------------------------------
# an F16 checkpoint end to end
# ---------------------------------------------------------------------------------------------


def load(dtype=F16, device="cpu"):
    return transformers.LlamaForCausalLM.from_pretrained(FIXTURE, dtype=dtype).eval().to(device)


IDS = torch.randint(3, 512, (4, 24), generator=torch.Generator().manual_seed(21))


def logits(model):
    with torch.no_grad():
        return model(input_ids=IDS.to(model.device)).logits.float()


def within_thresholds(out, stock, oracle):
    """tests/harness/test_pipeline_cpu.py's thresholds: the injected model's error against the
    fp32 model at most 1.5x stock's (mean abs, mean rel, KL), cosine >= 0.999, top-1 at most 5
    points below stock's."""
    def errs(x):
        m = metrics.report("", x, oracle)
        lp, lq = torch.log_softmax(oracle.double(), -1), torch.log_softmax(x.double(), -1)
        return m, float((lp.exp() * (lp - lq)).sum(-1).mean()), float((x.argmax(-1) == oracle.argmax(-1)).double().mean())

    (m, kl, top1), (ms, kls, top1s) = errs(out), errs(stock)
    assert m.nonfinite == 0 and m.cosine >= 0.999, m.line()
    assert m.mean_abs <= 1.5 * ms.mean_abs + 1e-9 and m.mean_rel <= 1.5 * ms.mean_rel + 1e-9, (m.line(), ms.line())
    assert kl <= 1.5 * kls + 1e-9, (kl, kls)
    assert top1 >= top1s - 0.05


@pytest.mark.parametrize("how", ["kernelize", "inject"])
def test_f16_checkpoint_runs_in_fp16(llama_odd_pkg, how, device):
    model = load(device=device)
    summary = getattr(llama_odd_pkg, how)(model)
    assert summary["replaced"] == {"Attention": 1, "DecoderLayer": 1, "LMHead": 1, "RMSNorm": 3, "SwiGLUMLP": 1}
    out = logits(model)
    assert all(b.dtype == F16 for m in model.modules() for n, b in m._buffers.items() if n.startswith("xpuinject_"))
    stock, oracle = logits(load(device=device)), logits(load(torch.float32, device))
    assert not torch.equal(out, stock)
    within_thresholds(out, stock, oracle)


def test_packed_weights_of_the_other_half_dtype_are_refused(llama_odd_run, llama_odd_pkg, device):
    with pytest.raises(llama_odd_pkg.InjectError, match=r"are bfloat16 \(plan dtype bf16\), the model is float16: load the model with dtype=torch.bfloat16"):
        llama_odd_pkg.inject(load(device=device), packed=llama_odd_run / "packed")


def test_fp16_packed_weights(llama_odd_run, llama_odd_pkg, tmp_path, device):
    """Packed weights in fp16 (what `xpuinject --dtype fp16` packs: the fp16 source concatenated
    and transposed, exact), made here from the model's own weights by the package's packer into
    the packed checkpoint's tensor names; their plan.yaml says fp16, as that pack's would, and is
    given as the plan to carry out (the package's own plan is bf16)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    own = load(device=device)
    llama_odd_pkg.inject(own)
    logits(own)  # packs every layer's tensors from the fp16 weights
    tensors = dict(own.named_parameters())
    bound = 0
    plan = yaml.safe_load((llama_odd_run / "packed" / "plan.yaml").read_text())
    for lp in plan["layers"]:
        for out in lp.get("outputs") or () if lp.get("bindings") else ():
            t = getattr(own.get_submodule(lp["module"]), out["attr"]) if out.get("attr") else tensors[out["name"]]
            assert t.dtype == F16 and list(t.shape) == out["shape"], out["name"]
            tensors[out["name"]] = t
            bound += 1
    packed = tmp_path / "packed-fp16"
    shutil.copytree(llama_odd_run / "packed", packed)
    n = 0
    for f in packed.glob("*.safetensors"):
        with safe_open(str(f), framework="pt") as sf:
            meta, names = sf.metadata(), list(sf.keys())
        save_file({k: tensors[k].detach().contiguous() for k in names}, str(f), metadata=meta)
        n += len(names)
    assert n > 0
    plan["dtype"] = "fp16"
    for lp in plan["layers"]:
        for out in lp.get("outputs") or ():
            out["dtype"] = "F16" if out["dtype"] == "BF16" else out["dtype"]
    (packed / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    model = load(device=device)
    summary = llama_odd_pkg.inject(model, packed=packed, plan=packed / "plan.yaml")
    assert summary["packed_tensors"] == bound and n >= bound
    out = logits(model)
    assert torch.equal(out, logits(own))  # the same tensors, attached instead of packed on the device
    stock, oracle = logits(load(device=device)), logits(load(torch.float32, device))
    within_thresholds(out, stock, oracle)
