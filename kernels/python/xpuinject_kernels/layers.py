"""Kernel-hub layer classes.

Rules (kernels 0.17 `kernels/layer/layer.py::_validate_layer`): each
class subclasses nn.Module, defines no `__init__` and no members beyond nn.Module's except
`has_backward` and `can_torch_compile`; `forward` takes the same parameters as the forward it
replaces. kernelize binds `forward` to the ORIGINAL module (`MethodType(layer.forward, module)`,
on the instance), so `self` is e.g. a LlamaRMSNorm and the layer reads that module's attributes.
Shared code therefore lives in module-level functions, not methods.

What each layer reads is contract.json's `layers` entry: its `reads`, and its `packed` tensors
(all weights K-major [in, out], in the model's half dtype):
  RMSNorm     weight [hidden], variance_epsilon                       (transformers' own attributes)
  SwiGLUMLP   xpuinject_gate_up_weight [hidden, 2*intermediate] (gate columns, then up),
              xpuinject_down_weight [intermediate, hidden], optional biases
  Linear      xpuinject_weight [in, out], optional xpuinject_bias [out]
  LMHead      weight [vocab, hidden] (nn.Linear's own, or the embedding table it is tied to), read
              in place through weight.t(), optional bias; returns fp32 logits
  LinearBN    xpuinject_weight [in, out], xpuinject_bias [out]  (Linear then BatchNorm1d folded:
              W' = diag(a) W, b' = a (b - mu) + beta, a = gamma/sqrt(var+eps))
  BNLinear    xpuinject_weight [in, out], xpuinject_bias [out]  (BatchNorm1d then Linear folded:
              W' = W diag(s), b' = b + W (beta - s mu), s = gamma/sqrt(var+eps))
  ConvBN      xpuinject_weight [out, in, kh, kw], xpuinject_bias [out] (Conv2d then BatchNorm2d
              folded) and the convolution's stride, padding, dilation, groups
  all         optional xpuinject_name (str): the module's path in the model, used in errors.
The packed tensors are either attached by `inject(model, packed=...)` from the offline-packed
checkpoint or, when absent, made on first use from the module's own children (packing.py) and
cached on the module.
"""

from __future__ import annotations

import torch
from torch import nn

from . import packing
from .contract import NAME_ATTR, packed_attr
from .gemm import gemm
from .rmsnorm import rms_norm

__all__ = ["RMSNorm", "SwiGLUMLP", "Linear", "LMHead", "LinearBN", "BNLinear", "ConvBN", "Attention", "DecoderLayer",
           "GemmaRMSNorm", "FP32RMSNorm", "GeGLUMLP", "GemmaDecoderLayer", "PostNormDecoderLayer", "FusedAttention",
           "FusedSwiGLUMLP", "SandwichDecoderLayer", "SparseMoE", "SharedExpertMoE", "MoEDecoderLayer",
           "PostNormMoEDecoderLayer", "RouterMoE", "ScaledMoEDecoderLayer"]


def _name(module: nn.Module) -> str:
    return getattr(module, NAME_ATTR, None) or type(module).__name__


def _packed(module: nn.Module, attr: str, layer: str) -> torch.Tensor:
    """The packed tensor `attr` of module, packing the layer's tensors from the module's own
    children first when they are absent."""
    t = getattr(module, attr, None)
    if t is None:
        packing.pack(module, layer)
        t = getattr(module, attr, None)
        if t is None:
            raise RuntimeError(f"xpuinject_kernels: {layer}: module {_name(module)!r}: packing made no {attr}")
    if not isinstance(t, torch.Tensor):
        raise RuntimeError(f"xpuinject_kernels: {layer}: module {_name(module)!r}: {attr} is a {type(t).__name__}, not a tensor")
    return t


def _linear(module: nn.Module, x: torch.Tensor, layer: str) -> torch.Tensor:
    w = _packed(module, packed_attr(layer, "weight"), layer)
    b = getattr(module, packed_attr(layer, "bias"), None)
    return gemm(x, w, bias=b, epilogue="bias" if b is not None else "none")


def _folded_bn(module: nn.Module, x: torch.Tensor, layer: str) -> torch.Tensor:
    if module.training:
        raise RuntimeError(
            f"xpuinject_kernels: {layer}: module {_name(module)!r} is in training mode; the BatchNorm is folded "
            "with its running statistics and is only valid in eval mode (call model.eval())"
        )
    w = _packed(module, packed_attr(layer, "weight"), layer)
    b = _packed(module, packed_attr(layer, "bias"), layer)
    return gemm(x, w, bias=b, epilogue="bias")


