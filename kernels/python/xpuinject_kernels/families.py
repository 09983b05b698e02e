"""Layers for the module layouts of Gemma 1 / 2 / 3, Phi-3, OLMo 2 and GLM-4 (transformers 5.17 models/gemma,
models/gemma2, models/gemma3, models/phi3, models/olmo2, models/glm4; Gemma 1's and GLM's block is
DecoderLayer, decoder.py).

  GemmaRMSNorm       replaces GemmaRMSNorm / Gemma2RMSNorm / Gemma3RMSNorm.forward: x / rms(x) * (1 + w)
                     in fp32, rounded once (rms_norm_gemma), on xpuinject_norm_weight = 1 + w in fp32
                     (folded offline by the plan's add-one, or made from the module's weight on first use)
  GeGLUMLP           replaces GemmaMLP / Gemma2MLP / Gemma3MLP.forward: down(gelu(gate(x)) * up(x)),
                     the gate/up GEMM with the geglu epilogue (gelu's tanh form) or geglu_erf (the
                     exact one, Gemma 1's published hidden_act) over the packed [hidden, 2I] weight
  GemmaDecoderLayer  replaces Gemma2DecoderLayer / Gemma3DecoderLayer.forward: the residual add
                     after post_attention_layernorm and pre_feedforward_layernorm as one kernel
  FP32RMSNorm        replaces Olmo2RMSNorm.forward: w * (x / rms(x)) in fp32, rounded once (rms_norm_gemma's
                     kernel on the module's own weight; Llama's norm rounds before the weight)
  PostNormDecoderLayer  replaces Olmo2DecoderLayer / Olmo3DecoderLayer / Exaone4DecoderLayer.forward: the
                     block normalizes each branch's output before adding it to the residual; each norm
                     and its add as one kernel (rms_norm_fp32_add or, on Llama's norms, rms_norm_add:
                     the norm rounded, then the sum, as stock rounds them)
  PostNormMoEDecoderLayer  replaces FlexOlmoDecoderLayer.forward, whose parameters have no use_cache:
                     PostNormDecoderLayer's block (the MLP a sparse MoE block)
  SandwichDecoderLayer  replaces Glm4DecoderLayer.forward: Llama's norms before and after each branch; the
                     add after post_self_attn_layernorm and post_attention_layernorm as one kernel,
                     post_mlp_layernorm and the add after it as another (rms_norm_add)
  FusedAttention     Phi3Attention: the Attention layer over a checkpoint-fused qkv_proj
  FusedSwiGLUMLP     Phi3MLP: the SwiGLUMLP layer over a checkpoint-fused gate_up_proj

FusedAttention and FusedSwiGLUMLP add nothing to Attention and SwiGLUMLP (same forward): they
are their own contract.json entries because their packed tensors come from other children
(qkv_proj, gate_up_proj), which injection releases. Rules as in layers.py.
"""

from __future__ import annotations

import torch
from torch import nn

from .contract import LAYERS, packed_attr
from .decoder import Attention, geglu_block, geglu_epilogue, mlp_activation  # noqa: F401 (re-exported)
from .layers import SwiGLUMLP, _packed
from .rmsnorm import add_rms_norm, add_rms_norm_gemma, rms_norm_add, rms_norm_fp32_add, rms_norm_gemma

__all__ = ["GemmaRMSNorm", "FP32RMSNorm", "GeGLUMLP", "GemmaDecoderLayer", "PostNormDecoderLayer", "PostNormMoEDecoderLayer",
           "SandwichDecoderLayer",
           "FusedAttention",
           "FusedSwiGLUMLP", "mlp_activation", "geglu_epilogue", "geglu_block"]

_NORM_W = packed_attr("GemmaRMSNorm", "weight")


def _norm_weight(module: nn.Module) -> torch.Tensor:
    return _packed(module, _NORM_W, "GemmaRMSNorm")


class GemmaRMSNorm(nn.Module):
    """Replaces GemmaRMSNorm.forward(x) (Gemma2RMSNorm and Gemma3RMSNorm alike)."""

    has_backward = False
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm_gemma(x, _norm_weight(self), self.eps)


class FP32RMSNorm(nn.Module):
    """Replaces Olmo2RMSNorm.forward(x)."""

    has_backward = False
    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return rms_norm_gemma(hidden_states, self.weight, self.variance_epsilon)


class GeGLUMLP(nn.Module):
    """Replaces GemmaMLP.forward(x) (Gemma2MLP and Gemma3MLP alike)."""

    has_backward = False
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return geglu_block(self, x)


