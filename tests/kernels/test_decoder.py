"""Attention and DecoderLayer layers bound into real transformers models (Llama with GQA,
Qwen2 with q/k/v biases, Qwen3 with q/k norms), with packed weights computed here by torch,
against the stock model: prefill logits, a padded batch, and cached decode steps."""

from __future__ import annotations

import types

import pytest
import torch

import metrics
from xpuinject_kernels import _backend, decoder, layers

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


def _inject(model):
    """What the shim does with the Go-packed checkpoint, done here with torch."""
    for layer in model.model.layers:
        at = layer.self_attn
        at.register_buffer("xpuinject_qkv_weight", _kmajor(torch.cat([at.q_proj.weight, at.k_proj.weight, at.v_proj.weight])), persistent=False)
        if at.q_proj.bias is not None:
            at.register_buffer("xpuinject_qkv_bias", torch.cat([at.q_proj.bias, at.k_proj.bias, at.v_proj.bias]).detach(), persistent=False)
        at.register_buffer("xpuinject_o_weight", _kmajor(at.o_proj.weight), persistent=False)
        mlp = layer.mlp
        mlp.register_buffer("xpuinject_gate_up_weight", _kmajor(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])), persistent=False)
        mlp.register_buffer("xpuinject_down_weight", _kmajor(mlp.down_proj.weight), persistent=False)
        at.forward = types.MethodType(decoder.Attention.forward, at)
        mlp.forward = types.MethodType(layers.SwiGLUMLP.forward, mlp)
        layer.forward = types.MethodType(decoder.DecoderLayer.forward, layer)
        for norm in (layer.input_layernorm, layer.post_attention_layernorm, getattr(at, "q_norm", None), getattr(at, "k_norm", None)):
            if norm is not None:
                norm.forward = types.MethodType(layers.RMSNorm.forward, norm)
    return model


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
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


def test_attention_requires_packed_weights(device):
    model = _tiny("llama", device)
    at = model.model.layers[0].self_attn
    at.forward = types.MethodType(decoder.Attention.forward, at)
    with pytest.raises(RuntimeError, match="xpuinject_qkv_weight"):
        with torch.no_grad():
            model(input_ids=torch.tensor([[1, 2, 3]], device=device))


def test_vendor_routes_run_torch_for_the_routed_ops_only(device):
    """With the plan's measured routes set on the module, qkv/o go through cuBLAS (torch.matmul)
    and prefill through SDPA; the output still matches stock and decode stays on our kernel."""
    stock = _tiny("llama", device)
    injected = _inject(_tiny("llama", device))
    for layer in injected.model.layers:
        layer.self_attn.xpuinject_vendor = frozenset({"qkv_proj", "o_proj", "attention-prefill"})
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
    """":decode" GEMM routes and the attention-decode route send a one-token step to cuBLAS/SDPA
    and leave the prefill on our kernels; generation still matches stock greedy decoding."""
    stock = _tiny("llama", device)
    injected = _inject(_tiny("llama", device))
    for layer in injected.model.layers:
        routes = frozenset({"qkv_proj:decode", "o_proj:decode", "gate_up_proj:decode", "down_proj:decode", "attention-decode"})
        layer.self_attn.xpuinject_vendor = routes
        layer.mlp.xpuinject_vendor = routes
    g = torch.Generator().manual_seed(6)
    ids = torch.randint(0, 97, (1, 70), generator=g).to(device)  # 70 > DECODE_MAX_M tokens
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
    assert a[0, 70] == b[0, 70]


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
