"""Attention and DecoderLayer layers bound into real transformers models (Llama with GQA,
Qwen2 with q/k/v biases, Qwen3 with q/k norms), with packed weights computed here by torch or
packed by the layers from the modules' own weights, against the stock model: prefill logits, a
padded batch, cached decode steps and vendor routes with token bounds."""

from __future__ import annotations

import importlib
import types

import pytest
import torch

import metrics
from xpuinject_kernels import _backend, decoder, layers, packing
from xpuinject_kernels.contract import DECODE_MAX_TOKENS, packed_attr

_gemm = importlib.import_module("xpuinject_kernels.gemm")  # the module; the package exports a function so named

transformers = pytest.importorskip("transformers")


def _tiny(arch: str, device: str = "cpu"):
    common = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, vocab_size=97, max_position_embeddings=128)
    if arch == "llama":
        cfg = transformers.LlamaConfig(**common)
        cls = transformers.LlamaForCausalLM
    elif arch == "qwen2":
        cfg = transformers.Qwen2Config(**common)
        cls = transformers.Qwen2ForCausalLM
    elif arch == "smollm3":
        cfg = transformers.SmolLM3Config(**common, no_rope_layers=[1, 0], pad_token_id=0, bos_token_id=1,  # layer 1 NoPE
                                          eos_token_id=2)
        cls = transformers.SmolLM3ForCausalLM
    else:
        cfg = transformers.Qwen3Config(**common)
        cls = transformers.Qwen3ForCausalLM
    torch.manual_seed(0)
    model = cls(cfg).eval()
    # norms around 1, not exactly 1, so a kernel that ignores the weight fails
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    return model.to(torch.bfloat16).to(device)


def _kmajor(w: torch.Tensor) -> torch.Tensor:
    return w.detach().t().contiguous().to(torch.bfloat16)


def _bind(model):
    """Bind the layers the way kernelize does (per instance), with no packed tensors attached."""
    for layer in model.model.layers:
        at, mlp = layer.self_attn, layer.mlp
        at.forward = types.MethodType(decoder.Attention.forward, at)
        mlp.forward = types.MethodType(layers.SwiGLUMLP.forward, mlp)
        layer.forward = types.MethodType(decoder.DecoderLayer.forward, layer)
        for norm in (layer.input_layernorm, layer.post_attention_layernorm, getattr(at, "q_norm", None), getattr(at, "k_norm", None)):
            if norm is not None:
                norm.forward = types.MethodType(layers.RMSNorm.forward, norm)
    return model


def _inject(model):
    """What injection does with the Go-packed checkpoint, done here with torch."""
    for layer in model.model.layers:
        at = layer.self_attn
        a = lambda role: packed_attr("Attention", role)  # noqa: E731
        at.register_buffer(a("qkv_weight"), _kmajor(torch.cat([at.q_proj.weight, at.k_proj.weight, at.v_proj.weight])), persistent=False)
        if at.q_proj.bias is not None:
            at.register_buffer(a("qkv_bias"), torch.cat([at.q_proj.bias, at.k_proj.bias, at.v_proj.bias]).detach(), persistent=False)
        at.register_buffer(a("o_weight"), _kmajor(at.o_proj.weight), persistent=False)
        mlp = layer.mlp
        mlp.register_buffer(packed_attr("SwiGLUMLP", "gate_up_weight"), _kmajor(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])), persistent=False)
        mlp.register_buffer(packed_attr("SwiGLUMLP", "down_weight"), _kmajor(mlp.down_proj.weight), persistent=False)
    return _bind(model)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "smollm3"])
def test_decoder_layers_match_stock(arch, device):
    stock = _tiny(arch, device)
    injected = _inject(_tiny(arch, device))
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 97, (2, 13), generator=g).to(device)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding in the second row
    with torch.no_grad():
        ref = stock(input_ids=ids, attention_mask=mask).logits.float()
        out = injected(input_ids=ids, attention_mask=mask).logits.float()
    valid = mask.bool()
    m = metrics.report(f"{arch} prefill logits (valid positions)", out[valid], ref[valid])
    assert m.nonfinite == 0
    assert m.cosine > 0.999, m.line()
    assert m.mean_abs < 0.05 * float(ref[valid].abs().mean()) + 1e-3, m.line()
    assert (out[valid].argmax(-1) == ref[valid].argmax(-1)).float().mean() > 0.9


def test_decode_with_cache_matches_stock(device):
    stock = _tiny("llama", device)
    injected = _inject(_tiny("llama", device))
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 97, (1, 9), generator=g).to(device)
    with torch.no_grad():
        a = stock.generate(ids, max_new_tokens=4, do_sample=False, min_new_tokens=4)
        b = injected.generate(ids, max_new_tokens=4, do_sample=False, min_new_tokens=4)
        # logits of the whole generated sequence, step by step vs in one prefill
        full_ref = stock(input_ids=a).logits.float()
        full_inj = injected(input_ids=a).logits.float()
    metrics.report("llama logits over generated sequence", full_inj, full_ref)
    assert a.shape == b.shape
    # bf16 on random weights: allow one late divergence, but the first new token must agree
    assert a[0, 9] == b[0, 9]


