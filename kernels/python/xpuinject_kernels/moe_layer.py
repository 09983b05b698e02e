"""The kernel-hub layers of a sparse mixture-of-experts block (Qwen3MoeSparseMoeBlock,
MixtralSparseMoeBlock; Qwen2MoeSparseMoeBlock, which adds a shared expert; GraniteMoeMoE, whose
router child is `router`; transformers 5.17):
router and experts as one fused moe call on the packed weights (contract.json `SparseMoE`,
`SharedExpertMoE`):
  xpuinject_router_weight   [hidden, experts]                K-major router
  xpuinject_gate_up_weight  [experts, hidden, 2*intermediate] each expert's K-major [gate | up]
  xpuinject_down_weight     [experts, intermediate, hidden]   each expert's K-major down
(the two experts' tensors N-major instead, the same shapes over each expert's [N, K], where
XPUINJECT_MOE_NMAJOR=1 says so, or blocked, [experts, N / S, K, S], where XPUINJECT_MOE_SLAB=S does:
packing.decode_layout). The routing rule follows the block's router: Qwen3's renormalizes when
gate.norm_topk_prob and rounds the weights to the activation dtype; Mixtral's (no such attribute) always renormalizes and
keeps them fp32 (moe.py); GraniteMoE's (RouterMoE) softmaxes the top-k logits and rounds the
weights, which is renormalizing then rounding. SharedExpertMoE also reads
  xpuinject_shared_gate_up_weight [hidden, 2*shared]  the shared expert's K-major [gate | up]
  xpuinject_shared_down_weight    [shared, hidden]    its K-major down
and the block's shared_expert_gate (Linear hidden -> 1) in place: the block's output is the routed
experts' + sigmoid(shared_expert_gate(x)) * shared_expert(x), the gate, its product and the sum in
fp32 and rounded once.
"""

from __future__ import annotations

import types

import torch
from torch import nn

from .contract import MIN_GEMM_DIM, packed_attr
from .layers import _name, _packed
from .gemm import gemm
from .moe import add_rms_norm_moe, moe
from .rmsnorm import add_rms_norm

__all__ = ["SparseMoE", "SharedExpertMoE", "RouterMoE", "MoEDecoderLayer", "ScaledMoEDecoderLayer", "runs_sparse_moe",
           "sparse_moe"]

_ROUTER_W = packed_attr("SparseMoE", "router_weight")
_GATE_UP_W = packed_attr("SparseMoE", "gate_up_weight")
_DOWN_W = packed_attr("SparseMoE", "down_weight")
_SHARED_GU_W = packed_attr("SharedExpertMoE", "shared_gate_up_weight")
_SHARED_DOWN_W = packed_attr("SharedExpertMoE", "shared_down_weight")


def _router(block: nn.Module) -> nn.Module:
    """A stock MoE block's router: its `gate` child, or GraniteMoE's `router`."""
    return block._modules.get("gate") or block._modules["router"]


def router_rule(block: nn.Module, layer: str = "SparseMoE") -> str:
    """The moe routing rule of a stock MoE block bound to `layer`."""
    if layer == "RouterMoE":  # GraniteMoeTopKRouter: softmax over the top-k logits, rounded
        return "softmax-topk-norm"
    norm = getattr(block.gate, "norm_topk_prob", None)
    if norm is None:
        return "softmax-topk-norm-fp32"
    return "softmax-topk-norm" if norm else "softmax-topk"


def sparse_moe(block: nn.Module, hidden_states: torch.Tensor, residual=None, norm=None,
               layer: str = "SparseMoE") -> torch.Tensor:
    """The SparseMoE layer's computation on block's packed weights; with residual, residual +
    that, the add in the kernel's last launch (where the dtypes let it; else a torch add).
    norm = (weight, eps), with residual: hidden_states is the attention's output, and the block
    runs on add_rms_norm(hidden_states, residual) (the post-attention add + RMSNorm, which
    moe.add_rms_norm_moe may run inside the router's launch), returning the new residual + the
    block's output. layer: the layer whose packing makes the weights when they are absent
    (SharedExpertMoE's routed experts)."""
    if block.training:
        raise RuntimeError(f"xpuinject_kernels: {layer}: module {_name(block)!r} is in training mode; "
                           "the fused kernel is inference-only (call model.eval())")
    rw = _packed(block, _ROUTER_W, layer)
    gu = _packed(block, _GATE_UP_W, layer)
    dn = _packed(block, _DOWN_W, layer)
    if norm is not None:
        w, eps = norm
        if (hidden_states.dtype == gu.dtype and residual.dtype == gu.dtype and w.dtype == gu.dtype
                and residual.shape == hidden_states.shape):
            return add_rms_norm_moe(hidden_states, residual, w, eps, rw, gu, dn, int(_router(block).top_k),
                                    router_rule(block, layer))
        residual, hidden_states = add_rms_norm(hidden_states, residual, w, eps)
    args = (hidden_states.to(gu.dtype), rw, gu, dn, int(_router(block).top_k), router_rule(block, layer))
    if residual is None:
        return moe(*args)
    if residual.dtype == gu.dtype and residual.shape == hidden_states.shape and residual.stride(-1) == 1:
        return moe(*args, residual=residual)
    return residual + moe(*args)


