"""Layers that replace a Llama-family attention block and decoder layer.

`Attention` replaces LlamaAttention.forward (and Mistral/Qwen2/Qwen3's, Gemma 2/3's and OLMo 2's,
which share the signature): one GEMM over the packed, concatenated QKV weight, RoPE by the rope
kernel, qwen3's and Gemma 3's per-head q/k RMSNorm inside the RoPE launch when q_norm and k_norm
run our RMSNorm or GemmaRMSNorm (the RoPE + static-cache write kernel, or the RoPE kernel alone:
the same weight and rounding, two launches fewer per layer, bit for bit the norms' own kernels; a
stock norm module runs as itself), HunYuan's (query_layernorm, key_layernorm) likewise but on the
rotated heads (stock modules after our rotation), OLMo 2's q/k norms over the whole projection as their modules,
before the heads are split, Gemma 2's logit soft-capping
(`attn_logit_softcapping`) and a sliding layer's window (`sliding_window`) in the attention
kernels, the KV cache update through the model's own Cache object, flash-attention prefill or
split-K decode, and one GEMM for the output projection. A decode step over a static cache runs
RoPE, the q/k norms and the cache write in the QKV GEMV's epilogue instead, one head a tile
(rope_cache.qkv_rope_cache_write).

`DecoderLayer` replaces LlamaDecoderLayer.forward to fuse the residual add that precedes
the post-attention RMSNorm into one kernel (add_rms_norm returns both the new residual
and the normalized activations), and the residual add after the MLP into the down
projection's GEMM epilogue (a SparseMoE block's: into the MoE kernel's last launch). The input
RMSNorm and the QKV projection go through gemm.rms_norm_gemm, and a SparseMoE block's
post-attention add + RMSNorm through moe.add_rms_norm_moe: at decode sizes, where launches do not
overlap, each norm runs inside the launch after it (_backend.fuse_norm).

Vendor routes: where a measurement showed cuBLAS or SDPA faster for a sub-operation at this
model's shapes, the plan's binding says so and injection sets `xpuinject_vendor` on the module:
a tuple of (op, min_tokens, max_tokens) with op one of "qkv_proj", "o_proj", "gate_up_proj",
"down_proj", "attention-prefill", "attention-decode", and the GEMM's token count M bounded by
min_tokens <= M <= max_tokens (max_tokens None: open); those operations then run through torch
(cuBLAS / SDPA) on the same packed weights, while the rest of the layer stays fused.

Packed attributes (contract.json; all K-major, attached by injection or packed on first use
from q/k/v/o_proj):
  Attention  xpuinject_qkv_weight [hidden, (H + 2*KV) * D]  (q columns, then k, then v)
             xpuinject_o_weight   [H * D, hidden]
             optional xpuinject_qkv_bias [(H + 2*KV) * D], xpuinject_o_bias [hidden]

Rules as in layers.py: no __init__, no members beyond forward / has_backward /
can_torch_compile; shared code lives in module-level functions.
"""

from __future__ import annotations

import types

import torch
from torch import nn

from . import _backend
from .attention import attention_forward, decode_attention
from .contract import GLOBAL_NOPE, LAYERS, QK_NORMS_AFTER_ROPE, QK_NORMS_AFTER_ROPE_MODULES, VENDOR_ATTR, packed_attr
from . import gemv
from .gemm import add_rms_norm_gemm, gemm, rms_norm_gemm
# layers.py defines these before it imports this module at its end, so the names exist here
# whichever module is imported first (the package imports layers first).
from .layers import SwiGLUMLP, _name, _packed
# The module itself, for the norm layers it binds last (GemmaRMSNorm comes from families.py,
# which imports this module): looked up at call time.
from . import layers as _layers
from .moe_layer import runs_sparse_moe, sparse_moe
from .rmsnorm import add_rms_norm, add_rms_norm_gemma
from .rope import apply_rope
from .rope_cache import qkv_rope_cache_write, qkv_rope_ok, rope_cache_write

__all__ = ["Attention", "DecoderLayer", "mlp_block", "geglu_block", "geglu_epilogue", "mlp_activation", "self_attention",
           "FUSE_DECODE_NORM", "FUSE_QKV_ROPE"]