def test_fused_decode_norm_gives_the_unfused_steps(device, monkeypatch):
    """FUSE_DECODE_NORM: at decode the post-attention add + RMSNorm runs in the gate/up GEMV's
    prologue (one add_rms_norm launch fewer per layer); the same greedy tokens and near-equal
    logits as the unfused path, and prefill (M > 16) is untouched."""
    model = _inject(_tiny("llama", device))
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(0, 97, (1, 18), generator=g).to(device)
    with torch.no_grad():
        monkeypatch.setattr(decoder, "FUSE_DECODE_NORM", False)
        ref = model.generate(ids, max_new_tokens=4, do_sample=False, min_new_tokens=4, output_logits=True,
                             return_dict_in_generate=True)
        monkeypatch.setattr(decoder, "FUSE_DECODE_NORM", True)
        before = dict(_backend.launch_counts)
        out = model.generate(ids, max_new_tokens=4, do_sample=False, min_new_tokens=4, output_logits=True,
                             return_dict_in_generate=True)
    ran = {k: _backend.launch_counts[k] - before.get(k, 0) for k in _backend.launch_counts}
    assert ran.get("add_rms_norm_gemm", 0) == 2 * 3, ran  # two layers, three one-token steps
    assert ran.get("add_rms_norm", 0) == 2, ran  # the prefill's, one per layer
    assert torch.equal(out.sequences, ref.sequences)
    for a, b in zip(out.logits, ref.logits):
        metrics.assert_close("fused-norm decode logits", a.float(), b.float(), atol=3e-2, rtol=2.0**-6)


def test_n_major_attention_weights_give_the_k_major_steps(device, monkeypatch):
    """XPUINJECT_NMAJOR=1: the attention's qkv and o weights, packed from the modules, are the
    [K, N] views of N-major copies (the MLP's stay K-major), and the model gives the K-major
    model's greedy tokens and near-equal logits: the prefill through the tiled GEMM, each one-token
    step's projections through the GEMV's EW path; "0" keeps them K-major."""
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(0, 97, (1, 18), generator=g).to(device)

    def gen(switch):
        monkeypatch.setenv("XPUINJECT_NMAJOR", switch)
        model = _bind(_tiny("llama", device))
        before = dict(_backend.launch_counts)
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=4, do_sample=False, min_new_tokens=4, output_logits=True,
                                 return_dict_in_generate=True)
        return model, out, _backend.launch_counts["gemv.ew"] - before.get("gemv.ew", 0)

    ref_model, ref, ew_ref = gen("0")
    model, out, ew = gen("1")
    at, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    k = model.config.hidden_size
    assert at.xpuinject_qkv_weight.stride() == (1, k) and at.xpuinject_o_weight.stride()[0] == 1
    assert torch.equal(at.xpuinject_qkv_weight, ref_model.model.layers[0].self_attn.xpuinject_qkv_weight)
    assert mlp.xpuinject_gate_up_weight.stride(1) == 1
    assert ref_model.model.layers[0].self_attn.xpuinject_qkv_weight.stride(1) == 1
    assert (ew_ref, ew) == (0, 2 * 2 * 3)  # two layers, qkv and o, three one-token steps
    assert torch.equal(out.sequences, ref.sequences)
    for a, b in zip(out.logits, ref.logits):
        metrics.assert_close("N-major decode logits", a.float(), b.float(), atol=3e-2, rtol=2.0**-6)


def test_n_major_layout_policy(monkeypatch):
    """K-major unless XPUINJECT_NMAJOR says otherwise (NMAJOR_ON_CUDA: the CUDA default); only the
    roles listed take it, and a tensor already N-major stays as it is."""
    from xpuinject_kernels import packing

    t = torch.randn(8, 12)
    for switch, want in (("1", True), ("0", False)):
        monkeypatch.setenv("XPUINJECT_NMAJOR", switch)
        for dev in ("cpu", "cuda", "xpu"):
            assert packing.nmajor_on(torch.device(dev)) is want
        assert (packing.decode_layout("Attention", "o_weight", t).stride() == (1, 8)) is want
        assert packing.decode_layout("SwiGLUMLP", "down_weight", t).stride() == (12, 1)
    monkeypatch.delenv("XPUINJECT_NMAJOR")
    assert not packing.nmajor_on(torch.device("cpu")) and not packing.nmajor_on(torch.device("xpu"))
    assert packing.nmajor_on(torch.device("cuda")) is packing.NMAJOR_ON_CUDA
    monkeypatch.setenv("XPUINJECT_NMAJOR", "1")
    n = t.t().contiguous().t()
    assert packing.decode_layout("Attention", "qkv_weight", n) is n


