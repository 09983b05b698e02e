"""Kernel-hub layer classes.

Rules (kernels 0.17 `kernels/layer/layer.py::_validate_layer`): each
class subclasses nn.Module, defines no `__init__` and no members beyond nn.Module's except
`has_backward` and `can_torch_compile`; `forward` takes the same parameters as the forward it
replaces. kernelize binds `forward` to the ORIGINAL module (`MethodType(layer.forward, module)`),
so `self` is e.g. a LlamaRMSNorm and the layer reads that module's attributes. Shared code
therefore lives in module-level functions, not methods.

Packed-weight attribute conventions (attached to the original module by the xpuinject shim from
the Go-packed checkpoint; all weights K-major [in, out], bf16):
  RMSNorm     reads  weight [hidden], variance_epsilon            (transformers' own attributes)
  SwiGLUMLP   reads  xpuinject_gate_up_weight [hidden, 2*intermediate] (gate columns, then up)
                     xpuinject_down_weight    [intermediate, hidden]
                     optional xpuinject_gate_up_bias [2*intermediate], xpuinject_down_bias [hidden]
  Linear      reads  xpuinject_weight [in, out], optional xpuinject_bias [out]
  LMHead      reads  weight [vocab, hidden] (transformers' own attribute, or the embedding table it
                     is tied to) through weight.t(), optional bias; returns fp32 logits
  LinearBN    reads  xpuinject_weight [in, out], xpuinject_bias [out]  (Linear then BatchNorm1d
                     folded offline: W' = diag(a) W, b' = a (b - mu) + beta, a = gamma/sqrt(var+eps))
  BNLinear    reads  xpuinject_weight [in, out], xpuinject_bias [out]  (BatchNorm1d then Linear
                     folded: W' = W diag(s), b' = b + W (beta - s mu), s = gamma/sqrt(var+eps))
  all         optional xpuinject_name (str): the module's path in the model, used in errors.
"""

from __future__ import annotations

import torch
from torch import nn

from .gemm import gemm
from .rmsnorm import rms_norm

__all__ = ["RMSNorm", "SwiGLUMLP", "Linear", "LMHead", "LinearBN", "BNLinear", "Attention", "DecoderLayer"]


def _name(module: nn.Module) -> str:
    return getattr(module, "xpuinject_name", None) or type(module).__name__


def _packed(module: nn.Module, attr: str, layer: str) -> torch.Tensor:
    t = getattr(module, attr, None)
    if t is None:
        raise RuntimeError(
            f"xpuinject_kernels: {layer}: module {_name(module)!r} has no {attr}: the packed weights were not "
            "loaded (the xpuinject shim attaches them from the packed checkpoint before kernelize); "
            "refusing to transpose the original weights on every call"
        )
    if not isinstance(t, torch.Tensor):
        raise RuntimeError(f"xpuinject_kernels: {layer}: module {_name(module)!r}: {attr} is a {type(t).__name__}, not a tensor")
    return t


def _linear(module: nn.Module, x: torch.Tensor, layer: str) -> torch.Tensor:
    w = _packed(module, "xpuinject_weight", layer)
    b = getattr(module, "xpuinject_bias", None)
    return gemm(x, w, bias=b, epilogue="bias" if b is not None else "none")


def _folded_bn(module: nn.Module, x: torch.Tensor, layer: str) -> torch.Tensor:
    if module.training:
        raise RuntimeError(
            f"xpuinject_kernels: {layer}: module {_name(module)!r} is in training mode; the BatchNorm was folded "
            "offline with its running statistics and is only valid in eval mode (call model.eval())"
        )
    w = _packed(module, "xpuinject_weight", layer)
    b = _packed(module, "xpuinject_bias", layer)
    return gemm(x, w, bias=b, epilogue="bias")


class RMSNorm(nn.Module):
    """Replaces LlamaRMSNorm.forward (and Mistral/Qwen2/Qwen3 RMSNorm: same attributes, same math)."""

    has_backward = False
    can_torch_compile = False

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)


class SwiGLUMLP(nn.Module):
    """Replaces LlamaMLP.forward(x): down(silu(gate(x)) * up(x)) as two GEMMs, the first with the
    fused swiglu epilogue over the packed [hidden, 2*intermediate] gate|up weight."""

    has_backward = False
    can_torch_compile = False

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
    can_torch_compile = False

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
    can_torch_compile = False

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (nn.Linear's parameter name)
        w = self.weight
        b = getattr(self, "bias", None)
        return gemm(input, w.t(), bias=b, epilogue="bias" if b is not None else "none", out_dtype=torch.float32)


class LinearBN(nn.Module):
    """Replaces LeViT's MLPLayerWithBN.forward(hidden_state): Linear (no bias) then BatchNorm1d over
    the flattened tokens, folded into one GEMM + bias. Eval mode only."""

    has_backward = False
    can_torch_compile = False

    def forward(self, hidden_state: torch.Tensor) -> torch.Tensor:
        return _folded_bn(self, hidden_state, "LinearBN")


class BNLinear(nn.Module):
    """Replaces LeViT's LevitClassificationLayer.forward(hidden_state): BatchNorm1d then Linear,
    folded into one GEMM + bias. Eval mode only."""

    has_backward = False
    can_torch_compile = False

    def forward(self, hidden_state: torch.Tensor) -> torch.Tensor:
        return _folded_bn(self, hidden_state, "BNLinear")


# The attention block and decoder layer of the Llama family live in decoder.py (they need
# the attention and rope kernels); kernelize finds every layer class here.
from . import decoder  # noqa: E402
from .decoder import Attention, DecoderLayer  # noqa: E402,F401