# At decode (M <= gemv.MAX_M), run the post-attention add + RMSNorm in the gate/up GEMV's
# prologue (gemm.add_rms_norm_gemm) instead of its own launch. Off: on the H200 every GEMV
# program re-reading the rows costs more than the launch saves (1B decode 1.24 against 1.06 ms,
# 8B 5.12 against 4.36; benchmarks/bench_decode_step.py --fuse-norm). XPUINJECT_FUSE_DECODE_NORM=1
# turns it on, for a GPU where launches cost more.
FUSE_DECODE_NORM = _backend.env_switch("XPUINJECT_FUSE_DECODE_NORM") is True

# At decode over a static cache, run RoPE, the q/k norms and the cache write in the QKV GEMV's
# epilogue (rope_cache.qkv_rope_cache_write), one head a tile, instead of a launch of their own:
# on the H200 the Qwen3-30B-A3B-shaped step took 0.633 ms with it against 0.649 without
# (benchmarks/profile_decode.py, BENCHMARKS.md). XPUINJECT_FUSE_QKV_ROPE=0 turns it off.
FUSE_QKV_ROPE = _backend.env_switch("XPUINJECT_FUSE_QKV_ROPE") is not False


def _heads(module: nn.Module):
    cfg = module.config
    d = module.head_dim
    h = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or h
    return h, kv, d


_QKV_W, _QKV_B = packed_attr("Attention", "qkv_weight"), packed_attr("Attention", "qkv_bias")
_O_W, _O_B = packed_attr("Attention", "o_weight"), packed_attr("Attention", "o_bias")
_GU_W, _GU_B = packed_attr("SwiGLUMLP", "gate_up_weight"), packed_attr("SwiGLUMLP", "gate_up_bias")
_DOWN_W, _DOWN_B = packed_attr("SwiGLUMLP", "down_weight"), packed_attr("SwiGLUMLP", "down_bias")
_GEMMA_NORM_W = packed_attr("GemmaRMSNorm", "weight")
_GEGLU_GU_W, _GEGLU_DOWN_W = packed_attr("GeGLUMLP", "gate_up_weight"), packed_attr("GeGLUMLP", "down_weight")
# The activation a GeGLU MLP applies -> the gate/up GEMM's epilogue: by the act_fn module's class
# (transformers/activations.py ACT2FN), else by the config's name for it.
_GEGLU_BY_CLASS = {"GELUTanh": "geglu", "GELUActivation": "geglu_erf"}
_GEGLU_BY_NAME = {"gelu_pytorch_tanh": "geglu", "gelu": "geglu_erf"}
# transformers' classes of Gemma's (1 + w) RMSNorm (contract.json)
_GEMMA_NORMS = frozenset(LAYERS["GemmaRMSNorm"]["classes"])
# ... and of the norms that multiply their own weight into the fp32 row and round once (Helium's)
_FP32_NORMS = frozenset(LAYERS["FP32RMSNorm"]["classes"])


def _vendor(module: nn.Module, op: str, m: int = -1) -> bool:
    """Whether the module's routes send op to the vendor path for a call of m tokens (m < 0:
    an attention op, whose routes have no token bounds)."""
    for r_op, lo, hi in getattr(module, VENDOR_ATTR, None) or ():
        if r_op == op and (m < 0 or (m >= lo and (hi is None or m <= hi))):
            return True
    return False


def _inline_mlp(mlp: nn.Module) -> bool:
    """Whether a patched block may run mlp inline (mlp_block): bound to our SwiGLUMLP, on silu."""
    act = getattr(getattr(mlp, "config", None), "hidden_act", "silu")
    return _runs_swiglu(mlp) and act in ("silu", "swish")


def _runs_swiglu(mlp: nn.Module) -> bool:
    """Whether mlp's forward is bound to this package's SwiGLUMLP (by inject or kernelize).
    Spelled without getattr(..., default) on the method: torch.compile's tracer (torch 2.11)
    answers None for getattr(bound_method, "__func__", None)."""
    f = mlp.__dict__.get("forward")
    return isinstance(f, types.MethodType) and f.__func__ is SwiGLUMLP.forward


def _rows(x: torch.Tensor) -> int:
    return x.numel() // x.shape[-1] if x.shape[-1] else 0


def _proj(x: torch.Tensor, w: torch.Tensor, b, vendor: bool = False) -> torch.Tensor:
    if vendor:  # cuBLAS on the same packed K-major weight
        out = torch.matmul(x, w)
        return out + b if b is not None else out
    return gemm(x, w, bias=b, epilogue="bias" if b is not None else "none")