def test_input_norm_inside_the_qkv_gemv_gives_the_unfused_steps(device, monkeypatch):
    """gemm.FUSE_INPUT_NORM: up to 16 rows the layer's input RMSNorm runs inside the QKV GEMV
    (one rms_norm launch fewer per layer): the same greedy tokens and near-equal logits as the two
    kernels; a longer prefill runs them apart."""
    model = _inject(_tiny("llama", device))
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(0, 97, (1, 18), generator=g).to(device)

    def gen():
        before = dict(_backend.launch_counts)
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=4, do_sample=False, min_new_tokens=4, output_logits=True,
                                 return_dict_in_generate=True)
        return out, {k: _backend.launch_counts[k] - before.get(k, 0) for k in ("rms_norm", "rms_norm_gemm")}

    monkeypatch.setattr(_gemm, "FUSE_INPUT_NORM", False)
    ref, ran_ref = gen()
    monkeypatch.setattr(_gemm, "FUSE_INPUT_NORM", True)
    out, ran = gen()
    # two layers, three one-token steps; the 18-token prefill's two input norms run as rms_norm
    # (the final norm runs in the LM head's launch)
    assert ran == {"rms_norm": 2, "rms_norm_gemm": 2 * 3}, ran
    assert ran_ref == {"rms_norm": 2 * 4, "rms_norm_gemm": 0}, ran_ref
    assert torch.equal(out.sequences, ref.sequences)
    for a, b in zip(out.logits, ref.logits):
        metrics.assert_close("fused input norm decode logits", a.float(), b.float(), atol=3e-2, rtol=2.0**-6)


def test_input_norm_stays_apart_when_hooked(device, monkeypatch):
    """A forward hook on the input norm sees its output: the layer then calls the module."""
    monkeypatch.setattr(_gemm, "FUSE_INPUT_NORM", True)
    model = _inject(_tiny("llama", device))
    seen = []
    model.model.layers[0].input_layernorm.register_forward_hook(lambda m, a, out: seen.append(out.shape))
    ids = torch.randint(0, 97, (1, 3), generator=torch.Generator().manual_seed(1)).to(device)
    before = _backend.launch_counts["rms_norm_gemm"]
    with torch.no_grad():
        model(input_ids=ids)
    assert seen == [torch.Size([1, 3, 64])]
    assert _backend.launch_counts["rms_norm_gemm"] - before == 1  # layer 1 only


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_layers_pack_from_the_modules_own_weights(arch, device):
    """Bound with no packed tensors, the layers pack them on first use from q/k/v/o and
    gate/up/down (qwen2: with the q/k/v biases), cache them as non-persistent buffers equal to
    what the offline packer writes, leave state_dict alone, and compute what the torch-packed
    model computes, bit for bit."""
    stock = _tiny(arch, device)
    packed_by_torch = _inject(_tiny(arch, device))
    model = _bind(_tiny(arch, device))
    keys = set(model.state_dict())
    at, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    assert not hasattr(at, "xpuinject_qkv_weight") and not hasattr(mlp, "xpuinject_down_weight")
    ids = torch.randint(0, 97, (2, 7), generator=torch.Generator().manual_seed(4)).to(device)
    with torch.no_grad():
        ref = stock(input_ids=ids).logits.float()
        want = packed_by_torch(input_ids=ids).logits.float()
        got = model(input_ids=ids).logits.float()
    ref_at = packed_by_torch.model.layers[0].self_attn
    assert torch.equal(at.xpuinject_qkv_weight, ref_at.xpuinject_qkv_weight)
    assert at.xpuinject_qkv_weight.shape == (64, (4 + 2 * 2) * 32) and at.xpuinject_qkv_weight.is_contiguous()
    assert (getattr(at, "xpuinject_qkv_bias", None) is not None) == (arch == "qwen2")
    assert torch.equal(mlp.xpuinject_gate_up_weight, packed_by_torch.model.layers[0].mlp.xpuinject_gate_up_weight)
    assert set(model.state_dict()) == keys  # non-persistent: the checkpoint layout is unchanged
    assert torch.equal(got, want)
    assert torch.nn.functional.cosine_similarity(got.flatten(), ref.flatten(), dim=0) > 0.999


def test_attention_without_weights_or_packed_tensors_names_the_module(device):
    model = _tiny("llama", device)
    at = model.model.layers[0].self_attn
    at.xpuinject_name = "model.layers.0.self_attn"
    at.q_proj = packing.Released("model.layers.0.self_attn.q_proj")
    at.forward = types.MethodType(decoder.Attention.forward, at)
    with pytest.raises(RuntimeError, match=r"'model.layers.0.self_attn' has neither its packed tensors .*xpuinject_qkv_weight.* nor a 'q_proj' child"):
        with torch.no_grad():
            model(input_ids=torch.tensor([[1, 2, 3]], device=device))


def test_decoder_layer_runs_the_mlp_inline_only_when_it_runs_our_swiglu(device):
    """The residual add rides in the down GEMM's epilogue when the block's MLP is bound to
    SwiGLUMLP; a block whose MLP kept its stock forward calls it as it is."""
    stock = _tiny("llama", device)
    model = _bind(_tiny("llama", device))
    for layer in model.model.layers:
        del layer.mlp.forward  # back to LlamaMLP.forward
    ids = torch.randint(0, 97, (1, 6), generator=torch.Generator().manual_seed(8)).to(device)
    before = dict(_backend.launch_counts)
    with torch.no_grad():
        out = model(input_ids=ids).logits.float()
        ref = stock(input_ids=ids).logits.float()
    ran = {k: _backend.launch_counts[k] - before.get(k, 0) for k in _backend.launch_counts}
    assert ran.get("gemm.residual", 0) == 0 and ran.get("gemm.swiglu", 0) == 0 and ran.get("add_rms_norm", 0) == 2, ran
    assert not hasattr(model.model.layers[0].mlp, "xpuinject_down_weight")
    assert torch.nn.functional.cosine_similarity(out.flatten(), ref.flatten(), dim=0) > 0.999