class RMSNorm(nn.Module):
    """Replaces LlamaRMSNorm.forward (and Mistral/Qwen2/Qwen3 RMSNorm: same attributes, same math)."""

    has_backward = False
    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)


class SwiGLUMLP(nn.Module):
    """Replaces LlamaMLP.forward(x): down(silu(gate(x)) * up(x)) as two GEMMs, the first with the
    fused swiglu epilogue over the packed [hidden, 2*intermediate] gate|up weight."""

    has_backward = False
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = getattr(getattr(self, "config", None), "hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise RuntimeError(
                f"xpuinject_kernels: SwiGLUMLP: module {_name(self)!r} uses hidden_act={act!r}; the fused kernel computes silu"
            )
        return decoder.mlp_block(self, x)


class Linear(nn.Module):
    """Replaces nn.Linear.forward(input) with the packed K-major xpuinject_weight (+ xpuinject_bias)."""

    has_backward = False
    can_torch_compile = True

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (nn.Linear's parameter name)
        return _linear(self, input, "Linear")


class LMHead(nn.Module):
    """Replaces the lm_head nn.Linear.forward(input): the same GEMM, with fp32 logits.

    bf16 logits are spaced 0.125 apart at |logit| 16-32, so two candidates the fp32 model orders
    0.06 apart come out equal and argmax takes the lower token id: greedy decoding leaves the
    fp32 path at the first such near-tie. The GEMM accumulates in fp32 anyway; writing that
    accumulator keeps the order, and costs 4 bytes a logit instead of 2. The weight is read in
    place (weight.t()), so a head tied to the embedding table needs no second copy.
    """

    has_backward = False
    can_torch_compile = True

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (nn.Linear's parameter name)
        w = self.weight
        b = getattr(self, "bias", None)
        return gemm(input, w.t(), bias=b, epilogue="bias" if b is not None else "none", out_dtype=torch.float32)


class LinearBN(nn.Module):
    """Replaces LeViT's MLPLayerWithBN.forward(hidden_state): Linear (no bias) then BatchNorm1d over
    the flattened tokens, folded into one GEMM + bias. Eval mode only."""

    has_backward = False
    can_torch_compile = True

    def forward(self, hidden_state: torch.Tensor) -> torch.Tensor:
        return _folded_bn(self, hidden_state, "LinearBN")


class BNLinear(nn.Module):
    """Replaces LeViT's LevitClassificationLayer.forward(hidden_state): BatchNorm1d then Linear,
    folded into one GEMM + bias. Eval mode only."""

    has_backward = False
    can_torch_compile = True

    def forward(self, hidden_state: torch.Tensor) -> torch.Tensor:
        return _folded_bn(self, hidden_state, "BNLinear")


class ConvBN(nn.Module):
    """Replaces LeViT's LevitConvEmbeddings.forward(embeddings): Conv2d then BatchNorm2d, with the
    BatchNorm folded into the convolution; stock conv2d runs on the folded tensors (no conv
    kernel here: the win is one pass instead of two). Eval mode only."""

    has_backward = False
    can_torch_compile = True

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        if self.training:
            raise RuntimeError(
                f"xpuinject_kernels: ConvBN: module {_name(self)!r} is in training mode; the BatchNorm is folded "
                "with its running statistics and is only valid in eval mode (call model.eval())"
            )
        w = _packed(self, packed_attr("ConvBN", "weight"), "ConvBN")
        b = getattr(self, packed_attr("ConvBN", "bias"), None)
        conv = self.convolution  # the Conv2d, or the placeholder that kept its geometry
        return torch.nn.functional.conv2d(embeddings.to(w.dtype), w, b, conv.stride, conv.padding, conv.dilation, conv.groups)


# The attention block and decoder layer of the Llama family live in decoder.py (they need
# the attention and rope kernels); kernelize finds every layer class here.
from . import decoder  # noqa: E402
from .decoder import Attention, DecoderLayer  # noqa: E402,F401
# Gemma's and Phi-3's layouts (families.py) build on the layers above.
from .families import (  # noqa: E402,F401
    FP32RMSNorm, FusedAttention, FusedSwiGLUMLP, GeGLUMLP, GemmaDecoderLayer, GemmaRMSNorm, PostNormDecoderLayer,
    PostNormMoEDecoderLayer, SandwichDecoderLayer,
)
# The sparse mixture-of-experts block (moe_layer.py).
from .moe_layer import MoEDecoderLayer, RouterMoE, ScaledMoEDecoderLayer, SharedExpertMoE, SparseMoE  # noqa: E402,F401