def _proj_add(x: torch.Tensor, w: torch.Tensor, b, vendor: bool, residual: torch.Tensor,
              res_scale: float) -> torch.Tensor:
    """residual + res_scale * (x @ w (+ b)), the add in the GEMM's residual epilogue: the sum
    rounded once, not after the GEMM and again after an add. The vendor path is one addmm (alpha
    res_scale, beta 1), which rounds once on the CPU; CUDA's half-precision addmm rounds the
    product before it adds (on an H100, bit for bit a matmul then an add, as the stock module
    rounds). Rounding once there needs an fp32 output and a cast launch, not measured for speed."""
    if vendor:
        if b is not None:
            return residual + (torch.matmul(x, w) + b) * res_scale
        n = w.shape[1]
        return torch.addmm(residual.reshape(-1, n), x.reshape(-1, x.shape[-1]), w, alpha=res_scale).view(residual.shape)
    return gemm(x, w, bias=b, residual=residual, epilogue="residual", res_scale=res_scale)


def _scaled_block(layer: nn.Module, hidden_states, rm: float, **kwargs):
    """A block that scales each branch by rm before adding it (GraniteDecoderLayer): both adds in
    the o and down projections' residual epilogues, one rounding each where stock rounds three
    times; the post-attention norm runs on its own."""
    residual = self_attention(layer, hidden_states, residual=hidden_states, res_scale=rm, **kwargs)
    mlp = layer.mlp
    h = layer.post_attention_layernorm(residual)
    if _inline_mlp(mlp):
        return mlp_block(mlp, h, residual=residual, res_scale=rm)
    return _add(residual, mlp(h), rm)


def mlp_block(mlp: nn.Module, x: torch.Tensor, residual=None, h=None, res_scale: float = 1.0) -> torch.Tensor:
    """down(silu(gate(x)) * up(x)) [+ residual] on the packed gate|up and down weights: our GEMMs
    with the swiglu and residual epilogues, or cuBLAS where the plan routes gate_up_proj /
    down_proj to the vendor path (the epilogue then runs as torch ops). h: silu(gate) * up
    already computed (by add_rms_norm_gemm); x is then unused. res_scale scales the MLP's output
    before the residual add (Granite's residual_multiplier)."""
    gate_up = _packed(mlp, _GU_W, "SwiGLUMLP")
    down = _packed(mlp, _DOWN_W, "SwiGLUMLP")
    gu_b = getattr(mlp, _GU_B, None)
    d_b = getattr(mlp, _DOWN_B, None)
    m = _rows(x if h is None else h)
    if h is None and _vendor(mlp, "gate_up_proj", m):
        gu = torch.matmul(x, gate_up)
        if gu_b is not None:
            gu = gu + gu_b
        g, u = gu.chunk(2, dim=-1)
        h = torch.nn.functional.silu(g) * u
    elif h is None:
        h = gemm(x, gate_up, bias=gu_b, epilogue="swiglu")
    vendor = _vendor(mlp, "down_proj", m)
    if residual is not None:
        return _proj_add(h, down, d_b, vendor, residual, res_scale)
    return _proj(h, down, d_b, vendor)


def mlp_activation(config) -> str:
    """The MLP activation a config names: Gemma's `hidden_activation` (what Gemma2MLP reads),
    else `hidden_act` (Llama's and Phi-3's), else silu."""
    return getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None) or "silu"


def geglu_epilogue(mlp: nn.Module) -> str:
    """The epilogue computing mlp's gelu ("geglu", "geglu_erf"), "" for one the kernels do not.
    The module's own act_fn decides where it has one: Gemma 1's MLP applies config.hidden_act
    and Gemma 2's and 3's config.hidden_activation, and Hub configs may carry both names."""
    act = getattr(mlp, "act_fn", None)
    if isinstance(act, nn.Module):
        return _GEGLU_BY_CLASS.get(type(act).__name__, "")
    return _GEGLU_BY_NAME.get(mlp_activation(getattr(mlp, "config", None)), "")