def test_vendor_routes_run_torch_for_the_routed_ops_only(device):
    """With the plan's measured routes set on the module, qkv/o go through cuBLAS (torch.matmul)
    and prefill through SDPA; the output still matches stock and decode stays on our kernel."""
    stock = _tiny("llama", device)
    injected = _inject(_tiny("llama", device))
    for layer in injected.model.layers:
        layer.self_attn.xpuinject_vendor = (("qkv_proj", 0, None), ("o_proj", 0, None), ("attention-prefill", 0, None))
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 97, (2, 12), generator=g).to(device)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    before = dict(_backend.launch_counts)
    with torch.no_grad():
        ref = stock(input_ids=ids, attention_mask=mask).logits.float()
        out = injected(input_ids=ids, attention_mask=mask).logits.float()
    after = _backend.launch_counts
    ran = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert ran.get("attention.prefill", 0) == 0, ran
    # per layer: gate_up (swiglu) + down (residual) still on our gemm, qkv and o not
    assert ran.get("gemm.swiglu", 0) == 2 and ran.get("gemm.residual", 0) == 2 and ran.get("gemm.none", 0) == 0, ran
    valid = mask.bool()
    m = metrics.report("llama with vendor routes (valid positions)", out[valid], ref[valid])
    assert m.cosine > 0.999, m.line()
    with torch.no_grad():
        before = _backend.launch_counts["attention.decode"]
        injected.generate(ids[:1, 3:], max_new_tokens=2, do_sample=False, min_new_tokens=2)
    assert _backend.launch_counts["attention.decode"] > before  # decode is not routed