class GemmaDecoderLayer(nn.Module):
    """Replaces Gemma2DecoderLayer.forward (Gemma3DecoderLayer alike): Gemma's block adds the
    residual after post_attention_layernorm, then pre_feedforward_layernorm normalizes the sum;
    add_rms_norm_gemma does both in one pass. The other norms and the MLP run as their modules
    (bound to this package's layers where the plan says so)."""

    has_backward = False
    can_torch_compile = True

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, position_ids=None,
                past_key_values=None, **kwargs):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(
            hidden_states=hidden_states,
            position_embeddings=position_embeddings,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            **kwargs,
        )
        hidden_states = self.post_attention_layernorm(hidden_states)
        norm = self.pre_feedforward_layernorm
        residual, hidden_states = add_rms_norm_gemma(hidden_states, residual, _norm_weight(norm), norm.eps)
        hidden_states = self.mlp(hidden_states)
        hidden_states = self.post_feedforward_layernorm(hidden_states)
        return residual + hidden_states


def _norm_add(norm: nn.Module):
    """The norm + residual-add op that rounds as `norm` does: OLMo 2's order for the classes the
    FP32RMSNorm layer replaces (contract.json), Llama's (EXAONE 4's Exaone4RMSNorm) otherwise."""
    return rms_norm_fp32_add if type(norm).__name__ in LAYERS["FP32RMSNorm"]["classes"] else rms_norm_add


class PostNormDecoderLayer(nn.Module):
    """Replaces Olmo2DecoderLayer.forward (Olmo3DecoderLayer and Exaone4DecoderLayer alike): no
    input norm; the attention's and the MLP's outputs are each normalized, then added to the
    residual, the norm and the add in one launch (rms_norm_fp32_add for OLMo's norms, rms_norm_add
    for EXAONE 4's Llama ones). The attention and the MLP run as their modules."""

    has_backward = False
    can_torch_compile = True

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False,
                position_embeddings=None, **kwargs):
        return _post_norm_block(self, hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                                past_key_values=past_key_values, use_cache=use_cache,
                                position_embeddings=position_embeddings, **kwargs)


def _post_norm_block(layer: nn.Module, hidden_states, **kwargs):
    """The block both post-norm layers run; kwargs go to the attention as the block's forward got them."""
    residual = hidden_states
    hidden_states, _ = layer.self_attn(hidden_states=hidden_states, **kwargs)
    norm = layer.post_attention_layernorm
    residual = _norm_add(norm)(hidden_states, residual, norm.weight, norm.variance_epsilon)
    norm = layer.post_feedforward_layernorm
    return _norm_add(norm)(layer.mlp(residual), residual, norm.weight, norm.variance_epsilon)


class PostNormMoEDecoderLayer(nn.Module):
    """Replaces FlexOlmoDecoderLayer.forward (OLMoE's parameters, no use_cache): PostNormDecoderLayer's
    block, its MLP a sparse MoE block run as its module."""

    has_backward = False
    can_torch_compile = True

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None,
                position_embeddings=None, **kwargs):
        return _post_norm_block(self, hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                                past_key_values=past_key_values, position_embeddings=position_embeddings, **kwargs)


class SandwichDecoderLayer(nn.Module):
    """Replaces Glm4DecoderLayer.forward: Llama's norms around each branch and after it; the add of
    post_self_attn_layernorm's output to the residual and post_attention_layernorm run as one
    add_rms_norm kernel, as DecoderLayer runs Llama's, and post_mlp_layernorm with the add after
    it as one rms_norm_add. The other norms, the attention and the MLP run as their modules."""

    has_backward = False
    can_torch_compile = True

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False,
                position_embeddings=None, **kwargs):
        residual = hidden_states
        hidden_states, _ = self.self_attn(
            hidden_states=self.input_layernorm(hidden_states),
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
            position_embeddings=position_embeddings,
            **kwargs,
        )
        norm = self.post_attention_layernorm
        residual, hidden_states = add_rms_norm(self.post_self_attn_layernorm(hidden_states), residual, norm.weight,
                                               norm.variance_epsilon)
        norm = self.post_mlp_layernorm
        return rms_norm_add(self.mlp(hidden_states), residual, norm.weight, norm.variance_epsilon)


class FusedAttention(Attention):
    """Phi3Attention.forward: Attention's, on the packed qkv weight made from qkv_proj."""


class FusedSwiGLUMLP(SwiGLUMLP):
    """Phi3MLP.forward: SwiGLUMLP's, on the packed gate|up weight made from gate_up_proj (its
    rows are gate, then up, as the concatenation SwiGLUMLP packs)."""