def geglu_block(mlp: nn.Module, x: torch.Tensor, residual=None) -> torch.Tensor:
    """down(gelu(gate(x)) * up(x)) [+ residual] on the packed weights: our GEMMs, or cuBLAS where
    the plan routes gate_up_proj / down_proj to the vendor path. A residual is added in the down
    projection's epilogue (Gemma 1's block, whose add follows the MLP)."""
    epilogue = geglu_epilogue(mlp)
    if not epilogue:
        act = getattr(mlp, "act_fn", None)
        act = type(act).__name__ if isinstance(act, nn.Module) else mlp_activation(getattr(mlp, "config", None))
        raise RuntimeError(f"xpuinject_kernels: GeGLUMLP: module {_name(mlp)!r} applies {act}; the fused kernel "
                           "computes gelu (gelu_pytorch_tanh or the exact gelu)")
    gate_up = _packed(mlp, _GEGLU_GU_W, "GeGLUMLP")
    down = _packed(mlp, _GEGLU_DOWN_W, "GeGLUMLP")
    m = _rows(x)
    if _vendor(mlp, "gate_up_proj", m):
        g, u = torch.matmul(x, gate_up).chunk(2, dim=-1)
        h = torch.nn.functional.gelu(g, approximate="tanh" if epilogue == "geglu" else "none") * u
    else:
        h = gemm(x, gate_up, epilogue=epilogue)
    vendor = _vendor(mlp, "down_proj", m)
    if residual is not None:
        return _proj_add(h, down, None, vendor, residual, 1.0)
    return _proj(h, down, None, vendor)


def _add(residual, out: torch.Tensor, res_scale: float = 1.0) -> torch.Tensor:
    """residual + res_scale * out as the block's own forward computes it (out alone without a
    residual)."""
    if residual is None:
        return out
    return residual + (out * res_scale if res_scale != 1.0 else out)


def _sdpa(module: nn.Module, q, k, v, attention_mask, scaling):
    """Attention through torch SDPA, with transformers' sdpa_attention_forward semantics (the
    mask is a 4-D bool/additive mask or None; no mask means causal when q_len > 1, and a decode
    step of one query attends to every cached key)."""
    q_len = q.shape[2]
    causal = attention_mask is None and q_len > 1 and getattr(module, "is_causal", True)
    if causal and k.shape[2] > q_len:  # empty static cache prefill: valid keys are the first q_len
        k, v = k[:, :, :q_len], v[:, :, :q_len]
    mask = attention_mask
    if mask is not None and mask.dtype != torch.bool and mask.dtype != q.dtype:
        mask = mask.to(q.dtype)
    gqa = q.shape[1] != k.shape[1]
    if gqa and mask is not None and q.device.type != "xpu":
        # With a mask, CUDA's SDPA serves enable_gqa only from its math kernel (materialized
        # scores): repeat the KV heads instead, as transformers does (integrations/sdpa_attention.py
        # use_gqa_in_sdpa / repeat_kv, 5.17), so the memory-efficient kernel takes the call.
        b, hk, length, d = k.shape
        rep = q.shape[1] // hk
        k = k[:, :, None].expand(b, hk, rep, length, d).reshape(b, hk * rep, length, d)
        v = v[:, :, None].expand(b, hk, rep, length, v.shape[-1]).reshape(b, hk * rep, length, v.shape[-1])
        gqa = False
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal, scale=scaling, enable_gqa=gqa
    )
    return out.transpose(1, 2)


def _static_layer(cache, idx, b: int, hk: int, d: int, dtype):
    """The cache layer a fused RoPE + cache write may fill: a transformers StaticLayer (full
    length; not the sliding kind, whose update rolls its window with host-side branches) of this
    batch, head count, head_dim and dtype. None: the layer goes through cache.update()."""
    layers = getattr(cache, "layers", None)
    if layers is None or idx is None or idx >= len(layers):
        return None
    layer = layers[idx]
    if type(layer).__name__ != "StaticLayer" or not isinstance(getattr(layer, "cumulative_length", None), torch.Tensor):
        return None
    if layer.is_initialized:
        keys = layer.keys
        if keys.shape[0] != b or keys.shape[1] != hk or keys.shape[3] != d or keys.dtype != dtype:
            return None
    return layer


def _bound_to(norm, layer) -> bool:
    """Whether norm's forward is bound to this package's layer class `layer` (by inject or
    kernelize); spelled as _runs_swiglu is, for torch.compile's tracer."""
    f = norm.__dict__.get("forward")
    return isinstance(f, types.MethodType) and f.__func__ is layer.forward