def test_decode_routes_apply_to_decode_steps_only(device):
    """GEMM routes bounded by max_tokens (the decode bound) and the attention-decode route send a
    one-token step to cuBLAS/SDPA and leave the prefill on our kernels; generation still matches
    stock greedy decoding."""
    stock = _tiny("llama", device)
    injected = _inject(_tiny("llama", device))
    for layer in injected.model.layers:
        routes = tuple((op, 0, DECODE_MAX_TOKENS) for op in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"))
        routes += (("attention-decode", 0, None),)
        layer.self_attn.xpuinject_vendor = routes
        layer.mlp.xpuinject_vendor = routes
    g = torch.Generator().manual_seed(6)
    ids = torch.randint(0, 97, (1, DECODE_MAX_TOKENS + 6), generator=g).to(device)  # above max_tokens
    with torch.no_grad():
        before = dict(_backend.launch_counts)
        injected(input_ids=ids)  # prefill: all ours
        after = dict(_backend.launch_counts)
        ran = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        assert ran.get("gemm.none", 0) == 4 and ran.get("gemm.swiglu", 0) == 2 and ran.get("gemm.residual", 0) == 2, ran
        assert ran.get("attention.prefill", 0) == 2, ran
        a = stock.generate(ids, max_new_tokens=3, do_sample=False, min_new_tokens=3)
        before = dict(_backend.launch_counts)
        b = injected.generate(ids, max_new_tokens=3, do_sample=False, min_new_tokens=3)
        after = dict(_backend.launch_counts)
    ran = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    # one prefill (2 layers) on our kernels, then 2 decode steps with no GEMM or attention of ours
    assert ran.get("gemm.none", 0) == 4 and ran.get("gemm.swiglu", 0) == 2 and ran.get("gemm.residual", 0) == 2, ran
    assert ran.get("attention.decode", 0) == 0 and ran.get("attention.prefill", 0) == 2, ran
    assert a[0, ids.shape[1]] == b[0, ids.shape[1]]


def test_vendor_route_bounds_are_inclusive():
    mod = types.SimpleNamespace(xpuinject_vendor=(("down_proj", 0, 64), ("o_proj", 65, None), ("attention-decode", 0, None)))
    assert decoder._vendor(mod, "down_proj", 64) and not decoder._vendor(mod, "down_proj", 65)
    assert not decoder._vendor(mod, "o_proj", 64) and decoder._vendor(mod, "o_proj", 65) and decoder._vendor(mod, "o_proj", 10**6)
    assert decoder._vendor(mod, "attention-decode") and not decoder._vendor(mod, "attention-prefill")
    assert not decoder._vendor(types.SimpleNamespace(), "down_proj", 1)


def test_sdpa_route_repeats_kv_heads_when_masked(monkeypatch):
    """The SDPA route asks for enable_gqa only without a mask: with one, CUDA's SDPA would fall
    back to its math kernel, so the KV heads are repeated (transformers' rule); same numbers."""
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        calls.append((q.shape[1], k.shape[1], kw.get("enable_gqa"), kw.get("attn_mask") is not None))
        return real(q, k, v, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    mod = types.SimpleNamespace(is_causal=True)
    g = torch.Generator().manual_seed(9)
    q = torch.randn(2, 4, 1, 8, generator=g)
    k = torch.randn(2, 2, 5, 8, generator=g)
    v = torch.randn(2, 2, 5, 8, generator=g)
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    mask[1, :, :, :2] = False
    out_masked = decoder._sdpa(mod, q, k, v, mask, 0.35)
    out_plain = decoder._sdpa(mod, q, k, v, None, 0.35)
    assert calls == [(4, 4, False, True), (4, 2, True, False)], calls
    ref = real(q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1), attn_mask=mask, scale=0.35)
    assert torch.allclose(out_masked, ref.transpose(1, 2), atol=1e-6)
    assert torch.allclose(out_plain[0], out_masked[0], atol=1e-6)  # row 0 has no masked keys


def test_vendor_down_route_rounds_the_residual_sum_once(device):
    """down_proj routed to the vendor keeps the residual in the GEMM (addmm, beta = 1). On the CPU
    the output is the fp64 sum h @ W + residual rounded once to bf16 (up to the GEMM's fp32
    accumulation), as our residual epilogue rounds it, where a GEMM then an add round twice. On
    CUDA, half-precision addmm rounds the product first: the output is the stock module's matmul
    then add (up to the GEMM's accumulation order)."""
    torch.manual_seed(3)
    k, n, rows = 256, 192, 48
    mlp = torch.nn.Module()
    setattr(mlp, decoder._DOWN_W, (torch.randn(k, n) / k**0.5).to(torch.bfloat16).to(device))
    setattr(mlp, decoder._GU_W, torch.zeros(n, 2 * k, dtype=torch.bfloat16, device=device))
    mlp.xpuinject_vendor = (("down_proj", 0, None), ("gate_up_proj", 0, None))
    h = torch.randn(rows, k, dtype=torch.bfloat16, device=device)
    res = (4 * torch.randn(rows, n)).to(torch.bfloat16).to(device)
    down = getattr(mlp, decoder._DOWN_W)
    out = decoder.mlp_block(mlp, None, residual=res, h=h)
    once = (h.double() @ down.double() + res.double()).to(torch.bfloat16)
    twice = (torch.matmul(h, down) + res)
    assert out.shape == res.shape and out.dtype == torch.bfloat16
    off_twice = (twice != once).float().mean().item()
    assert off_twice > 0.05, off_twice  # a second rounding moves many sums
    if torch.device(device).type == "cuda":
        assert (out != twice).float().mean().item() < 0.01
    else:
        off_once = (out != once).float().mean().item()
        assert off_once < 0.01, off_once  # only where the fp32 accumulation sits on a rounding boundary


def _static_steps(model, ids, steps=2):
    """Prefill then `steps` greedy one-token steps on a transformers StaticCache: every forward's
    logits and the cache's keys and values at the end."""
    cache = transformers.StaticCache(config=model.config, max_cache_len=ids.shape[1] + steps + 2)
    logits = []
    with torch.no_grad():
        out = model(input_ids=ids, past_key_values=cache, use_cache=True).logits
        logits.append(out)
        for _ in range(steps):
            out = model(input_ids=out[:, -1:].argmax(-1), past_key_values=cache, use_cache=True).logits
            logits.append(out)
    return logits, [t.clone() for layer in cache.layers for t in (layer.keys, layer.values)]


@pytest.mark.parametrize("vendor", [False, True])
def test_granite_block_scales_its_residual_adds_in_the_epilogues(device, vendor):
    """Granite's block scales each branch by residual_multiplier before adding it: bound to our
    DecoderLayer, both adds ride in the o and down projections' residual epilogues (cuBLAS's alpha
    where the projections are routed to the vendor path), and prefill and static-cache decode
    steps give stock's logits; our attention takes attention_multiplier, the module's scaling, as
    its softmax scale."""
    from xpuinject_kernels import injection

    common = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, vocab_size=97, max_position_embeddings=128, pad_token_id=0,
                  embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.5, logits_scaling=8.0)
    torch.manual_seed(3)
    stock = transformers.GraniteForCausalLM(transformers.GraniteConfig(**common)).eval()
    with torch.no_grad():  # scores far from uniform, so the softmax scale shows
        for layer in stock.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                proj.weight.normal_(0, 0.3)
    stock = stock.to(torch.bfloat16).to(device)
    model = transformers.GraniteForCausalLM(transformers.GraniteConfig(**common)).eval().to(torch.bfloat16).to(device)
    model.load_state_dict(stock.state_dict())
    _bind(model)
    if vendor:
        for layer in model.model.layers:
            for m, op in ((layer.self_attn, "o_proj"), (layer.mlp, "down_proj")):
                setattr(m, decoder.VENDOR_ATTR, ((op, 0, None),))
    block = model.model.layers[0]
    assert block.self_attn.scaling == 0.5 and injection._why_not(block, "DecoderLayer") == ""
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(4)).to(device)
    counts = _backend.launch_counts
    before = dict(counts)
    got, got_cache = _static_steps(model, ids)
    want, want_cache = _static_steps(stock, ids)
    residual_launches = counts["gemm.residual"] - before.get("gemm.residual", 0)
    # two adds a block, two blocks, three forwards, each in a GEMM epilogue unless routed to cuBLAS
    assert residual_launches == (0 if vendor else 2 * 2 * 3), residual_launches
    assert counts["add_rms_norm"] == before.get("add_rms_norm", 0)  # the scaled adds are not add_rms_norm's
    for a, b in zip(got, want):
        metrics.assert_close("granite logits", a.float(), b.float(), atol=0.02, rtol=0.02, min_cosine=0.9999)
    for a, b in zip(got_cache, want_cache):
        metrics.assert_close("granite cache", a.float(), b.float(), atol=0.02, rtol=0.02, min_cosine=0.9999)
    # the residual stream itself: a forgotten scale moves the first block's output far past its error
    x = model.model.embed_tokens(ids) * 12.0
    pe = model.model.rotary_emb(x, torch.arange(9, device=device)[None])
    with torch.no_grad():
        h_want = stock.model.layers[0](x, position_embeddings=pe).float()
        h_got = block(x, position_embeddings=pe).float()
        block.residual_multiplier = 1.0  # the unscaled block
        h_other = block(x, position_embeddings=pe).float()
        block.residual_multiplier = 0.22
    err = (h_got - h_want).abs().mean()
    assert (h_other - h_want).abs().mean() > 10 * err, err
    # the attention alone: Llama's scale in place of attention_multiplier moves its output
    at, ref = block.self_attn, stock.model.layers[0].self_attn
    xa = torch.randn(2, 9, 64, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16).to(device)
    with torch.no_grad():
        a_want, a_got = ref(xa, position_embeddings=pe, attention_mask=None)[0], at(xa, position_embeddings=pe)[0]
        at.scaling = 32 ** -0.5
        a_other = at(xa, position_embeddings=pe)[0]
        at.scaling = 0.5
    err = (a_got.float() - a_want.float()).abs().mean()
    assert (a_other.float() - a_want.float()).abs().mean() > 10 * err, err


