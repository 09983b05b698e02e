"""Layers for the module layouts of Gemma 2 / Gemma 3 and Phi-3 (transformers 5.17
models/gemma2, models/gemma3, models/phi3).

  GemmaRMSNorm       replaces Gemma2RMSNorm / Gemma3RMSNorm.forward: x / rms(x) * (1 + w) in fp32,
                     rounded once (rms_norm_gemma), on xpuinject_norm_weight = 1 + w in fp32 (folded
                     offline by the plan's add-one, or made from the module's weight on first use)
  GeGLUMLP           replaces Gemma2MLP / Gemma3MLP.forward: down(gelu_tanh(gate(x)) * up(x)), the
                     gate/up GEMM with the geglu epilogue over the packed [hidden, 2I] weight
  GemmaDecoderLayer  replaces Gemma2DecoderLayer / Gemma3DecoderLayer.forward: the residual add
                     after post_attention_layernorm and pre_feedforward_layernorm as one kernel
  FusedAttention     Phi3Attention: the Attention layer over a checkpoint-fused qkv_proj
  FusedSwiGLUMLP     Phi3MLP: the SwiGLUMLP layer over a checkpoint-fused gate_up_proj

FusedAttention and FusedSwiGLUMLP add nothing to Attention and SwiGLUMLP (same forward): they
are their own contract.json entries because their packed tensors come from other children
(qkv_proj, gate_up_proj), which injection releases. Rules as in layers.py.
"""

from __future__ import annotations

import torch
from torch import nn

from .contract import packed_attr
from .decoder import Attention, _rows, _vendor
from .gemm import gemm
from .layers import SwiGLUMLP, _name, _packed
from .rmsnorm import add_rms_norm_gemma, rms_norm_gemma

__all__ = ["GemmaRMSNorm", "GeGLUMLP", "GemmaDecoderLayer", "FusedAttention", "FusedSwiGLUMLP", "mlp_activation"]

_NORM_W = packed_attr("GemmaRMSNorm", "weight")
_GU_W, _DOWN_W = packed_attr("GeGLUMLP", "gate_up_weight"), packed_attr("GeGLUMLP", "down_weight")
_GELU_TANH = ("gelu_pytorch_tanh",)


def mlp_activation(config) -> str:
    """The MLP activation a config names: Gemma's `hidden_activation` (what Gemma2MLP reads),
    else `hidden_act` (Llama's and Phi-3's), else silu."""
    return getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None) or "silu"


def _norm_weight(module: nn.Module) -> torch.Tensor:
    return _packed(module, _NORM_W, "GemmaRMSNorm")


class GemmaRMSNorm(nn.Module):
    """Replaces Gemma2RMSNorm.forward(x) (Gemma3RMSNorm alike)."""

    has_backward = False
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm_gemma(x, _norm_weight(self), self.eps)


def geglu_block(mlp: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """down(gelu_tanh(gate(x)) * up(x)) on the packed weights: our GEMMs, or cuBLAS where the
    plan routes gate_up_proj / down_proj to the vendor path."""
    act = mlp_activation(getattr(mlp, "config", None))
    if act not in _GELU_TANH:
        raise RuntimeError(f"xpuinject_kernels: GeGLUMLP: module {_name(mlp)!r} uses {act!r}; the fused kernel computes "
                           "gelu_pytorch_tanh")
    gate_up = _packed(mlp, _GU_W, "GeGLUMLP")
    down = _packed(mlp, _DOWN_W, "GeGLUMLP")
    m = _rows(x)
    if _vendor(mlp, "gate_up_proj", m):
        g, u = torch.matmul(x, gate_up).chunk(2, dim=-1)
        h = torch.nn.functional.gelu(g, approximate="tanh") * u
    else:
        h = gemm(x, gate_up, epilogue="geglu")
    if _vendor(mlp, "down_proj", m):
        return torch.matmul(h, down)
    return gemm(h, down)


class GeGLUMLP(nn.Module):
    """Replaces Gemma2MLP.forward(x) (Gemma3MLP alike)."""

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


class FusedAttention(Attention):
    """Phi3Attention.forward: Attention's, on the packed qkv weight made from qkv_proj."""


class FusedSwiGLUMLP(SwiGLUMLP):
    """Phi3MLP.forward: SwiGLUMLP's, on the packed gate|up weight made from gate_up_proj (its
    rows are gate, then up, as the concatenation SwiGLUMLP packs)."""