def _qk_norm_modules(module: nn.Module):
    """(q norm, k norm, after): the attention's per-head q/k norm modules (None where it has
    none), and whether they normalize the rotated heads (contract.json qk_norms_after_rope:
    HunYuan's query_layernorm and key_layernorm) rather than the heads RoPE then rotates."""
    if type(module).__name__ in QK_NORMS_AFTER_ROPE:
        qa, ka = QK_NORMS_AFTER_ROPE_MODULES
        return getattr(module, qa, None), getattr(module, ka, None), True
    return getattr(module, "q_norm", None), getattr(module, "k_norm", None), False


def _qk_norms(module: nn.Module, q: torch.Tensor, k: torch.Tensor):
    """(q weight, k weight, eps, round, after) for the RoPE launch to apply the q/k norms as the
    kernels their forwards are bound to would: both bound to our RMSNorm (Llama's order, the
    module's own weight; only when the weight keeps the output in q's dtype) or both to our
    GemmaRMSNorm (the fp32 1 + w it runs on), with one eps; after: on the rotated heads. None:
    anything else (a stock module, mixed kinds), and the norms keep their own launches."""
    qn, kn, after = _qk_norm_modules(module)
    if qn is None or kn is None:
        return None
    if _bound_to(qn, _layers.RMSNorm) and _bound_to(kn, _layers.RMSNorm):
        qw, kw = qn.weight, kn.weight
        eps, k_eps = qn.variance_epsilon, kn.variance_epsilon
        if torch.promote_types(qw.dtype, q.dtype) != q.dtype or torch.promote_types(kw.dtype, k.dtype) != k.dtype:
            return None
        rnd = True
    elif _bound_to(qn, _layers.GemmaRMSNorm) and _bound_to(kn, _layers.GemmaRMSNorm):
        qw = _packed(qn, _GEMMA_NORM_W, "GemmaRMSNorm")
        kw = _packed(kn, _GEMMA_NORM_W, "GemmaRMSNorm")
        eps, k_eps = qn.eps, kn.eps
        rnd = False
    else:
        return None
    if eps != k_eps:
        return None
    return qw, kw, float(eps), rnd, after


def _qkv_rope_layer(module: nn.Module, x: torch.Tensor, qkv_w: torch.Tensor, cache, h: int, kv: int, d: int, m: int):
    """(static cache layer, q/k norms or None) when a decode step's QKV projection may write the
    rotated query and the cache itself (rope_cache.qkv_rope_cache_write): FUSE_QKV_ROPE, one
    token per row, an initialized StaticLayer, our GEMV for the projection and our attention
    after it, and q_norm/k_norm (if any) ours. None: the step as before."""
    if not FUSE_QKV_ROPE or cache is None or x.dim() != 3 or x.shape[1] != 1:
        return None
    if m > gemv.MAX_M or _vendor(module, "qkv_proj", m) or _vendor(module, "attention-decode"):
        return None
    layer = _static_layer(cache, getattr(module, "layer_idx", None), x.shape[0], kv, d, x.dtype)
    if layer is None or not layer.is_initialized or not qkv_rope_ok(x, qkv_w, layer.keys, d):
        return None
    norms = None
    if _qk_norm_modules(module)[0] is not None:
        if _full_width_norms(module, d):
            return None
        norms = _qk_norms(module, x, x)
        if norms is None:
            return None
    return layer, norms


def _full_width_norms(module: nn.Module, d: int) -> bool:
    """Whether q_norm (and k_norm) normalize a token's whole projection, every head at once,
    before the heads are split (Olmo2Attention), rather than each head over head_dim."""
    w = getattr(_qk_norm_modules(module)[0], "weight", None)
    return isinstance(w, torch.Tensor) and w.numel() != d


def _global_nope_layer(module: nn.Module) -> bool:
    """A global layer of a contract.json global_nope class: a window configured, the layer not
    sliding (Exaone4Attention.forward: RoPE only "if self.sliding_window is None or
    self.is_sliding", the window only where is_sliding)."""
    return (type(module).__name__ in GLOBAL_NOPE and getattr(module, "sliding_window", None) is not None
            and not getattr(module, "is_sliding", False))


def _rotates(module: nn.Module) -> bool:
    """Whether the attention layer applies RoPE (SmolLM3 says so in use_rope)."""
    return getattr(module, "use_rope", True) and not _global_nope_layer(module)


def _window(module: nn.Module):
    """The attention layer's sliding window, None where it attends in full."""
    return None if _global_nope_layer(module) else getattr(module, "sliding_window", None)