@pytest.mark.parametrize("vendor", [False, True])
def test_gemma_block_runs_gemma_norms_and_the_exact_gelu(device, vendor):
    """Gemma 1's block is Llama's on Gemma's (1 + w) norm and a GeGLU MLP of the exact gelu
    (published configs' hidden_act "gelu"): bound to our DecoderLayer it adds and normalizes in
    add_rms_norm_gemma, the MLP's gate/up GEMM takes the geglu_erf epilogue and its residual add
    rides in the down projection's epilogue (cuBLAS's where routed there); prefill and static-cache
    decode steps give stock's logits and cache."""
    from transformers import GemmaConfig, GemmaForCausalLM
    from xpuinject_kernels import families, injection

    cfg = GemmaConfig(hidden_size=96, intermediate_size=104, num_hidden_layers=2, num_attention_heads=3,
                      num_key_value_heads=1, head_dim=32, hidden_act="gelu", vocab_size=97,
                      max_position_embeddings=128, pad_token_id=0)
    torch.manual_seed(5)
    stock = GemmaForCausalLM(cfg).eval()
    with torch.no_grad():  # Gemma's norms start at 0: draw around it so a kernel that drops 1 + w fails
        for n, p in stock.named_parameters():
            if n.endswith("norm.weight"):
                p.uniform_(-0.3, 0.3)
    stock = stock.to(torch.bfloat16).to(device)
    model = GemmaForCausalLM(cfg).eval().to(torch.bfloat16).to(device)
    model.load_state_dict(stock.state_dict())
    for block in model.model.layers:
        at, mlp = block.self_attn, block.mlp
        at.forward = types.MethodType(decoder.Attention.forward, at)
        mlp.forward = types.MethodType(layers.GeGLUMLP.forward, mlp)
        block.forward = types.MethodType(decoder.DecoderLayer.forward, block)
        for norm in (block.input_layernorm, block.post_attention_layernorm):
            norm.forward = types.MethodType(layers.GemmaRMSNorm.forward, norm)
        if vendor:
            setattr(mlp, decoder.VENDOR_ATTR, (("gate_up_proj", 0, None), ("down_proj", 0, None)))
    block = model.model.layers[0]
    assert injection._why_not(block, "DecoderLayer") == "" and injection._why_not(block.mlp, "GeGLUMLP") == ""
    assert families.geglu_epilogue(block.mlp) == "geglu_erf"
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(6)).to(device)
    counts = _backend.launch_counts
    before = dict(counts)
    got, got_cache = _static_steps(model, ids)
    want, want_cache = _static_steps(stock, ids)
    ran = {k: counts[k] - before.get(k, 0) for k in ("add_rms_norm_gemma", "gemm.geglu_erf", "gemm.geglu",
                                                         "gemm.residual", "add_rms_norm")}
    # one block add + norm, gate/up GEMM and down GEMM a block, two blocks, three forwards
    assert ran == {"add_rms_norm_gemma": 6, "gemm.geglu_erf": 0 if vendor else 6, "gemm.geglu": 0,
                   "gemm.residual": 0 if vendor else 6, "add_rms_norm": 0}, ran
    for a, b in zip(got, want):
        metrics.assert_close("gemma logits", a.float(), b.float(), atol=0.02, rtol=0.02, min_cosine=0.9999)
    for a, b in zip(got_cache, want_cache):
        metrics.assert_close("gemma cache", a.float(), b.float(), atol=0.02, rtol=0.02, min_cosine=0.9999)
    # an activation the epilogues do not compute is refused by name, not run as another gelu
    block.mlp.act_fn = torch.nn.SiLU()
    assert families.geglu_epilogue(block.mlp) == "" and "activation" in injection._why_not(block.mlp, "GeGLUMLP")
    with pytest.raises(RuntimeError, match="GeGLUMLP: module .* applies SiLU"):
        block.mlp(torch.randn(1, 2, 96).to(torch.bfloat16).to(device))