def runs_sparse_moe(mlp: nn.Module) -> bool:
    """Whether a decoder layer may run mlp as sparse_moe with its residual: mlp's forward is
    bound to this package's SparseMoE (by inject or kernelize), and no hook waits for its call."""
    f = mlp.__dict__.get("forward")
    return (isinstance(f, types.MethodType) and f.__func__ is SparseMoE.forward
            and not (mlp._forward_hooks or mlp._forward_pre_hooks))


class SparseMoE(nn.Module):
    """Replaces Qwen3MoeSparseMoeBlock.forward / MixtralSparseMoeBlock.forward(hidden_states)."""

    has_backward = False
    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return sparse_moe(self, hidden_states)


class RouterMoE(nn.Module):
    """Replaces GraniteMoeMoE.forward(layer_input): SparseMoE's computation, the router the
    block's `router` child."""

    has_backward = False
    can_torch_compile = True

    def forward(self, layer_input: torch.Tensor) -> torch.Tensor:
        return sparse_moe(self, layer_input, layer="RouterMoE")


class SharedExpertMoE(nn.Module):
    """Replaces Qwen2MoeSparseMoeBlock.forward(hidden_states): the routed experts by the fused moe
    kernel, the shared expert by our GEMMs (gate/up with the swiglu epilogue, then down), its gate
    by torch (a GEMM one column wide)."""

    has_backward = False
    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        x = hidden_states
        routed = sparse_moe(self, x, layer="SharedExpertMoE")
        gu = _packed(self, _SHARED_GU_W, "SharedExpertMoE")
        shared = gemm(gemm(x.to(gu.dtype), gu, epilogue="swiglu"), _packed(self, _SHARED_DOWN_W, "SharedExpertMoE"))
        # the gate and the sum in fp32, rounded once (stock rounds the gate's logit, the sigmoid,
        # the product and the sum)
        gate = torch.sigmoid(torch.nn.functional.linear(x.float(), self.shared_expert_gate.weight.float()))
        return (routed.float() + gate * shared.float()).to(routed.dtype)


class MoEDecoderLayer(nn.Module):
    """Replaces MixtralDecoderLayer.forward, whose parameters come in another order than
    LlamaDecoderLayer's (position_embeddings second; transformers 5.17 modeling_mixtral.py): the
    residual add after attention and the post-attention RMSNorm as one add_rms_norm kernel, then
    the MoE block with the final residual add in its last launch."""

    has_backward = False
    can_torch_compile = True

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, position_ids=None,
                past_key_values=None, **kwargs):
        residual = hidden_states
        hidden_states = _decoder.self_attention(
            self,
            hidden_states,
            position_embeddings=position_embeddings,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            **kwargs,
        )
        norm = self.post_attention_layernorm
        if runs_sparse_moe(self.mlp):
            return sparse_moe(self.mlp, hidden_states, residual, norm=(norm.weight, norm.variance_epsilon))
        residual, hidden_states = add_rms_norm(hidden_states, residual, norm.weight, norm.variance_epsilon)
        return residual + self.mlp(hidden_states)


class ScaledMoEDecoderLayer(nn.Module):
    """Replaces GraniteMoeDecoderLayer.forward (no position_ids or use_cache parameters;
    transformers 5.17 modeling_granitemoe.py): each branch scaled by residual_multiplier before its
    add, the attention's in o_proj's residual epilogue (one fp32 multiply-add, rounded once); the
    MoE block's output scaled and added as the stock block rounds them."""

    has_backward = False
    can_torch_compile = True

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, position_embeddings=None, **kwargs):
        rm = float(self.residual_multiplier)
        residual = _decoder.self_attention(self, hidden_states, residual=hidden_states, res_scale=rm,
                                           attention_mask=attention_mask, past_key_values=past_key_values,
                                           position_embeddings=position_embeddings, **kwargs)
        return residual + self.block_sparse_moe(self.post_attention_layernorm(residual)) * rm