def attention_block(module: nn.Module, hidden_states, position_embeddings, attention_mask, past_key_values,
                    in_norm=None, residual=None, res_scale: float = 1.0, **kwargs):
    """The Attention layer's computation (a function so DecoderLayer-free models reuse it).
    in_norm = (weight, eps): hidden_states is the layer's input before its RMSNorm (Llama's), which
    runs inside the QKV projection (gemm.rms_norm_gemm). residual: the output is residual +
    res_scale * the attention's, the add in the o projection's epilogue."""
    h, kv, d = _heads(module)
    qkv_w = _packed(module, _QKV_W, "Attention")
    if qkv_w.shape[1] != (h + 2 * kv) * d:
        raise RuntimeError(
            f"xpuinject_kernels: Attention: module {_name(module)!r}: packed qkv weight has {qkv_w.shape[1]} columns, "
            f"config wants ({h} + 2*{kv}) * {d} = {(h + 2 * kv) * d}"
        )
    if position_embeddings is None:
        raise RuntimeError(f"xpuinject_kernels: Attention: module {_name(module)!r} got no position_embeddings")
    cos, sin = position_embeddings
    if not _rotates(module):
        # NoPE layers (SmolLM3's no_rope_layers, EXAONE 4's global ones): zero-width views rotate
        # nothing, and the q/k norms and cache write that share RoPE's launch still run
        cos, sin = cos[..., :0], sin[..., :0]
    window = _window(module)
    input_shape = hidden_states.shape[:-1]
    m = _rows(hidden_states)
    fused = _qkv_rope_layer(module, hidden_states, qkv_w, past_key_values, h, kv, d, m)
    if fused is not None:
        # Decode over an initialized static cache: RoPE, the q/k norms and the cache write in the
        # QKV GEMV's epilogue (rope_cache.qkv_rope_cache_write), then the attention launch, which
        # advances the layer's counter.
        layer, norms = fused
        q = qkv_rope_cache_write(hidden_states, qkv_w, getattr(module, _QKV_B, None), cos, sin, layer.keys,
                                 layer.values, layer.cumulative_length, h, *(norms or ()),
                                 **({} if in_norm is None else {"in_norm_weight": in_norm[0], "in_eps": in_norm[1]}))
        out = decode_attention(q, layer.keys, layer.values, scaling=module.scaling, kv_lens=layer.cumulative_length,
                               key_mask=attention_mask, softcap=getattr(module, "attn_logit_softcapping", None),
                               window=window, advance=True)
        return _o_proj(module, out.reshape(*input_shape, h * d), m, residual, res_scale)
    if in_norm is not None:
        qkv_b = getattr(module, _QKV_B, None)
        qkv = rms_norm_gemm(hidden_states, in_norm[0], in_norm[1], qkv_w, qkv_b, "bias" if qkv_b is not None else "none")
    else:
        qkv = _proj(hidden_states, qkv_w, getattr(module, _QKV_B, None), _vendor(module, "qkv_proj", m))
    q, k, v = qkv.split([h * d, kv * d, kv * d], dim=-1)
    q_norm, k_norm, after = _qk_norm_modules(module)
    if q_norm is not None and _full_width_norms(module, d):
        # OLMo 2: each norm spans all its heads, so it runs as its module (ours where bound) on
        # the projection's rows before the split
        q, k = q_norm(q), k_norm(k)
        q_norm = None
    q = q.view(*input_shape, h, d)
    k = k.view(*input_shape, kv, d)
    v = v.view(*input_shape, kv, d)
    q_len = q.shape[1] if q.dim() == 4 else 1
    layer = None
    if past_key_values is not None and q.dim() == 4:
        layer = _static_layer(past_key_values, getattr(module, "layer_idx", None), q.shape[0], kv, d, k.dtype)
    norms = None
    if q_norm is not None:  # qwen3, Gemma 3: RMSNorm over head_dim before RoPE; HunYuan: after it
        # ours: inside the RoPE launch below (with the static cache's write, or alone); a stock
        # or mixed pair keeps its own launches
        norms = _qk_norms(module, q, k)
        if norms is None and after:
            # the rotation first, here, then the modules; the launches below rotate nothing
            q, k = apply_rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
            q, k = q_norm(q).transpose(1, 2), k_norm(k).transpose(1, 2)
            cos, sin = cos[..., :0], sin[..., :0]
        elif norms is None:
            q = q_norm(q)
            k = k_norm(k)
    softcap = getattr(module, "attn_logit_softcapping", None)
    # SDPA has no soft-capping (integrations/sdpa_attention.py ignores it): capped layers stay ours.
    vendor_attn = softcap is None and _vendor(module, "attention-prefill" if q_len > 1 else "attention-decode")
    kv_lens = None
    if layer is not None:
        # A static cache: RoPE and the cache write in one kernel at the layer's own device-side
        # counter, which then advances as StaticLayer.update advances it: at decode inside our
        # attention launch, else here.
        if not layer.is_initialized:
            layer.lazy_initialization(k.transpose(1, 2), v.transpose(1, 2))
        q = rope_cache_write(q, k, v, cos, sin, layer.keys, layer.values, layer.cumulative_length,
                             *(norms or ()))
        if q_len != 1 or vendor_attn:
            layer.cumulative_length.add_(q_len)
        k, v = layer.keys, layer.values
        kv_lens = layer.cumulative_length
    else:
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        # In place only outside autograd: q and k are views of this call's own projection, but a
        # tracer with grad mode on (torch.compile) refuses in-place writes to views it records.
        nw = {} if norms is None else dict(zip(("q_norm_weight", "k_norm_weight", "eps", "norm_round", "norm_after"),
                                                norms))
        if cos.shape[-1] or norms is not None:
            q, k = apply_rope(q, k, cos, sin, inplace=not torch.is_grad_enabled(), **nw)
        if past_key_values is not None:
            k, v = past_key_values.update(k, v, module.layer_idx)
    if q_len == 1 and kv_lens is not None and not vendor_attn:
        # Decode over the static cache: only the filled slots are read (the length comes from the
        # counter on the device); the mask then only adds padding. A sliding layer's window is
        # also the kernel's own (the query sits at kv_lens - 1), so keys older than it are not read.
        out = decode_attention(q, k, v, scaling=module.scaling, kv_lens=kv_lens, key_mask=attention_mask,
                               softcap=softcap, window=window, advance=True)
    elif vendor_attn:
        out = _sdpa(module, q, k, v, attention_mask, module.scaling)
    else:
        out, _ = attention_forward(
            module, q, k, v, attention_mask, dropout=0.0, scaling=module.scaling,
            sliding_window=window,
            softcap=softcap, **kwargs,
        )
    return _o_proj(module, out.reshape(*input_shape, h * d), m, residual, res_scale)