@pytest.mark.parametrize("fuse_qkv_rope", [True, False])
def test_smollm3_nope_layer_caches_its_keys_unrotated(device, monkeypatch, fuse_qkv_rope):
    """SmolLM3's NoPE layer (use_rope 0) on a static cache: prefill and decode steps give stock's
    logits within bf16 error, and the layer's cached keys are stock's, unrotated; the same layer
    made to rotate caches other keys, so the test sees the switch. The decode steps' RoPE runs in
    the QKV GEMV's epilogue, or with the switch off in the RoPE launch. On a dynamic cache the
    NoPE layer launches no RoPE at all."""
    monkeypatch.setattr(decoder, "FUSE_QKV_ROPE", fuse_qkv_rope)
    stock = _tiny("smollm3", device)
    model = _inject(_tiny("smollm3", device))
    assert [int(layer.self_attn.use_rope) for layer in model.model.layers] == [1, 0]
    g = torch.Generator().manual_seed(8)
    ids = torch.randint(0, 97, (2, 7), generator=g).to(device)
    counts = _backend.launch_counts
    before = dict(counts)
    got, got_cache = _static_steps(model, ids)
    want, want_cache = _static_steps(stock, ids)
    n = {k: counts[k] - before.get(k, 0) for k in ("rope_cache_write", "qkv_rope_cache_write")}
    # two layers, the prefill in the RoPE launch, each of two decode steps in the GEMV's epilogue
    assert n == ({"rope_cache_write": 2, "qkv_rope_cache_write": 4} if fuse_qkv_rope else
                 {"rope_cache_write": 6, "qkv_rope_cache_write": 0}), n
    for a, b in zip(got, want):
        metrics.assert_close("smollm3 logits", a.float(), b.float(), atol=0.05, rtol=0.05, min_cosine=0.999)
    nope_keys, nope_keys_stock = got_cache[2], want_cache[2]  # layer 1's keys
    metrics.assert_close("NoPE keys", nope_keys.float(), nope_keys_stock.float(), atol=0.02, rtol=2.0**-6)
    model.model.layers[1].self_attn.use_rope = 1
    rotated = _static_steps(model, ids)[1][2]
    assert (rotated.float() - nope_keys_stock.float()).abs().max() > 20 * (nope_keys - nope_keys_stock).float().abs().max()
    model.model.layers[1].self_attn.use_rope = 0
    before = dict(counts)
    with torch.no_grad():
        dyn = model(input_ids=ids, use_cache=True).logits
        ref = stock(input_ids=ids, use_cache=True).logits
    assert counts["apply_rope.inplace"] - before.get("apply_rope.inplace", 0) == 1  # layer 0's only
    metrics.assert_close("smollm3 dynamic-cache logits", dyn.float(), ref.float(), atol=0.05, rtol=0.05, min_cosine=0.999)


def test_qwen3_qk_norms_fuse_into_the_static_cache_write(device, monkeypatch):
    """Qwen3's q_norm / k_norm bound to our RMSNorm run inside the RoPE + static-cache write, and
    on a dynamic cache inside the RoPE launch alone: the same logits and caches, bit for bit, as
    the norms' own launches before it, with two rms_norm launches fewer per layer and forward; a
    stock norm module keeps its own."""
    model = _inject(_tiny("qwen3", device))
    at = model.model.layers[0].self_attn
    g = torch.Generator().manual_seed(6)
    ids = torch.randint(0, 97, (2, 7), generator=g).to(device)
    counts = _backend.launch_counts

    def run():
        before = dict(counts)
        out = _static_steps(model, ids)
        return out, {k: counts[k] - before.get(k, 0)
                     for k in ("rms_norm", "rope_cache_write", "qkv_rope_cache_write")}

    (fused, fused_cache), fused_n = run()
    with monkeypatch.context() as m:
        m.setattr(decoder, "_qk_norms", lambda *a: None)
        (unfused, unfused_cache), unfused_n = run()
    with monkeypatch.context() as m:
        m.setattr(decoder, "FUSE_QKV_ROPE", False)
        (own, own_cache), own_n = run()
    # the prefill's RoPE launch (two layers), then each of two decode steps' in the QKV GEMV; stock
    # norms and the switch off keep every forward's in a launch of its own
    assert fused_n["rope_cache_write"] == 2 and fused_n["qkv_rope_cache_write"] == 2 * 2, fused_n
    assert unfused_n["rope_cache_write"] == own_n["rope_cache_write"] == 2 * 3  # two layers, three forwards
    assert unfused_n["qkv_rope_cache_write"] == own_n["qkv_rope_cache_write"] == 0
    assert unfused_n["rms_norm"] - fused_n["rms_norm"] == 2 * 2 * 3, (fused_n, unfused_n)
    assert own_n["rms_norm"] == fused_n["rms_norm"]
    for a, b in zip(fused + fused_cache, unfused + unfused_cache):
        assert torch.equal(a, b), float((a.float() - b.float()).abs().max())
    for a, b in zip(fused + fused_cache, own + own_cache):
        if str(device) == "cpu":
            assert torch.equal(a, b), float((a.float() - b.float()).abs().max())
        else:  # on a GPU the head norm's sum may run in another order inside the GEMV
            assert torch.allclose(a.float(), b.float(), atol=2e-2, rtol=2.0**-7)
    q = torch.zeros(1, 1, 4, 32, dtype=torch.bfloat16, device=device)
    assert decoder._qk_norms(at, q, q[:, :, :2]) is not None

    def dynamic():  # a dynamic cache: the norms in the RoPE launch alone
        before = dict(counts)
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=True).logits
        return out, {k: counts[k] - before.get(k, 0) for k in ("rms_norm", "apply_rope.norm")}

    fused, fused_n = dynamic()
    with monkeypatch.context() as m:
        m.setattr(decoder, "_qk_norms", lambda *a: None)
        unfused, unfused_n = dynamic()
    assert torch.equal(fused, unfused), float((fused.float() - unfused.float()).abs().max())
    assert fused_n["apply_rope.norm"] == 2 and unfused_n["apply_rope.norm"] == 0
    assert unfused_n["rms_norm"] - fused_n["rms_norm"] == 2 * 2
    del at.q_norm.forward  # a stock Qwen3RMSNorm: runs as itself
    assert decoder._qk_norms(at, q, q[:, :, :2]) is None
    before = counts["rms_norm"]
    with torch.no_grad():
        model(input_ids=ids, use_cache=True)
    assert counts["rms_norm"] - before == fused_n["rms_norm"] + 1, "layer 0's k_norm launches on its own"