def why_not(m: nn.Module, layer: str, why_not_other) -> str:
    """Why kernelize may not bind `layer` to m ("" when it may): the planner's checks for the
    same layer (inject/plan/rules_moe.go, kernels/registry.go), on the live module."""
    c = m._modules
    if layer in ("MoEDecoderLayer", "ScaledMoEDecoderLayer"):
        norm = c.get("post_attention_layernorm")
        ff = "mlp" if layer == "MoEDecoderLayer" else "block_sparse_moe"
        if not all(isinstance(c.get(n), nn.Module) for n in ("input_layernorm", "self_attn", ff)) or norm is None:
            return "not a pre-norm decoder block"
        if layer == "ScaledMoEDecoderLayer" and not isinstance(getattr(m, "residual_multiplier", None), (int, float)):
            return "no residual_multiplier"
        return "" if not why_not_other(norm, "RMSNorm") else "its post-attention norm is not an RMSNorm"
    if layer == "SharedExpertMoE":
        se, sg = c.get("shared_expert"), c.get("shared_expert_gate")
        lin = [getattr(se, n, None) for n in ("gate_proj", "up_proj", "down_proj")]
        if not all(isinstance(t, nn.Linear) and t.bias is None for t in lin + [sg]):
            return "no unbiased shared_expert gate/up/down_proj and shared_expert_gate Linear children"
        if type(getattr(se, "act_fn", None)).__name__ != "SiLUActivation":
            return "the shared expert's activation is not silu"
        if min(lin[0].in_features, lin[0].out_features) < MIN_GEMM_DIM:
            return f"a shared-expert GEMM dimension below {MIN_GEMM_DIM}"
    elif "shared_expert" in c:
        return "a shared expert the SparseMoE layer does not run"
    rname = "router" if layer == "RouterMoE" else "gate"
    gate, experts = c.get(rname), c.get("experts")
    gu, dn = getattr(experts, "gate_up_proj", None), getattr(experts, "down_proj", None)
    w = getattr(gate, "weight", None)
    if not all(isinstance(t, torch.Tensor) for t in (w, gu, dn)) or gu.dim() != 3 or dn.dim() != 3:
        return f"no router weight and stacked experts ({rname}.weight, experts.gate_up_proj, experts.down_proj)"
    if type(getattr(experts, "act_fn", None)).__name__ != "SiLUActivation":
        return "the experts' activation is not silu"
    e, two_i, h = gu.shape
    if min(h, two_i // 2) < MIN_GEMM_DIM:
        return f"a GEMM dimension below {MIN_GEMM_DIM}"
    if not 1 <= int(getattr(gate, "top_k", 0)) <= e:
        return "top_k outside 1 to the number of experts"
    return ""


def loaded_sources(module: str, out: dict, layer: str = "SparseMoE"):
    """(tensor name, shape) in the loaded model for a SparseMoE output of a plan. The plan's
    sources are the checkpoint's per-expert 2D tensors (Mixtral's under block_sparse_moe, w1/w2/w3;
    GraniteMoE's views of its stacked ones); transformers 5.17 loads them stacked under the block's
    own module (conversion_mapping.py): gate.weight [E, H] (RouterMoE: router.weight),
    experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]."""
    shape = [int(d) for d in out["shape"]]
    name = out["name"]
    if name.endswith(".shared_expert.gate_up_proj.weight"):  # [H, 2S] from two [S, H]
        s = [int(n) for n in out.get("split") or ()]
        return [(module + f".shared_expert.{p}.weight", [n, shape[0]]) for p, n in zip(("gate_proj", "up_proj"), s)]
    if name.endswith(".shared_expert.down_proj.weight"):  # [S, H]
        return [(module + ".shared_expert.down_proj.weight", shape[::-1])]
    if name.endswith(".shared_expert_gate.weight"):  # [1, H], the module's own
        return [(module + ".shared_expert_gate.weight", shape)]
    if name.endswith(".router.weight"):  # [H, E]
        return [(module + (".router.weight" if layer == "RouterMoE" else ".gate.weight"), shape[::-1])]
    if name.endswith(".gate_up_proj.weight"):  # [E, H, 2I]
        return [(module + ".experts.gate_up_proj", [shape[0], shape[2], shape[1]])]
    if name.endswith(".down_proj.weight"):  # [E, I, H]
        return [(module + ".experts.down_proj", [shape[0], shape[2], shape[1]])]
    raise ValueError(f"xpuinject_kernels: SparseMoE: {module}: unknown packed output {name!r}")


# Last: decoder.py imports this module's functions, and its own import of them must find them
# whichever module Python loads first.
from . import decoder as _decoder  # noqa: E402