def _o_proj(module: nn.Module, out: torch.Tensor, m: int, residual, res_scale: float) -> torch.Tensor:
    w, b, vendor = _packed(module, _O_W, "Attention"), getattr(module, _O_B, None), _vendor(module, "o_proj", m)
    if residual is None:
        return _proj(out, w, b, vendor)
    return _proj_add(out, w, b, vendor, residual, res_scale)


def _input_norm(layer: nn.Module, hidden_states: torch.Tensor):
    """(weight, eps) when the layer's input RMSNorm may run inside its QKV projection
    (gemm.rms_norm_gemm decides whether it does): at decode size, the norm bound to our RMSNorm
    and the attention to our Attention, neither hooked, and the QKV projection ours at this size.
    None: the two modules run as themselves."""
    norm, attn = layer.input_layernorm, layer.self_attn
    m = _rows(hidden_states)
    if m > gemv.MAX_M or not _bound_to(norm, _layers.RMSNorm) or not _bound_to(attn, Attention):
        return None
    if norm._forward_hooks or norm._forward_pre_hooks or attn._forward_hooks or attn._forward_pre_hooks:
        return None
    if attn.training or _vendor(attn, "qkv_proj", m) or norm.weight.dtype != hidden_states.dtype:
        return None
    return norm.weight, float(norm.variance_epsilon)