def test_gemma3_qk_norms_fuse_into_the_static_cache_write(device, monkeypatch):
    """Gemma 3's q_norm / k_norm bound to GemmaRMSNorm (the fp32 1 + w, no rounding before the
    weight) fused into the static cache's write on a full-attention layer: the attention output
    and cache bit for bit those of rms_norm_gemma's own launches, prefill and a decode step."""
    from transformers import Gemma3TextConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention, Gemma3RotaryEmbedding

    torch.manual_seed(8)
    cfg = Gemma3TextConfig(hidden_size=96, num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
                           head_dim=64, sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                           query_pre_attn_scalar=64, vocab_size=97, max_position_embeddings=64)
    at = Gemma3Attention(cfg, layer_idx=1).eval()
    with torch.no_grad():
        for p in at.parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.2))
    at = at.to(torch.bfloat16).to(device)
    at.forward = types.MethodType(decoder.Attention.forward, at)
    for norm in (at.q_norm, at.k_norm):
        norm.forward = types.MethodType(layers.GemmaRMSNorm.forward, norm)
    rot = Gemma3RotaryEmbedding(cfg)
    x = (torch.randn(1, 6, 96) * 2).to(torch.bfloat16).to(device)
    length = 8

    def run():
        cache = transformers.StaticCache(config=cfg, max_cache_len=length)
        outs = []
        for lo, hi in ((0, 5), (5, 6)):
            pos = torch.arange(lo, hi)[None]
            cos, sin = rot(x.cpu(), pos, layer_type="full_attention")
            keep = torch.arange(length)[None, :] <= torch.arange(lo, hi)[:, None]
            with torch.no_grad():
                out, _ = at(x[:, lo:hi], position_embeddings=(cos.to(device), sin.to(device)),
                            attention_mask=keep[None, None].to(device), past_key_values=cache)
            outs.append(out)
        return outs, (cache.layers[1].keys.clone(), cache.layers[1].values.clone())

    counts = _backend.launch_counts
    before = counts["rms_norm_gemma"]
    fused, fused_cache = run()
    assert counts["rms_norm_gemma"] == before  # the norms ran inside the write
    with monkeypatch.context() as m:
        m.setattr(decoder, "_qk_norms", lambda *a: None)
        unfused, unfused_cache = run()
    assert counts["rms_norm_gemma"] - before == 2 * 2
    for a, b in zip(fused + list(fused_cache), unfused + list(unfused_cache)):
        assert torch.equal(a, b), float((a.float() - b.float()).abs().max())


def test_qwen3_fused_qk_norms_compile_as_one_graph(device):
    """torch.compile(fullgraph=True) of the Qwen3 model on a static cache, its q/k norms inside
    the RoPE + cache write op: the traced prefill and decode step compute what eager does."""
    model = _inject(_tiny("qwen3", device))
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 97, (1, 5), generator=g).to(device)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    before = dict(_backend.launch_counts)
    want, want_cache = _static_steps(model, ids, steps=1)
    ran = {k: _backend.launch_counts[k] - before.get(k, 0) for k in ("rms_norm", "rms_norm_gemm")}
    got, got_cache = _static_steps(compiled, ids, steps=1)
    torch._dynamo.reset()
    # q_norm and k_norm ran inside the write; the input norms (5 and 1 rows) apart or inside the
    # QKV GEMVs, as _backend.fuse_norm decides on this device
    fused = _backend.fuse_norm(_gemm.FUSE_INPUT_NORM, ids.device)
    assert ran == ({"rms_norm": 0, "rms_norm_gemm": 2 * 2} if fused else {"rms_norm": 2 * 2, "rms_norm_gemm": 0}), ran
    for a, b in zip(got + got_cache, want + want_cache):
        assert torch.equal(a, b), float((a.float() - b.float()).abs().max())