def self_attention(layer: nn.Module, hidden_states, residual=None, res_scale: float = 1.0, **kwargs):
    """layer.self_attn(hidden_states=layer.input_layernorm(hidden_states), **kwargs)'s output, the
    norm and the QKV projection through gemm.rms_norm_gemm where _input_norm allows it. residual:
    residual + res_scale * that output instead, the add in the o projection's epilogue where the
    attention is ours and unhooked."""
    in_norm = _input_norm(layer, hidden_states)
    attn = layer.self_attn
    ours = _bound_to(attn, Attention) and not (attn._forward_hooks or attn._forward_pre_hooks or attn.training)
    if in_norm is None and not (residual is not None and ours):
        out, _ = attn(hidden_states=layer.input_layernorm(hidden_states), **kwargs)
        return _add(residual, out, res_scale)
    x = hidden_states if in_norm is not None else layer.input_layernorm(hidden_states)
    kwargs = dict(kwargs)
    return attention_block(attn, x, kwargs.pop("position_embeddings", None), kwargs.pop("attention_mask", None),
                           kwargs.pop("past_key_values", None), in_norm=in_norm, residual=residual,
                           res_scale=res_scale, **kwargs)


class Attention(nn.Module):
    """Replaces LlamaAttention.forward (Mistral, Qwen2, Qwen3, SmolLM3, Gemma 2 and Gemma 3 alike)."""

    has_backward = False
    can_torch_compile = True

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, past_key_values=None, **kwargs):
        if self.training:
            raise RuntimeError(f"xpuinject_kernels: Attention: module {_name(self)!r} is in training mode; inference only")
        return attention_block(self, hidden_states, position_embeddings, attention_mask, past_key_values, **kwargs), None


class DecoderLayer(nn.Module):
    """Replaces LlamaDecoderLayer.forward (and its relatives', Gemma 1's among them): the residual
    add after attention and the post-attention RMSNorm run as one fused add_rms_norm kernel
    (add_rms_norm_gemma on Gemma's norm, and on a norm that rounds once after its weight, as
    Helium's does: the kernel's fp32 multiply and one rounding, on the module's own weight)."""

    has_backward = False
    can_torch_compile = True

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        position_ids=None,
        past_key_values=None,
        use_cache=False,
        position_embeddings=None,
        **kwargs,
    ):
        rm = float(getattr(self, "residual_multiplier", 1.0))
        if rm != 1.0:
            return _scaled_block(self, hidden_states, rm, attention_mask=attention_mask, position_ids=position_ids,
                                 past_key_values=past_key_values, use_cache=use_cache,
                                 position_embeddings=position_embeddings, **kwargs)
        residual = hidden_states
        hidden_states = self_attention(
            self,
            hidden_states,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
            position_embeddings=position_embeddings,
            **kwargs,
        )
        norm = self.post_attention_layernorm
        mlp = self.mlp
        if type(norm).__name__ in _GEMMA_NORMS:
            # Gemma 1: Llama's block on Gemma's (1 + w) norm, the MLP's residual add in its down
            # projection's epilogue where the MLP runs our GeGLU
            residual, h = add_rms_norm_gemma(hidden_states, residual, _packed(norm, _GEMMA_NORM_W, "GemmaRMSNorm"),
                                             norm.eps)
            if _bound_to(mlp, _layers.GeGLUMLP):
                return geglu_block(mlp, h, residual=residual)
            return residual + mlp(h)
        swiglu = _inline_mlp(mlp)
        if type(norm).__name__ in _FP32_NORMS:
            residual, h = add_rms_norm_gemma(hidden_states, residual, norm.weight, norm.variance_epsilon)
            return mlp_block(mlp, h, residual=residual) if swiglu else residual + mlp(h)
        m = _rows(hidden_states)
        if FUSE_DECODE_NORM and swiglu and m <= gemv.MAX_M and not _vendor(mlp, "gate_up_proj", m):
            # decode: the add + RMSNorm in the gate/up GEMV's prologue, one launch fewer
            residual, h = add_rms_norm_gemm(hidden_states, residual, norm.weight, norm.variance_epsilon,
                                            _packed(mlp, _GU_W, "SwiGLUMLP"), getattr(mlp, _GU_B, None), "swiglu")
            return mlp_block(mlp, None, residual=residual, h=h)
        if runs_sparse_moe(mlp):
            # Qwen3-MoE: the add + RMSNorm in the router's launch at decode, the residual add in
            # the MoE kernel's last launch
            return sparse_moe(mlp, hidden_states, residual, norm=(norm.weight, norm.variance_epsilon))
        residual, hidden_states = add_rms_norm(hidden_states, residual, norm.weight, norm.variance_epsilon)
        if not swiglu:
            return residual + mlp(hidden_states)
        # The MLP runs our SwiGLUMLP: run it inline so the final residual add rides in the
        # down projection's epilogue instead of a separate pass over the activations.
        return mlp_block(mlp, hidden_states, residual=residual)
